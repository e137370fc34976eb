//! A progress bar on stderr for sweeps and repetitions; hidden when stderr is not a
//! terminal (CI logs, pipes) or when there is only one step.

use std::io::IsTerminal;

use indicatif::{ProgressBar as Bar, ProgressDrawTarget, ProgressStyle};

use crate::units::format_size;

/// Progress through the (size, repetition) steps of a run.
#[derive(Debug)]
pub(crate) struct ProgressBar {
    bar: Bar,
}

impl ProgressBar {
    /// A bar of `steps` steps, drawn only when `wanted`, stderr is a terminal and there is
    /// more than one step.
    pub(crate) fn new(steps: u64, wanted: bool) -> Self {
        let shown = wanted && steps > 1 && std::io::stderr().is_terminal();
        let target = if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = Bar::with_draw_target(Some(steps), target);
        if let Ok(style) = ProgressStyle::with_template(" {bar:30} {pos}/{len} sizes  {msg}") {
            bar.set_style(style);
        }
        ProgressBar { bar }
    }

    /// A step starts.
    pub(crate) fn start(&self, size: u64, rep: u32) {
        self.bar.set_message(format!(
            "measuring {} (repetition {})",
            format_size(size),
            rep + 1
        ));
    }

    /// Prints through `f` without tearing the bar, and counts a step done.
    pub(crate) fn suspend(&self, f: impl FnOnce()) {
        self.bar.suspend(f);
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// True when the bar is drawn.
    #[cfg(test)]
    pub(crate) fn is_shown(&self) -> bool {
        !self.bar.is_hidden()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_stays_hidden_when_not_wanted_or_for_one_step() {
        assert!(!ProgressBar::new(23, false).is_shown());
        assert!(!ProgressBar::new(1, true).is_shown());
        // Under `cargo test` stderr is captured, not a terminal.
        if !std::io::stderr().is_terminal() {
            assert!(!ProgressBar::new(23, true).is_shown());
        }
    }
}
