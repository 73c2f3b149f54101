//! Log lines captured in tests: what a function would print, to check what it never prints.

use std::sync::{Arc, Mutex};

/// The log lines written on this thread while the guard of [`Captured::start`] lives (a
/// `#[tokio::test]` runs on one thread).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Captures every level, as plain text, until the guard is dropped.
    pub fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        // Without a global subscriber, a callsite first hit on another test's thread while this
        // one installs its own may cache "never" and its lines would be missed here.
        static SOMETIMES: std::sync::Once = std::sync::Once::new();
        SOMETIMES.call_once(|| {
            let _ = tracing::subscriber::set_global_default(Sometimes);
        });
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A global subscriber that records nothing and caches no callsite as never enabled, so each
/// thread's own (scoped) subscriber decides.
struct Sometimes;

impl tracing::Subscriber for Sometimes {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
