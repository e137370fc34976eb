//! The TCP control channel: the hello, the plan, the endpoints, barriers and results.
//! Every connect and read has a timeout, so a dead or silent peer ends the run with a clear
//! message instead of a hang.

mod companion;
mod messages;
mod wire;

pub use companion::Listen;
pub use messages::{Message, MAGIC, PROTOCOL_VERSION};
pub use wire::{read_message, write_message, WireError};

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::plan::PlanError;

/// The default TCP port, perftest's.
pub const DEFAULT_PORT: u16 = 18515;

/// The error a peer's `Reject` means here: its refusal of the plan stays a refusal, so both
/// sides exit the same way.
fn rejected(reason: String, refused: bool) -> anyhow::Error {
    if refused {
        PlanError(reason).into()
    } else {
        anyhow!("the peer ended the run: {reason}")
    }
}

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
        if let Message::Reject { reason, refused } = msg {
            return Err(rejected(reason, refused));
        }
        Ok(msg)
    }

    /// The next message that is not a heartbeat (the peer's companion thread sends them
    /// while it measures, and they may still be on their way after).
    fn next(&mut self, what: &str) -> Result<Message> {
        loop {
            match self.recv(what)? {
                Message::Heartbeat => continue,
                msg => return Ok(msg),
            }
        }
    }

    /// Receives a message and checks it is the one expected.
    pub fn expect(&mut self, name: &'static str) -> Result<Message> {
        let msg = self.next(name)?;
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
            refused: false,
        });
    }

    /// Tells the peer why this side (`who`: "the server", "the client") ended the run: a
    /// refused plan ([`PlanError`]) reaches the peer as one too, so both exit the same way.
    pub fn end_with(&mut self, who: &str, e: &anyhow::Error) {
        let refused = e.is::<PlanError>();
        let what = if refused { "refused the run" } else { "failed" };
        let _ = self.send(&Message::Reject {
            reason: format!("{who} {what}: {e:#}"),
            refused,
        });
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
        server.reject("protocol mismatch");
        let err = client.recv("the plan verdict").unwrap_err();
        assert!(err.to_string().contains("protocol mismatch"), "{err}");
        assert!(!err.is::<PlanError>(), "a failure, not a refusal: {err}");
        let refusal = PlanError("plan mismatch (size: server 64 KiB, client 4 KiB)".into());
        server.end_with("the server", &refusal.into());
        let err = client.recv("the plan verdict").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the server refused the run: plan mismatch (size: server 64 KiB, client 4 KiB)"
        );
        assert!(
            err.is::<PlanError>(),
            "the peer's refusal is a refusal here too"
        );
    }
}
