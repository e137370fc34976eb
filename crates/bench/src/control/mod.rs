//! The TCP control channel: the handshake (hellos, the token's proofs), the plan, the
//! endpoints, barriers and results. Every connect has a timeout and every message a deadline
//! for the whole of it, so a dead, silent or trickling peer ends the run with a clear message
//! instead of a hang; the server greets connections in threads of their own (`listener.rs`),
//! so strangers never stand in a client's way.

mod companion;
mod handshake;
mod listener;
mod messages;
mod token;
mod wire;

pub use companion::Listen;
pub use handshake::{admit, greet_server, printable, welcome, Admitted, Stranger, HANDSHAKE_MAX};
pub use listener::{
    anyone_may_connect, Greeting, Listener, NoClient, HELLO_DEADLINE, MAX_GREETINGS,
    MAX_GREETINGS_PER_HOST,
};
pub use messages::{Joining, Message, Work, MAGIC, PROTOCOL_VERSION};
pub use token::{Nonce, Prover, Token, MIN_TOKEN_BYTES, TOKEN_ENV};
pub use wire::{
    decode, frame, read_frame, read_message, write_message, MemoryPeer, TimedRead, WireError,
    MAX_MESSAGE,
};

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::plan::PlanError;

/// The default TCP port, perftest's.
pub const DEFAULT_PORT: u16 = 18515;

/// The error a peer's `Reject` means here: its refusal of the plan stays a refusal, so both
/// sides exit the same way.
fn rejected(reason: String, refused: bool) -> anyhow::Error {
    // The peer's words are shown as text, never as terminal control sequences.
    let reason = handshake::printable(&reason);
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
    /// The server's side of a run: while the channel lives, other clients are told `Busy`.
    seat: Option<listener::Seat>,
}

impl Channel {
    fn new(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> Result<Self> {
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Channel {
            stream,
            peer,
            timeout,
            seat: None,
        })
    }

    /// Connects to the server at `host`:`port` within `timeout` and shakes hands (proving
    /// `token` when given, and checking the server's proof of it).
    pub fn connect(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&Token>,
    ) -> Result<Self> {
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
                    greet_server(&mut ch.stream, token, Instant::now() + timeout, *addr)?;
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

    /// The server's side: the run's messages are over (the client said `Finish`), so a client
    /// that comes now waits for the server to be free instead of being told it is busy.
    pub fn run_over(&mut self) {
        self.seat = None;
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This side's address of the connection (the address the peer reached it at).
    pub fn local(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<()> {
        write_message(&mut self.stream, msg)
            .map_err(|e| anyhow!("sending {} to {} failed: {e}", msg.name(), self.peer))
    }

    /// Receives one message, all of it within `--timeout`; `what` names it in errors. A
    /// `Reject` becomes an error with the peer's reason.
    pub fn recv(&mut self, what: &str) -> Result<Message> {
        self.recv_within(what, self.timeout)
    }

    /// Receives one message, all of it within `within` (a step known to take longer than
    /// `--timeout`, such as a cluster sweep's round); otherwise as [`Channel::recv`].
    pub fn recv_within(&mut self, what: &str, within: Duration) -> Result<Message> {
        let deadline = Instant::now() + within;
        let msg = read_message::<Message>(&mut self.stream, deadline, MAX_MESSAGE).map_err(|e| match e {
            WireError::TimedOut => anyhow!(
                "timed out after {} s waiting for {what} from {}; is the peer still alive? (--timeout)",
                within.as_secs_f64(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn listen() -> Listener {
        Listener::bind("127.0.0.1", 0, Greeting::new(None, Duration::from_secs(5))).unwrap()
    }

    /// A server channel and a client channel, connected; the client's `--timeout` is `timeout`.
    fn pair(timeout: Duration) -> (Listener, Channel, Channel) {
        let l = listen();
        let port = l.port().unwrap();
        let t = std::thread::spawn(move || Channel::connect("127.0.0.1", port, timeout, None));
        let server = l.accept_client(Duration::from_secs(5)).unwrap();
        let client = t.join().unwrap().unwrap();
        (l, server, client)
    }

    #[test]
    fn a_client_and_server_greet_each_other() {
        let (_l, mut server, mut client) = pair(Duration::from_secs(5));
        client.send(&Message::Ready).unwrap();
        assert_eq!(server.expect("Ready").unwrap().name(), "Ready");
    }

    #[test]
    fn a_stranger_is_dropped_and_the_server_keeps_waiting() {
        let l = listen();
        let port = l.port().unwrap();
        let t = std::thread::spawn(move || {
            let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
            junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            drop(junk);
            Channel::connect("127.0.0.1", port, Duration::from_secs(5), None)
        });
        assert!(l.accept_client(Duration::from_secs(5)).is_ok());
        assert!(t.join().unwrap().is_ok());
    }

    #[test]
    fn nobody_listening_fails_within_the_timeout() {
        let port = listen().port().unwrap();
        let start = Instant::now();
        let err = Channel::connect("127.0.0.1", port, Duration::from_secs(2), None).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(err.to_string().contains("cannot connect"), "{err}");
    }

    #[test]
    fn no_client_fails_the_server_within_the_timeout() {
        let l = listen();
        let start = Instant::now();
        let err = l.accept_client(Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(err.to_string().contains("no client connected"), "{err}");
    }

    #[test]
    fn a_silent_peer_times_out_naming_what_was_awaited() {
        let (_l, _server, mut client) = pair(Duration::from_millis(500));
        let err = client.recv("the endpoints").unwrap_err();
        assert!(
            err.to_string().contains("timed out") && err.to_string().contains("the endpoints"),
            "{err}"
        );
    }

    #[test]
    fn a_trickling_peer_is_cut_off_when_the_messages_time_is_up() {
        let (_l, mut server, mut client) = pair(Duration::from_secs(5));
        server.timeout = Duration::from_millis(600);
        let frame = frame(br#"{"type":"ready"}"#);
        let t = std::thread::spawn(move || {
            // One byte every 100 ms: every read() gets something well within any per-read
            // timeout, but the message takes 2 s.
            for b in frame {
                if client.stream.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let err = server.recv("the client's next step").unwrap_err();
        assert!(
            start.elapsed() < Duration::from_millis(1200),
            "{:?}",
            start.elapsed()
        );
        assert!(err.to_string().contains("timed out after 0.6 s"), "{err}");
        drop(server);
        let _ = t.join();
    }

    #[test]
    fn a_reject_carries_the_peers_reason() {
        let (_l, mut server, mut client) = pair(Duration::from_secs(5));
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
