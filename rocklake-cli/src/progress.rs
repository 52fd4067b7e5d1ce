//! Progress of long commands on stderr, through indicatif: drawn only while stderr is a
//! terminal and the command was not given `--json`; otherwise nothing at all, so that logs
//! and pipes get only the command's result.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One command's progress: a spinner that counts, or a bar over a known number of steps.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn target(quiet: bool) -> ProgressDrawTarget {
        if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        }
    }

    /// A spinner with the elapsed time and a message (`what` first: `backup`, `verify`).
    pub fn spinner(what: &str, quiet: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(None, Self::target(quiet));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {wide_msg} {elapsed}")
                .expect("a valid template"),
        );
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress { bar }
    }

    /// A bar over `steps` steps (tables, checks), with a message for the current one.
    pub fn steps(what: &str, steps: u64, quiet: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(steps), Self::target(quiet));
        bar.set_style(
            ProgressStyle::with_template("{prefix}: [{bar:25}] {pos}/{len} {wide_msg} {elapsed}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar }
    }

    /// Say what is being done now.
    pub fn say(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// One more step done.
    pub fn step(&self) {
        self.bar.inc(1);
    }

    /// A line above the bar, kept on the terminal (a finished table, a check's outcome);
    /// nothing when the progress is not drawn.
    pub fn line(&self, line: impl AsRef<str>) {
        self.bar.println(line);
    }

    /// The work is done: the progress leaves the terminal (the command's result follows on
    /// standard output).
    pub fn done(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    /// A command that fails leaves its last state; the error follows it.
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.abandon();
        }
    }
}
