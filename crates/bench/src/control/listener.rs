//! The server's listening socket. A thread accepts every connection and greets each in a thread
//! of its own ([`super::handshake::admit`], within the hello deadline), so a silent or slow
//! stranger delays no one; strangers are logged in one line each and dropped.
//!
//! The lobby decides what an admitted client gets: while the server waits for a client
//! ([`Listener::accept_client`]) the first one is welcomed and handed over; while a run is going
//! on (its [`Channel`] is open) it is told `Busy`; in between (the server opening its device,
//! writing its record) it waits, up to `--timeout`, for the server to ask again. A multi-rail
//! run ([`Listener::accept_run`]) takes the next admitted connections during the run as its
//! further rails instead of telling them `Busy`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::handshake::{admit, printable, welcome, Admitted};
use super::token::Token;
use super::wire::write_message;
use super::{Channel, Message};

/// How long a new connection has to say hello and prove the token, whatever `--timeout` is.
pub(crate) const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// Greetings in progress at once, in all: a flood of connections costs at most this many
/// threads, each for at most the hello deadline. When all are taken, a new connection
/// evicts the oldest that has not proved itself yet.
pub(crate) const MAX_GREETINGS: usize = 256;

/// Greetings in progress at once from one host (an IPv4 address, an IPv6 /64), so that one
/// host cannot take them all.
pub(crate) const MAX_GREETINGS_PER_HOST: usize = 32;

/// No client came within the timeout (a `--persistent` server just waits again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no client connected within {} s (--timeout); start the client with this host's address",
    .0.as_secs()
)]
pub struct NoClient(pub Duration);

/// The server's one line when it runs without a token.
pub fn anyone_may_connect(bind: &str, port: u16) -> String {
    format!(
        "rdmabench: no token (--token FILE or RDMABENCH_TOKEN): anyone who can reach {bind}:{port} \
         can run tests through this server"
    )
}

/// A sweep's rank 0's line when it runs without a token.
pub(crate) fn anyone_may_join(bind: &str, port: u16) -> String {
    format!(
        "rdmabench: no token (--token FILE or RDMABENCH_TOKEN): anyone who can reach {bind}:{port} \
         can take the place of a rank that has not joined this sweep yet"
    )
}

/// How the server greets connections.
#[derive(Debug, Clone)]
pub struct Greeting {
    /// The shared secret clients must prove; `None`: anyone may run tests.
    pub token: Option<Token>,
    /// `--timeout`: each message's deadline once a client is admitted, and how long an admitted
    /// client waits for the server to be free.
    pub timeout: Duration,
    /// How long a new connection has for its hello and its proof.
    pub hello_deadline: Duration,
    /// A server serves one run at a time (others are told `Busy`); a cluster sweep's
    /// coordinator takes every rank in turn (they wait for it).
    pub one_at_a_time: bool,
}

impl Greeting {
    /// A server's greeting: `token`, `--timeout`, the usual hello deadline.
    pub fn new(token: Option<Token>, timeout: Duration) -> Self {
        Greeting {
            token,
            timeout,
            hello_deadline: HELLO_DEADLINE,
            one_at_a_time: true,
        }
    }

    /// A sweep coordinator's greeting: every admitted rank waits its turn, none is busy.
    pub(crate) fn coordinator(token: Option<Token>, timeout: Duration) -> Self {
        Greeting {
            one_at_a_time: false,
            ..Greeting::new(token, timeout)
        }
    }
}

/// The server's listening socket and its greeters.
#[derive(Debug)]
pub struct Listener {
    local: SocketAddr,
    lobby: Arc<Lobby>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the greeters and the server share.
#[derive(Debug)]
struct Lobby {
    state: Mutex<LobbyState>,
    changed: Condvar,
    greeting: Greeting,
}

#[derive(Debug, Default)]
struct LobbyState {
    /// The servers waiting for a client, first come first served: where to hand each, and
    /// what `joining` becomes when it takes its client.
    waiting: std::collections::VecDeque<Waiter>,
    /// The runs going on.
    running: usize,
    /// How many runs may go on at once: 1, or a sweep's congestion round's clients
    /// ([`Listener::serve_only`]).
    seats: usize,
    /// The running client's connection (a second handle): a client that comes while that
    /// one is gone waits for the server to notice, instead of being told `Busy`.
    running_peer: Option<TcpStream>,
    /// The run's further rails: where to hand them, and how many more it takes.
    joining: Option<(mpsc::Sender<Channel>, usize)>,
    /// The listener is closing.
    closing: bool,
    /// Greetings in progress, per host (an IPv4 address, an IPv6 /64).
    greeting: HashMap<IpAddr, usize>,
    /// Every greeting counted in, by id: its host.
    counted: HashMap<u64, IpAddr>,
    /// The greetings that have not proved themselves yet, oldest first, with their socket.
    unproven: std::collections::VecDeque<(u64, TcpStream)>,
    /// The next greeting's id.
    next_greeting: u64,
    /// The addresses a client may come from (a sweep's assigned partners); any, if none.
    only_from: Vec<IpAddr>,
    /// The next waiter's id.
    next_waiter: u64,
}

/// A server waiting for its client.
#[derive(Debug)]
struct Waiter {
    id: u64,
    hand: mpsc::Sender<Channel>,
    joining: (mpsc::Sender<Channel>, usize),
}

/// Held by the channel of a run: while it lives, admitted clients are told the server is busy.
#[derive(Debug)]
pub(super) struct Seat(Arc<Lobby>);

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running = state.running.saturating_sub(1);
        if state.running == 0 {
            state.running_peer = None;
            state.joining = None;
        }
        drop(state);
        self.0.changed.notify_all();
    }
}

impl Listener {
    /// Binds `addr`:`port` (port 0 picks a free one) and starts greeting connections.
    pub fn bind(addr: &str, port: u16, greeting: Greeting) -> Result<Self> {
        let listener = TcpListener::bind((addr, port)).with_context(|| {
            format!("cannot listen on {addr}:{port}; is another server running there? (-p, --bind)")
        })?;
        let local = listener.local_addr()?;
        let lobby = Arc::new(Lobby {
            state: Mutex::new(LobbyState {
                seats: 1,
                ..LobbyState::default()
            }),
            changed: Condvar::new(),
            greeting,
        });
        let shared = Arc::clone(&lobby);
        let acceptor = thread::Builder::new()
            .name("rdmabench-accept".into())
            .spawn(move || accept_loop(&listener, &shared))
            .context("cannot start the control port's accept thread")?;
        Ok(Listener {
            local,
            lobby,
            acceptor: Some(acceptor),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> Result<u16> {
        Ok(self.local.port())
    }

    /// From now on, clients may come from `peers` only (a sweep's measuring server serves
    /// the partners rank 0 assigned), as many runs at once as there are peers (a congestion
    /// round's); none: one run at a time, from anywhere. Connections from elsewhere are
    /// dropped, each with a line.
    pub(crate) fn serve_only(&self, peers: &[IpAddr]) {
        let mut state = self.lobby.lock();
        state.only_from = peers.to_vec();
        state.seats = peers.len().max(1);
    }

    /// Waits up to `timeout` for an admitted client and takes it for a run.
    pub fn accept_client(&self, timeout: Duration) -> Result<Channel> {
        Ok(self.accept_run(timeout, 0)?.0)
    }

    /// [`Listener::accept_client`] for a run of several rails: the next `rails` admitted
    /// connections during the run are its further rails, handed through the receiver
    /// (instead of being told `Busy`).
    pub(crate) fn accept_run(
        &self,
        timeout: Duration,
        rails: usize,
    ) -> Result<(Channel, mpsc::Receiver<Channel>)> {
        let (join_tx, join_rx) = mpsc::channel();
        let ch = self.wait_for_client(timeout, (join_tx, rails))?;
        Ok((ch, join_rx))
    }

    fn wait_for_client(
        &self,
        timeout: Duration,
        join: (mpsc::Sender<Channel>, usize),
    ) -> Result<Channel> {
        let deadline = Instant::now() + timeout;
        loop {
            let (tx, rx) = mpsc::channel();
            let id = {
                let mut state = self.lobby.lock();
                let id = state.next_waiter;
                state.next_waiter += 1;
                state.waiting.push_back(Waiter {
                    id,
                    hand: tx,
                    joining: join.clone(),
                });
                id
            };
            self.lobby.changed.notify_all();
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(ch) => return Ok(ch),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let mut state = self.lobby.lock();
                    let before = state.waiting.len();
                    state.waiting.retain(|w| w.id != id);
                    if state.waiting.len() < before {
                        return Err(NoClient(timeout).into());
                    }
                    drop(state);
                    // A greeter took the place just now: its channel comes at once, unless its
                    // client went away.
                    if let Ok(ch) = rx.recv() {
                        return Ok(ch);
                    }
                }
                // A greeter took the place and lost its client: wait on.
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            if Instant::now() >= deadline {
                return Err(NoClient(timeout).into());
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.lobby.lock().closing = true;
        self.lobby.changed.notify_all();
        // The accept thread blocks in accept(): a connection of our own wakes it to see
        // `closing`. Without one it ends with the process.
        let wake = match self.local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from((Ipv4Addr::LOCALHOST, self.local.port()))
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((Ipv6Addr::LOCALHOST, self.local.port()))
            }
            _ => self.local,
        };
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
            if let Some(acceptor) = self.acceptor.take() {
                let _ = acceptor.join();
            }
        }
    }
}

impl Lobby {
    fn lock(&self) -> MutexGuard<'_, LobbyState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a greeting of `stream` in, unless its host (an IPv4 address, an IPv6 /64) has
    /// too many in progress. When all slots are taken, the oldest greeting that has not
    /// proved itself is evicted (its socket shut, its slot freed at once), so that a few
    /// hosts holding silent sockets cannot keep a real client out.
    fn enter(self: &Arc<Self>, ip: IpAddr, stream: &TcpStream) -> Result<Entry, String> {
        let host = host_key(ip);
        let mut state = self.lock();
        let mine = state.greeting.get(&host).copied().unwrap_or(0);
        if mine >= MAX_GREETINGS_PER_HOST {
            return Err(format!(
                "{mine} of its host's connections are already being greeted"
            ));
        }
        if state.counted.len() >= MAX_GREETINGS && !state.evict_oldest() {
            return Err(format!(
                "{} greetings are already in progress",
                state.counted.len()
            ));
        }
        let id = state.next_greeting;
        state.next_greeting += 1;
        *state.greeting.entry(host).or_insert(0) += 1;
        state.counted.insert(id, host);
        if let Ok(clone) = stream.try_clone() {
            state.unproven.push_back((id, clone));
        }
        Ok(Entry {
            lobby: Arc::clone(self),
            id,
        })
    }

    /// Greeting `id` proved itself: it can no longer be evicted.
    fn proved(&self, id: u64) {
        self.lock().unproven.retain(|(g, _)| *g != id);
    }

    fn leave(&self, id: u64) {
        let mut state = self.lock();
        state.unproven.retain(|(g, _)| *g != id);
        state.uncount(id);
    }
}

impl LobbyState {
    /// Frees the slot of the oldest unproven greeting and shuts its socket (its thread
    /// then fails its read at once and ends).
    /// Whether there was one to evict.
    fn evict_oldest(&mut self) -> bool {
        let Some((id, stream)) = self.unproven.pop_front() else {
            return false;
        };
        let _ = stream.shutdown(std::net::Shutdown::Both);
        self.uncount(id);
        true
    }

    fn uncount(&mut self, id: u64) {
        let Some(host) = self.counted.remove(&id) else {
            return;
        };
        if let Some(n) = self.greeting.get_mut(&host) {
            *n -= 1;
            if *n == 0 {
                self.greeting.remove(&host);
            }
        }
    }
}

/// Whose greetings count together: an IPv4 address, or an IPv6 address's /64 (one host
/// may hold a whole /64); an IPv4-mapped IPv6 address is its IPv4 address.
fn host_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(bits))
            }
        },
    }
}

/// One greeting counted in; counted out when dropped (also when its thread never started).
struct Entry {
    lobby: Arc<Lobby>,
    id: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.lobby.leave(self.id);
    }
}

fn dropped(peer: SocketAddr, why: &str) {
    eprintln!("{}", dropped_line(peer, why));
}

/// The server's line about a connection it did not take for a run, and why.
pub fn dropped_line(peer: SocketAddr, why: &str) -> String {
    format!(
        "rdmabench: dropped a connection from {peer}: {}",
        printable(why)
    )
}

/// Accepts connections until the listener closes, each greeted in a thread of its own.
fn accept_loop(listener: &TcpListener, lobby: &Arc<Lobby>) {
    for conn in listener.incoming() {
        if lobby.lock().closing {
            return;
        }
        let stream = match conn {
            Ok(stream) => stream,
            Err(e) => {
                // Out of file descriptors, say: the connection waits in the backlog.
                eprintln!("rdmabench: accept on the control port failed: {e}");
                thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let entry = match lobby.enter(peer.ip(), &stream) {
            Ok(entry) => entry,
            Err(why) => {
                dropped(peer, &why);
                continue;
            }
        };
        let spawned = thread::Builder::new()
            .name("rdmabench-greet".into())
            .spawn(move || greet(stream, peer, &entry));
        if let Err(e) = spawned {
            dropped(peer, &format!("no thread to greet it: {e}"));
        }
    }
}

/// Greets one connection: a stranger is dropped; an admitted client is seated.
fn greet(mut stream: TcpStream, peer: SocketAddr, entry: &Entry) {
    let lobby = &entry.lobby;
    let g = &lobby.greeting;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(g.hello_deadline));
    let deadline = Instant::now() + g.hello_deadline;
    let admitted = admit(&mut stream, g.token.as_ref(), deadline);
    if admitted.is_ok() {
        lobby.proved(entry.id);
    }
    match admitted {
        Ok(admitted) if from_partner(&mut stream, peer, lobby) => {
            seat(stream, peer, lobby, &admitted)
        }
        Ok(_) => {}
        Err(why) => dropped(peer, &why.0),
    }
}

/// Whether an admitted client comes from where the server may take one
/// ([`Listener::serve_only`]); one from elsewhere is told so and dropped.
fn from_partner(stream: &mut TcpStream, peer: SocketAddr, lobby: &Lobby) -> bool {
    let only = lobby.lock().only_from.clone();
    if only.is_empty() || only.contains(&peer.ip()) {
        return true;
    }
    let at: Vec<String> = only.iter().map(IpAddr::to_string).collect();
    let reason = match at.as_slice() {
        [one] => format!("this server serves only its assigned partner, at {one}"),
        _ => format!(
            "this server serves only its assigned partners, at {}",
            at.join(", ")
        ),
    };
    let refused = Message::Reject {
        reason: reason.clone(),
        refused: true,
    };
    let _ = write_message(
        stream,
        &refused,
        Instant::now() + lobby.greeting.hello_deadline,
    );
    dropped(peer, &reason);
    false
}

/// Whether the peer closed `stream` (or it broke): a look that does not wait, nor take a
/// byte, nor change the socket's flags (a second handle of a running client's socket shares
/// them with the thread that reads it).
#[allow(unsafe_code)]
fn gone(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    // SAFETY: recv(2) on a descriptor `stream` owns and keeps open for the call, into a
    // 1-byte buffer that lives across it; MSG_PEEK leaves the byte, MSG_DONTWAIT makes this
    // one call non-blocking without touching the descriptor's flags.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            byte.len(),
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => {
            let e = std::io::Error::last_os_error().kind();
            !matches!(
                e,
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            )
        }
    }
}

/// What an admitted client gets: the server's place when it waits, `Busy` during a run, a
/// wait (up to `--timeout`) in between.
fn seat(mut stream: TcpStream, peer: SocketAddr, lobby: &Arc<Lobby>, admitted: &Admitted) {
    let g = &lobby.greeting;
    let Some((hand, seated)) = take_seat(&mut stream, peer, lobby) else {
        return;
    };
    // From here the seat is taken: dropping the channel (a failed welcome, or the run's end)
    // frees it. A further rail's channel joins the run's seat.
    let seat = seated.then(|| Seat(Arc::clone(lobby)));
    let deadline = Instant::now() + g.hello_deadline;
    if let Err(e) = welcome(&mut stream, g.token.as_ref(), admitted, deadline) {
        drop(seat);
        dropped(peer, &format!("the welcome could not be sent: {e}"));
        return;
    }
    match Channel::new(stream, peer, g.timeout) {
        Ok(mut ch) => {
            ch.seat = seat;
            ch.framing = admitted.framing(peer);
            let _ = hand.send(ch);
        }
        Err(e) => {
            drop(seat);
            dropped(peer, &format!("{e:#}"));
        }
    }
}

/// Waits (up to `--timeout`) for the server's place: where the client's channel is to be
/// handed, and whether it takes a seat (a further rail's channel joins the run's). `None`
/// when the client was told no (busy, shutting down, not free in time) or left.
fn take_seat(
    stream: &mut TcpStream,
    peer: SocketAddr,
    lobby: &Arc<Lobby>,
) -> Option<(mpsc::Sender<Channel>, bool)> {
    let g = &lobby.greeting;
    let until = Instant::now() + g.timeout;
    let mut state = lobby.lock();
    loop {
        if state.closing {
            not_now(stream, "the server is shutting down".to_string(), g);
            return None;
        }
        // A running client that is gone (killed mid-run) ends its run as soon as the server
        // reads from it again: the newcomer waits for that, not told Busy.
        let running_gone = state.running_peer.as_ref().is_some_and(gone);
        if state.running >= state.seats && g.one_at_a_time && !running_gone {
            if let Some((tx, left)) = state.joining.as_mut().filter(|(_, left)| *left > 0) {
                *left -= 1;
                return Some((tx.clone(), false));
            }
            drop(state);
            let _ = write_message(stream, &Message::Busy, Instant::now() + g.hello_deadline);
            eprintln!("rdmabench: told {peer} that the server is busy with another run");
            return None;
        }
        if !state.waiting.is_empty() && gone(stream) {
            // A client killed while it waited must not take the seat from the next one.
            drop(state);
            dropped(
                peer,
                "it closed the connection while it waited for the server",
            );
            return None;
        }
        if let Some(w) = state.waiting.pop_front() {
            if g.one_at_a_time {
                state.running += 1;
            }
            state.running_peer = stream.try_clone().ok();
            state.joining = Some(w.joining);
            return Some((w.hand, true));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            drop(state);
            let secs = g.timeout.as_secs_f64();
            not_now(
                stream,
                format!("the server did not become free within {secs} s"),
                g,
            );
            return None;
        }
        state = match lobby.changed.wait_timeout(state, left) {
            Ok((s, _)) => s,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

/// Tells a client the server will not take it now, for `reason` (not a refusal of its
/// plan or its token: it may try again).
fn not_now(stream: &mut TcpStream, reason: String, g: &Greeting) {
    let _ = write_message(
        stream,
        &Message::Reject {
            reason,
            refused: false,
        },
        Instant::now() + g.hello_deadline,
    );
}

#[cfg(test)]
mod tests;
