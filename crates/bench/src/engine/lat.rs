//! The latency loops, ping-pong on one QP. WRITE: the initiator writes a tagged message and
//! polls the last byte of its receive half until the responder's write with the same tag
//! lands. SEND: the initiator sends and waits for the responder's SEND to complete a receive.
//! READ and atomics: the initiator times each operation's full round trip; the peer's CPU is
//! not involved. WRITE and SEND report one-way latency (RTT/2); READ and atomics the round
//! trip. Every latency goes into an HdrHistogram, which needs no per-sample storage.
//!
//! The initiator reads its clock once per round trip, as perftest does: the stamp taken just
//! before posting round trip i is round trip i - 1's end (so the re-posted receive and the
//! moderated send completion count in the round trip, as in perftest). The waits look at the
//! clock only every few thousand spins, which an answered round trip never reaches.
//!
//! With `--mem cuda-staged` each message is copied out of the GPU into a pinned bounce buffer
//! before it is posted and copied into the GPU after it arrived, inside the timed round trip:
//! the latency GPUDirect RDMA removes.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use verbs::{Completion, Op, SendRequest};

use super::bw::{recv_wr_id, PeerState, Stop, Window};
use super::staged::{copy_in, copy_out};
use super::{region, Connected};
use crate::clock::{Clock, Mark};
use crate::histogram::LatencyRecorder;
use crate::plan::{AtomicOp, Verb};

/// Spins between two looks at the clock while waiting.
pub(crate) const SPINS_PER_CHECK: u32 = 1 << 14;

/// The shape of one latency loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatShape {
    /// The operation.
    pub verb: Verb,
    /// The atomic operation, for atomics.
    pub atomic: AtomicOp,
    /// Bytes per message.
    pub size: u32,
    /// When to stop (iterations after the warm-up, or a duration with margins).
    pub stop: Stop,
    /// Round trips before measuring (iteration mode).
    pub warmup: u64,
    /// A send completion is requested every this many operations.
    pub cq_mod: u32,
    /// Send the payload inline.
    pub inline: bool,
    /// Fail when the peer does not answer for this long.
    pub stall_timeout: Duration,
    /// The clock the initiator stamps each round trip with.
    pub clock: Clock,
    /// Receives kept posted (SEND).
    pub rx_depth: u32,
    /// How long the initiator waits after each round trip before posting the next
    /// (`--latency-gap`); the wait is not counted in the latency.
    pub gap: Duration,
}

/// What the initiator measured.
#[derive(Debug, Clone)]
pub(crate) struct LatMeasured {
    /// Round trips measured and the window they spanned.
    pub window: Window,
    /// Latencies in nanoseconds (one-way for WRITE/SEND, round trip otherwise).
    pub hist: LatencyRecorder,
    /// Round trips done in all, warm-up included.
    pub total: u64,
}

/// The tag of round trip `i`: never 0 (buffers start zeroed), never equal to the previous.
#[inline]
fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Which round trips count: after the warm-up, or inside the duration's margins. Times are
/// in the clock's ticks, from the clock's read at the loop's start.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: u64,
    stop: Stop,
    warmup: u64,
    /// The duration run's length and margin, in ticks.
    total: u64,
    margin: u64,
}

impl Schedule {
    fn new(clock: &Clock, start: u64, stop: Stop, warmup: u64) -> Self {
        let (total, margin) = match stop {
            Stop::Iters(_) => (0, 0),
            Stop::Duration { total, margin } => (clock.ticks(total), clock.ticks(margin)),
        };
        Schedule {
            start,
            stop,
            warmup,
            total,
            margin,
        }
    }

    #[inline]
    fn more(&self, i: u64, now: u64) -> bool {
        match self.stop {
            Stop::Iters(n) => i < self.warmup + n,
            Stop::Duration { .. } => now.wrapping_sub(self.start) < self.total,
        }
    }

    #[inline]
    fn measured(&self, i: u64, t0: u64) -> bool {
        match self.stop {
            Stop::Iters(_) => i >= self.warmup,
            Stop::Duration { .. } => {
                let at = t0.wrapping_sub(self.start);
                at >= self.margin && at < self.total - self.margin
            }
        }
    }
}

/// What one side posts every round trip, worked out once before the loop: the request's
/// fixed fields, where its tag goes, and when a completion is asked for. Between the stamp
/// and the wire lies only the post itself.
struct Ping {
    wr: SendRequest,
    /// The last byte of the send half, which carries the tag (WRITE only).
    tag_at: Option<*mut u8>,
    /// Operations until the next signalled one (READ and atomics: every one).
    to_signal: u32,
    signal_every: u32,
    /// Re-post a receive only after the answer is posted: another receive is still posted
    /// for the peer's next message (rx-depth 2 or more), so the re-post leaves the round trip.
    repost_late: bool,
    staged: bool,
}

impl Ping {
    fn new(side: &Connected, shape: &LatShape, rx_depth: u32) -> Result<Self> {
        let rkey = side.remote[0].rkey;
        let (op, local_offset) = match shape.verb {
            Verb::Write => (
                Op::Write {
                    remote_addr: side.remote_recv(0),
                    rkey,
                },
                side.send_offset(0),
            ),
            Verb::Send => (Op::Send, side.send_offset(0)),
            Verb::Read => (
                Op::Read {
                    remote_addr: side.remote_send(0),
                    rkey,
                },
                side.recv_offset(0),
            ),
            Verb::Atomic => (
                match shape.atomic {
                    AtomicOp::FetchAdd => Op::FetchAdd {
                        remote_addr: side.remote_recv(0),
                        rkey,
                        add: 1,
                    },
                    AtomicOp::CompareSwap => Op::CompareSwap {
                        remote_addr: side.remote_recv(0),
                        rkey,
                        compare: 0,
                        swap: 1,
                    },
                },
                side.recv_offset(0),
            ),
        };
        let tag_at = match shape.verb {
            Verb::Write => Some(side.byte_ptr(local_offset + u64::from(shape.size) - 1)?),
            _ => None,
        };
        let signal_every = match shape.verb {
            Verb::Read | Verb::Atomic => 1,
            Verb::Write | Verb::Send => shape.cq_mod.max(1),
        };
        Ok(Ping {
            wr: SendRequest {
                wr_id: 0,
                op,
                local_offset,
                len: shape.size,
                signaled: false,
            },
            tag_at,
            to_signal: signal_every,
            signal_every,
            repost_late: rx_depth >= 2,
            staged: side.staging.is_some(),
        })
    }

    /// Posts message `i` (tagged, for WRITE); returns whether it asked for a completion.
    #[inline]
    fn post(&mut self, side: &mut Connected, shape: &LatShape, i: u64) -> Result<bool> {
        if let Some(at) = self.tag_at {
            // SAFETY: at points into the registered host buffer owned by `side`, which
            // outlives the loop.
            unsafe { std::ptr::write_volatile(at, tag(i)) };
        }
        self.to_signal -= 1;
        let signaled = self.to_signal == 0;
        if signaled {
            self.to_signal = self.signal_every;
        }
        self.wr.wr_id = i;
        self.wr.signaled = signaled;
        if let Op::CompareSwap { compare, swap, .. } = &mut self.wr.op {
            (*compare, *swap) = (i, i + 1);
        }
        let wr = std::slice::from_ref(&self.wr);
        match side.ah.first() {
            Some(ah) => {
                side.qps[0].post_send_ud(region(&side.parts, &side.mr, 0), wr, shape.inline, ah)?
            }
            None => side.qps[0].post_send(region(&side.parts, &side.mr, 0), wr, shape.inline)?,
        }
        Ok(signaled)
    }
}

/// Watches a wait for a dead or finished peer. It looks at the peer's state and the clock
/// only every [`SPINS_PER_CHECK`] spins, which a round trip that is answered never reaches:
/// the timed round trip holds no clock read but its own stamp.
struct Watch<'a> {
    spins: u32,
    /// The first check's time since the last progress.
    since: Option<Instant>,
    stall: Duration,
    peer: Option<&'a PeerState>,
    /// What did not happen, for the stall's error.
    what: &'static str,
}

impl<'a> Watch<'a> {
    fn new(stall: Duration, peer: Option<&'a PeerState>, what: &'static str) -> Self {
        Watch {
            spins: 0,
            since: None,
            stall,
            peer,
            what,
        }
    }

    /// One spin without progress: `Ok(true)` once the peer said it is done.
    #[inline]
    fn spin(&mut self) -> Result<bool> {
        self.spins += 1;
        if self.spins < SPINS_PER_CHECK {
            return Ok(false);
        }
        self.spins = 0;
        if self.peer.is_some_and(PeerState::is_done) {
            return Ok(true);
        }
        if self.peer.is_some_and(PeerState::is_failed) {
            bail!("the peer's control connection failed while measuring latency");
        }
        let now = Instant::now();
        if now.duration_since(*self.since.get_or_insert(now)) > self.stall {
            bail!(
                "{} for {:.1} s; is it alive? (--timeout)",
                self.what,
                self.stall.as_secs_f64()
            );
        }
        Ok(false)
    }

    /// Something arrived: the stall timer starts again at the next check.
    #[inline]
    fn progress(&mut self) {
        self.since = None;
    }
}

/// Polls until a completion `want` accepts; every completion is checked for errors.
/// Receives that are not wanted cannot happen in a ping-pong and are an error.
fn poll_until(
    side: &Connected,
    stall: Duration,
    peer: Option<&PeerState>,
    mut want: impl FnMut(&Completion) -> bool,
) -> Result<Option<Completion>> {
    let mut wcs = [Completion::default(); 4];
    let mut watch = Watch::new(stall, peer, "the peer did not answer");
    loop {
        let n = side.cq.poll(&mut wcs)?;
        if n == 0 {
            if watch.spin()? {
                return Ok(None);
            }
            continue;
        }
        watch.progress();
        let mut found = None;
        for wc in &wcs[..n] {
            wc.check()?;
            if found.is_none() && want(wc) {
                found = Some(*wc);
            }
        }
        if found.is_some() {
            return Ok(found);
        }
    }
}

fn is_recv(wc: &Completion) -> bool {
    wc.wr_id() == recv_wr_id(0)
}

/// Waits until the byte at `ptr` equals `want`, or the peer finished (`Ok(false)`).
fn wait_byte(ptr: *const u8, want: u8, stall: Duration, peer: Option<&PeerState>) -> Result<bool> {
    let mut watch = Watch::new(stall, peer, "the peer's write did not arrive");
    loop {
        // SAFETY: ptr points into the registered host buffer, which outlives this call; the
        // NIC writes it concurrently, hence the volatile read.
        if unsafe { std::ptr::read_volatile(ptr) } == want {
            return Ok(true);
        }
        // No PAUSE (spin_loop) between reads, as perftest: on recent x86 one costs up to ~140
        // cycles, added to the moment the byte is seen, and under TCG each one leaves the
        // emulated CPU's loop.
        if watch.spin()? {
            return Ok(false);
        }
    }
}

/// Adds why a ping-pong over an unreliable transport can stall.
fn explain_loss<T>(side: &Connected, r: Result<T>) -> Result<T> {
    if side.transport == verbs::Transport::Rc {
        return r;
    }
    r.map_err(|e| {
        e.context(format!(
            "{} does not retransmit: one lost message stops a ping-pong; use -c RC for a loss-free latency",
            side.transport.name()
        ))
    })
}

/// The last byte of the receive half, which WRITE latency polls (host memory only); `None`
/// for the other verbs, which wait for completions instead.
fn last_byte(side: &Connected, shape: &LatShape) -> Result<Option<*const u8>> {
    if shape.verb != Verb::Write {
        return Ok(None);
    }
    Ok(Some(side.byte_ptr(
        side.recv_offset(0) + u64::from(shape.size) - 1,
    )?))
}

/// The initiator's loop (the client).
pub(crate) fn initiate(side: &mut Connected, shape: &LatShape) -> Result<LatMeasured> {
    let r = initiate_loop(side, shape);
    explain_loss(side, r)
}

/// The responder's loop (the server) for WRITE and SEND latency: answer every round trip,
/// until the plan's count or, in duration runs, until the initiator says it is done.
/// Returns the number of round trips answered.
pub(crate) fn respond(side: &mut Connected, shape: &LatShape, peer: &PeerState) -> Result<u64> {
    let r = respond_loop(side, shape, peer);
    explain_loss(side, r)
}

/// What the initiator has measured so far.
/// Most round trips kept as raw ticks until the loop ends (8 bytes each: 128 MiB at most);
/// beyond, and in duration runs, each goes into the histogram as it comes.
const RAW_MAX: u64 = 16 << 20;

/// What the initiator keeps of its round trips. As perftest, which stores each post's cycle
/// count and works out the statistics afterwards, a round trip costs one subtraction and a
/// store into room reserved before the loop; the histogram is filled when the loop is over.
struct Tally {
    hist: LatencyRecorder,
    raw: Vec<u64>,
    one_way: bool,
    first: Option<u64>,
    last: u64,
    measured: u64,
}

impl Tally {
    fn new(shape: &LatShape) -> Result<Self> {
        let room = match shape.stop {
            Stop::Iters(n) if n <= RAW_MAX => n,
            _ => 0,
        };
        Ok(Tally {
            hist: LatencyRecorder::new()?,
            raw: Vec::with_capacity(room as usize),
            one_way: matches!(shape.verb, Verb::Write | Verb::Send),
            first: None,
            last: 0,
            measured: 0,
        })
    }

    /// Round trip `i`, stamped `t0` before its post and `end` before the next one's.
    #[inline]
    fn add(&mut self, clock: &Clock, schedule: &Schedule, i: u64, t0: u64, end: u64) {
        if !schedule.measured(i, t0) {
            return;
        }
        let ticks = end.wrapping_sub(t0);
        if self.raw.len() < self.raw.capacity() {
            // Within the reserved room: no allocation.
            self.raw.push(ticks);
        } else {
            self.record(clock, ticks);
        }
        self.first.get_or_insert(t0);
        self.last = end;
        self.measured += 1;
    }

    fn record(&mut self, clock: &Clock, ticks: u64) {
        let rtt = clock.ns(ticks);
        self.hist.record(if self.one_way { rtt / 2 } else { rtt });
    }

    /// The histogram of every round trip, once the loop is over, at `rate`: those that went
    /// into the histogram during the loop (beyond the reserved room, and in duration runs)
    /// at `clock`'s rate move to `rate`'s.
    fn into_histogram(mut self, clock: &Clock, rate: &Clock) -> Result<LatencyRecorder> {
        if !self.hist.is_empty() && clock.hz() != rate.hz() {
            self.hist = self.hist.scaled(clock.hz() / rate.hz())?;
        }
        let raw = std::mem::take(&mut self.raw);
        for ticks in raw {
            self.record(rate, ticks);
        }
        Ok(self.hist)
    }
}

fn initiate_loop(side: &mut Connected, shape: &LatShape) -> Result<LatMeasured> {
    let clock = shape.clock;
    let recv_last = last_byte(side, shape)?;
    let mut ping = Ping::new(side, shape, shape.rx_depth)?;
    // The monotonic clock between two ticks, read just outside the loop's first and last
    // stamps.
    let opened = clock.mark();
    let schedule = Schedule::new(&clock, clock.now(), shape.stop, shape.warmup);
    let mut tally = Tally::new(shape)?;
    tally.last = schedule.start;
    // The stamp taken before posting the previous round trip.
    let mut started: Option<u64> = None;
    let gap = clock.ticks(shape.gap);
    let mut i = 0u64;
    loop {
        // One clock read per round trip, as perftest: the stamp before posting round trip i
        // is round trip i - 1's end. Round trip i is posted before i - 1 is recorded, so the
        // bookkeeping overlaps the flight instead of lengthening the round trip.
        let now = clock.now();
        if !schedule.more(i, now) {
            if let Some(t0) = started {
                tally.add(&clock, &schedule, i - 1, t0, now);
            }
            break;
        }
        // With a gap, round trip i starts when it ends, not at i - 1's end.
        let start = if gap > 0 {
            wait_until(&clock, now + gap)
        } else {
            now
        };
        let signaled = send_ping(side, shape, &mut ping, i)?;
        if let Some(t0) = started {
            tally.add(&clock, &schedule, i - 1, t0, now);
        }
        await_pong(side, shape, &ping, i, signaled, recv_last)?;
        started = Some(start);
        i += 1;
    }
    let closed = clock.mark();
    measured(&clock, (opened, closed), tally, i)
}

/// Spins on `clock` until it reads `until` or later (`--latency-gap`, as perftest's busy
/// wait: a sleep would wake late by more than a short gap); returns that reading.
fn wait_until(clock: &Clock, until: u64) -> u64 {
    loop {
        let now = clock.now();
        if now >= until {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// What a loop bracketed by `opened` and `closed` measured, in nanoseconds at the rate the
/// loop kept ([`Clock::over`]): its ticks over its length on the monotonic clock, where the
/// bracket knows that rate (a loop of a few milliseconds or more); the calibrated rate
/// otherwise. So a TSC calibrated wrong at the process's start (the thread preempted between
/// a TSC read and the monotonic clock's) sets neither the latencies nor the window.
///
/// The window is never more than the bracket's monotonic length: at the loop's rate its
/// ticks lie between the marks' (`opened` before the loop's first stamp, `closed` after its
/// last), and at the calibrated one it is cut to it. That length is within the time from the
/// server's `Ready` to this side's `SizeDone`, which the server checks the window against
/// (`run/figures/peer.rs`).
fn measured(
    clock: &Clock,
    (opened, closed): (Mark, Mark),
    tally: Tally,
    total: u64,
) -> Result<LatMeasured> {
    let Some(first) = tally.first else {
        bail!("no round trip fell inside the measured window; give more iterations or a longer -D");
    };
    let rate = clock.over(opened, closed);
    let span = closed.at.saturating_duration_since(opened.at).as_secs_f64();
    let window = Window {
        ops: tally.measured,
        seconds: (rate.ns(tally.last.wrapping_sub(first)) as f64 / 1e9).min(span),
        events: tally.measured,
        extended: std::time::Duration::ZERO,
        intervals: None,
    };
    Ok(LatMeasured {
        window,
        hist: tally.into_histogram(clock, &rate)?,
        total,
    })
}

/// The initiator's message `i`: copied out of the GPU first when staged (GPUDirect RDMA off:
/// the copy is part of the round trip), then posted.
fn send_ping(side: &mut Connected, shape: &LatShape, ping: &mut Ping, i: u64) -> Result<bool> {
    if ping.staged && shape.verb != Verb::Read {
        copy_out(side, u64::from(shape.size), shape.stall_timeout)?;
    }
    ping.post(side, shape, i)
}

/// The rest of the initiator's round trip `i`: wait for the answer, and make ready for the
/// next.
fn await_pong(
    side: &mut Connected,
    shape: &LatShape,
    ping: &Ping,
    i: u64,
    signaled: bool,
    recv_last: Option<*const u8>,
) -> Result<()> {
    let stall = shape.stall_timeout;
    match shape.verb {
        Verb::Write => {
            let at = recv_last.context("WRITE latency without a byte to poll")?;
            wait_byte(at, tag(i), stall, None)?;
        }
        Verb::Send => {
            if ping.repost_late && i > 0 {
                // The receive the previous answer used, re-posted while this message flies.
                side.post_recv(0, recv_wr_id(0))?;
            }
            poll_until(side, stall, None, is_recv)?;
        }
        Verb::Read | Verb::Atomic => {
            poll_until(side, stall, None, |wc| wc.wr_id() == i)?;
        }
    }
    if ping.staged {
        // ...and what arrived is copied into the GPU before the round trip ends.
        copy_in(side, u64::from(shape.size), stall)?;
    }
    if shape.verb == Verb::Send && !ping.repost_late {
        side.post_recv(0, recv_wr_id(0))?;
    }
    if signaled && shape.verb == Verb::Write {
        poll_until(side, stall, None, |wc| wc.wr_id() == i)?;
    }
    Ok(())
}

fn respond_loop(side: &mut Connected, shape: &LatShape, peer: &PeerState) -> Result<u64> {
    let size = u64::from(shape.size);
    let stall = shape.stall_timeout;
    let recv_last = last_byte(side, shape)?;
    let mut ping = Ping::new(side, shape, shape.rx_depth)?;
    let limit = match shape.stop {
        Stop::Iters(n) => shape.warmup + n,
        Stop::Duration { .. } => u64::MAX,
    };
    let mut i = 0u64;
    while i < limit {
        let arrived = match shape.verb {
            Verb::Write => {
                let at = recv_last.context("WRITE latency without a byte to poll")?;
                wait_byte(at, tag(i), stall, Some(peer))?
            }
            Verb::Send => poll_until(side, stall, Some(peer), is_recv)?.is_some(),
            Verb::Read | Verb::Atomic => bail!("{:?} latency needs no responder", shape.verb),
        };
        if !arrived {
            break;
        }
        let repost = shape.verb == Verb::Send;
        if repost && !ping.repost_late {
            side.post_recv(0, recv_wr_id(0))?;
        }
        if ping.staged {
            // The message goes into the GPU, and the answer comes out of it.
            copy_in(side, size, stall)?;
            copy_out(side, size, stall)?;
        }
        let signaled = ping.post(side, shape, i)?;
        if repost && ping.repost_late {
            side.post_recv(0, recv_wr_id(0))?;
        }
        if signaled && shape.verb == Verb::Write {
            poll_until(side, stall, Some(peer), |wc| wc.wr_id() == i)?;
        }
        i += 1;
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ClockKind;

    #[test]
    fn tags_are_never_zero_and_always_change() {
        for i in 0..1000u64 {
            assert_ne!(tag(i), 0);
            assert_ne!(tag(i), tag(i + 1));
        }
    }

    fn shape(stop: Stop, verb: Verb) -> LatShape {
        LatShape {
            verb,
            atomic: AtomicOp::FetchAdd,
            size: 2,
            stop,
            warmup: 2,
            cq_mod: 1,
            inline: false,
            stall_timeout: Duration::from_secs(1),
            clock: Clock::new(ClockKind::Monotonic),
            rx_depth: 1,
            gap: Duration::ZERO,
        }
    }

    #[test]
    fn a_gap_waits_on_the_clock_and_returns_the_reading_that_ends_it() {
        let clock = Clock::new(ClockKind::Monotonic);
        let before = clock.now();
        let until = before + clock.ticks(Duration::from_millis(2));
        let ended = wait_until(&clock, until);
        assert!(ended >= until, "{ended} < {until}");
        assert!(clock.now() >= ended);
    }

    #[test]
    fn round_trips_are_kept_raw_in_reserved_room_and_folded_once_the_loop_is_over() {
        let clock = Clock::new(ClockKind::Monotonic);
        let sh = shape(Stop::Iters(4), Verb::Write);
        let s = Schedule::new(&clock, 0, sh.stop, sh.warmup);
        let mut t = Tally::new(&sh).unwrap();
        let room = t.raw.capacity();
        for i in 0..6u64 {
            t.add(&clock, &s, i, 1000 * i, 1000 * i + 2000);
        }
        assert_eq!(
            (t.raw.len(), t.raw.capacity()),
            (4, room),
            "no allocation in the loop"
        );
        assert_eq!(t.measured, 4);
        let hist = t.into_histogram(&clock, &clock).unwrap();
        assert_eq!(hist.len(), 4);
        // WRITE latency is one-way: half of each 2000 ns round trip.
        let stats = hist.stats().unwrap();
        assert!(
            (stats.min - 1.0).abs() < 0.01 && (stats.max - 1.0).abs() < 0.01,
            "{stats:?}"
        );
        // A duration run has no count to reserve for: each round trip goes straight in.
        let d = shape(Stop::for_duration(1.0), Verb::Read);
        assert_eq!(Tally::new(&d).unwrap().raw.capacity(), 0);
    }

    /// The TSC's true rate in the tests below (ticks per nanosecond).
    const GHZ: f64 = 2.596;

    /// A loop's bracket `secs` apart on the monotonic clock, each mark `width` ticks wide,
    /// the ticks counted at [`GHZ`]: the opening mark's and the closing one's.
    fn bracket(secs: f64, width: u64) -> (Mark, Mark) {
        let at = Instant::now();
        let opened = Mark {
            before: 1_000_000,
            at,
            after: 1_000_000 + width,
        };
        let mid = 1_000_000 + width / 2 + (secs * 1e9 * GHZ) as u64;
        let closed = Mark {
            before: mid - width / 2,
            at: at + Duration::from_secs_f64(secs),
            after: mid - width / 2 + width,
        };
        (opened, closed)
    }

    /// `n` WRITE round trips of `rtt` seconds back to back, the first starting just after
    /// `opened`, tallied at `clock` (in iteration or duration mode, `stop`).
    fn round_trips(clock: &Clock, opened: Mark, stop: Stop, n: u64, rtt: f64) -> Tally {
        let sh = LatShape {
            warmup: 0,
            ..shape(stop, Verb::Write)
        };
        let start = opened.after + 10;
        let s = Schedule::new(clock, start, Stop::Iters(n), 0);
        let mut t = Tally::new(&sh).unwrap();
        let ticks = (rtt * 1e9 * GHZ) as u64;
        for i in 0..n {
            t.add(clock, &s, i, start + i * ticks, start + (i + 1) * ticks);
        }
        t
    }

    #[test]
    fn a_calibration_16_percent_off_sets_neither_the_latencies_nor_the_window() {
        // The six-node guest's write-lat over a slow uplink: the client's TSC, calibrated at
        // its start, read as if 16% slower than it runs (a window of 6.87 s for a size the
        // server saw last 5.90 s). 1000 round trips of 5.9 ms: 2.95 ms one way.
        let wrong = Clock::tsc_at(GHZ * 5.90 / 6.87);
        let (opened, closed) = bracket(5.91, 3_000);
        for stop in [Stop::Iters(1000), Stop::for_duration(5.9)] {
            // Kept raw until the loop ends, or into the histogram as they come.
            let tally = round_trips(&wrong, opened, stop, 1000, 5.9e-3);
            let m = measured(&wrong, (opened, closed), tally, 1000).unwrap();
            let stats = m.hist.stats().unwrap();
            for us in [stats.min, stats.p50, stats.max, stats.mean] {
                let off = (us - 2950.0).abs() / 2950.0;
                assert!(off < 0.01, "{us} us, not 2950 us ({stop:?}): {stats:?}");
            }
            let w = m.window.seconds;
            assert!((w - 5.90).abs() < 0.01 && w <= 5.91, "{w} s ({stop:?})");
        }
    }

    #[test]
    fn a_loop_too_short_for_its_bracket_keeps_the_calibrated_rate_within_its_length() {
        // 20 round trips of 5 us, a bracket 200 us long whose marks are 10 us wide: the
        // loop's own rate is known to 5% only, the calibration to 1e-5.
        let right = Clock::tsc_at(GHZ);
        let (opened, closed) = bracket(200e-6, (10e-6 * 1e9 * GHZ) as u64);
        let tally = round_trips(&right, opened, Stop::Iters(20), 20, 5e-6);
        let m = measured(&right, (opened, closed), tally, 20).unwrap();
        let p50 = m.hist.stats().unwrap().p50;
        assert!((p50 - 2.5).abs() < 0.01, "{p50} us");
        assert!(
            (m.window.seconds - 100e-6).abs() < 1e-7,
            "{}",
            m.window.seconds
        );
        // A calibration that made the window longer than the bracket is cut to it.
        let wrong = Clock::tsc_at(GHZ / 4.0);
        let tally = round_trips(&wrong, opened, Stop::Iters(20), 20, 5e-6);
        let m = measured(&wrong, (opened, closed), tally, 20).unwrap();
        assert!(m.window.seconds <= 200e-6, "{}", m.window.seconds);
    }

    #[test]
    fn the_warm_up_is_not_measured() {
        let clock = Clock::new(ClockKind::Monotonic);
        let s = Schedule::new(&clock, clock.now(), Stop::Iters(10), 3);
        let now = clock.now();
        assert!(!s.measured(2, now) && s.measured(3, now));
        assert!(s.more(12, now) && !s.more(13, now));
    }

    #[test]
    fn a_duration_run_measures_inside_the_margins() {
        let clock = Clock::new(ClockKind::Monotonic);
        let start = clock.now();
        let stop = Stop::Duration {
            total: Duration::from_secs(3),
            margin: Duration::from_millis(300),
        };
        let s = Schedule::new(&clock, start, stop, 0);
        let at = |ms: u64| start + clock.ticks(Duration::from_millis(ms));
        assert!(!s.measured(0, at(100)));
        assert!(s.measured(0, at(500)));
        assert!(!s.measured(0, at(2800)));
        assert!(s.more(0, at(2999)) && !s.more(0, at(3000)));
    }

    #[test]
    fn a_wait_looks_at_the_clock_only_every_so_many_spins() {
        let mut w = Watch::new(Duration::ZERO, None, "nothing came");
        for _ in 1..SPINS_PER_CHECK {
            assert!(!w.spin().unwrap());
        }
        assert!(w.since.is_none(), "the clock was read before the check");
        // The first check starts the stall timer; a later one, past the stall, fails.
        assert!(!w.spin().unwrap());
        assert!(w.since.is_some());
        std::thread::sleep(Duration::from_millis(2));
        let e = (0..SPINS_PER_CHECK).try_for_each(|_| w.spin().map(drop));
        assert!(e.unwrap_err().to_string().contains("nothing came"));
    }

    #[test]
    fn a_finished_peer_ends_the_wait() {
        let peer = PeerState::default();
        peer.set_done();
        let mut w = Watch::new(Duration::from_secs(1), Some(&peer), "nothing came");
        let done = (0..SPINS_PER_CHECK).any(|_| w.spin().unwrap());
        assert!(done);
    }
}
