//! The bandwidth loop: keep `tx-depth` operations in flight on every QP (READ and atomics
//! also bounded by the outstanding reads both ends allow), ring one doorbell per post list,
//! request a completion every `cq-mod`-th operation, keep the receive queues full when SENDs
//! arrive, and time the window with a monotonic clock.
//!
//! With an iteration count the window runs from the first post to the last completion. With
//! a duration the loop runs that long and the window leaves out a warm-up and a cool-down
//! margin at both ends. Nothing in the loop allocates, locks or makes a system call besides
//! the verbs' own: counters and the post list are set up before the clock starts.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use verbs::{Completion, Op, SendRequest};

use super::Connected;
use crate::plan::{AtomicOp, Verb};

/// Completions taken per poll.
const POLL_BATCH: usize = 16;
/// Bits of a work request id that hold the operation count; the QP index sits above them.
const COUNT_BITS: u32 = 40;
/// Marks the id of a receive work request.
const RECV_FLAG: u64 = 1 << 63;
/// How many empty polls pass between two looks at the clock for a stall.
const CLOCK_CHECK_EVERY: u32 = 1 << 10;
/// How long a receiver keeps polling after the sender said it is done (UC/UD may lose).
const DRAIN: Duration = Duration::from_millis(200);

/// The id of a receive on QP `q`.
#[inline]
pub fn recv_wr_id(q: usize) -> u64 {
    RECV_FLAG | ((q as u64) << COUNT_BITS)
}

/// What the peer's control channel said while the loop ran (shared with a reader thread);
/// 0, the default, means the peer is still running.
#[derive(Debug, Default)]
pub struct PeerState(AtomicU8);

impl PeerState {
    const DONE: u8 = 1;
    const FAILED: u8 = 2;

    /// The peer finished its part.
    pub fn set_done(&self) {
        self.0.store(Self::DONE, Ordering::Release);
    }

    /// The peer is gone.
    pub fn set_failed(&self) {
        self.0.store(Self::FAILED, Ordering::Release);
    }

    /// True once the peer finished.
    pub fn is_done(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::DONE
    }

    /// True once the peer is gone.
    pub fn is_failed(&self) -> bool {
        self.0.load(Ordering::Acquire) == Self::FAILED
    }
}

/// When a loop ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many operations per QP.
    Iters(u64),
    /// After this long; the window leaves out `margin` at both ends.
    Duration {
        /// Whole run.
        total: Duration,
        /// Left out at the start and at the end.
        margin: Duration,
    },
}

impl Stop {
    /// The duration mode's margin for a run of `secs`: a tenth, at most two seconds.
    pub fn for_duration(secs: f64) -> Stop {
        let total = Duration::from_secs_f64(secs);
        Stop::Duration {
            total,
            margin: (total / 10).min(Duration::from_secs(2)),
        }
    }
}

/// The shape of one loop.
#[derive(Debug, Clone, Copy)]
pub struct LoopShape {
    /// The operation posted (when `send`).
    pub verb: Verb,
    /// The atomic operation, for atomics.
    pub atomic: AtomicOp,
    /// Bytes per operation.
    pub size: u32,
    /// When to stop.
    pub stop: Stop,
    /// Operations in flight per QP.
    pub depth: u32,
    /// Receives posted per QP (a staged receiver's limit; the plain loop keeps its receive
    /// queues full from the start).
    pub rx_depth: u32,
    /// Work requests per doorbell.
    pub post_list: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// Send the payload inline.
    pub inline: bool,
    /// This side posts operations.
    pub send: bool,
    /// This side receives SENDs: how many per QP it expects (iteration mode).
    pub recv: Option<u64>,
    /// Fail when nothing completes for this long.
    pub stall_timeout: Duration,
}

/// One measured window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Window {
    /// Operations completed inside the window, all QPs together.
    pub ops: u64,
    /// Its length.
    pub seconds: f64,
}

/// What one loop measured: the operations this side sent, the messages it received, and
/// how many operations each QP carried in all (for atomic validation).
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// This side's operations.
    pub sent: Option<Window>,
    /// SENDs that arrived.
    pub received: Option<Window>,
    /// Operations completed per QP, window or not.
    pub ops_per_qp: Vec<u64>,
}

/// Whether operation number `n` (1-based, per QP) asks for a completion.
#[inline]
pub fn is_signaled(n: u64, cq_mod: u32, last: u64) -> bool {
    n.is_multiple_of(u64::from(cq_mod)) || n == last
}

/// Opens and closes a window on (time, count) events: at the first event (iteration mode),
/// or at the margins (duration mode).
#[derive(Debug, Clone, Copy)]
pub(super) struct Meter {
    start: Instant,
    open_at: Option<Instant>,
    close_at: Option<Instant>,
    opened: Option<(Instant, u64)>,
    closed: Option<(Instant, u64)>,
    last: Option<(Instant, u64)>,
}

impl Meter {
    pub(super) fn new(start: Instant, stop: Stop) -> Self {
        let (open_at, close_at) = match stop {
            Stop::Iters(_) => (None, None),
            Stop::Duration { total, margin } => {
                (Some(start + margin), Some(start + total - margin))
            }
        };
        Meter {
            start,
            open_at,
            close_at,
            opened: None,
            closed: None,
            last: None,
        }
    }

    /// Restarts the clock (a receiver's window starts at its first message).
    fn restart(&mut self, start: Instant, stop: Stop) {
        *self = Meter::new(start, stop);
    }

    #[inline]
    pub(super) fn tick(&mut self, now: Instant, count: u64) {
        match self.open_at {
            None => {
                if self.opened.is_none() {
                    self.opened = Some((self.start, 0));
                }
            }
            Some(open_at) => {
                if self.opened.is_none() && now >= open_at {
                    self.opened = Some((now, count));
                }
                if self.closed.is_none() && self.close_at.is_some_and(|c| now >= c) {
                    self.closed = Some((now, count));
                }
            }
        }
        self.last = Some((now, count));
    }

    pub(super) fn window(&self) -> Option<Window> {
        let (t0, c0) = self.opened?;
        let (t1, c1) = self.closed.or(self.last)?;
        Some(Window {
            ops: c1.saturating_sub(c0),
            seconds: t1.saturating_duration_since(t0).as_secs_f64(),
        })
    }
}

/// Counts per QP for the sending side: posted, and known completed (a completion for
/// operation n completes every operation up to n on that QP).
#[derive(Debug)]
pub struct SendProgress {
    posted: Vec<u64>,
    completed: Vec<u64>,
    /// Operations completed, all QPs together.
    pub done: u64,
    /// Operations per QP to post; `u64::MAX` in duration mode until the time is up.
    limit: u64,
}

impl SendProgress {
    /// Counters for `qps` QPs that post `limit` operations each (`u64::MAX`: until stopped).
    pub fn new(qps: usize, limit: u64) -> Self {
        SendProgress {
            posted: vec![0; qps],
            completed: vec![0; qps],
            done: 0,
            limit,
        }
    }

    /// How many operations QP `q` may post now.
    #[inline]
    pub fn room(&self, q: usize, shape: &LoopShape) -> u64 {
        let in_flight = self.posted[q] - self.completed[q];
        let free = u64::from(shape.depth).saturating_sub(in_flight);
        let left = self.limit.saturating_sub(self.posted[q]);
        let batch = u64::from(shape.post_list).min(left);
        if free >= batch {
            batch
        } else {
            0
        }
    }

    #[inline]
    fn in_flight(&self) -> u64 {
        self.posted
            .iter()
            .zip(&self.completed)
            .map(|(p, c)| p - c)
            .sum()
    }

    /// Stops posting when the time is up. The new limit is the next multiple of `cq_mod` at
    /// or above what the busiest QP posted, so that every QP's last operation is signaled.
    fn stop_posting(&mut self, cq_mod: u32) {
        if self.limit != u64::MAX {
            return;
        }
        let most = self.posted.iter().copied().max().unwrap_or(0);
        self.limit = most.div_ceil(u64::from(cq_mod)).max(1) * u64::from(cq_mod);
    }

    /// Accounts one completion whose id carries (QP, count).
    #[inline]
    pub fn complete(&mut self, wr_id: u64) {
        let q = ((wr_id & !RECV_FLAG) >> COUNT_BITS) as usize;
        let n = wr_id & ((1 << COUNT_BITS) - 1);
        if let Some(c) = self.completed.get_mut(q) {
            if n > *c {
                self.done += n - *c;
                *c = n;
            }
        }
    }

    fn finished(&self) -> bool {
        self.posted.iter().all(|&p| p >= self.limit) && self.in_flight() == 0
    }
}

/// Runs one bandwidth loop on every QP and returns what it measured.
pub fn measure_bw(side: &mut Connected, shape: &LoopShape, peer: &PeerState) -> Result<Measured> {
    let qps = side.qps.len();
    let limit = match shape.stop {
        Stop::Iters(n) => n,
        Stop::Duration { .. } => u64::MAX,
    };
    let mut sending = shape.send.then(|| SendProgress::new(qps, limit));
    let mut received_per_qp = vec![0u64; qps];
    let mut received = 0u64;
    let expected = shape.recv.map(|n| n * qps as u64);
    let mut batch = vec![
        SendRequest {
            wr_id: 0,
            op: Op::Send,
            local_offset: 0,
            len: shape.size,
            signaled: false,
        };
        shape.post_list as usize
    ];
    let mut wcs = [Completion::default(); POLL_BATCH];
    let mut idle_polls = 0u32;
    let mut drain_since: Option<Instant> = None;

    let start = Instant::now();
    let mut send_meter = Meter::new(start, shape.stop);
    let mut recv_meter = Meter::new(start, shape.stop);
    let mut last_progress = start;
    let deadline = match shape.stop {
        Stop::Duration { total, .. } => Some(start + total),
        Stop::Iters(_) => None,
    };
    loop {
        if let Some(s) = sending.as_mut() {
            for q in 0..qps {
                post_ops(side, q, shape, s, &mut batch)?;
            }
        }
        let n = side.cq.poll(&mut wcs)?;
        if n == 0 {
            idle_polls += 1;
            if idle_polls >= CLOCK_CHECK_EVERY {
                idle_polls = 0;
                let now = Instant::now();
                if let (Some(s), Some(d)) = (sending.as_mut(), deadline) {
                    if now >= d {
                        s.stop_posting(shape.cq_mod);
                    }
                }
                if receive_finished(shape, received, expected, peer, &mut drain_since, now)
                    && sending.as_ref().is_none_or(SendProgress::finished)
                {
                    break;
                }
                if peer.is_failed() {
                    bail!("the peer's control connection failed while measuring");
                }
                if now.duration_since(last_progress) > shape.stall_timeout {
                    return Err(stalled(sending.as_ref(), received, shape));
                }
            }
            continue;
        }
        let now = Instant::now();
        for wc in &wcs[..n] {
            wc.check()?;
            let id = wc.wr_id();
            if id & RECV_FLAG != 0 {
                let q = ((id & !RECV_FLAG) >> COUNT_BITS) as usize;
                if received == 0 {
                    recv_meter.restart(now, shape.stop);
                }
                received += 1;
                received_per_qp[q] += 1;
                side.post_recv(q, id)?;
            } else if let Some(s) = sending.as_mut() {
                s.complete(id);
            }
        }
        last_progress = now;
        idle_polls = 0;
        if let Some(s) = sending.as_mut() {
            send_meter.tick(now, s.done);
            if deadline.is_some_and(|d| now >= d) {
                s.stop_posting(shape.cq_mod);
            }
        }
        if received > 0 {
            recv_meter.tick(now, received);
        }
        let send_done = sending.as_ref().is_none_or(SendProgress::finished);
        let recv_done = match (shape.recv, expected) {
            (None, _) => true,
            (Some(_), Some(e)) if matches!(shape.stop, Stop::Iters(_)) => received >= e,
            _ => false,
        };
        if send_done && recv_done {
            break;
        }
    }
    let ops_per_qp = match &sending {
        Some(s) => s.completed.clone(),
        None => received_per_qp,
    };
    Ok(Measured {
        sent: sending.as_ref().and_then(|_| send_meter.window()),
        received: shape.recv.and_then(|_| recv_meter.window()),
        ops_per_qp,
    })
}

/// A receiver is finished when it has every expected message, or when the peer said it is
/// done and nothing arrived for a short drain time (UC/UD lose messages; duration runs).
fn receive_finished(
    shape: &LoopShape,
    received: u64,
    expected: Option<u64>,
    peer: &PeerState,
    drain_since: &mut Option<Instant>,
    now: Instant,
) -> bool {
    if shape.recv.is_none() {
        return true;
    }
    if matches!(shape.stop, Stop::Iters(_)) && expected.is_some_and(|e| received >= e) {
        return true;
    }
    if !peer.is_done() {
        return false;
    }
    let since = *drain_since.get_or_insert(now);
    now.duration_since(since) >= DRAIN
}

/// The error for a loop that saw no completion within the stall timeout.
#[cold]
fn stalled(sending: Option<&SendProgress>, received: u64, shape: &LoopShape) -> anyhow::Error {
    let secs = shape.stall_timeout.as_secs_f64();
    match sending {
        Some(s) => {
            let bytes = s.in_flight() * u64::from(shape.size);
            anyhow::anyhow!(
                "no completion for {secs:.1} s with {} operations done and {} in flight: the peer \
                 may be dead, or the link slower than {:.1} MB/s; raise --timeout or lower --tx-depth",
                s.done,
                crate::units::format_size(bytes),
                bytes as f64 / secs / 1e6
            )
        }
        None => anyhow::anyhow!(
            "no message arrived for {secs:.1} s after {received}; is the peer alive? (--timeout)"
        ),
    }
}

/// Where QP `q`'s operations go and come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The peer's receive half (WRITE, SEND and atomics land there).
    pub remote_recv: u64,
    /// The peer's send half (READs read it).
    pub remote_send: u64,
    /// The peer's remote key.
    pub rkey: u32,
    /// The local bytes: the receive half for READ (and atomics' fetched value), else the
    /// send half.
    pub local_offset: u64,
}

impl Target {
    /// QP `q`'s target on a connected side.
    #[inline]
    pub fn of(side: &Connected, q: usize, verb: Verb) -> Self {
        Target {
            remote_recv: side.remote_recv(q),
            remote_send: side.remote_send(q),
            rkey: side.remote[q].rkey,
            local_offset: if matches!(verb, Verb::Read | Verb::Atomic) {
                side.recv_offset(q)
            } else {
                side.send_offset(q)
            },
        }
    }
}

/// The operation for request number `n`.
#[inline]
fn op_for(target: &Target, shape: &LoopShape, n: u64) -> Op {
    let rkey = target.rkey;
    match shape.verb {
        Verb::Write => Op::Write {
            remote_addr: target.remote_recv,
            rkey,
        },
        Verb::Read => Op::Read {
            remote_addr: target.remote_send,
            rkey,
        },
        Verb::Send => Op::Send,
        Verb::Atomic => match shape.atomic {
            AtomicOp::FetchAdd => Op::FetchAdd {
                remote_addr: target.remote_recv,
                rkey,
                add: 1,
            },
            AtomicOp::CompareSwap => Op::CompareSwap {
                remote_addr: target.remote_recv,
                rkey,
                compare: n - 1,
                swap: n,
            },
        },
    }
}

/// Fills `batch` with the work requests numbered `first + 1 ..= first + batch.len()` of QP
/// `q`: ids carrying (QP, number), every `cq_mod`-th and the last (`limit`) signaled.
/// Allocates nothing.
#[inline]
pub fn fill_batch(
    batch: &mut [SendRequest],
    q: usize,
    first: u64,
    shape: &LoopShape,
    limit: u64,
    target: &Target,
) {
    for (k, wr) in batch.iter_mut().enumerate() {
        let n = first + k as u64 + 1;
        *wr = SendRequest {
            wr_id: ((q as u64) << COUNT_BITS) | n,
            op: op_for(target, shape, n),
            local_offset: target.local_offset,
            len: shape.size,
            signaled: is_signaled(n, shape.cq_mod, limit),
        };
    }
}

/// Posts as many post lists on QP `q` as its depth allows.
#[inline]
fn post_ops(
    side: &mut Connected,
    q: usize,
    shape: &LoopShape,
    progress: &mut SendProgress,
    batch: &mut [SendRequest],
) -> Result<()> {
    let target = Target::of(side, q, shape.verb);
    loop {
        let count = progress.room(q, shape) as usize;
        if count == 0 {
            return Ok(());
        }
        fill_batch(
            &mut batch[..count],
            q,
            progress.posted[q],
            shape,
            progress.limit,
            &target,
        );
        match side.ah.get(q) {
            Some(ah) => side.qps[q].post_send_ud(&side.mr, &batch[..count], shape.inline, ah)?,
            None => side.qps[q].post_send(&side.mr, &batch[..count], shape.inline)?,
        }
        progress.posted[q] += count as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(iters: u64, depth: u32, post_list: u32, cq_mod: u32) -> LoopShape {
        LoopShape {
            verb: Verb::Write,
            atomic: AtomicOp::FetchAdd,
            size: 64,
            stop: Stop::Iters(iters),
            depth,
            rx_depth: depth,
            post_list,
            cq_mod,
            inline: false,
            send: true,
            recv: None,
            stall_timeout: Duration::from_secs(1),
        }
    }

    /// A model NIC: completes the oldest signaled request each step. The loop's accounting
    /// must finish every operation without ever exceeding the depth.
    fn simulate(s: LoopShape, qps: usize) -> u64 {
        let Stop::Iters(iters) = s.stop else {
            unreachable!()
        };
        let mut p = SendProgress::new(qps, iters);
        let mut signaled: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); qps];
        let total = iters * qps as u64;
        let mut steps = 0;
        while p.done < total {
            steps += 1;
            assert!(steps < 1_000_000, "stalled at {} of {total}", p.done);
            for (q, queue) in signaled.iter_mut().enumerate() {
                loop {
                    let count = p.room(q, &s);
                    if count == 0 {
                        break;
                    }
                    for k in 0..count {
                        let n = p.posted[q] + k + 1;
                        if is_signaled(n, s.cq_mod, p.limit) {
                            queue.push_back(n);
                        }
                    }
                    p.posted[q] += count;
                    assert!(p.posted[q] - p.completed[q] <= u64::from(s.depth));
                }
                if let Some(n) = queue.pop_front() {
                    p.complete(((q as u64) << COUNT_BITS) | n);
                }
            }
        }
        assert!(p.finished());
        p.done
    }

    #[test]
    fn every_operation_completes_for_valid_shapes() {
        assert_eq!(simulate(shape(5000, 128, 1, 100), 1), 5000);
        assert_eq!(simulate(shape(1000, 16, 4, 13), 4), 4000);
        assert_eq!(simulate(shape(7, 128, 16, 100), 2), 14);
        assert_eq!(simulate(shape(1, 1, 1, 1), 1), 1);
    }

    #[test]
    fn the_last_operation_is_always_signaled() {
        assert!(is_signaled(7, 100, 7));
        assert!(is_signaled(100, 100, 5000));
        assert!(!is_signaled(99, 100, 5000));
    }

    #[test]
    fn a_completion_counts_every_operation_before_it() {
        let mut p = SendProgress::new(2, 1000);
        p.complete((1 << COUNT_BITS) | 100);
        assert_eq!((p.completed[1], p.done), (100, 100));
        p.complete((1 << COUNT_BITS) | 50);
        assert_eq!(p.done, 100);
    }

    #[test]
    fn receive_ids_carry_their_qp_and_a_flag() {
        let id = recv_wr_id(5);
        assert_ne!(id & RECV_FLAG, 0);
        assert_eq!((id & !RECV_FLAG) >> COUNT_BITS, 5);
    }

    #[test]
    fn an_iteration_window_runs_from_the_start_to_the_last_event() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, Stop::Iters(10));
        m.tick(t0 + Duration::from_millis(5), 4);
        m.tick(t0 + Duration::from_millis(10), 10);
        let w = m.window().unwrap();
        assert_eq!(w.ops, 10);
        assert!((w.seconds - 0.010).abs() < 1e-9);
    }

    #[test]
    fn a_duration_window_leaves_out_both_margins() {
        let t0 = Instant::now();
        let stop = Stop::Duration {
            total: Duration::from_secs(10),
            margin: Duration::from_secs(1),
        };
        let mut m = Meter::new(t0, stop);
        for s in 0..=100u64 {
            m.tick(t0 + Duration::from_millis(s * 100), s * 10);
        }
        let w = m.window().unwrap();
        // opens at 1 s (count 100), closes at 9 s (count 900)
        assert_eq!(w.ops, 800);
        assert!((w.seconds - 8.0).abs() < 1e-9);
        assert_eq!(
            Stop::for_duration(3.0),
            Stop::Duration {
                total: Duration::from_secs(3),
                margin: Duration::from_millis(300)
            }
        );
    }

    #[test]
    fn stopping_early_ends_every_qp_at_its_last_post() {
        let mut p = SendProgress::new(2, u64::MAX);
        p.posted = vec![10, 12];
        p.completed = vec![10, 12];
        p.stop_posting(5);
        assert_eq!(
            p.limit, 15,
            "the next multiple of cq_mod, so the last one is signaled"
        );
        assert!(is_signaled(15, 5, p.limit));
        assert!(!p.finished());
        p.posted = vec![15, 15];
        p.completed = vec![15, 15];
        assert!(p.finished());
        p.stop_posting(5);
        assert_eq!(p.limit, 15, "a second stop changes nothing");
    }
}
