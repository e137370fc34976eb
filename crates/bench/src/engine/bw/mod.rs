//! The bandwidth loops. This module is the skeleton both share: when a loop stops
//! ([`Stop`]), what it measures ([`Meter`], [`Window`]), how work requests are named
//! ([`WrId`]), what the control channel tells it ([`PeerState`]), and [`drive`], the turn
//! loop with its deadline, stall and peer checks. The bodies fill in one turn each:
//! `host.rs` (the payload in host or GPU memory the NIC reaches directly) and
//! `staged::pipeline` (the payload staged through pinned bounce buffers).
//!
//! A body counts per QP in tables indexed by QP; a work request's id carries only its kind,
//! its QP and how many operations its completion accounts for (at most the queue depth), so
//! no count can overflow into the QP bits however long a run lasts.

pub mod host;
pub(crate) mod marks;
pub(crate) mod pace;
pub mod startup;

pub(crate) use host::measure_bw;
#[cfg(test)]
pub(crate) use marks::Interval;
pub(crate) use marks::Intervals;
pub(crate) use pace::{fewest_in_flight, pace_for, signal_every_for};

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use verbs::Completion;

use super::Connected;
pub use crate::plan::Stop;
use crate::plan::{AtomicOp, Verb};

/// Completions taken per poll.
pub(crate) const POLL_BATCH: usize = 16;
/// How many turns without progress pass between two looks at the clock.
const CLOCK_CHECK_EVERY: u32 = 1 << 10;

/// What a work request is, from its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrKind {
    /// An operation this side posted (WRITE, READ, SEND, atomic).
    Op,
    /// A receive for the payload.
    Recv,
    /// A zero-byte notice this side sent (a staged credit or "ready").
    Notice,
    /// A receive for a notice.
    NoticeRecv,
}

/// The layout of a work request id: bits 62-63 the kind, bits 32-47 the QP, bits 0-31 how
/// many operations its completion accounts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrId(pub u64);

impl WrId {
    const KIND_SHIFT: u32 = 62;
    const QP_SHIFT: u32 = 32;

    /// The id of a request of `kind` on QP `q` whose completion accounts for `covers`
    /// operations.
    #[inline]
    pub const fn new(kind: WrKind, q: usize, covers: u32) -> WrId {
        let k = match kind {
            WrKind::Op => 0u64,
            WrKind::Recv => 1,
            WrKind::Notice => 2,
            WrKind::NoticeRecv => 3,
        };
        WrId((k << Self::KIND_SHIFT) | ((q as u64 & 0xffff) << Self::QP_SHIFT) | covers as u64)
    }

    /// The id of a receive on QP `q`.
    #[inline]
    pub(crate) const fn recv(q: usize) -> u64 {
        WrId::new(WrKind::Recv, q, 1).0
    }

    /// What the request is.
    #[inline]
    pub(crate) const fn kind(self) -> WrKind {
        match self.0 >> Self::KIND_SHIFT {
            0 => WrKind::Op,
            1 => WrKind::Recv,
            2 => WrKind::Notice,
            _ => WrKind::NoticeRecv,
        }
    }

    /// Its QP.
    #[inline]
    pub(crate) const fn qp(self) -> usize {
        ((self.0 >> Self::QP_SHIFT) & 0xffff) as usize
    }

    /// How many operations its completion accounts for.
    #[inline]
    pub(crate) const fn covers(self) -> u64 {
        self.0 & 0xffff_ffff
    }
}

/// The id of a receive on QP `q`.
#[inline]
pub(crate) fn recv_wr_id(q: usize) -> u64 {
    WrId::recv(q)
}

/// Whether operation number `n` (1-based, per QP) asks for a completion: every `cq_mod`-th,
/// and the last (`last`).
#[inline]
pub(crate) fn is_signaled(n: u64, cq_mod: u32, last: u64) -> bool {
    n.is_multiple_of(u64::from(cq_mod)) || n == last
}

/// The fewest completion events a duration window closes with. A window that reaches its
/// planned end with fewer (a slow link, a large message) is extended until it holds this
/// many, for at most the stall timeout (`--timeout`), instead of yielding no rate.
pub(crate) const MIN_WINDOW_EVENTS: u64 = 10;

/// What the control channel and the loop tell each other while a loop runs (shared with
/// the channel's companion thread). The peer's state: 0 running, [`DONE`](Self) its sends
/// are over (or its whole part), failed; and whether this side's sends are over, which the
/// companion thread announces to the peer.
#[derive(Debug, Default)]
pub(crate) struct PeerState {
    peer: AtomicU8,
    sends_over: AtomicU8,
    /// The companion thread that announces, woken when there is something to announce.
    announcer: OnceLock<Thread>,
    /// Taken by [`wait_over`](Self::wait_over) to look at `peer`, and by a change of `peer`
    /// to wake it through `changed`: a waiter that saw no change is asleep before the
    /// change's wake-up, so it is never missed.
    watch: Mutex<()>,
    changed: Condvar,
}

impl PeerState {
    const DONE: u8 = 1;
    const FAILED: u8 = 2;

    /// The peer sent everything it will send (or finished its part).
    pub(crate) fn set_done(&self) {
        self.set(Self::DONE);
    }

    /// The peer is gone.
    pub(crate) fn set_failed(&self) {
        self.set(Self::FAILED);
    }

    fn set(&self, state: u8) {
        self.peer.store(state, Ordering::Release);
        let _looking = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        self.changed.notify_all();
    }

    /// Sleeps until the peer is done or failed (true) or `deadline` passes (false; `None`:
    /// no deadline). A passive side waits here rather than polling: a thread that wakes to
    /// look takes CPU time from the machine's spinning threads (the client's, in loopback or
    /// a one-machine run, and the soft-RoCE kernel work they drive).
    pub(crate) fn wait_over(&self, deadline: Option<Instant>) -> bool {
        let mut looking = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.is_done() || self.is_failed() {
                return true;
            }
            looking = match deadline {
                None => self
                    .changed
                    .wait(looking)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => {
                        self.changed
                            .wait_timeout(looking, left)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    _ => return false,
                },
            };
        }
    }

    /// True once the peer's sends are over.
    pub(crate) fn is_done(&self) -> bool {
        self.peer.load(Ordering::Acquire) == Self::DONE
    }

    /// True once the peer is gone.
    pub(crate) fn is_failed(&self) -> bool {
        self.peer.load(Ordering::Acquire) == Self::FAILED
    }

    /// This side's sends are over: the peer may stop waiting for them (the first call wakes
    /// the announcing thread; later ones cost one atomic operation).
    pub(crate) fn announce_sends_over(&self) {
        let first = self
            .sends_over
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if let (true, Some(t)) = (first, self.announcer.get()) {
            t.unpark();
        }
    }

    /// The calling thread is the one that announces, and sleeps until there is something
    /// to announce.
    pub(crate) fn set_announcer(&self) {
        let _ = self.announcer.set(std::thread::current());
    }

    /// True the first time it is asked after [`announce_sends_over`](Self::announce_sends_over).
    pub(crate) fn take_sends_over(&self) -> bool {
        self.sends_over
            .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The shape of one bandwidth loop: the effective values it runs with.
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
    /// Operations in flight per QP (the send queue's depth).
    pub depth: u32,
    /// Receives posted per QP (a staged receiver's limit; the host loop keeps its receive
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
    /// `--rate-limit`: post at most this many bytes a second, all QPs together ([`Pacer`]).
    pub rate_limit: Option<f64>,
    /// `--interval`: cut a duration window into intervals this long ([`Intervals`]).
    pub interval: Option<Duration>,
}

/// `--rate-limit`: paces the posts in software (perftest's SW rate limiter) so that the
/// operations posted, all QPs together, never run ahead of the rate by more than one post
/// list. It reads the clock once per turn, and only on a paced run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacer {
    start: Instant,
    ops_per_sec: f64,
    burst: u64,
}

impl Pacer {
    /// A pacer from now for `bytes_per_sec` in messages of `shape.size` bytes.
    pub(crate) fn new(shape: &LoopShape, bytes_per_sec: f64) -> Pacer {
        Pacer {
            start: Instant::now(),
            ops_per_sec: bytes_per_sec / f64::from(shape.size.max(1)),
            burst: u64::from(shape.post_list.max(1)),
        }
    }

    /// How many operations, all QPs together, may have been posted by `now`.
    #[inline]
    pub(crate) fn allowed(&self, now: Instant) -> u64 {
        ((now - self.start).as_secs_f64() * self.ops_per_sec) as u64 + self.burst
    }
}

/// One measured window.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Window {
    /// Operations completed inside the window, all QPs together.
    pub ops: u64,
    /// Its length.
    pub seconds: f64,
    /// Completion events inside it (the count moved this many times).
    pub events: u64,
    /// How long past its planned end it was kept open (duration mode): to span its planned
    /// length when it opened late, and to hold [`MIN_WINDOW_EVENTS`]; zero when it was not.
    pub extended: Duration,
    /// `--interval`: the window cut into intervals.
    pub intervals: Option<Intervals>,
}

/// What one loop measured: the operations this side sent, the messages it received, and
/// how many operations each QP carried in all (for atomic validation).
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// This side's operations.
    pub sent: Option<Window>,
    /// SENDs that arrived.
    pub received: Option<Window>,
    /// Operations completed per QP, window or not.
    pub ops_per_qp: Vec<u64>,
    /// The most operations one QP had posted and not yet completed.
    pub in_flight_max: u64,
    /// Operations per requested completion at the end of the loop (0: the loop does not
    /// choose one, as a staged loop, which signals each chunk's last operation).
    pub signal_every: u32,
}

/// A window that opens later than this after its planned start says so (`extended`):
/// with a completion every 1/50 of the window, an opening a few of those late is the pace.
const LATE_ENOUGH: Duration = Duration::from_millis(50);

/// Opens and closes a window on (time, count) events: at the loop's start (iteration mode),
/// or at the margins (duration mode), where it closes only once it holds
/// [`MIN_WINDOW_EVENTS`] events, or `extend_limit` past its planned end; with `--interval`,
/// its [`Marks`](marks::Marks) cut it into intervals.
#[derive(Debug, Clone)]
pub(crate) struct Meter {
    plan: Option<Planned>,
    opened: Option<(Instant, u64)>,
    closed: Option<(Instant, u64)>,
    last: Option<(Instant, u64)>,
    /// Events after the opening one.
    events: u64,
    /// The planned end passed with too few events, so the window is kept open.
    extending: bool,
    /// `--interval` (duration mode).
    marks: Option<marks::Marks>,
}

/// A duration window's planned times.
#[derive(Debug, Clone, Copy)]
struct Planned {
    open_at: Instant,
    close_at: Instant,
    give_up_at: Instant,
    /// How much later than planned the window opened (`close_at` moved by as much, up to
    /// `give_up_at`).
    late: Duration,
}

impl Meter {
    /// A meter whose window starts at `start`; a duration window may be extended for at
    /// most `extend_limit` past its planned end, and is cut every `interval` when given.
    pub(crate) fn new(
        start: Instant,
        stop: Stop,
        extend_limit: Duration,
        interval: Option<Duration>,
    ) -> Self {
        let (plan, opened) = match stop {
            Stop::Iters(_) => (None, Some((start, 0))),
            Stop::Duration { total, margin } => {
                let close_at = start + total - margin;
                let planned = Planned {
                    open_at: start + margin,
                    close_at,
                    give_up_at: close_at + extend_limit,
                    late: Duration::ZERO,
                };
                (Some(planned), None)
            }
        };
        let marks = match (stop.window(), interval) {
            (Some(window), Some(every)) => Some(marks::Marks::new(every, window, extend_limit)),
            _ => None,
        };
        Meter {
            plan,
            opened,
            closed: None,
            last: None,
            events: 0,
            extending: false,
            marks,
        }
    }

    /// The same meter started again at `start` (a receiver's, at its first message),
    /// keeping the room its intervals' marks were given: a turn allocates nothing.
    pub(crate) fn restart(&mut self, start: Instant, stop: Stop, extend_limit: Duration) {
        let marks = self.marks.take();
        *self = Meter {
            marks,
            ..Meter::new(start, stop, extend_limit, None)
        };
    }

    /// The count is `count` at `now`.
    #[inline]
    pub(crate) fn tick(&mut self, now: Instant, count: u64) {
        self.last = Some((now, count));
        if self.closed.is_some() {
            return;
        }
        if self.opened.is_none() {
            if let Some(p) = self.plan.as_mut().filter(|p| now >= p.open_at) {
                self.opened = Some((now, count));
                // A window that opens late (nothing completed for a while after the
                // warm-up: a peer still getting ready, a first loss retransmitted) still
                // spans its planned length; else a burst at its opening would be the rate.
                // The limit stays where it was: a run lasts no longer than before, and
                // its peer's deadline (the planned length plus --timeout) holds.
                p.late = now
                    .saturating_duration_since(p.open_at)
                    .min(p.give_up_at.saturating_duration_since(p.close_at));
                p.close_at += p.late;
                if let Some(m) = self.marks.as_mut() {
                    m.open(now, count);
                }
            }
            return;
        }
        self.events += 1;
        if let Some(m) = self.marks.as_mut() {
            m.tick(now, count);
        }
        if let Some(p) = self.plan {
            if now >= p.close_at {
                if self.events >= MIN_WINDOW_EVENTS || now >= p.give_up_at {
                    self.closed = Some((now, count));
                } else {
                    self.extending = true;
                }
            }
        }
    }

    /// True once the window opened (iteration mode: from the start).
    pub(crate) fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// True once this side may stop posting as far as the window is concerned: it closed,
    /// or could not hold enough events within its limit (iteration mode: always).
    pub(crate) fn may_end(&self, now: Instant) -> bool {
        match self.plan {
            None => true,
            Some(p) => self.closed.is_some() || now >= p.give_up_at,
        }
    }

    /// The window, once it opened.
    pub(crate) fn window(&self) -> Option<Window> {
        let (t0, c0) = self.opened?;
        let (t1, c1) = self.closed.or(self.last)?;
        let extended = match self.plan {
            Some(p) if self.extending || p.late > LATE_ENOUGH => {
                t1.saturating_duration_since(p.close_at - p.late)
            }
            _ => Duration::ZERO,
        };
        Some(Window {
            ops: c1.saturating_sub(c0),
            seconds: t1.saturating_duration_since(t0).as_secs_f64(),
            events: self.events,
            extended,
            intervals: self.marks.as_ref().map(|m| m.intervals((t1, c1))),
        })
    }
}

/// What a body has done so far, all QPs together, for the meters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// This side's operations done (sent, or a staged sink's chunks in GPU memory).
    pub sent: u64,
    /// Operations posted, while a duration run is starting slow ([`startup`]).
    pub posted: Option<u64>,
    /// Messages received (or a staged receiver's messages in GPU memory).
    pub received: u64,
    /// The first message arrived: a receiver's window opens then.
    pub receiving: bool,
}

/// One bandwidth loop's body: what it does in a turn, and when it is done. [`drive`] runs
/// the turns, reads the clock, keeps the meters, the deadline and the stall and peer checks.
pub(crate) trait LoopBody {
    /// Posts what may be posted and polls `wcs` once. True when anything moved.
    fn turn(&mut self, side: &mut Connected, wcs: &mut [Completion]) -> Result<bool>;
    /// The counts the meters follow.
    fn counts(&self) -> Counts;
    /// The duration is up: post nothing new, finish what is in flight.
    fn stop_posting(&mut self);
    /// True once the loop is over (`now` for drain times).
    fn finished(&mut self, now: Instant, peer: &PeerState) -> bool;
    /// The error when nothing moved for the stall timeout.
    fn stalled(&self, secs: f64) -> anyhow::Error;
    /// A duration run's warm-up is over: from now on, request a completion every `every`
    /// operations per QP ([`Pace::signal_every`]). A body that signals otherwise ignores it.
    fn signal_every(&mut self, every: u32) {
        let _ = every;
    }
    /// A duration run's startup found the link's rate: from now on, keep at most `ops` in
    /// flight per QP ([`Pace::in_flight`]). A body that queues otherwise ignores it.
    fn hold_in_flight(&mut self, ops: u32) {
        let _ = ops;
    }
}

/// The windows [`drive`] measured: this side's operations and the messages it received
/// (`None` when their count never moved).
#[derive(Debug, Clone, Default)]
pub(crate) struct Windows {
    /// This side's operations.
    pub sent: Option<Window>,
    /// The messages it received.
    pub received: Option<Window>,
}

/// Runs `body`'s turns until it is finished: looks at the clock after each turn that moved
/// (to keep the meters) and every [`CLOCK_CHECK_EVERY`] turns that did not (for the
/// deadline, the stall timeout and a failed peer). In duration mode the warm-up's rate sets
/// how often completions are requested once the window opens, the [`startup`]'s finding
/// how much is kept in flight, and posting stops at the deadline only once this side's
/// window holds enough events (or its extension ran out).
pub(crate) fn drive<B: LoopBody>(
    side: &mut Connected,
    shape: &LoopShape,
    peer: &PeerState,
    body: &mut B,
) -> Result<Windows> {
    let mut wcs = [Completion::default(); POLL_BATCH];
    let start = Instant::now();
    let extend = shape.stall_timeout;
    let mut sent = Meter::new(start, shape.stop, extend, shape.interval);
    let mut received = Meter::new(start, shape.stop, extend, shape.interval);
    let (mut seen, mut receiving, mut paced) = (Counts::default(), false, false);
    let deadline = match shape.stop {
        Stop::Duration { total, .. } => Some(start + total),
        Stop::Iters(_) => None,
    };
    let (mut idle, mut last_progress, mut stopped) = (0u32, start, false);
    // Fed only while the body starts slow (it reports what it posted).
    let mut startup = startup::Startup::new(start);
    loop {
        let moved = body.turn(side, &mut wcs)?;
        let now = if moved {
            idle = 0;
            let now = Instant::now();
            last_progress = now;
            let c = body.counts();
            if c.receiving && !receiving {
                receiving = true;
                received.restart(now, shape.stop, extend);
            }
            if c.sent != seen.sent {
                sent.tick(now, c.sent);
                let found = c.posted.and_then(|p| startup.progress(now, c.sent, p));
                if let Some(f) = found {
                    hold_found(body, shape, side.qps.len(), f);
                }
            }
            if c.received != seen.received {
                received.tick(now, c.received);
            }
            seen = c;
            now
        } else {
            idle += 1;
            if idle < CLOCK_CHECK_EVERY {
                continue;
            }
            idle = 0;
            Instant::now()
        };
        if !paced && sent.is_open() {
            paced = true;
            let rate = seen.sent as f64 / (now - start).as_secs_f64().max(1e-9);
            if let Some(every) = signal_every_for(shape, side.qps.len(), rate) {
                body.signal_every(every);
            }
        }
        if !stopped && deadline.is_some_and(|d| now >= d) && sent.may_end(now) {
            body.stop_posting();
            stopped = true;
        }
        if body.finished(now, peer) {
            break;
        }
        if moved {
            continue;
        }
        if peer.is_failed() {
            bail!("the peer's control connection failed while measuring");
        }
        if now.duration_since(last_progress) > shape.stall_timeout {
            return Err(body.stalled(shape.stall_timeout.as_secs_f64()));
        }
    }
    Ok(Windows {
        sent: sent.window(),
        received: received.window(),
    })
}

/// The startup found the link's rate: `body` holds what [`pace_for`] keeps in flight at it
/// (and a `-n` run signals at its pace from now on; a `-D` run's pace of completions is set
/// when its window opens).
fn hold_found<B: LoopBody>(body: &mut B, shape: &LoopShape, qps: usize, found: startup::Found) {
    let p = pace_for(shape, qps, found.ops_per_sec, found.round_trip);
    if let Stop::Iters(_) = shape.stop {
        body.signal_every(p.signal_every);
    }
    body.hold_in_flight(p.in_flight);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_kind_qp_and_count() {
        for kind in [WrKind::Op, WrKind::Recv, WrKind::Notice, WrKind::NoticeRecv] {
            let id = WrId(WrId::new(kind, 1023, 65536).0);
            assert_eq!((id.kind(), id.qp(), id.covers()), (kind, 1023, 65536));
        }
        assert_eq!(WrId(recv_wr_id(5)).kind(), WrKind::Recv);
        assert_eq!(WrId(recv_wr_id(5)).qp(), 5);
    }

    #[test]
    fn the_last_operation_is_always_signaled() {
        assert!(is_signaled(7, 100, 7));
        assert!(is_signaled(100, 100, 5000));
        assert!(!is_signaled(99, 100, 5000));
    }

    #[test]
    fn sends_over_is_announced_once() {
        let p = PeerState::default();
        assert!(!p.take_sends_over());
        p.announce_sends_over();
        assert!(p.take_sends_over());
        assert!(!p.take_sends_over());
        p.announce_sends_over();
        assert!(!p.take_sends_over(), "announced once per loop");
    }

    #[test]
    fn an_iteration_window_runs_from_the_start_to_the_last_event() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, Stop::Iters(10), Duration::from_secs(30), None);
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
        let mut m = Meter::new(t0, stop, Duration::from_secs(30), None);
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

    /// Events every `every_ms`, the count one more each time, from the first after
    /// `from_ms` up to `until_ms`.
    fn ticks_every(m: &mut Meter, t0: Instant, every_ms: u64, (from_ms, until_ms): (u64, u64)) {
        for k in from_ms / every_ms + 1..=until_ms / every_ms {
            m.tick(t0 + Duration::from_millis(k * every_ms), k);
        }
    }

    #[test]
    fn a_duration_window_with_too_few_events_is_extended_until_it_holds_enough() {
        // -D 1: planned window 0.1 s .. 0.9 s; a completion every 300 ms (a slow link).
        let t0 = Instant::now();
        let stop = Stop::for_duration(1.0);
        let mut m = Meter::new(t0, stop, Duration::from_secs(30), None);
        ticks_every(&mut m, t0, 300, (0, 2_000));
        assert!(
            !m.may_end(t0 + Duration::from_secs(2)),
            "3 events: keep measuring"
        );
        ticks_every(&mut m, t0, 300, (2_000, 4_000));
        let w = m.window().unwrap();
        // opened at 0.3 s (event 1), closed at the 10th event after it: 3.3 s.
        assert_eq!((w.ops, w.events), (10, MIN_WINDOW_EVENTS));
        assert!((w.seconds - 3.0).abs() < 1e-9, "{w:?}");
        assert_eq!(w.extended, Duration::from_millis(2_400));
        assert!(m.may_end(t0 + Duration::from_secs(4)));
    }

    #[test]
    fn an_extension_ends_at_its_limit_with_what_it_has() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, Stop::for_duration(1.0), Duration::from_secs(2), None);
        ticks_every(&mut m, t0, 500, (0, 5_000));
        // Opens at its first event, 0.5 s, 0.4 s late: its planned end moves to 1.3 s, its
        // limit stays at 0.9 + 2 s. Closes at the first event past that, 3.0 s, after 5.
        let w = m.window().unwrap();
        assert_eq!(w.events, 5);
        assert!((w.seconds - 2.5).abs() < 1e-9, "{w:?}");
        assert!(m.may_end(t0 + Duration::from_millis(2_900)));
    }

    /// In the six-node guest a pair that shared its round stalled for its first 0.85 s of
    /// `-D 1`, and its window, opened at its first completion, closed ten events later:
    /// 0.05 s of the burst that ended the stall, three times the pair's true rate.
    #[test]
    fn a_window_that_opens_late_still_spans_its_planned_length() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, Stop::for_duration(1.0), Duration::from_secs(30), None);
        // Nothing until 0.85 s, a burst of 100 ops over 50 ms, then 1 op every 10 ms.
        for k in 0..10u64 {
            m.tick(t0 + Duration::from_millis(850 + 5 * k), 10 * (k + 1));
        }
        ticks_every(&mut m, t0, 10, (900, 1_600));
        assert!(!m.may_end(t0 + Duration::from_millis(1_600)));
        ticks_every(&mut m, t0, 10, (1_600, 3_000));
        let w = m.window().unwrap();
        // Opened at 0.85 s, closed 0.8 s later, at 1.65 s.
        assert!((w.seconds - 0.8).abs() < 1e-9, "{w:?}");
        assert_eq!(w.extended, Duration::from_millis(750));
        assert!(w.ops < 200, "the burst is a small part: {w:?}");
        assert!(m.may_end(t0 + Duration::from_millis(1_650)));
    }

    #[test]
    fn a_window_with_enough_events_is_not_extended() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0, Stop::for_duration(1.0), Duration::from_secs(30), None);
        ticks_every(&mut m, t0, 10, (0, 1_000));
        let w = m.window().unwrap();
        assert_eq!(w.extended, Duration::ZERO);
        assert_eq!(w.events, 80, "0.1 s .. 0.9 s at one event every 10 ms");
    }
}
