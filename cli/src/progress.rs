//! How the workbench's long operations (replay, discard, stats) report how far they got.
//!
//! On a terminal: an indicatif bar ([`Bar`]) on stderr. Anywhere else, any writer (a test's
//! buffer, a log, [`std::io::sink`] when stderr is not a terminal) is a [`Progress`] that gets one
//! plain line when the operation ends, and nothing while it runs.

use std::io::Write;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where an operation reports progress: `done` of `total` letters (`total` unknown while
/// counting).
pub trait Progress {
    /// `done` letters handled so far.
    fn update(&mut self, done: usize, total: Option<usize>) -> std::io::Result<()>;
    /// The operation ended having handled `done` letters.
    fn finish(&mut self, done: usize, total: Option<usize>) -> std::io::Result<()>;
}

/// The line a writer gets when an operation ends.
fn summary(done: usize, total: Option<usize>) -> String {
    match total {
        Some(total) => format!("{done}/{total} letters"),
        None => format!("counted {done} letters"),
    }
}

impl<W: Write + ?Sized> Progress for W {
    fn update(&mut self, _done: usize, _total: Option<usize>) -> std::io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, done: usize, total: Option<usize>) -> std::io::Result<()> {
        writeln!(self, "{}", summary(done, total))?;
        self.flush()
    }
}

/// An indicatif progress bar: a bar with the count and an estimate for replay and discard, a
/// spinner with the running count for stats. Left on the terminal, complete, when it ends.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    /// Whether the style is set (on the first update, when it is known whether a total is).
    styled: bool,
}

impl Bar {
    /// A bar on stderr (for a terminal: indicatif draws nothing where stderr is not one).
    pub fn stderr() -> Bar {
        Bar::to(ProgressDrawTarget::stderr())
    }

    /// A bar drawn on `target`.
    pub fn to(target: ProgressDrawTarget) -> Bar {
        Bar {
            bar: ProgressBar::with_draw_target(None, target),
            styled: false,
        }
    }

    fn style(&mut self, total: Option<usize>) {
        if self.styled {
            return;
        }
        self.styled = true;
        let style = match total {
            Some(total) => {
                self.bar.set_length(total as u64);
                ProgressStyle::with_template("[{bar:30}] {pos}/{len} letters  {per_sec}  eta {eta}")
                    .map(|s| s.progress_chars("#>."))
            }
            None => ProgressStyle::with_template("{spinner} counted {pos} letters"),
        };
        // The templates are constants; indicatif's default style should they ever not parse.
        if let Ok(style) = style {
            self.bar.set_style(style);
        }
    }
}

impl Progress for Bar {
    fn update(&mut self, done: usize, total: Option<usize>) -> std::io::Result<()> {
        self.style(total);
        self.bar.set_position(done as u64);
        Ok(())
    }

    fn finish(&mut self, done: usize, total: Option<usize>) -> std::io::Result<()> {
        self.style(total);
        self.bar.set_position(done as u64);
        self.bar.finish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that records what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl Screen {
        fn text(&self) -> String {
            self.0.lock().unwrap().clone()
        }

        fn bar(&self) -> Bar {
            Bar::to(ProgressDrawTarget::term_like(Box::new(self.clone())))
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.write_str("\r")
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_bar_draws_the_count_of_the_total_and_a_spinner_the_running_count() {
        let screen = Screen::default();
        let mut bar = screen.bar();
        bar.update(0, Some(4)).unwrap();
        bar.update(2, Some(4)).unwrap();
        bar.finish(4, Some(4)).unwrap();
        let text = screen.text();
        assert!(
            text.contains("[##############################] 4/4 letters"),
            "{text:?}"
        );
        let screen = Screen::default();
        let mut spinner = screen.bar();
        spinner.update(1000, None).unwrap();
        spinner.finish(1234, None).unwrap();
        assert!(
            screen.text().contains("counted 1234 letters"),
            "{:?}",
            screen.text()
        );
    }

    #[test]
    fn a_writer_gets_one_line_at_the_end() {
        let mut out = Vec::new();
        out.update(1, Some(3)).unwrap();
        assert!(out.is_empty());
        out.finish(3, Some(3)).unwrap();
        out.finish(11, None).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "3/3 letters\ncounted 11 letters\n"
        );
    }
}
