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
use super::Connected;
use crate::clock::Clock;
use crate::histogram::LatencyRecorder;
use crate::plan::{AtomicOp, Verb};

/// Spins between two looks at the clock while waiting.
pub(crate) const SPINS_PER_CHECK: u32 = 1 << 14;

/// The shape of one latency loop.
#[derive(Debug, Clone, Copy)]
pub struct LatShape {
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
}

/// What the initiator measured.
#[derive(Debug, Clone)]
pub struct LatMeasured {
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

/// A single request on QP 0.
fn request(side: &Connected, shape: &LatShape, i: u64, signaled: bool) -> SendRequest {
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
                    compare: i,
                    swap: i + 1,
                },
            },
            side.recv_offset(0),
        ),
    };
    SendRequest {
        wr_id: i,
        op,
        local_offset,
        len: shape.size,
        signaled,
    }
}

fn post(side: &mut Connected, shape: &LatShape, i: u64, signaled: bool) -> Result<()> {
    let wr = [request(side, shape, i, signaled)];
    match side.ah.first() {
        Some(ah) => side.qps[0].post_send_ud(&side.mr, &wr, shape.inline, ah)?,
        None => side.qps[0].post_send(&side.mr, &wr, shape.inline)?,
    }
    Ok(())
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

/// Sets the last byte of the send half to the round trip's tag.
fn set_tag(side: &Connected, shape: &LatShape, value: u8) -> Result<()> {
    let ptr = side.byte_ptr(side.send_offset(0) + u64::from(shape.size) - 1)?;
    // SAFETY: ptr points into the registered host buffer owned by `side`.
    unsafe { std::ptr::write_volatile(ptr, value) };
    Ok(())
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
pub fn initiate(side: &mut Connected, shape: &LatShape) -> Result<LatMeasured> {
    let r = initiate_loop(side, shape);
    explain_loss(side, r)
}

/// The responder's loop (the server) for WRITE and SEND latency: answer every round trip,
/// until the plan's count or, in duration runs, until the initiator says it is done.
/// Returns the number of round trips answered.
pub fn respond(side: &mut Connected, shape: &LatShape, peer: &PeerState) -> Result<u64> {
    let r = respond_loop(side, shape, peer);
    explain_loss(side, r)
}

fn initiate_loop(side: &mut Connected, shape: &LatShape) -> Result<LatMeasured> {
    let clock = shape.clock;
    let mut hist = LatencyRecorder::new()?;
    let recv_last = last_byte(side, shape)?;
    let schedule = Schedule::new(&clock, clock.now(), shape.stop, shape.warmup);
    let one_way = matches!(shape.verb, Verb::Write | Verb::Send);
    let mut first: Option<u64> = None;
    let mut last = schedule.start;
    let mut measured = 0u64;
    // The stamp taken before posting round trip i - 1.
    let mut started: Option<u64> = None;
    let mut i = 0u64;
    loop {
        // One clock read per round trip, as perftest: the stamp before posting round trip i
        // is round trip i - 1's end.
        let now = clock.now();
        if let Some(t0) = started.filter(|&t0| schedule.measured(i - 1, t0)) {
            let rtt = clock.ns(now.wrapping_sub(t0));
            hist.record(if one_way { rtt / 2 } else { rtt });
            first.get_or_insert(t0);
            last = now;
            measured += 1;
        }
        if !schedule.more(i, now) {
            break;
        }
        started = Some(now);
        round_trip(side, shape, i, recv_last)?;
        i += 1;
    }
    let Some(first) = first else {
        bail!("no round trip fell inside the measured window; give more iterations or a longer -D");
    };
    Ok(LatMeasured {
        window: Window {
            ops: measured,
            seconds: clock.ns(last.wrapping_sub(first)) as f64 / 1e9,
        },
        hist,
        total: i,
    })
}

/// The initiator's round trip `i`: post, wait for the answer, and make ready for the next.
fn round_trip(
    side: &mut Connected,
    shape: &LatShape,
    i: u64,
    recv_last: Option<*const u8>,
) -> Result<()> {
    let staged = side.staging.is_some();
    let signaled = (i + 1).is_multiple_of(u64::from(shape.cq_mod))
        || matches!(shape.verb, Verb::Read | Verb::Atomic);
    if shape.verb == Verb::Write && !staged {
        set_tag(side, shape, tag(i))?;
    }
    if staged && shape.verb != Verb::Read {
        // GPUDirect RDMA off: the message is copied out of the GPU inside the round trip.
        copy_out(side, u64::from(shape.size), shape.stall_timeout)?;
        if shape.verb == Verb::Write {
            set_tag(side, shape, tag(i))?;
        }
    }
    post(side, shape, i, signaled)?;
    match shape.verb {
        Verb::Write => {
            wait_byte(
                recv_last.context("WRITE latency without a byte to poll")?,
                tag(i),
                shape.stall_timeout,
                None,
            )?;
        }
        Verb::Send => {
            poll_until(side, shape.stall_timeout, None, is_recv)?;
        }
        Verb::Read | Verb::Atomic => {
            poll_until(side, shape.stall_timeout, None, |wc| wc.wr_id() == i)?;
        }
    }
    if staged {
        // ...and what arrived is copied into the GPU before the round trip ends.
        copy_in(side, u64::from(shape.size), shape.stall_timeout)?;
    }
    if shape.verb == Verb::Send {
        side.post_recv(0, recv_wr_id(0))?;
    }
    if signaled && shape.verb == Verb::Write {
        poll_until(side, shape.stall_timeout, None, |wc| wc.wr_id() == i)?;
    }
    Ok(())
}

fn respond_loop(side: &mut Connected, shape: &LatShape, peer: &PeerState) -> Result<u64> {
    let staged = side.staging.is_some();
    let size = u64::from(shape.size);
    let recv_last = last_byte(side, shape)?;
    let limit = match shape.stop {
        Stop::Iters(n) => shape.warmup + n,
        Stop::Duration { .. } => u64::MAX,
    };
    let mut i = 0u64;
    while i < limit {
        let arrived = match shape.verb {
            Verb::Write => wait_byte(
                recv_last.context("WRITE latency without a byte to poll")?,
                tag(i),
                shape.stall_timeout,
                Some(peer),
            )?,
            Verb::Send => {
                let got = poll_until(side, shape.stall_timeout, Some(peer), is_recv)?.is_some();
                if got {
                    side.post_recv(0, recv_wr_id(0))?;
                }
                got
            }
            Verb::Read | Verb::Atomic => bail!("{:?} latency needs no responder", shape.verb),
        };
        if !arrived {
            break;
        }
        if staged {
            // The message goes into the GPU, and the answer comes out of it.
            copy_in(side, size, shape.stall_timeout)?;
            copy_out(side, size, shape.stall_timeout)?;
        }
        let signaled = (i + 1).is_multiple_of(u64::from(shape.cq_mod));
        if shape.verb == Verb::Write {
            set_tag(side, shape, tag(i))?;
        }
        post(side, shape, i, signaled)?;
        if signaled && shape.verb == Verb::Write {
            poll_until(side, shape.stall_timeout, Some(peer), |wc| wc.wr_id() == i)?;
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
