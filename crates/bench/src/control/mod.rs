//! The TCP control channel: the handshake (hellos, the token's proofs), the plan, the
//! endpoints, barriers and results. Every connect has a timeout and every message a deadline
//! for the whole of it, so a dead, silent or trickling peer ends the run with a clear message
//! instead of a hang; the server greets connections in threads of their own (`listener.rs`),
//! so strangers never stand in a client's way. With a token, every frame after the handshake
//! carries a sequence number and a MAC under a key of the connection (`wire.rs`), so an
//! on-path relay can neither alter, replay nor reorder the plan, the endpoints or the figures.

mod companion;
mod handshake;
mod listener;
mod messages;
mod token;
mod wire;

pub(crate) use companion::Listen;
pub use handshake::{admit, HANDSHAKE_MAX};
pub(crate) use handshake::{greet_server, printable};
pub use listener::{anyone_may_connect, dropped_line, Greeting, Listener, NoClient};
pub(crate) use listener::{anyone_may_join, HELLO_DEADLINE};
pub use messages::Message;
pub(crate) use messages::{FlowDone, FlowFrom, FlowTo, Joining, Work, MAGIC, PROTOCOL_VERSION};
pub use token::{Nonce, Prover, Token};
pub(crate) use wire::WireError;
pub use wire::{frame, read_message, write_message, Framing, MemoryPeer, MAX_MESSAGE};

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::plan::PlanError;

/// The default TCP port, perftest's.
pub(crate) const DEFAULT_PORT: u16 = 18515;

/// The error a peer's `Reject` means here: its refusal of the plan stays a refusal, so both
/// sides exit the same way.
fn rejected(reason: String, refused: bool) -> anyhow::Error {
    // The peer's words are shown as text, never as terminal control sequences.
    let reason = handshake::printable(&reason);
    if refused {
        PlanError::Refused(reason).into()
    } else {
        anyhow!("the peer ended the run: {reason}")
    }
}

/// The pause between two connects to a server that does not listen yet.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Whether a failed connect means that nothing listens there yet (the server is starting,
/// its host or interface coming up): worth trying again until the timeout.
fn not_listening_yet(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
    )
}

/// Why [`dial`] got no connection: the last address it tried and that try's error (`None`:
/// there was no address, or no time to try one).
#[derive(Debug)]
pub(crate) struct NotReached {
    /// The address of the last try.
    pub addr: Option<SocketAddr>,
    /// Its error.
    pub error: std::io::Error,
}

/// Opens a TCP connection to the first of `addrs` that accepts one within `timeout`, trying
/// them all again every [`RETRY_PAUSE`] while nothing listens there yet (a script or a
/// launcher starts both sides at once); any other failure ends it at once. `waiting` hears
/// once that it waits, with the address and the error of the try that made it wait.
pub(crate) fn dial(
    addrs: &[SocketAddr],
    timeout: Duration,
    waiting: &mut dyn FnMut(SocketAddr, &std::io::Error),
) -> std::result::Result<(SocketAddr, TcpStream), NotReached> {
    let deadline = Instant::now() + timeout;
    let (mut said, mut last) = (false, None);
    loop {
        for &addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(stream) => return Ok((addr, stream)),
                Err(e) => last = Some((addr, e)),
            }
        }
        let Some((addr, error)) = last.take() else {
            let error = std::io::Error::new(ErrorKind::NotFound, "no address to connect to");
            return Err(NotReached { addr: None, error });
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if !not_listening_yet(&error) || left.is_zero() {
            return Err(NotReached {
                addr: Some(addr),
                error,
            });
        }
        if !said {
            waiting(addr, &error);
            said = true;
        }
        last = Some((addr, error));
        std::thread::sleep(RETRY_PAUSE.min(left));
    }
}

/// [`dial`] for a two-node run's client: the wait said once through `waiting`, and each way
/// of failing in a client's words.
fn reach(
    host: &str,
    addrs: &[SocketAddr],
    timeout: Duration,
    waiting: &mut dyn FnMut(&str),
) -> Result<(SocketAddr, TcpStream)> {
    let secs = timeout.as_secs_f64();
    let said = &mut |addr: SocketAddr, e: &std::io::Error| {
        waiting(&format!(
            "rdmabench: waiting for the server at {addr} ({}), up to --timeout {secs} s",
            e.kind()
        ))
    };
    let NotReached { addr, error: e } = match dial(addrs, timeout, said) {
        Ok(reached) => return Ok(reached),
        Err(not) => not,
    };
    let Some(addr) = addr else {
        bail!("no address found for server '{host}' (or --timeout {secs} s is too short)");
    };
    if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock {
        bail!(
            "no answer from the server at {addr} within {secs} s; is `rdmabench` running \
             there and the port open? (--timeout, -p)"
        );
    }
    if !not_listening_yet(&e) {
        bail!("cannot connect to the server at {addr}: {e}; check the address and -p");
    }
    bail!(
        "cannot connect to the server at {addr} within --timeout {secs} s ({e}): nothing \
         listens there; start the server (`rdmabench <test>` on the server host), check \
         -p, or give it longer (--timeout)"
    )
}

/// The addresses of `host`:`port`, looked up within `timeout`: a broken resolver can block a
/// lookup for minutes, so it runs in a thread of its own, left to finish on its own when the
/// time is up.
pub(crate) fn resolve(host: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>> {
    resolve_with(host, port, timeout, |host, port| {
        Ok((host, port).to_socket_addrs()?.collect())
    })
}

/// How a name is looked up ([`resolve`]; tests give a slow one).
type Lookup = fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>;

/// [`resolve`] with `lookup` doing the looking up.
fn resolve_with(
    host: &str,
    port: u16,
    timeout: Duration,
    lookup: Lookup,
) -> Result<Vec<SocketAddr>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("rdmabench-resolve".into())
        .spawn(move || {
            let _ = tx.send(lookup(&name, port));
        })
        .context("cannot start a thread to look up the server's address")?;
    match rx.recv_timeout(timeout) {
        Ok(found) => found.with_context(|| format!("cannot resolve server address '{host}'")),
        Err(_) => bail!(
            "looking up the server's address '{host}' took longer than --timeout {} s; check \
             the name and the resolver (/etc/resolv.conf), or give an IP address",
            timeout.as_secs_f64()
        ),
    }
}

/// A connected control channel to the peer.
#[derive(Debug)]
pub struct Channel {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    /// How frames are written and read after the handshake (sealed with a token); every
    /// writer and reader of `stream`, the companion threads' too, goes through it.
    framing: Framing,
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
            framing: Framing::plain(),
            seat: None,
        })
    }

    /// Looks up `host` and connects to the server at `host`:`port`, each within `timeout`,
    /// and shakes hands (proving `token` when given, and checking the server's proof of it).
    /// A server not listening yet (a script starts both sides at once) is waited for, up to
    /// `timeout`, with one line on stderr saying so.
    pub fn connect(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&Token>,
    ) -> Result<Self> {
        let addrs = resolve(host, port, timeout)?;
        let (addr, stream) = reach(host, &addrs, timeout, &mut |line| eprintln!("{line}"))?;
        Channel::greet(stream, addr, timeout, token)
    }

    /// Shakes hands with the server at `addr` over `stream`, a connection the caller opened
    /// (a cluster rank reaching rank 0 waits and advises in a sweep's words, not a two-node
    /// run's); as [`Channel::connect`] from there.
    pub(crate) fn greet(
        stream: TcpStream,
        addr: SocketAddr,
        timeout: Duration,
        token: Option<&Token>,
    ) -> Result<Self> {
        let mut ch = Channel::new(stream, addr, timeout)?;
        let keys = greet_server(&mut ch.stream, token, Instant::now() + timeout, addr)?;
        if let Some(keys) = keys {
            ch.framing = Framing::sealed(&keys, addr);
        }
        Ok(ch)
    }

    /// The server's side: the run's messages are over (the client said `Finish`), so a client
    /// that comes now waits for the server to be free instead of being told it is busy.
    pub(crate) fn run_over(&mut self) {
        self.seat = None;
    }

    /// The peer's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This side's address of the connection (the address the peer reached it at).
    pub(crate) fn local(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        self.framing
            .write(&mut self.stream, msg, deadline)
            .map_err(|e| anyhow!("sending {} to {} failed: {e}", msg.name(), self.peer))
    }

    /// Receives one message, all of it within `--timeout`; `what` names it in errors. A
    /// `Reject` becomes an error with the peer's reason.
    #[cfg(test)]
    pub(crate) fn recv(&mut self, what: &str) -> Result<Message> {
        self.recv_within(what, self.timeout)
    }

    /// Receives one message, all of it within `within` (a step known to take longer than
    /// `--timeout`, such as a cluster sweep's round); otherwise as [`Channel::recv`].
    pub(crate) fn recv_within(&mut self, what: &str, within: Duration) -> Result<Message> {
        self.recv_until(what, Instant::now() + within, within)
    }

    /// Receives one message by `deadline`, the end of a wait of `within` (named in errors).
    fn recv_until(&mut self, what: &str, deadline: Instant, within: Duration) -> Result<Message> {
        let msg = self.framing.read::<Message>(&mut self.stream, deadline, MAX_MESSAGE).map_err(|e| match e {
            WireError::TimedOut => anyhow!(
                "timed out after {} s waiting for {what} from {}; is the peer still alive? (--timeout)",
                within.as_secs_f64(),
                self.peer
            ),
            WireError::Closed => anyhow!("the peer {} closed the connection while we waited for {what}", self.peer),
            forged @ WireError::Forged { .. } => forged.into(),
            other => anyhow!("bad message from {} while waiting for {what}: {other}", self.peer),
        })?;
        if let Message::Reject { reason, refused } = msg {
            return Err(rejected(reason, refused));
        }
        Ok(msg)
    }

    /// The next message that is not a heartbeat, all of it within `within` (the peer's
    /// companion thread sends heartbeats while it measures, and they may still be on their
    /// way after). The wait has one deadline: heartbeats do not extend it, so a peer that
    /// sends nothing else cannot hold this side beyond `within`.
    pub(crate) fn next_within(&mut self, what: &str, within: Duration) -> Result<Message> {
        let deadline = Instant::now() + within;
        loop {
            match self.recv_until(what, deadline, within)? {
                Message::Heartbeat => continue,
                msg => return Ok(msg),
            }
        }
    }

    /// Receives a message and checks it is the one expected, all within `--timeout`
    /// (heartbeats passed over, not extending it).
    pub fn expect(&mut self, name: &'static str) -> Result<Message> {
        let msg = self.next_within(name, self.timeout)?;
        if msg.name() != name {
            bail!(
                "protocol error: expected {name} from {}, got {}",
                self.peer,
                msg.name()
            );
        }
        Ok(msg)
    }

    /// `--timeout`: the wait for one message.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Tells the peer the run failed, so it stops waiting; errors here are ignored because
    /// the run is failing anyway.
    #[cfg(test)]
    pub(crate) fn reject(&mut self, reason: &str) {
        let _ = self.send(&Message::Reject {
            reason: reason.to_string(),
            refused: false,
        });
    }

    /// Tells the peer why this side (`who`: "the server", "the client") ended the run: a
    /// refused plan ([`PlanError`]) reaches the peer as one too, so both exit the same way.
    pub(crate) fn end_with(&mut self, who: &str, e: &anyhow::Error) {
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

    #[test]
    fn a_peers_refusal_of_the_plan_is_a_refused_usage_error_and_an_ending_is_not() {
        let e = rejected("--size 4K differs".to_string(), true);
        let usage = e.downcast_ref::<PlanError>();
        assert!(matches!(usage, Some(PlanError::Refused(_))), "{e:?}");
        assert_eq!(e.to_string(), "--size 4K differs");
        let e = rejected("the server is shutting down".to_string(), false);
        assert!(e.downcast_ref::<PlanError>().is_none(), "{e:?}");
    }
    use crate::engine::bw::PeerState;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

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
    fn a_name_is_looked_up_within_the_timeout() {
        let found = resolve("localhost", 18515, Duration::from_secs(5)).unwrap();
        assert!(!found.is_empty(), "{found:?}");
        assert!(found.iter().all(|a| a.port() == 18515), "{found:?}");
        fn stuck(_: &str, _: u16) -> std::io::Result<Vec<SocketAddr>> {
            std::thread::sleep(Duration::from_secs(5));
            Ok(Vec::new())
        }
        let start = Instant::now();
        let err = resolve_with("stuck.example", 1, Duration::from_millis(300), stuck).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(
            err.to_string(),
            "looking up the server's address 'stuck.example' took longer than --timeout 0.3 s; \
             check the name and the resolver (/etc/resolv.conf), or give an IP address"
        );
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

    /// A loopback port nothing listens on (for now).
    fn free_port() -> u16 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    }

    #[test]
    fn a_client_started_before_its_server_waits_for_it() {
        let port = free_port();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            let l = Listener::bind(
                "127.0.0.1",
                port,
                Greeting::new(None, Duration::from_secs(5)),
            )
            .unwrap();
            l.accept_client(Duration::from_secs(5)).map(|_| ())
        });
        let start = Instant::now();
        let mut client = Channel::connect("127.0.0.1", port, Duration::from_secs(5), None)
            .expect("the client waits for the server that comes a second later");
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "{:?}",
            start.elapsed()
        );
        server.join().unwrap().unwrap();
        assert!(client.send(&Message::Ready).is_ok());
    }

    #[test]
    fn the_wait_is_said_once_and_a_server_that_never_comes_fails_at_the_timeout() {
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let timeout = Duration::from_millis(1500);
        let start = Instant::now();
        let mut said = Vec::new();
        let err = reach("127.0.0.1", &[addr], timeout, &mut |l| {
            said.push(l.to_string())
        })
        .unwrap_err();
        let took = start.elapsed();
        assert!(took >= timeout && took < Duration::from_secs(3), "{took:?}");
        assert_eq!(
            said,
            [format!(
                "rdmabench: waiting for the server at {addr} (connection refused), up to \
                 --timeout 1.5 s"
            )]
        );
        assert!(
            err.to_string().starts_with(&format!(
                "cannot connect to the server at {addr} within --timeout 1.5 s (Connection \
                 refused"
            )),
            "{err}"
        );
        // Through the channel too, within its timeout.
        let start = Instant::now();
        let err = Channel::connect("127.0.0.1", port, Duration::from_secs(1), None).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(err.to_string().contains("--timeout 1 s"), "{err}");
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

    /// A peer that sends only heartbeats, one every 200 ms, until it is dropped (or 5 s).
    fn heartbeats_only(mut peer: Channel) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until && peer.send(&Message::Heartbeat).is_ok() {
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    }

    #[test]
    fn a_peer_that_only_heartbeats_is_dropped_at_the_timeout() {
        let (_l, mut server, client) = pair(Duration::from_secs(5));
        server.timeout = Duration::from_secs(1);
        let beats = heartbeats_only(client);
        let start = Instant::now();
        let err = server.expect("StartSize").unwrap_err();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        assert!(
            err.to_string()
                .contains("timed out after 1 s waiting for StartSize"),
            "{err}"
        );
        drop(server);
        beats.join().unwrap();
    }

    #[test]
    fn heartbeats_before_the_expected_message_are_passed_over() {
        let (_l, mut server, mut client) = pair(Duration::from_secs(5));
        server.timeout = Duration::from_secs(1);
        for _ in 0..3 {
            client.send(&Message::Heartbeat).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        }
        client.send(&start(0)).unwrap();
        assert_eq!(server.expect("StartSize").unwrap().name(), "StartSize");
    }

    #[test]
    fn a_peer_that_only_heartbeats_while_measuring_fails_at_the_planned_length() {
        let (_l, mut server, client) = pair(Duration::from_secs(5));
        server.timeout = Duration::from_secs(1);
        let beats = heartbeats_only(client);
        let ps = PeerState::default();
        let start = Instant::now();
        let err = server
            .measuring(&ps, Listen::SizeDone, Duration::from_millis(300), || {
                ps.wait_over(Some(Instant::now() + Duration::from_secs(10)));
                anyhow::ensure!(!ps.is_failed(), "the peer failed");
                Ok(())
            })
            .unwrap_err();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1200) && took < Duration::from_millis(1900),
            "{took:?}"
        );
        assert!(err.to_string().contains("no SizeDone from"), "{err}");
        assert!(err.to_string().contains("within 1.3 s"), "{err}");
        drop(server);
        beats.join().unwrap();
    }

    #[test]
    fn a_reject_carries_the_peers_reason() {
        let (_l, mut server, mut client) = pair(Duration::from_secs(5));
        server.reject("protocol mismatch");
        let err = client.recv("the plan verdict").unwrap_err();
        assert!(err.to_string().contains("protocol mismatch"), "{err}");
        assert!(!err.is::<PlanError>(), "a failure, not a refusal: {err}");
        let refusal = PlanError::Value("plan mismatch (size: server 64 KiB, client 4 KiB)".into());
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

    /// One frame off `from` (its length prefix and body), or `None` once it closed.
    fn raw_frame(from: &mut TcpStream) -> Option<Vec<u8>> {
        let mut prefix = [0u8; 4];
        from.read_exact(&mut prefix).ok()?;
        let mut frame = prefix.to_vec();
        frame.resize(4 + u32::from_be_bytes(prefix) as usize, 0);
        from.read_exact(&mut frame[4..]).ok()?;
        Some(frame)
    }

    /// What an on-path relay does with the client's frames after the handshake: given each
    /// one's place (from 0) and bytes, the frames to pass on.
    type Tamper = Box<dyn FnMut(usize, Vec<u8>) -> Vec<Vec<u8>> + Send>;

    /// An on-path relay to the server at `port`, on a port of its own (returned): the server's
    /// bytes pass as they are, the client's hello and proof too, its later frames through
    /// `tamper`.
    fn relay(port: u16, mut tamper: Tamper) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay_port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut client, _) = l.accept().unwrap();
            let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut from_server = server.try_clone().unwrap();
            let mut to_client = client.try_clone().unwrap();
            std::thread::spawn(move || std::io::copy(&mut from_server, &mut to_client));
            let mut n = 0;
            while let Some(frame) = raw_frame(&mut client) {
                let out = if n < 2 {
                    vec![frame]
                } else {
                    tamper(n - 2, frame)
                };
                for f in out {
                    if server.write_all(&f).is_err() {
                        return;
                    }
                }
                n += 1;
            }
        });
        relay_port
    }

    fn secret() -> Token {
        Token::new(b"the cluster's shared secret", "test").unwrap()
    }

    /// A server channel and a client channel connected through `tamper`'s relay, both with
    /// `token`; `--timeout` is `timeout`.
    fn relayed(
        token: Option<Token>,
        timeout: Duration,
        tamper: Tamper,
    ) -> (Listener, Channel, Channel) {
        let l = Listener::bind("127.0.0.1", 0, Greeting::new(token.clone(), timeout)).unwrap();
        let port = relay(l.port().unwrap(), tamper);
        let t = std::thread::spawn(move || {
            Channel::connect("127.0.0.1", port, timeout, token.as_ref())
        });
        let server = l.accept_client(Duration::from_secs(5)).unwrap();
        let client = t.join().unwrap().unwrap();
        (l, server, client)
    }

    fn replace(frame: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
        match frame.windows(from.len()).position(|w| w == from) {
            Some(at) => [&frame[..at], to, &frame[at + from.len()..]].concat(),
            None => frame,
        }
    }

    fn start(rep: u32) -> Message {
        Message::StartSize { size: 4096, rep }
    }

    fn forged(n: u64, server: &Channel) -> String {
        format!(
            "frame {n} from {} failed its MAC: altered, replayed or out of order",
            server.peer()
        )
    }

    #[test]
    fn with_a_token_an_altered_frame_ends_the_run() {
        let alter: Tamper = Box::new(|_, f| vec![replace(f, b"4096", b"8192")]);
        let (_l, mut server, mut client) = relayed(Some(secret()), Duration::from_secs(5), alter);
        client.send(&start(0)).unwrap();
        let err = server.expect("StartSize").unwrap_err();
        assert_eq!(err.to_string(), forged(1, &server));
        assert!(err.downcast_ref::<WireError>().is_some(), "{err:?}");
        // Nothing more is taken from that channel.
        client.send(&Message::Finish).unwrap();
        assert!(server.recv("the client's next step").is_err());
    }

    #[test]
    fn with_a_token_a_replayed_frame_ends_the_run() {
        let replay: Tamper = Box::new(|n, f| if n == 0 { vec![f.clone(), f] } else { vec![f] });
        let (_l, mut server, mut client) = relayed(Some(secret()), Duration::from_secs(5), replay);
        client.send(&start(0)).unwrap();
        server.expect("StartSize").unwrap();
        let err = server.recv("the client's next step").unwrap_err();
        assert_eq!(err.to_string(), forged(2, &server));
    }

    #[test]
    fn with_a_token_two_swapped_frames_end_the_run() {
        let mut held = None;
        let swap: Tamper = Box::new(move |n, f| match n {
            0 => {
                held = Some(f);
                vec![]
            }
            1 => vec![f].into_iter().chain(held.take()).collect(),
            _ => vec![f],
        });
        let (_l, mut server, mut client) = relayed(Some(secret()), Duration::from_secs(5), swap);
        client.send(&start(0)).unwrap();
        client.send(&start(1)).unwrap();
        let err = server.expect("StartSize").unwrap_err();
        assert_eq!(err.to_string(), forged(1, &server));
    }

    /// Both sides measure at once, their companion threads writing sealed heartbeats and
    /// `SendsOver` between the channels' own messages.
    fn measure_both(server: &mut Channel, client: &mut Channel) {
        std::thread::scope(|s| {
            let theirs = s.spawn(|| {
                let ps = PeerState::default();
                client.measuring(&ps, Listen::Nothing, Duration::from_secs(2), || {
                    std::thread::sleep(Duration::from_millis(1200));
                    ps.announce_sends_over();
                    std::thread::sleep(Duration::from_millis(100));
                    Ok(())
                })
            });
            let ps = PeerState::default();
            let (_, heard) = server
                .measuring(&ps, Listen::SendsOver, Duration::from_secs(2), || {
                    ps.wait_over(Some(Instant::now() + Duration::from_secs(5)));
                    Ok(())
                })
                .unwrap();
            assert_eq!(heard.map(|m| m.name()), Some("SendsOver"));
            theirs.join().unwrap().unwrap();
        });
    }

    #[test]
    fn a_peer_with_the_token_runs_through_an_honest_relay() {
        let (tx, rx) = mpsc::channel();
        let watch: Tamper = Box::new(move |_, f| {
            let _ = tx.send(f.clone());
            vec![f]
        });
        let (_l, mut server, mut client) =
            relayed(Some(secret()), Duration::from_millis(1500), watch);
        client.send(&Message::Ready).unwrap();
        assert_eq!(server.expect("Ready").unwrap().name(), "Ready");
        server.send(&Message::PlanAccepted).unwrap();
        assert_eq!(
            client.expect("PlanAccepted").unwrap().name(),
            "PlanAccepted"
        );
        measure_both(&mut server, &mut client);
        client.send(&Message::Finish).unwrap();
        assert_eq!(server.expect("Finish").unwrap().name(), "Finish");
        server.send(&Message::Ready).unwrap();
        assert_eq!(client.expect("Ready").unwrap().name(), "Ready");
        // The first frame is sealed: sequence 1, the JSON, a MAC.
        let first = rx.recv().unwrap();
        assert_eq!(&first[4..12], &1u64.to_be_bytes());
        assert_eq!(&first[12..first.len() - 32], br#"{"type":"ready"}"#);
    }

    #[test]
    fn without_a_token_frames_are_plain_as_before() {
        let (tx, rx) = mpsc::channel();
        let watch: Tamper = Box::new(move |_, f| {
            let _ = tx.send(f.clone());
            vec![replace(f, b"4096", b"8192")]
        });
        let (_l, mut server, mut client) = relayed(None, Duration::from_millis(1500), watch);
        client.send(&Message::Ready).unwrap();
        assert_eq!(server.expect("Ready").unwrap().name(), "Ready");
        assert_eq!(rx.recv().unwrap(), frame(br#"{"type":"ready"}"#));
        measure_both(&mut server, &mut client);
        // Nothing guards the frames: a relay's rewrite goes through, as before protocol 8.
        client.send(&start(0)).unwrap();
        let got = server.expect("StartSize").unwrap();
        assert!(
            matches!(got, Message::StartSize { size: 8192, .. }),
            "{got:?}"
        );
    }
}
