//! What a run shows on the terminal while it measures: the header (`header.rs`, from the
//! run's record), its layout and the table of sizes (`table.rs`), and progress through a
//! long sweep (`progress_bar.rs`). The records side (`report/`) renders files; this renders
//! a live run.

pub mod header;
pub mod progress_bar;
pub mod table;
