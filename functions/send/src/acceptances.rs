//! Acceptances this instance saw but could not record: the provider took the mail, and neither
//! the sent status nor `unknown` could be written (the status table was unreachable). When a copy
//! of that job comes back to this instance (a warm Lambda keeps its memory between invocations)
//! and finds the record `unknown` after the lease, the kept answer records it sent instead of
//! letting the grace window end in a second send. Another instance, or a restarted one, does not
//! know: there the job stays a recorded duplicate at worst, as before.

use std::collections::VecDeque;
use std::sync::Mutex;

use courier_core::ports::StatusUpdate;

/// How many acceptances an instance keeps (the oldest go first).
pub const KEPT: usize = 1_000;

/// The acceptances kept, newest last.
#[derive(Debug, Default)]
pub struct Acceptances {
    kept: Mutex<VecDeque<StatusUpdate>>,
}

impl Acceptances {
    /// Keeps the sent status that could not be written (a status carries no body: the record
    /// has it since the claim).
    pub(crate) fn remember(&self, sent: &StatusUpdate) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|u| u.message_id != sent.message_id);
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(sent.clone());
    }

    /// The sent status kept for this generation of the job, if any (taken: it is recorded once).
    pub(crate) fn recall(&self, message_id: &str, attempt: u32) -> Option<StatusUpdate> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let at = kept
            .iter()
            .position(|u| u.message_id == message_id && u.attempt == attempt)?;
        kept.remove(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::status::Status;

    fn sent(id: &str, attempt: u32) -> StatusUpdate {
        StatusUpdate::new(id, "o", Status::SentToProvider, attempt, chrono::Utc::now())
    }

    #[test]
    fn an_acceptance_is_recalled_once_for_its_generation_and_the_oldest_go_first() {
        let a = Acceptances::default();
        a.remember(&sent("m", 2));
        assert!(a.recall("m", 1).is_none(), "another generation");
        assert_eq!(a.recall("m", 2).unwrap().attempt, 2);
        assert!(a.recall("m", 2).is_none(), "taken");
        for i in 0..=KEPT {
            a.remember(&sent(&format!("j{i}"), 0));
        }
        assert!(a.recall("j0", 0).is_none(), "the oldest went");
        assert!(a.recall(&format!("j{KEPT}"), 0).is_some());
    }
}
