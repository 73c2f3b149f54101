//! What no Lambda links: the in-memory fakes of every port, for unit tests of the pure logic and
//! for benchmarks, and the provisioning of Courier's resources on the emulators.
//!
//! # Layout
//! - [`memory`]: an in-memory adapter of every port (the claim follows the same rules as
//!   DynamoDB's).
//! - [`provision`]: Courier's data plane on moto or LocalStack, from `infra/template.yaml`.
//! - [`faults`]: faults injected at every port call; [`logs`]: log lines captured in tests.
//! - [`moto`]: moto's own record of what it holds (the messages its SES accepted); [`mime`]:
//!   a captured message's header fields.

pub mod faults;
pub mod logs;
pub mod memory;
pub mod mime;
pub mod moto;
pub mod provision;
