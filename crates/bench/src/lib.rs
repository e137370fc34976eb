//! The `rdmabench` library: everything the binary does, one module per concern, so that the
//! criterion benches in `benches/` can measure the engine's own hot-path work.
//!
//! The binary parses the command line ([`cli`]), validates the whole plan ([`plan`]), and
//! runs the server, the client or both ([`run`]) over the TCP control channel ([`control`])
//! and the verbs engine ([`engine`]); results go to the terminal and to JSON and CSV records
//! ([`report`]). Exit codes (`exit.rs`): 0 pass, 1 run failed, 2 what was asked cannot run as
//! asked (a bad value or combination, or a limit of a device), 3 below a `--limit-*`.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod compare;
pub mod control;
pub mod devices;
pub mod doctor;
pub mod engine;
pub mod exit;
pub mod files;
pub mod histogram;
pub mod memory;
pub mod output;
pub mod placement;
pub mod plan;
pub mod plot;
pub mod report;
pub mod run;
pub mod show;
pub mod sysroot;
pub mod thresholds;
pub mod units;
