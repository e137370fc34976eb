//! Criterion benches of rdmabench's CPU-side hot paths (`hot_path.rs`: building a post list,
//! completion accounting, timestamps, histogram recording) and of posting and polling on a
//! real device (`device.rs`, which needs soft-RoCE or a NIC and says so when there is none).
//! `fleet.rs` keeps the fleet paths (cluster plans, compare, plot, nccl-log) linear at scale.
//! Run them with `cargo bench -p rdmabench-benches`; CI only builds them.
