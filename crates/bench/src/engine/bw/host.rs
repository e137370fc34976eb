//! The bandwidth loop over memory the NIC reaches directly (host memory, or GPU memory with
//! GPUDirect RDMA): keep `tx-depth` operations in flight on every QP (READ and atomics too:
//! the QP's outstanding-read limit makes the NIC hold back the rest, as perftest relies on),
//! ring one doorbell per post list, request a completion every `cq-mod`-th operation, and
//! keep the receive queues full when SENDs arrive. [`super::drive`] runs the turns; in a
//! duration run it tells the loop how often to request a completion once the warm-up is
//! over (every operation until then), and how many operations to keep in flight.
//!
//! A duration run starts slow: [`SendProgress::starting_slow`] lets each QP keep a whole
//! post list (at least two operations) in flight, and one more for each that completes
//! (twice as many every round trip), up to `tx-depth`, until [`super::startup`] finds the
//! link full. On a fast link the queue is full within microseconds; on a slow one what is
//! in flight when the time is up drains in about the end margin, where a full queue of
//! 64 KiB writes took 40 s to drain behind a 5 Mbit/s link.
//!
//! Nothing in a turn allocates, locks or makes a system call besides the verbs' own: the
//! per-QP tables and the post list are set up before the clock starts.

use std::time::{Duration, Instant};

use anyhow::Result;
use verbs::{Completion, Op, SendRequest};

use super::{
    drive, fewest_in_flight, Counts, LoopBody, LoopShape, Measured, Pacer, PeerState, WrId, WrKind,
};
use crate::engine::{region, Connected};
use crate::plan::{AtomicOp, Verb};

/// How long a receiver keeps polling after the peer said its sends are over (UC/UD may
/// lose messages; duration runs end on the peer's word).
const DRAIN: Duration = Duration::from_millis(200);

/// One QP's counts: operations posted, and known completed (the completions of a QP's send
/// queue arrive in order, each accounting for the operations since the previous one), and
/// the number of the last operation that asked for a completion.
#[derive(Debug, Clone, Copy, Default)]
struct QpCount {
    posted: u64,
    completed: u64,
    last_signaled: u64,
}

/// The sending side's table of per-QP counts.
#[derive(Debug)]
pub struct SendProgress {
    qps: Vec<QpCount>,
    /// Operations completed, all QPs together.
    pub done: u64,
    /// Operations per QP to post; `u64::MAX` in duration mode until the time is up.
    limit: u64,
    /// The most operations one QP had in flight.
    in_flight_max: u64,
    /// A completion is requested every this many operations per QP.
    every: u32,
    /// At most this many operations in flight per QP (besides the send queue's depth).
    in_flight_cap: u64,
    /// The cap grows by every operation completed (a duration run's warm-up).
    growing: bool,
}

impl SendProgress {
    /// Counters for `qps` QPs that post `limit` operations each (`u64::MAX`: until stopped)
    /// and request a completion every `every` operations.
    pub fn new(qps: usize, limit: u64, every: u32) -> Self {
        SendProgress {
            qps: vec![QpCount::default(); qps],
            done: 0,
            limit,
            in_flight_max: 0,
            every: every.max(1),
            in_flight_cap: u64::MAX,
            growing: false,
        }
    }

    /// The same, starting with a whole post list (at least two operations) in flight per
    /// QP, one more for each operation that completes, until [`set_in_flight_cap`]
    /// (Self::set_in_flight_cap) holds it.
    pub(crate) fn starting_slow(mut self, post_list: u32) -> Self {
        self.in_flight_cap = u64::from(fewest_in_flight(self.every, post_list));
        self.growing = true;
        self
    }

    /// Operations posted so far, all QPs together.
    pub(crate) fn posted_total(&self) -> u64 {
        self.qps.iter().map(|c| c.posted).sum()
    }

    /// From the next operation on, a completion every `every` operations per QP (posted in
    /// lists of `post_list`): room is kept for at least that many in flight.
    pub(crate) fn set_every(&mut self, every: u32, post_list: u32) {
        self.every = every.max(1);
        let fewest = u64::from(fewest_in_flight(self.every, post_list));
        self.in_flight_cap = self.in_flight_cap.max(fewest);
    }

    /// From now on, at most `in_flight` operations in flight per QP (posted in lists of
    /// `post_list`), and no fewer than the completions requested need.
    pub(crate) fn set_in_flight_cap(&mut self, in_flight: u32, post_list: u32) {
        let fewest = fewest_in_flight(self.every, post_list);
        self.in_flight_cap = u64::from(in_flight.max(fewest));
        self.growing = false;
    }

    /// Whether QP `q`'s operation number `n` (the next to post) asks for a completion, and
    /// how many operations that completion accounts for (0: not signaled): `every` since
    /// the last signaled one, and the last of all (`limit`). Marks it signaled.
    #[inline]
    pub(crate) fn signal(&mut self, q: usize, n: u64) -> u32 {
        let c = &mut self.qps[q];
        let since = n - c.last_signaled;
        if since >= u64::from(self.every) || n == self.limit {
            c.last_signaled = n;
            since as u32
        } else {
            0
        }
    }

    /// How many operations QP `q` may post now: a whole post list (or what is left), once
    /// the send queue has room for it.
    #[inline]
    pub fn room(&self, q: usize, shape: &LoopShape) -> u64 {
        let c = self.qps[q];
        let depth = u64::from(shape.depth).min(self.in_flight_cap);
        let free = depth.saturating_sub(c.posted - c.completed);
        let batch = u64::from(shape.post_list).min(self.limit.saturating_sub(c.posted));
        if free >= batch {
            batch
        } else {
            0
        }
    }

    /// Operations QP `q` posted so far.
    #[inline]
    pub(crate) fn posted(&self, q: usize) -> u64 {
        self.qps[q].posted
    }

    /// QP `q` posted `count` more.
    #[inline]
    pub fn add_posted(&mut self, q: usize, count: u64) {
        let c = &mut self.qps[q];
        c.posted += count;
        self.in_flight_max = self.in_flight_max.max(c.posted - c.completed);
    }

    fn in_flight(&self) -> u64 {
        self.qps.iter().map(|c| c.posted - c.completed).sum()
    }

    /// Stops posting when the time is up: every QP posts up to one more than the busiest
    /// QP posted, and that last operation is signaled.
    fn stop_posting(&mut self) {
        if self.limit != u64::MAX {
            return;
        }
        self.limit = self.qps.iter().map(|c| c.posted).max().unwrap_or(0) + 1;
    }

    /// Accounts one completion of an operation: its QP and how many it covers.
    #[inline]
    pub fn complete(&mut self, id: WrId) {
        if let Some(c) = self.qps.get_mut(id.qp()) {
            c.completed += id.covers();
            self.done += id.covers();
            if self.growing {
                self.in_flight_cap = self.in_flight_cap.saturating_add(id.covers());
            }
        }
    }

    fn finished(&self) -> bool {
        self.qps.iter().all(|c| c.posted >= self.limit) && self.in_flight() == 0
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
    /// The local bytes: the receive half for READ, else the send half (an atomic's fetched
    /// value lands there, apart from the word the peer's atomics act on with `-b`).
    pub local_offset: u64,
}

impl Target {
    /// QP `q`'s target on a connected side.
    #[inline]
    pub(crate) fn of(side: &Connected, q: usize, verb: Verb) -> Self {
        Target {
            remote_recv: side.remote_recv(q),
            remote_send: side.remote_send(q),
            rkey: side.remote[q].rkey,
            local_offset: if verb == Verb::Read {
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

/// Fills `batch` with QP `q`'s next work requests (numbered on from what it posted): those
/// [`SendProgress::signal`] picks are signaled, their ids carrying how many operations their
/// completion accounts for. Allocates nothing.
#[inline]
pub fn fill_batch(
    batch: &mut [SendRequest],
    q: usize,
    progress: &mut SendProgress,
    shape: &LoopShape,
    target: &Target,
) {
    let first = progress.posted(q);
    for (k, wr) in batch.iter_mut().enumerate() {
        let n = first + k as u64 + 1;
        let covers = progress.signal(q, n);
        *wr = SendRequest {
            wr_id: WrId::new(WrKind::Op, q, covers).0,
            op: op_for(target, shape, n),
            local_offset: target.local_offset,
            len: shape.size,
            signaled: covers > 0,
        };
    }
}

/// Takes `count` operations from a paced run's `budget` (what its pacer allows beyond what
/// was posted); false, taking nothing, when the budget holds fewer.
#[inline]
fn take_budget(budget: &mut u64, count: u64) -> bool {
    let enough = *budget >= count;
    if enough {
        *budget -= count;
    }
    enough
}

/// Posts as many post lists on QP `q` as its depth allows, and on a `PACED` run (a separate
/// instance: the unpaced loop does no pacing work) as many as `budget` still allows.
#[inline]
fn post_ops<const PACED: bool>(
    side: &mut Connected,
    q: usize,
    shape: &LoopShape,
    progress: &mut SendProgress,
    batch: &mut [SendRequest],
    budget: &mut u64,
) -> Result<()> {
    let target = Target::of(side, q, shape.verb);
    loop {
        let count = progress.room(q, shape) as usize;
        if count == 0 || (PACED && !take_budget(budget, count as u64)) {
            return Ok(());
        }
        fill_batch(&mut batch[..count], q, progress, shape, &target);
        match side.ah.get(q) {
            Some(ah) => side.qps[q].post_send_ud(
                region(&side.parts, &side.mr, q),
                &batch[..count],
                shape.inline,
                ah,
            )?,
            None => side.qps[q].post_send(
                region(&side.parts, &side.mr, q),
                &batch[..count],
                shape.inline,
            )?,
        }
        progress.add_posted(q, count as u64);
    }
}

/// The host loop's state: what it sends and what it received, per QP.
#[derive(Debug)]
struct HostLoop<'a> {
    shape: &'a LoopShape,
    sending: Option<SendProgress>,
    batch: Vec<SendRequest>,
    received: u64,
    received_per_qp: Vec<u64>,
    /// Messages this side expects in all (iteration mode).
    expected: Option<u64>,
    drain_since: Option<Instant>,
    /// `--rate-limit`: the posts' pace.
    pacer: Option<Pacer>,
}

impl LoopBody for HostLoop<'_> {
    #[inline]
    fn turn(&mut self, side: &mut Connected, wcs: &mut [Completion]) -> Result<bool> {
        if let Some(s) = self.sending.as_mut() {
            match &self.pacer {
                Some(p) => {
                    let mut budget = p.allowed(Instant::now()).saturating_sub(s.posted_total());
                    for q in 0..side.qps.len() {
                        post_ops::<true>(side, q, self.shape, s, &mut self.batch, &mut budget)?;
                    }
                }
                None => {
                    for q in 0..side.qps.len() {
                        post_ops::<false>(side, q, self.shape, s, &mut self.batch, &mut 0)?;
                    }
                }
            }
        }
        let n = side.cq.poll(wcs)?;
        for wc in &wcs[..n] {
            wc.check()?;
            let id = WrId(wc.wr_id());
            match id.kind() {
                WrKind::Recv => {
                    self.received += 1;
                    self.received_per_qp[side.receiver(wc, id.qp())] += 1;
                    side.post_recv(id.qp(), id.0)?;
                }
                _ => {
                    if let Some(s) = self.sending.as_mut() {
                        s.complete(id);
                    }
                }
            }
        }
        Ok(n > 0)
    }

    fn counts(&self) -> Counts {
        Counts {
            sent: self.sending.as_ref().map_or(0, |s| s.done),
            posted: self
                .sending
                .as_ref()
                .filter(|s| s.growing)
                .map(SendProgress::posted_total),
            received: self.received,
            receiving: self.received > 0,
        }
    }

    fn stop_posting(&mut self) {
        if let Some(s) = self.sending.as_mut() {
            s.stop_posting();
        }
    }

    fn signal_every(&mut self, every: u32) {
        if let Some(s) = self.sending.as_mut() {
            s.set_every(every, self.shape.post_list);
        }
    }

    fn hold_in_flight(&mut self, ops: u32) {
        if let Some(s) = self.sending.as_mut() {
            s.set_in_flight_cap(ops, self.shape.post_list);
        }
    }

    fn finished(&mut self, now: Instant, peer: &PeerState) -> bool {
        if !self.sending.as_ref().is_none_or(SendProgress::finished) {
            return false;
        }
        if self.sending.is_some() {
            peer.announce_sends_over();
        }
        self.receive_finished(now, peer)
    }

    fn stalled(&self, secs: f64) -> anyhow::Error {
        match &self.sending {
            Some(s) => {
                let bytes = s.in_flight() * u64::from(self.shape.size);
                anyhow::anyhow!(
                    "no completion for {secs:.1} s with {} operations done and {} in flight: the \
                     peer may be dead, or the link slower than {:.1} MB/s; raise --timeout or lower \
                     --tx-depth",
                    s.done,
                    crate::units::format_size(bytes),
                    bytes as f64 / secs / 1e6
                )
            }
            None => anyhow::anyhow!(
                "no message arrived for {secs:.1} s after {}; is the peer alive? (--timeout)",
                self.received
            ),
        }
    }
}

impl HostLoop<'_> {
    /// A receiver is finished when it has every expected message, or when the peer said its
    /// sends are over and a short drain time passed (UC/UD lose messages; duration runs).
    fn receive_finished(&mut self, now: Instant, peer: &PeerState) -> bool {
        if self.shape.recv.is_none() || self.expected.is_some_and(|e| self.received >= e) {
            return true;
        }
        if !peer.is_done() {
            return false;
        }
        let since = *self.drain_since.get_or_insert(now);
        now.duration_since(since) >= DRAIN
    }
}

/// Runs one bandwidth loop on every QP and returns what it measured.
pub(crate) fn measure_bw(
    side: &mut Connected,
    shape: &LoopShape,
    peer: &PeerState,
) -> Result<Measured> {
    let qps = side.qps.len();
    let iterations = matches!(shape.stop, super::Stop::Iters(_));
    let mut body = HostLoop {
        shape,
        sending: shape.send.then(|| {
            if super::pace::starts_slow(shape) {
                SendProgress::new(qps, shape.stop.limit(), 1).starting_slow(shape.post_list)
            } else {
                SendProgress::new(qps, shape.stop.limit(), shape.cq_mod)
            }
        }),
        batch: vec![SendRequest::default(); shape.post_list as usize],
        received: 0,
        received_per_qp: vec![0; qps],
        expected: shape.recv.filter(|_| iterations).map(|n| n * qps as u64),
        drain_since: None,
        pacer: shape.rate_limit.map(|rate| Pacer::new(shape, rate)),
    };
    let windows = drive(side, shape, peer, &mut body)?;
    let (ops_per_qp, in_flight_max, signal_every) = match &body.sending {
        Some(s) => (
            s.qps.iter().map(|c| c.completed).collect(),
            s.in_flight_max,
            s.every,
        ),
        None => (body.received_per_qp.clone(), 0, 0),
    };
    Ok(Measured {
        sent: windows.sent.filter(|_| shape.send),
        received: windows.received.filter(|_| shape.recv.is_some()),
        ops_per_qp,
        in_flight_max,
        signal_every,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Stop;
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
            rate_limit: None,
            interval: None,
        }
    }

    const TARGET: Target = Target {
        remote_recv: 0x1000,
        remote_send: 0x2000,
        rkey: 7,
        local_offset: 0,
    };

    /// Posts on QP `q` what its room allows, queueing the signaled requests' ids for the model
    /// NIC to complete.
    fn post_all(
        p: &mut SendProgress,
        q: usize,
        s: &LoopShape,
        batch: &mut [SendRequest],
        queue: &mut std::collections::VecDeque<u64>,
    ) {
        while let count @ 1.. = p.room(q, s) as usize {
            fill_batch(&mut batch[..count], q, p, s, &TARGET);
            queue.extend(
                batch[..count]
                    .iter()
                    .filter(|w| w.signaled)
                    .map(|w| w.wr_id),
            );
            p.add_posted(q, count as u64);
            assert!(p.qps[q].posted - p.qps[q].completed <= u64::from(s.depth));
        }
    }

    /// A model NIC: completes the oldest signaled request each step. The loop's accounting
    /// must finish every operation without ever exceeding the depth; returns the operations
    /// done and the most one QP had in flight.
    fn simulate(s: LoopShape, qps: usize) -> (u64, u64) {
        let mut p = SendProgress::new(qps, s.stop.limit(), s.cq_mod);
        let mut signaled: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); qps];
        let mut batch = vec![SendRequest::default(); s.post_list as usize];
        let total = s.stop.limit() * qps as u64;
        let mut steps = 0;
        while p.done < total {
            steps += 1;
            assert!(steps < 1_000_000, "stalled at {} of {total}", p.done);
            for (q, queue) in signaled.iter_mut().enumerate() {
                post_all(&mut p, q, &s, &mut batch, queue);
                if let Some(id) = queue.pop_front() {
                    p.complete(WrId(id));
                }
            }
        }
        assert!(p.finished());
        (p.done, p.in_flight_max)
    }

    #[test]
    fn every_operation_completes_for_valid_shapes() {
        assert_eq!(simulate(shape(5000, 128, 1, 100), 1), (5000, 128));
        assert_eq!(simulate(shape(1000, 16, 4, 13), 4).0, 4000);
        assert_eq!(simulate(shape(7, 128, 16, 100), 2), (14, 7));
        assert_eq!(simulate(shape(1, 1, 1, 1), 1), (1, 1));
    }

    #[test]
    fn a_paced_run_posts_no_more_than_the_pacer_allows_all_qps_together() {
        // 6 allowed beyond what was posted: one post list of 4, then not another.
        let mut budget = 6;
        assert!(take_budget(&mut budget, 4), "a whole post list fits in 6");
        assert!(
            !take_budget(&mut budget, 4),
            "two left is no room for a post list"
        );
        assert_eq!(budget, 2, "a refused list takes nothing");
        let mut p = SendProgress::new(2, 1000, 100);
        p.add_posted(0, 4);
        p.add_posted(1, 8);
        assert_eq!(p.posted_total(), 12);
        // 1 GB/s of 64-byte messages: 15.6 M a second, so 15.6 k in a millisecond, plus a
        // post list.
        let pacer = Pacer::new(&shape(1000, 128, 4, 100), 1e9);
        let later = pacer.start + Duration::from_millis(1);
        assert_eq!(pacer.allowed(later), 15_625 + 4);
    }

    #[test]
    fn a_completion_counts_the_operations_it_covers_on_its_qp() {
        let mut p = SendProgress::new(2, 1000, 100);
        p.complete(WrId::new(WrKind::Op, 1, 100));
        assert_eq!(
            (p.qps[1].completed, p.qps[0].completed, p.done),
            (100, 0, 100)
        );
        p.complete(WrId::new(WrKind::Op, 1, 50));
        assert_eq!(p.done, 150);
    }

    #[test]
    fn a_run_of_any_length_keeps_its_qp_apart_from_its_count() {
        // Far past 2^40 operations (what a packed count held): the ids stay the same.
        let s = shape(u64::MAX, 128, 1, 100);
        let mut p = SendProgress::new(4, u64::MAX, 100);
        p.qps[3] = QpCount {
            posted: 1_000_000_000_000_000 - 1,
            completed: 1_000_000_000_000_000 - 1,
            last_signaled: 1_000_000_000_000_000 - 100,
        };
        let mut batch = [SendRequest::default()];
        fill_batch(&mut batch, 3, &mut p, &s, &TARGET);
        let id = WrId(batch[0].wr_id);
        assert!(batch[0].signaled);
        assert_eq!((id.kind(), id.qp(), id.covers()), (WrKind::Op, 3, 100));
    }

    #[test]
    fn a_completion_covers_the_operations_since_the_last_signaled_one() {
        let mut p = SendProgress::new(1, 250, 100);
        let signaled: Vec<(u64, u32)> = (1..=250)
            .map(|n| (n, p.signal(0, n)))
            .filter(|&(_, c)| c > 0)
            .collect();
        // every 100th, and the last of a run of 250: the 50 after the 200th.
        assert_eq!(signaled, [(100, 100), (200, 100), (250, 50)]);
    }

    #[test]
    fn a_changed_interval_counts_from_the_last_signaled_operation() {
        // A duration run: every operation during the warm-up, then every 40th.
        let mut p = SendProgress::new(1, u64::MAX, 1);
        assert_eq!(p.signal(0, 1), 1);
        assert_eq!(p.signal(0, 2), 1);
        p.set_every(40, 1);
        assert_eq!((3..42).map(|n| p.signal(0, n)).sum::<u32>(), 0);
        assert_eq!(p.signal(0, 42), 40);
        p.set_every(0, 1);
        assert_eq!(p.signal(0, 43), 1, "at least every operation");
    }

    #[test]
    fn every_operation_completes_when_a_duration_run_changes_its_interval() {
        let mut s = shape(u64::MAX, 16, 4, 8);
        s.stop = Stop::for_duration(1.0);
        // Started slow and held to two in flight before the interval grows to 7: the hold
        // gives way to the unsignaled operations and a post list besides.
        let mut p = SendProgress::new(2, u64::MAX, 1).starting_slow(4);
        let mut batch = vec![SendRequest::default(); 4];
        let mut queues: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); 2];
        for step in 0..2_000 {
            if step == 50 {
                p.set_in_flight_cap(2, 4);
                assert_eq!(p.in_flight_cap, 4, "a whole post list");
            }
            if step == 100 {
                p.set_every(7, 4);
                assert_eq!(p.in_flight_cap, 10);
            }
            if step == 1_000 {
                p.stop_posting();
            }
            for (q, queue) in queues.iter_mut().enumerate() {
                post_all(&mut p, q, &s, &mut batch, queue);
                if let Some(id) = queue.pop_front() {
                    p.complete(WrId(id));
                }
            }
        }
        assert!(p.finished(), "every QP drained after the stop: {:?}", p.qps);
        assert_eq!(p.done, 2 * p.limit);
    }

    #[test]
    fn stopping_early_ends_every_qp_at_its_last_post() {
        let mut p = SendProgress::new(2, u64::MAX, 5);
        p.qps[0] = QpCount {
            posted: 10,
            completed: 10,
            last_signaled: 10,
        };
        p.qps[1] = QpCount {
            posted: 12,
            completed: 12,
            last_signaled: 10,
        };
        p.stop_posting();
        assert_eq!(p.limit, 13, "one past the busiest QP, signaled");
        assert_eq!(p.signal(1, 13), 3);
        assert!(!p.finished());
        for c in &mut p.qps {
            (c.posted, c.completed) = (13, 13);
        }
        assert!(p.finished());
        p.stop_posting();
        assert_eq!(p.limit, 13, "a second stop changes nothing");
    }
}
