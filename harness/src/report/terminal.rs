//! What a person at a terminal sees beyond the plain report: colour and a progress bar. Both
//! stay off when nobody is watching (pipes, files, CI logs), so those get the plain text.
//! The engine knows nothing of this: the command feeds it the scenarios' starts and ends.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use anstyle::{AnsiColor, Style};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Colours for the terminal report; [`Paint::PLAIN`] leaves text untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Paint {
    on: bool,
}

impl Paint {
    pub(crate) const PLAIN: Paint = Paint { on: false };
    #[cfg(test)]
    pub(crate) const COLOUR: Paint = Paint { on: true };

    /// `--color auto|always|never` for stdout: `auto` colours only a terminal that supports it,
    /// and never when `NO_COLOR` is set (anstream reads the environment the way clap and cargo do).
    pub(crate) fn for_stdout(choice: clap::ColorChoice) -> Paint {
        let on = match choice {
            clap::ColorChoice::Always => true,
            clap::ColorChoice::Never => false,
            clap::ColorChoice::Auto => {
                anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
            }
        };
        Paint { on }
    }

    pub(crate) fn is_on(self) -> bool {
        self.on
    }

    pub fn pass(self, text: &str) -> String {
        self.styled(AnsiColor::Green.on_default().bold(), text)
    }

    pub fn fail(self, text: &str) -> String {
        self.styled(AnsiColor::Red.on_default().bold(), text)
    }

    pub fn skip(self, text: &str) -> String {
        self.styled(AnsiColor::Yellow.on_default().bold(), text)
    }

    /// A line that explains a failure: red, but not shouting.
    pub(crate) fn failure_detail(self, text: &str) -> String {
        self.styled(AnsiColor::Red.on_default(), text)
    }

    /// A word that says how something ended: `PASS`, `ok`, `FAIL`, `ERROR`, `SKIP`.
    pub fn status(self, word: &str) -> String {
        match word {
            "PASS" | "ok" => self.pass(word),
            "SKIP" | "FAULT" => self.skip(word),
            _ => self.fail(word),
        }
    }

    fn styled(self, style: Style, text: &str) -> String {
        if self.on { format!("{style}{text}{style:#}") } else { text.to_string() }
    }
}

/// A progress bar on stderr while work runs, drawn only when stderr is a terminal; results are
/// printed to stdout above it. Without a terminal it draws nothing and prints as plain `print!`.
pub struct Progress {
    bar: ProgressBar,
    /// What is running now, in the order it started, for the bar's message.
    running: Mutex<Vec<String>>,
}

impl Progress {
    /// A bar for `total` pieces of work (scenarios, mutants).
    pub fn new(total: usize, paint: Paint) -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            let template = if paint.is_on() {
                "{spinner:.cyan} [{pos}/{len}] {bar:24.cyan/blue} {elapsed_precise} {wide_msg:.dim}"
            } else {
                "{spinner} [{pos}/{len}] {bar:24} {elapsed_precise} {wide_msg}"
            };
            let style = ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            // The elapsed time and spinner move even while one long scenario runs.
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress { bar, running: Mutex::new(Vec::new()) }
    }

    pub fn started(&self, name: &str) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.push(name.to_string());
        self.bar.set_message(running.join(", "));
    }

    /// `name` ended; `text` (whole lines) goes to stdout above the bar in one write, so the
    /// lines of concurrent scenarios never interleave.
    pub fn finished(&self, name: &str, text: &str) {
        {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = running.iter().position(|n| n == name) {
                running.remove(i);
            }
            self.bar.set_message(running.join(", "));
        }
        self.print(text);
        self.bar.inc(1);
    }

    /// Prints `text` to stdout above the bar.
    pub fn print(&self, text: &str) {
        self.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        });
    }

    /// Removes the bar, leaving only what was printed.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // Also on an error or a panic: never leave a half-drawn bar on the user's terminal.
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paint_leaves_text_alone() {
        assert_eq!(Paint::PLAIN.status("FAIL"), "FAIL");
        assert_eq!(Paint::PLAIN.failure_detail("✗ x"), "✗ x");
    }

    #[test]
    fn colour_wraps_the_word_and_resets() {
        assert_eq!(Paint::COLOUR.status("PASS"), "\x1b[1m\x1b[32mPASS\x1b[0m");
        assert_eq!(Paint::COLOUR.status("FAIL"), "\x1b[1m\x1b[31mFAIL\x1b[0m");
        assert_eq!(Paint::COLOUR.status("SKIP"), "\x1b[1m\x1b[33mSKIP\x1b[0m");
        assert_eq!(anstream::adapter::strip_str(&Paint::COLOUR.status("ok")).to_string(), "ok");
    }

    #[test]
    fn never_and_always_ignore_the_environment() {
        assert!(!Paint::for_stdout(clap::ColorChoice::Never).is_on());
        assert!(Paint::for_stdout(clap::ColorChoice::Always).is_on());
    }
}
