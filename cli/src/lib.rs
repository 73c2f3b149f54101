//! The library half of `courierctl`: the dead-letter workbench's logic (selection, replay,
//! discard, stats) over the core's ports, so that the integration tests and the local run use
//! the same code as the operator's commands.
//!
//! # Layout
//! - [`workbench`]: the dead-letter workbench.
//! - [`table`]: tables as courierctl prints them (comfy-table).
//! - [`progress`]: progress of long operations (indicatif bars on a terminal).
//! - [`smoke`]: the smoke test of a deployed stack against SES's mailbox simulator.
//! - [`policy`]: the live settings (`courierctl policy show|validate|set`).
//! - [`requeue`]: a flagged job's lost copy put back (`courierctl requeue`).

pub mod policy;
pub mod progress;
pub mod requeue;
pub mod smoke;
pub mod table;
pub mod workbench;
