//! Cluster sweeps (work in progress toward `rdmabench cluster`): where a launched process
//! stands in its job (`launcher.rs`, Slurm's node lists in `hostlist.rs`) and which ranks
//! test against which, round by round (`schedule.rs`). Pure functions; nothing here opens a
//! device or a socket.

pub mod hostlist;
pub mod launcher;
pub mod schedule;
