//! The TCP control channel: the hello, the plan, the endpoints, barriers and results.
//! Every connect and read has a timeout, so a dead or silent peer ends the run with a clear
//! message instead of a hang.

mod messages;
mod wire;

pub use messages::{Message, MAGIC, PROTOCOL_VERSION};
pub use wire::{read_message, write_message, WireError};

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::engine::bw::PeerState;

/// The default TCP port, perftest's.
pub const DEFAULT_PORT: u16 = 18515;

/// A connected control channel to the peer.
#[derive(Debug)]
pub struct Channel {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
}

impl Channel {
    fn new(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> Result<Self> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Channel {
            stream,
            peer,
            timeout,
        })
    }

    /// Connects to the server at `host`:`port` within `timeout` and exchanges hellos.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<Self> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve server address '{host}'"))?
            .collect();
        let deadline = Instant::now() + timeout;
        let mut last_err = None;
        for addr in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(addr, left) {
                Ok(stream) => {
                    let mut ch = Channel::new(stream, *addr, timeout)?;
                    ch.send(&Message::hello())?;
                    ch.expect_hello()?;
                    return Ok(ch);
                }
                Err(e) => last_err = Some((addr, e)),
            }
        }
        match last_err {
            Some((addr, e)) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => bail!(
                "no answer from the server at {addr} within {} s; is `rdmabench` running there and the \
                 port open? (--timeout, -p)",
                timeout.as_secs()
            ),
            Some((addr, e)) => bail!(
                "cannot connect to the server at {addr}: {e}; start the server first (`rdmabench <test>` \
                 on the server host) and check -p"
            ),
            None => bail!("no address found for server '{host}' (or --timeout {} s is too short)", timeout.as_secs()),
        }
    }

    fn expect_hello(&mut self) -> Result<()> {
        match self.recv("the hello")? {
            Message::Hello {
                magic,
                protocol,
                tool_version,
            } => {
                if magic != MAGIC {
                    bail!("{} is not an rdmabench peer", self.peer);
                }
                if protocol != PROTOCOL_VERSION {
                    bail!(
                        "protocol mismatch: this rdmabench speaks version {PROTOCOL_VERSION}, the peer \
                         ({tool_version}) speaks {protocol}; run the same rdmabench on both hosts"
                    );
                }
                Ok(())
            }
            other => bail!("expected a hello from {}, got {}", self.peer, other.name()),
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<()> {
        write_message(&mut self.stream, msg)
            .map_err(|e| anyhow!("sending {} to {} failed: {e}", msg.name(), self.peer))
    }

    /// Receives one message; `what` names it in errors. A `Reject` becomes an error with the
    /// peer's reason.
    pub fn recv(&mut self, what: &str) -> Result<Message> {
        let msg = read_message::<Message>(&mut self.stream).map_err(|e| match e {
            WireError::TimedOut => anyhow!(
                "timed out after {} s waiting for {what} from {}; is the peer still alive? (--timeout)",
                self.timeout.as_secs_f64(),
                self.peer
            ),
            WireError::Closed => anyhow!("the peer {} closed the connection while we waited for {what}", self.peer),
            other => anyhow!("bad message from {} while waiting for {what}: {other}", self.peer),
        })?;
        if let Message::Reject { reason } = msg {
            bail!("the peer ended the run: {reason}");
        }
        Ok(msg)
    }

    /// Receives a message and checks it is the one expected.
    pub fn expect(&mut self, name: &'static str) -> Result<Message> {
        let msg = self.recv(name)?;
        if msg.name() != name {
            bail!(
                "protocol error: expected {name} from {}, got {}",
                self.peer,
                msg.name()
            );
        }
        Ok(msg)
    }

    /// Tells the peer the run failed, so it stops waiting; errors here are ignored because
    /// the run is failing anyway.
    pub fn reject(&mut self, reason: &str) {
        let _ = self.send(&Message::Reject {
            reason: reason.to_string(),
        });
    }

    /// Runs `work` while a helper thread sends a heartbeat every second (or more often for a
    /// short timeout), so that the peer's read timeout measures silence, not run length.
    /// The helper stops before this returns, so no other write can interleave with it.
    pub fn with_heartbeat<T>(&mut self, work: impl FnOnce() -> T) -> Result<T> {
        let mut writer = self
            .stream
            .try_clone()
            .context("cannot clone the control socket")?;
        let interval = (self.timeout / 3).min(Duration::from_secs(1));
        let stop = AtomicBool::new(false);
        let out = std::thread::scope(|s| {
            // The helper sleeps until its next beat (woken early to stop), so that it does
            // not interrupt a measuring thread spinning on the same CPUs more than it must.
            let beat = s.spawn(|| {
                let mut next = Instant::now() + interval;
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::park_timeout(next - now);
                        continue;
                    }
                    if write_message(&mut writer, &Message::Heartbeat).is_err() {
                        return;
                    }
                    next += interval;
                }
            });
            let out = work();
            stop.store(true, Ordering::Relaxed);
            beat.thread().unpark();
            let _ = beat.join();
            out
        });
        Ok(out)
    }
}

impl Channel {
    /// Runs `work` while a helper thread reads the peer's messages: heartbeats are skipped,
    /// the peer's `SizeDone` marks `peer` done and is returned with the work's result, and a
    /// dead or silent peer marks `peer` failed, which `work` is expected to notice. When
    /// `work` fails, the read side is shut so the helper ends at once.
    pub fn watch<T>(
        &mut self,
        peer: &PeerState,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Message)> {
        let mut reader = self
            .stream
            .try_clone()
            .context("cannot clone the control socket")?;
        let timeout = self.timeout;
        let peer_addr = self.peer;
        std::thread::scope(|s| {
            let watcher = s.spawn(move || -> Result<Message> {
                loop {
                    match read_message::<Message>(&mut reader) {
                        Ok(Message::Heartbeat) => continue,
                        Ok(msg @ Message::SizeDone { .. }) => {
                            peer.set_done();
                            return Ok(msg);
                        }
                        Ok(Message::Reject { reason }) => {
                            peer.set_failed();
                            bail!("the peer ended the run: {reason}");
                        }
                        Ok(other) => {
                            peer.set_failed();
                            bail!("protocol error: {} sent {} while measuring", peer_addr, other.name());
                        }
                        Err(WireError::TimedOut) => {
                            peer.set_failed();
                            bail!(
                                "nothing from {peer_addr} for {} s while measuring; is the peer still alive? (--timeout)",
                                timeout.as_secs_f64()
                            );
                        }
                        Err(WireError::Closed) => {
                            peer.set_failed();
                            bail!("the peer {peer_addr} closed the connection while measuring");
                        }
                        Err(e) => {
                            peer.set_failed();
                            bail!("bad message from {peer_addr} while measuring: {e}");
                        }
                    }
                }
            });
            let out = work();
            // Whose failure came first decides which message the user sees.
            let peer_failed_first = peer.is_failed();
            if out.is_err() {
                let _ = self.stream.shutdown(std::net::Shutdown::Read);
            }
            let msg = watcher
                .join()
                .map_err(|_| anyhow!("the control watcher thread panicked"))?;
            match (out, msg) {
                (Ok(v), Ok(m)) => Ok((v, m)),
                (Err(_), Err(w)) if peer_failed_first => Err(w),
                (Err(e), _) => Err(e),
                (Ok(_), Err(w)) => Err(w),
            }
        })
    }
}

/// No client came within the timeout (a `--persistent` server just waits again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no client connected within {} s (--timeout); start the client with this host's address",
    .0.as_secs()
)]
pub struct NoClient(pub Duration);

/// The server's listening socket.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Binds `addr`:`port` (port 0 picks a free one).
    pub fn bind(addr: &str, port: u16) -> Result<Self> {
        let listener = TcpListener::bind((addr, port)).with_context(|| {
            format!("cannot listen on {addr}:{port}; is another server running there? (-p, --bind)")
        })?;
        listener.set_nonblocking(true)?;
        Ok(Listener { listener })
    }

    /// The port it listens on.
    pub fn port(&self) -> Result<u16> {
        Ok(self.listener.local_addr()?.port())
    }

    /// Waits up to `timeout` for a real rdmabench client and exchanges hellos. Connections that
    /// do not speak the protocol are logged and dropped, and the wait goes on.
    pub fn accept_client(&self, timeout: Duration) -> Result<Channel> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NoClient(timeout).into());
            }
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    stream.set_nonblocking(false)?;
                    match Self::greet(stream, peer, timeout, left) {
                        Ok(Some(ch)) => return Ok(ch),
                        Ok(None) => continue,
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e).context("accept on the control port failed"),
            }
        }
    }

    /// Reads the client's hello. `Ok(None)`: not an rdmabench client, dropped.
    fn greet(
        stream: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
        left: Duration,
    ) -> Result<Option<Channel>> {
        let mut ch = Channel::new(stream, peer, timeout)?;
        ch.stream.set_read_timeout(Some(left.min(timeout)))?;
        let hello = read_message::<Message>(&mut ch.stream);
        ch.stream.set_read_timeout(Some(timeout))?;
        match hello {
            Ok(Message::Hello {
                magic,
                protocol,
                tool_version,
            }) if magic == MAGIC => {
                ch.send(&Message::hello())?;
                if protocol != PROTOCOL_VERSION {
                    let reason = format!(
                        "protocol mismatch: the server speaks version {PROTOCOL_VERSION}, the client \
                         ({tool_version}) speaks {protocol}; run the same rdmabench on both hosts"
                    );
                    ch.reject(&reason);
                    bail!("{reason}");
                }
                Ok(Some(ch))
            }
            Ok(other) => {
                eprintln!(
                    "rdmabench: dropped a connection from {peer}: it sent {} instead of a hello",
                    other.name()
                );
                Ok(None)
            }
            Err(e) => {
                eprintln!(
                    "rdmabench: dropped a connection from {peer}: not an rdmabench client ({e})"
                );
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_client_and_server_greet_each_other() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port = l.port().unwrap();
        let t =
            std::thread::spawn(move || Channel::connect("127.0.0.1", port, Duration::from_secs(5)));
        let mut server = l.accept_client(Duration::from_secs(5)).unwrap();
        let mut client = t.join().unwrap().unwrap();
        client.send(&Message::Ready).unwrap();
        assert_eq!(server.expect("Ready").unwrap().name(), "Ready");
    }

    #[test]
    fn a_stranger_is_dropped_and_the_server_keeps_waiting() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port = l.port().unwrap();
        let t = std::thread::spawn(move || {
            let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
            junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            drop(junk);
            Channel::connect("127.0.0.1", port, Duration::from_secs(5))
        });
        assert!(l.accept_client(Duration::from_secs(5)).is_ok());
        assert!(t.join().unwrap().is_ok());
    }

    #[test]
    fn nobody_listening_fails_within_the_timeout() {
        let port = {
            let l = Listener::bind("127.0.0.1", 0).unwrap();
            l.port().unwrap()
        };
        let start = Instant::now();
        let err = Channel::connect("127.0.0.1", port, Duration::from_secs(2)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }

    #[test]
    fn no_client_fails_the_server_within_the_timeout() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let start = Instant::now();
        let err = l.accept_client(Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(err.to_string().contains("no client connected"), "{err}");
    }

    #[test]
    fn a_silent_peer_times_out_naming_what_was_awaited() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port = l.port().unwrap();
        let t = std::thread::spawn(move || {
            Channel::connect("127.0.0.1", port, Duration::from_millis(500))
        });
        let _server = l.accept_client(Duration::from_secs(5)).unwrap();
        let mut client = t.join().unwrap().unwrap();
        let err = client.recv("the endpoints").unwrap_err();
        assert!(
            err.to_string().contains("timed out") && err.to_string().contains("the endpoints"),
            "{err}"
        );
    }

    #[test]
    fn a_reject_carries_the_peers_reason() {
        let l = Listener::bind("127.0.0.1", 0).unwrap();
        let port = l.port().unwrap();
        let t =
            std::thread::spawn(move || Channel::connect("127.0.0.1", port, Duration::from_secs(5)));
        let mut server = l.accept_client(Duration::from_secs(5)).unwrap();
        let mut client = t.join().unwrap().unwrap();
        server.reject("plan mismatch (size: server 64 KiB, client 4 KiB)");
        let err = client.recv("the plan verdict").unwrap_err();
        assert!(err.to_string().contains("server 64 KiB"), "{err}");
    }
}
