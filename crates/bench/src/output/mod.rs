//! What the terminal shows besides the table: progress through a long sweep.

pub mod progress_bar;
