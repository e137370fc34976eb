//! The control channel while a loop measures: a companion thread writes (heartbeats, which
//! say the peer is alive while it measures, and `SendsOver` once the loop announced that its
//! operations all completed) and another reads what the loop must know (the peer's
//! `SendsOver` or `SizeDone`, a rejection, silence), through [`PeerState`]. The reader waits
//! with one deadline, the loop's planned length plus `--timeout`: heartbeats never extend
//! it, so a peer that only heartbeats cannot hold this side longer than the plan allows.
//! Both stop before [`Channel::measuring`] returns, so nothing else reads or writes the
//! socket at the same time. Both go through the channel's [`Framing`], so with a token their
//! frames are sealed and checked in the same sequence as the channel's own.

use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::{Channel, Framing, Message, WireError, MAX_MESSAGE};
use crate::engine::bw::PeerState;

/// What the reader waits for while a loop measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listen {
    /// Nothing: the peer has nothing to tell this loop.
    Nothing,
    /// The peer's `SendsOver` (a `-b` client, whose receives end when the server's sends do).
    SendsOver,
    /// The client's `SizeDone`, returned with the work's result (the server).
    SizeDone,
}

impl Channel {
    /// Runs `work` while the companion threads write and read for it: the peer's
    /// `SendsOver` or `SizeDone` marks `peer` done, a dead, silent or rejecting peer marks it
    /// failed (which `work` is expected to notice). `length` is how long the peer's loop may
    /// honestly take (the plan's length for the size); what `listen` waits for must come
    /// within `length` plus `--timeout`, however many heartbeats come meanwhile. Returns the
    /// message `listen` waited for. When `work` fails, the read side is shut so the reader
    /// ends at once.
    pub(crate) fn measuring<T>(
        &mut self,
        peer: &PeerState,
        listen: Listen,
        length: Duration,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Option<Message>)> {
        let mut writer = self
            .stream
            .try_clone()
            .context("cannot clone the control socket")?;
        let mut reader = self
            .stream
            .try_clone()
            .context("cannot clone the control socket")?;
        let interval = (self.timeout / 3).min(Duration::from_secs(1));
        let within = length.saturating_add(self.timeout);
        let (addr, framing, timeout) = (self.peer, &self.framing, self.timeout);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let beat = s.spawn(|| {
                let send = |msg: &Message| {
                    framing
                        .write(&mut writer, msg, Instant::now() + timeout)
                        .is_ok()
                };
                write_while(send, peer, &stop, interval)
            });
            let beat_thread = beat.thread().clone();
            let heard = (listen != Listen::Nothing).then(|| {
                s.spawn(move || listen_for(&mut reader, framing, listen, peer, within, addr))
            });
            let out = work();
            stop.store(true, Ordering::Release);
            beat_thread.unpark();
            // Whose failure came first decides which message the user sees.
            let peer_failed_first = peer.is_failed();
            if out.is_err() {
                let _ = self.stream.shutdown(Shutdown::Read);
            }
            let _ = beat.join();
            let msg = match heard {
                Some(h) => Some(
                    h.join()
                        .map_err(|_| anyhow!("the control reader thread panicked"))?,
                ),
                None => None,
            };
            match (out, msg) {
                (Ok(v), None) => Ok((v, None)),
                (Ok(v), Some(Ok(m))) => Ok((v, Some(m))),
                (Err(_), Some(Err(w))) if peer_failed_first => Err(w),
                (Err(e), _) => Err(e),
                (Ok(_), Some(Err(w))) => Err(w),
            }
        })
    }
}

/// Sends (through `send`, which says whether it could) a heartbeat every `interval` and
/// `SendsOver` once the loop announced it, until `stop`; an announcement made just before the
/// stop still goes out. Between two it sleeps (woken by the announcement or the stop), so
/// that it does not interrupt a measuring thread spinning on the same CPUs more than it must.
fn write_while(
    mut send: impl FnMut(&Message) -> bool,
    peer: &PeerState,
    stop: &AtomicBool,
    interval: Duration,
) {
    peer.set_announcer();
    let mut next = Instant::now() + interval;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if peer.take_sends_over() && !send(&Message::SendsOver) {
            return;
        }
        if stopping {
            return;
        }
        let now = Instant::now();
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        if !send(&Message::Heartbeat) {
            return;
        }
        next += interval;
    }
}

/// Reads the peer's messages until the one `listen` waits for, all within `within` (one
/// deadline: heartbeats are passed over and do not extend it).
fn listen_for(
    from: &mut std::net::TcpStream,
    framing: &Framing,
    listen: Listen,
    peer: &PeerState,
    within: Duration,
    addr: SocketAddr,
) -> Result<Message> {
    let failed = |e: anyhow::Error| -> Result<Message> {
        peer.set_failed();
        Err(e)
    };
    let deadline = Instant::now().checked_add(within);
    loop {
        // A length beyond the clock's range is no deadline worth keeping: a day is.
        let by = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400));
        match framing.read::<Message>(from, by, MAX_MESSAGE) {
            Ok(Message::Heartbeat) => continue,
            Ok(Message::SendsOver) => {
                peer.set_done();
                if listen == Listen::SendsOver {
                    return Ok(Message::SendsOver);
                }
            }
            Ok(msg @ Message::SizeDone { .. }) if listen == Listen::SizeDone => {
                peer.set_done();
                return Ok(msg);
            }
            Ok(Message::Reject { reason, refused }) => {
                return failed(super::rejected(reason, refused))
            }
            Ok(other) => {
                return failed(anyhow!(
                    "protocol error: {addr} sent {} while measuring",
                    other.name()
                ))
            }
            Err(WireError::TimedOut) => {
                return failed(anyhow!(
                    "no {} from {addr} within {:.1} s while measuring (the size's planned \
                     length and --timeout); is the peer still alive and measuring?",
                    awaited(listen),
                    within.as_secs_f64()
                ))
            }
            Err(WireError::Closed) => {
                return failed(anyhow!(
                    "the peer {addr} closed the connection while measuring"
                ))
            }
            Err(forged @ WireError::Forged { .. }) => return failed(forged.into()),
            Err(e) => return failed(anyhow!("bad message from {addr} while measuring: {e}")),
        }
    }
}

/// What the reader waits for, as an error names it.
fn awaited(listen: Listen) -> &'static str {
    match listen {
        Listen::Nothing => "message",
        Listen::SendsOver => "SendsOver",
        Listen::SizeDone => "SizeDone",
    }
}
