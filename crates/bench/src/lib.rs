//! The `rdmabench` library: everything the binary does, one module per concern, so that the
//! criterion benches in `benches/` can measure the engine's own hot-path work. An item is
//! `pub` only where the binary, the integration tests or the benches use it, `pub(crate)`
//! otherwise (`tests/layers.rs` checks), so that the compiler reports what nothing uses.
//!
//! The binary parses the command line ([`cli`]), validates the whole plan ([`plan`]), and
//! runs the server, the client or both ([`run`]) over the TCP control channel ([`control`])
//! and the verbs engine ([`engine`]); results go to the terminal and to JSON and CSV records
//! ([`report`]). Exit codes (`exit.rs`): 0 pass, 1 run failed, 2 what was asked cannot run as
//! asked (a bad value or combination, or a limit of a device), 3 below a `--limit-*`.

pub use model::{catalogue, plan, text};
pub(crate) use model::{files, units};

#[forbid(unsafe_code)]
pub mod cli;
pub(crate) mod clock;
pub mod cluster;
#[forbid(unsafe_code)]
pub mod compare;
#[deny(unsafe_code)]
// (its tests open sockets from chosen addresses through libc; the listener peeks)
pub mod control;
#[forbid(unsafe_code)]
pub mod counters;
#[forbid(unsafe_code)]
pub mod devices;
pub mod doctor;
pub mod engine;
#[forbid(unsafe_code)]
pub mod exit;
#[forbid(unsafe_code)]
pub mod health;
#[forbid(unsafe_code)]
pub mod histogram;
#[forbid(unsafe_code)]
pub mod kconfig;
#[forbid(unsafe_code)]
pub mod memory;
#[forbid(unsafe_code)]
pub mod nccl_log;
#[forbid(unsafe_code)]
pub mod output;
#[forbid(unsafe_code)]
pub mod perftest_names;
pub(crate) mod placement;
#[forbid(unsafe_code)]
pub mod plot;
#[forbid(unsafe_code)]
pub mod report;
#[forbid(unsafe_code)]
pub mod run;
#[forbid(unsafe_code)]
pub mod show;
#[forbid(unsafe_code)]
pub(crate) mod sysroot;
#[forbid(unsafe_code)]
pub mod thresholds;

#[cfg(test)]
mod catalogue_reach;

/// `promtool check metrics`, shared by the unit tests of every Prometheus exporter and the
/// integration tests (one file).
#[cfg(test)]
pub(crate) mod promtool_check {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/common/promtool.rs"
    ));
}
