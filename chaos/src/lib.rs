//! Courier's chaos suite (issue #8): thousands of jobs through the local system (moto, the
//! send function's real handler in `courier-dev drive` processes, Postfix with its scripted
//! failures) while the suite SIGKILLs the drivers at random points, restarts Postfix, takes the
//! AWS emulator away for a while and injects latency, resets and stalls between the functions
//! and the emulator through a proxy. Then every job is audited: one home (a terminal status or
//! a dead letter with its record), none lost, none delivered twice unless the status machine
//! recorded the outcome as ambiguous (those are counted).
//!
//! # Layout
//! - [`schedule`]: the seeded plan (kill times, fault episodes, restarts) and the RNG.
//! - [`proxy`]: the fault-injecting TCP proxy.
//! - [`mix`]: the jobs (the scripted-recipient mix) and the compressed retry policy.
//! - [`postfix`]: a real restart of the harness's Postfix.
//! - [`dynamodb_local`]: DynamoDB Local on disk, for a real restart of the DynamoDB emulator.
//! - [`homes`]: after the chaos phase, the sweeper and the archiver, and the archive read back.
//! - [`ses_side`]: SES's events for what moto's SES accepted, and the events function on them.
//! - [`audit`]: the per-job rules and the printed table.
//! - [`run`]: one run from provisioning to the verdict.

pub mod audit;
pub mod dynamodb_local;
pub mod homes;
pub mod mix;
pub mod postfix;
pub mod proxy;
pub mod run;
pub mod schedule;
pub mod ses_side;
