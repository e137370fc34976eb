//! What a run shows on the terminal while it measures: the header (`header.rs`, from the
//! run's record), its layout and the table of sizes (`table.rs`), and progress through a
//! long sweep (`progress_bar.rs`). The records side (`report/`) renders files; this renders
//! a live run.

pub mod header;
pub(crate) mod progress_bar;
pub(crate) mod table;

use std::io::IsTerminal;

/// Where the view of a run goes: stdout, or stderr when stdout carries the run's record
/// (`--json -` or `--csv -`), so that stdout holds the record alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Screen {
    /// The usual place.
    #[default]
    Stdout,
    /// Stdout holds the record.
    Stderr,
}

impl Screen {
    /// Prints `text` as it is.
    pub(crate) fn print(self, text: &str) {
        match self {
            Screen::Stdout => print!("{text}"),
            Screen::Stderr => eprint!("{text}"),
        }
    }

    /// Prints `text` and a newline.
    pub fn line(self, text: &str) {
        self.print(&format!("{text}\n"));
    }

    /// Whether it is a terminal (warnings are bold there).
    pub(crate) fn is_terminal(self) -> bool {
        match self {
            Screen::Stdout => std::io::stdout().is_terminal(),
            Screen::Stderr => std::io::stderr().is_terminal(),
        }
    }
}
