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

pub use host::measure_bw;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use verbs::Completion;

use super::Connected;
use crate::plan::{AtomicOp, Verb};

/// Completions taken per poll.
pub const POLL_BATCH: usize = 16;
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
    pub const fn recv(q: usize) -> u64 {
        WrId::new(WrKind::Recv, q, 1).0
    }

    /// What the request is.
    #[inline]
    pub const fn kind(self) -> WrKind {
        match self.0 >> Self::KIND_SHIFT {
            0 => WrKind::Op,
            1 => WrKind::Recv,
            2 => WrKind::Notice,
            _ => WrKind::NoticeRecv,
        }
    }

    /// Its QP.
    #[inline]
    pub const fn qp(self) -> usize {
        ((self.0 >> Self::QP_SHIFT) & 0xffff) as usize
    }

    /// How many operations its completion accounts for.
    #[inline]
    pub const fn covers(self) -> u64 {
        self.0 & 0xffff_ffff
    }
}

/// The id of a receive on QP `q`.
#[inline]
pub fn recv_wr_id(q: usize) -> u64 {
    WrId::recv(q)
}

/// Whether operation number `n` (1-based, per QP) asks for a completion: every `cq_mod`-th,
/// and the last (`last`).
#[inline]
pub fn is_signaled(n: u64, cq_mod: u32, last: u64) -> bool {
    n.is_multiple_of(u64::from(cq_mod)) || n == last
}

/// Whether operation number `n` asks for a completion and how many operations that
/// completion accounts for (0: not signaled): every `cq_mod`-th covers `cq_mod`, and the
/// last (`last`), the only one signaled off that grid, covers those since the grid. One
/// division, as [`is_signaled`].
#[inline]
pub fn signal(n: u64, cq_mod: u32, last: u64) -> u32 {
    let rem = n % u64::from(cq_mod);
    if rem == 0 {
        cq_mod
    } else if n == last {
        rem as u32
    } else {
        0
    }
}

/// What the control channel and the loop tell each other while a loop runs (shared with
/// the channel's companion thread). The peer's state: 0 running, [`DONE`](Self) its sends
/// are over (or its whole part), failed; and whether this side's sends are over, which the
/// companion thread announces to the peer.
#[derive(Debug, Default)]
pub struct PeerState {
    peer: AtomicU8,
    sends_over: AtomicU8,
    /// The companion thread that announces, woken when there is something to announce.
    announcer: OnceLock<Thread>,
}

impl PeerState {
    const DONE: u8 = 1;
    const FAILED: u8 = 2;

    /// The peer sent everything it will send (or finished its part).
    pub fn set_done(&self) {
        self.peer.store(Self::DONE, Ordering::Release);
    }

    /// The peer is gone.
    pub fn set_failed(&self) {
        self.peer.store(Self::FAILED, Ordering::Release);
    }

    /// True once the peer's sends are over.
    pub fn is_done(&self) -> bool {
        self.peer.load(Ordering::Acquire) == Self::DONE
    }

    /// True once the peer is gone.
    pub fn is_failed(&self) -> bool {
        self.peer.load(Ordering::Acquire) == Self::FAILED
    }

    /// This side's sends are over: the peer may stop waiting for them (the first call wakes
    /// the announcing thread; later ones cost one atomic operation).
    pub fn announce_sends_over(&self) {
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
    pub fn set_announcer(&self) {
        let _ = self.announcer.set(std::thread::current());
    }

    /// True the first time it is asked after [`announce_sends_over`](Self::announce_sends_over).
    pub fn take_sends_over(&self) -> bool {
        self.sends_over
            .compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
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

    /// Operations per QP to post: the count, or `u64::MAX` until the time is up.
    pub fn limit(self) -> u64 {
        match self {
            Stop::Iters(n) => n,
            Stop::Duration { .. } => u64::MAX,
        }
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
    /// The most operations one QP had posted and not yet completed.
    pub in_flight_max: u64,
}

/// Opens and closes a window on (time, count) events: at the loop's start (iteration mode),
/// or at the margins (duration mode).
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    start: Instant,
    open_at: Option<Instant>,
    close_at: Option<Instant>,
    opened: Option<(Instant, u64)>,
    closed: Option<(Instant, u64)>,
    last: Option<(Instant, u64)>,
}

impl Meter {
    /// A meter whose window starts at `start`.
    pub fn new(start: Instant, stop: Stop) -> Self {
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

    /// The count is `count` at `now`.
    #[inline]
    pub fn tick(&mut self, now: Instant, count: u64) {
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

    /// The window, once it opened.
    pub fn window(&self) -> Option<Window> {
        let (t0, c0) = self.opened?;
        let (t1, c1) = self.closed.or(self.last)?;
        Some(Window {
            ops: c1.saturating_sub(c0),
            seconds: t1.saturating_duration_since(t0).as_secs_f64(),
        })
    }
}

/// What a body has done so far, all QPs together, for the meters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// This side's operations done (sent, or a staged sink's chunks in GPU memory).
    pub sent: u64,
    /// Messages received (or a staged receiver's messages in GPU memory).
    pub received: u64,
    /// The first message arrived: a receiver's window opens then.
    pub receiving: bool,
}

/// One bandwidth loop's body: what it does in a turn, and when it is done. [`drive`] runs
/// the turns, reads the clock, keeps the meters, the deadline and the stall and peer checks.
pub trait LoopBody {
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
}

/// The windows [`drive`] measured: this side's operations and the messages it received
/// (`None` when their count never moved).
#[derive(Debug, Clone, Copy, Default)]
pub struct Windows {
    /// This side's operations.
    pub sent: Option<Window>,
    /// The messages it received.
    pub received: Option<Window>,
}

/// Runs `body`'s turns until it is finished: looks at the clock after each turn that moved
/// (to keep the meters) and every [`CLOCK_CHECK_EVERY`] turns that did not (for the
/// deadline, the stall timeout and a failed peer).
pub fn drive<B: LoopBody>(
    side: &mut Connected,
    shape: &LoopShape,
    peer: &PeerState,
    body: &mut B,
) -> Result<Windows> {
    let mut wcs = [Completion::default(); POLL_BATCH];
    let start = Instant::now();
    let mut sent = Meter::new(start, shape.stop);
    let mut received = Meter::new(start, shape.stop);
    let (mut seen, mut receiving) = (Counts::default(), false);
    let deadline = match shape.stop {
        Stop::Duration { total, .. } => Some(start + total),
        Stop::Iters(_) => None,
    };
    let (mut idle, mut last_progress, mut stopped) = (0u32, start, false);
    loop {
        let moved = body.turn(side, &mut wcs)?;
        let now = if moved {
            idle = 0;
            let now = Instant::now();
            last_progress = now;
            let c = body.counts();
            if c.receiving && !receiving {
                receiving = true;
                received = Meter::new(now, shape.stop);
            }
            if c.sent != seen.sent {
                sent.tick(now, c.sent);
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
        if !stopped && deadline.is_some_and(|d| now >= d) {
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
    fn a_completion_covers_the_operations_since_the_last_signaled_one() {
        assert_eq!(signal(100, 100, 5000), 100);
        assert_eq!(signal(200, 100, 5000), 100);
        assert_eq!(signal(199, 100, 5000), 0);
        // The last operation of a run of 250: the 50 after the 200th.
        assert_eq!(signal(250, 100, 250), 50);
        assert_eq!(signal(1, 1, 1), 1);
        assert_eq!(signal(7, 100, 7), 7);
        for n in 1..=1000 {
            assert_eq!(signal(n, 64, 1000) > 0, is_signaled(n, 64, 1000), "{n}");
        }
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
}
