//! The real clock and the entropy that seeds jitter: the two inputs the core takes as arguments.

use chrono::{DateTime, Utc};
use courier_core::ports::Clock;
use courier_core::random::SeededRandom;

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A generator seeded from the process's clock and address-space layout: good enough for jitter,
/// which only needs instances not to move in lockstep.
pub fn seeded_from_entropy() -> SeededRandom {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let addr = std::ptr::addr_of!(local) as u64;
    SeededRandom::new(nanos ^ addr.rotate_left(32) ^ u64::from(std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_generators_seeded_from_entropy_do_not_move_in_lockstep() {
        // GIVEN two generators seeded a moment apart
        let mut a = seeded_from_entropy();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let mut b = seeded_from_entropy();
        // THEN their sequences differ
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_ne!(xs, ys);
    }
}
