//! How a bandwidth loop that started slow goes on: how often it requests a completion and
//! how many operations it keeps in flight once its [`super::startup`] found the link's rate
//! and round trip ([`Pace`]).
//!
//! Every `-D` run starts slow; so does a `-n` run of READs of [`LARGE_READ`] or more
//! ([`starts_slow`]). A READ's response is the responder's to pace: soft-RoCE sends a whole
//! READ's response at once, and a READ of more packets than the requester's host queues
//! (1,000 by default) loses its tail and waits for the QP's retransmission timer, so such
//! READs take seconds each; a `-n` run that asked for one completion per `cq_mod` of them
//! saw none within `--timeout` and was taken for dead. Starting slow, it asks for every
//! completion until the rate is known, then often enough for [`STALL_EVENTS`] per
//! `--timeout` at that rate, and keeps twice a round trip's worth in flight. At those sizes
//! two READs in flight are more than any link's bandwidth-delay product (800 Gb/s over
//! 10 us is 1 MB), so starting with two costs a NIC nothing but the first completions.

use std::time::Duration;

use super::{LoopShape, Stop};
use crate::plan::Verb;

/// The smallest READ a `-n` run starts slow with ([`starts_slow`]): 1 MiB, a thousand
/// packets at soft-RoCE's 1024-byte path MTU, and more than a fast link's bandwidth-delay
/// product twice over.
pub(crate) const LARGE_READ: u32 = 1 << 20;

/// Completion events a `-n` run that started slow asks for within each `--timeout` at the
/// rate its startup found, so that a slow operation is never taken for a stalled one.
pub(crate) const STALL_EVENTS: f64 = 20.0;

/// Whether a loop of `shape` starts slow: a post list in flight per QP, one more per
/// completed operation, a completion for each, until its startup finds the link's rate
/// (every `-D` run, and a `-n` run of READs of [`LARGE_READ`] or more).
pub(crate) fn starts_slow(shape: &LoopShape) -> bool {
    matches!(shape.stop, Stop::Duration { .. })
        || (shape.verb == Verb::Read && shape.size >= LARGE_READ)
}

/// Completion events a duration window aims to hold: a `-D` run signals often enough for
/// the rate seen in its warm-up that a completion comes at least every 1/50 of the window.
pub(crate) const WINDOW_EVENTS: f64 = 50.0;

/// Completion events an interval aims to hold (`--interval`): a `-D` run with intervals
/// signals often enough for this many per interval at its warm-up's rate, so that each
/// interval's boundaries fall within a twentieth of it.
pub(crate) const INTERVAL_EVENTS: f64 = 20.0;

/// How many operations a QP posts per requested completion once a duration run's warm-up
/// is over: `cq_mod`, or fewer so that `ops_per_sec` (all `qps` together) gives a window of
/// `window` [`WINDOW_EVENTS`] completions; at least 1.
pub(crate) fn signal_every(cq_mod: u32, ops_per_sec: f64, qps: usize, window: Duration) -> u32 {
    let per_qp = ops_per_sec / qps.max(1) as f64;
    ops_within(per_qp * window.as_secs_f64() / WINDOW_EVENTS, cq_mod)
}

/// How a run that started slow goes on once its warm-up is over (how often it signals) and
/// once its [`super::startup`] found the link's rate (how much it keeps in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// A completion every this many operations per QP ([`signal_every`]).
    pub signal_every: u32,
    /// At most this many operations in flight per QP: what drains within the end margin at
    /// the link's rate, or twice what completes in one round trip if more (so that a
    /// slow link with a long round trip stays busy), at most `tx-depth`, and never so few
    /// that posting waits on a completion that was not requested. A deep queue on a slow
    /// link adds no bandwidth, only a drain of many seconds after the time is up.
    pub in_flight: u32,
}

/// How often a duration run that did `ops_per_sec`, all `qps` together, requests a
/// completion ([`Pace::signal_every`]); `None` in iteration mode.
pub(crate) fn signal_every_for(shape: &LoopShape, qps: usize, ops_per_sec: f64) -> Option<u32> {
    let window = shape.stop.window()?;
    // With intervals, the events that cut them count too: WINDOW_EVENTS per window of
    // that many intervals' worth of INTERVAL_EVENTS.
    let aim = shape.interval.map_or(window, |i| {
        window.min(i.mul_f64(WINDOW_EVENTS / INTERVAL_EVENTS))
    });
    Some(signal_every(shape.cq_mod, ops_per_sec, qps, aim))
}

/// The pace of a run that started slow and did `ops_per_sec`, all `qps` together, its round
/// trip `round_trip`. A `-D` run keeps what drains in its end margin or twice a round trip's
/// worth (its completions are [`signal_every_for`]'s); a `-n` run twice a round trip's worth,
/// with a completion often enough for [`STALL_EVENTS`] per `--timeout` (at most every
/// `cq_mod`).
pub(crate) fn pace_for(
    shape: &LoopShape,
    qps: usize,
    ops_per_sec: f64,
    round_trip: Duration,
) -> Pace {
    let per_qp = ops_per_sec / qps.max(1) as f64;
    let busy = ops_within(per_qp * 2.0 * round_trip.as_secs_f64(), shape.depth);
    let (every, keep) = match shape.stop {
        Stop::Duration { margin, .. } => (
            signal_every_for(shape, qps, ops_per_sec).unwrap_or(1),
            busy.max(ops_within(per_qp * margin.as_secs_f64(), shape.depth)),
        ),
        Stop::Iters(_) => {
            let timeout = shape.stall_timeout.as_secs_f64();
            (
                ops_within(per_qp * timeout / STALL_EVENTS, shape.cq_mod),
                busy,
            )
        }
    };
    let fewest = fewest_in_flight(every, shape.post_list);
    Pace {
        signal_every: every,
        in_flight: keep.max(fewest).min(shape.depth.max(1)),
    }
}

/// The fewest operations a QP that requests a completion every `every` operations may keep
/// in flight: its unsignaled ones and a whole post list besides, at least two; fewer, and
/// posting would wait on a completion that was not requested.
pub(crate) fn fewest_in_flight(every: u32, post_list: u32) -> u32 {
    (every.max(1) + post_list.max(1) - 1).max(2)
}

/// `ops` rounded down, within 1..=`most` (1 when not finite).
pub(super) fn ops_within(ops: f64, most: u32) -> u32 {
    if !ops.is_finite() || ops < 1.0 {
        return 1;
    }
    (ops.floor() as u64).clamp(1, u64::from(most.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::AtomicOp;

    #[test]
    fn a_duration_run_signals_often_enough_for_its_warm_up_rate() {
        let window = Duration::from_millis(800);
        // 38 messages/s (64 KiB over 20 Mbit/s): every message.
        assert_eq!(signal_every(64, 38.0, 1, window), 1);
        // 1 M messages/s on 1 QP: capped at cq_mod.
        assert_eq!(signal_every(64, 1e6, 1, window), 64);
        // 10,000/s over 4 QPs: 2,500/s each, 2,000 in the window: a completion per 40.
        assert_eq!(signal_every(64, 10_000.0, 4, window), 40);
        assert_eq!(signal_every(64, 0.0, 1, window), 1);
        assert_eq!(signal_every(64, f64::NAN, 1, window), 1);
    }

    #[test]
    fn a_slow_duration_run_keeps_in_flight_what_drains_in_its_end_margin() {
        const MS: Duration = Duration::from_millis(1);
        let shape = |secs: f64| LoopShape {
            verb: Verb::Write,
            atomic: AtomicOp::FetchAdd,
            size: 65536,
            stop: Stop::for_duration(secs),
            depth: 128,
            rx_depth: 512,
            post_list: 1,
            cq_mod: 64,
            inline: false,
            send: true,
            recv: None,
            stall_timeout: Duration::from_secs(30),
            rate_limit: None,
            interval: None,
        };
        // 64 KiB over 20 Mbit/s, -D 2 (margin 0.2 s): 38/s, 7 drain in the margin.
        let slow = pace_for(&shape(2.0), 1, 38.0, MS);
        assert_eq!((slow.signal_every, slow.in_flight), (1, 7));
        // 8 MiB at 20 MB/s, -D 0.5: never fewer than two.
        assert_eq!(pace_for(&shape(0.5), 1, 2.5, MS).in_flight, 2);
        // A NIC's rate: the whole depth, a completion every cq_mod.
        let fast = pace_for(&shape(1.0), 4, 4e6, MS);
        assert_eq!((fast.signal_every, fast.in_flight), (64, 128));
        // -D 10 at 1,000/s: 8,000 in the window, a completion every 64 (cq_mod); cut every
        // second, every 50 (20 events a second).
        assert_eq!(pace_for(&shape(10.0), 1, 1e3, MS).signal_every, 64);
        let cut = LoopShape {
            interval: Some(Duration::from_secs(1)),
            ..shape(10.0)
        };
        assert_eq!(pace_for(&cut, 1, 1e3, MS).signal_every, 50);
        // Room for a whole post list beyond the unsignaled operations.
        let mut listed = shape(2.0);
        listed.post_list = 16;
        let p = pace_for(&listed, 1, 38.0, MS);
        assert!(p.in_flight >= p.signal_every + 15, "{p:?}");
        // -D 1 (margin 0.1 s) across 20 Mbit/s whose first WRITE took 150 ms to complete
        // (the emulated guest): the margin alone keeps 3 in flight, which ran the link at
        // half its rate; a round trip's worth twice over keeps it busy.
        assert_eq!(pace_for(&shape(1.0), 1, 38.0, MS).in_flight, 3);
        let long = pace_for(&shape(1.0), 1, 38.0, Duration::from_millis(150));
        assert_eq!(long.in_flight, 11);
    }

    fn counted(verb: Verb, size: u32) -> LoopShape {
        LoopShape {
            verb,
            atomic: AtomicOp::FetchAdd,
            size,
            stop: Stop::Iters(50),
            depth: 128,
            rx_depth: 512,
            post_list: 1,
            cq_mod: 64,
            inline: false,
            send: true,
            recv: None,
            stall_timeout: Duration::from_secs(30),
            rate_limit: None,
            interval: None,
        }
    }

    #[test]
    fn a_counted_run_starts_slow_only_for_large_reads() {
        assert!(starts_slow(&counted(Verb::Read, 4 << 20)));
        assert!(starts_slow(&counted(Verb::Read, LARGE_READ)));
        assert!(!starts_slow(&counted(Verb::Read, 65536)));
        assert!(!starts_slow(&counted(Verb::Write, 4 << 20)));
        let timed = LoopShape {
            stop: Stop::for_duration(1.0),
            ..counted(Verb::Write, 2)
        };
        assert!(starts_slow(&timed));
    }

    /// 4 MiB READs in the two-node guest: about one every 4.5 s at its QP timeout of 18,
    /// one every 0.9 s at 14, two in flight the shortest round.
    #[test]
    fn a_counted_run_of_slow_reads_asks_for_a_completion_well_within_its_timeout() {
        let slow = pace_for(
            &counted(Verb::Read, 4 << 20),
            1,
            0.22,
            Duration::from_secs(9),
        );
        assert_eq!((slow.signal_every, slow.in_flight), (1, 3));
        let faster = pace_for(
            &counted(Verb::Read, 4 << 20),
            1,
            1.1,
            Duration::from_secs(2),
        );
        assert_eq!((faster.signal_every, faster.in_flight), (1, 4));
        // A NIC's 4 MiB READs (3,000/s, 0.7 ms with two in flight): a completion every 64
        // (cq_mod), and never fewer in flight than the unsignaled ones and one more.
        let nic = pace_for(
            &counted(Verb::Read, 4 << 20),
            1,
            3e3,
            Duration::from_micros(700),
        );
        assert_eq!((nic.signal_every, nic.in_flight), (64, 64));
        // Many QPs share the rate: 1,000/s over 10 QPs, 100/s each, 150 per 30 s / 20.
        let shared = pace_for(
            &counted(Verb::Read, 1 << 20),
            10,
            1e3,
            Duration::from_millis(20),
        );
        assert_eq!(shared.signal_every, 64);
        let slower = pace_for(
            &counted(Verb::Read, 1 << 20),
            10,
            50.0,
            Duration::from_secs(1),
        );
        assert_eq!((slower.signal_every, slower.in_flight), (7, 10));
    }
}
