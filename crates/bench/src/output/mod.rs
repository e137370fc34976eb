//! What a run shows on the terminal while it measures: the header and the table of sizes
//! (`table.rs`), and progress through a long sweep (`progress_bar.rs`). The records side
//! (`report/`) renders files; this renders a live run.

pub mod progress_bar;
pub mod table;
