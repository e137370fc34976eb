//! The plan's defaults (perftest's where perftest has one) and the limits of its values.

/// Default operations per QP and size for bandwidth tests (perftest's).
pub const DEFAULT_ITERS_BW: u64 = 5000;
/// Default iterations for latency tests (perftest's).
pub const DEFAULT_ITERS_LAT: u64 = 1000;
/// Default message size for bandwidth tests.
pub const DEFAULT_SIZE_BW: u64 = 65536;
/// Default message size for latency tests (perftest's).
pub const DEFAULT_SIZE_LAT: u64 = 2;
/// The size of every atomic operation.
pub const ATOMIC_SIZE: u64 = 8;
/// Default send queue depth (perftest's).
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// Default receive queue depth (perftest's).
pub const DEFAULT_RX_DEPTH: u32 = 512;
/// Default completion moderation (perftest's), at most half the TX depth.
pub const DEFAULT_CQ_MOD: u32 = 100;
/// `--interval`'s shortest interval, in seconds: a tenth of a second holds a score of
/// completion events on a slow link, where shorter would be noise.
pub const MIN_INTERVAL: f64 = 0.1;
/// `--interval`'s most intervals in one window.
pub const MAX_INTERVALS: u64 = 10_000;
/// Default RC acknowledgement timeout exponent on a NIC (perftest's): 4.096 us * 2^14 = 67 ms a
/// try, retried up to 7 times, so a dead peer fails a request in about half a second.
pub const DEFAULT_QP_TIMEOUT: u8 = 14;
/// Default on a software device (rxe, siw), but for READs: 2^18 * 4.096 us = 1.07 s a try.
pub const SOFTWARE_QP_TIMEOUT: u8 = 18;
/// Largest `-u`: the verbs attribute is 5 bits (0, "wait forever", is not offered: a lost
/// packet would stall the run until `--timeout`).
pub const MAX_QP_TIMEOUT: u8 = 31;
/// The path MTUs a QP can be given, in bytes (the verbs `ibv_mtu` values).
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// Largest message size.
pub const MAX_SIZE: u64 = 1 << 31;
/// Largest number of QPs.
pub const MAX_QPS: u32 = 1024;
/// Round trips before a latency test starts measuring.
pub const LAT_WARMUP: u64 = 16;
