//! The latency loops, ping-pong on one QP. WRITE: the initiator writes a tagged message and
//! polls the last byte of its receive half until the responder's write with the same tag
//! lands. SEND: the initiator sends and waits for the responder's SEND to complete a receive.
//! READ and atomics: the initiator times each operation's full round trip; the peer's CPU is
//! not involved. WRITE and SEND report one-way latency (RTT/2); READ and atomics the round
//! trip. Every latency goes into an HdrHistogram, which needs no per-sample storage.
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

/// Which round trips count: after the warm-up, or inside the duration's margins.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: Instant,
    stop: Stop,
    warmup: u64,
}

impl Schedule {
    #[inline]
    fn more(&self, i: u64, now: Instant) -> bool {
        match self.stop {
            Stop::Iters(n) => i < self.warmup + n,
            Stop::Duration { total, .. } => now < self.start + total,
        }
    }

    #[inline]
    fn measured(&self, i: u64, t0: Instant) -> bool {
        match self.stop {
            Stop::Iters(_) => i >= self.warmup,
            Stop::Duration { total, margin } => {
                t0 >= self.start + margin && t0 < self.start + total - margin
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

/// Polls until a completion `want` accepts; every completion is checked for errors.
/// Receives that are not wanted cannot happen in a ping-pong and are an error.
fn poll_until(
    side: &Connected,
    stall: Duration,
    peer: Option<&PeerState>,
    mut want: impl FnMut(&Completion) -> bool,
) -> Result<Option<Completion>> {
    let mut wcs = [Completion::default(); 4];
    let mut spins = 0u32;
    let mut since = Instant::now();
    loop {
        let n = side.cq.poll(&mut wcs)?;
        if n == 0 {
            spins += 1;
            if spins == SPINS_PER_CHECK {
                spins = 0;
                if peer.is_some_and(PeerState::is_done) {
                    return Ok(None);
                }
                if peer.is_some_and(PeerState::is_failed) {
                    bail!("the peer's control connection failed while measuring latency");
                }
                if since.elapsed() > stall {
                    bail!(
                        "the peer did not answer for {:.1} s; is it alive? (--timeout)",
                        stall.as_secs_f64()
                    );
                }
            }
            continue;
        }
        since = Instant::now();
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
    let mut spins = 0u32;
    let since = Instant::now();
    loop {
        // SAFETY: ptr points into the registered host buffer, which outlives this call; the
        // NIC writes it concurrently, hence the volatile read.
        if unsafe { std::ptr::read_volatile(ptr) } == want {
            return Ok(true);
        }
        spins += 1;
        if spins == SPINS_PER_CHECK {
            spins = 0;
            if peer.is_some_and(PeerState::is_done) {
                return Ok(false);
            }
            if peer.is_some_and(PeerState::is_failed) {
                bail!("the peer's control connection failed while measuring latency");
            }
            if since.elapsed() > stall {
                bail!(
                    "the peer's write did not arrive for {:.1} s; is it alive? (--timeout)",
                    stall.as_secs_f64()
                );
            }
        }
        std::hint::spin_loop();
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
    let staged = side.staging.is_some();
    let size = u64::from(shape.size);
    let mut hist = LatencyRecorder::new()?;
    let recv_last = last_byte(side, shape)?;
    let schedule = Schedule {
        start: Instant::now(),
        stop: shape.stop,
        warmup: shape.warmup,
    };
    let mut first: Option<Instant> = None;
    let mut last = schedule.start;
    let mut measured = 0u64;
    let mut i = 0u64;
    while schedule.more(i, Instant::now()) {
        let signaled = (i + 1).is_multiple_of(u64::from(shape.cq_mod))
            || matches!(shape.verb, Verb::Read | Verb::Atomic);
        if shape.verb == Verb::Write && !staged {
            set_tag(side, shape, tag(i))?;
        }
        let t0 = Instant::now();
        if staged && shape.verb != Verb::Read {
            // GPUDirect RDMA off: the message is copied out of the GPU inside the round trip.
            copy_out(side, size, shape.stall_timeout)?;
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
            copy_in(side, size, shape.stall_timeout)?;
        }
        let t1 = Instant::now();
        if schedule.measured(i, t0) {
            let rtt = t1.duration_since(t0).as_nanos() as u64;
            hist.record(if shape.verb == Verb::Write || shape.verb == Verb::Send {
                rtt / 2
            } else {
                rtt
            });
            first.get_or_insert(t0);
            last = t1;
            measured += 1;
        }
        if shape.verb == Verb::Send {
            side.post_recv(0, recv_wr_id(0))?;
        }
        if signaled && shape.verb == Verb::Write {
            poll_until(side, shape.stall_timeout, None, |wc| wc.wr_id() == i)?;
        }
        i += 1;
    }
    let Some(first) = first else {
        bail!("no round trip fell inside the measured window; give more iterations or a longer -D");
    };
    Ok(LatMeasured {
        window: Window {
            ops: measured,
            seconds: last.duration_since(first).as_secs_f64(),
        },
        hist,
        total: i,
    })
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

    #[test]
    fn tags_are_never_zero_and_always_change() {
        for i in 0..1000u64 {
            assert_ne!(tag(i), 0);
            assert_ne!(tag(i), tag(i + 1));
        }
    }

    #[test]
    fn the_warm_up_is_not_measured() {
        let s = Schedule {
            start: Instant::now(),
            stop: Stop::Iters(10),
            warmup: 3,
        };
        let now = Instant::now();
        assert!(!s.measured(2, now) && s.measured(3, now));
        assert!(s.more(12, now) && !s.more(13, now));
    }

    #[test]
    fn a_duration_run_measures_inside_the_margins() {
        let start = Instant::now();
        let s = Schedule {
            start,
            stop: Stop::Duration {
                total: Duration::from_secs(3),
                margin: Duration::from_millis(300),
            },
            warmup: 0,
        };
        assert!(!s.measured(0, start + Duration::from_millis(100)));
        assert!(s.measured(0, start + Duration::from_millis(500)));
        assert!(!s.measured(0, start + Duration::from_millis(2800)));
        assert!(!s.more(0, start + Duration::from_secs(3)));
    }
}
