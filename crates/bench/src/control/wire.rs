//! Framing: each message is a 4-byte big-endian length followed by that many bytes.
//!
//! Without a token (and during the handshake) those bytes are the message's JSON, nothing else:
//!
//! ```text
//! length (u32, big-endian) | JSON
//! ```
//!
//! With a token, every frame after the handshake (the server's `Welcome` is the last plain
//! one), in both directions, heartbeats and the companion thread's frames included, is sealed
//! ([`Framing`]):
//!
//! ```text
//! length (u32, big-endian) | sequence (u64, big-endian) | JSON | MAC (32 bytes)
//! ```
//!
//! `length` counts the sequence, the JSON and the MAC; `sequence` numbers the frames of one
//! direction from 1; the MAC is HMAC-SHA256, under the direction's frame key
//! ([`super::token::Token::frame_keys`]: from the secret and both nonces), of every byte of
//! the frame before it, length included. A reader takes a frame only when its sequence is
//! the next one it expects and its MAC checks (in constant time): an altered, replayed,
//! reordered, dropped, injected or reflected frame is refused with [`WireError::Forged`],
//! which ends the run, and every later frame of that channel is refused too.
//!
//! A read has a deadline for the whole message, not for each `read()` call: a peer that
//! trickles a byte every few seconds is cut off when the message's time is up. A write has
//! one too ([`TimedWrite`]): a peer that reads a little now and then cannot keep the writer
//! going past the message's deadline. A length above the reader's cap ([`MAX_MESSAGE`], or
//! less) is refused before anything is allocated, and the body grows only as its bytes
//! arrive, so a peer that announces a large message and sends little costs little.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::Sha256;

use super::token::FrameKeys;
use crate::text::printable;

/// The largest message accepted, in bytes.
pub const MAX_MESSAGE: u32 = 1 << 20;

/// What can go wrong reading or writing one frame.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The peer closed the connection.
    #[error("the peer closed the connection")]
    Closed,
    /// The whole message did not arrive before its deadline.
    #[error("no whole message within the time allowed")]
    TimedOut,
    /// The length prefix is beyond the reader's cap.
    #[error("message of {0} bytes exceeds the {1}-byte limit")]
    TooLarge(u32, u32),
    /// The bytes are not a message of the protocol.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A sealed frame whose sequence or MAC is not the one expected: altered, replayed,
    /// reordered or forged on the way. The channel refuses every frame after it.
    #[error("frame {frame} from {peer} failed its MAC: altered, replayed or out of order")]
    Forged {
        /// The frame's place in its direction, from 1: the one that was expected.
        frame: u64,
        /// Who it came from.
        peer: SocketAddr,
    },
    /// Any other I/O failure.
    #[error("{0}")]
    Io(io::Error),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => WireError::Closed,
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::TimedOut,
            _ => WireError::Io(e),
        }
    }
}

/// A byte stream whose next `read()` can be bounded in time (a socket's receive timeout).
pub trait TimedRead: Read {
    /// Lets the next reads block at most `limit` (never zero).
    fn limit_next_read(&mut self, limit: Duration) -> io::Result<()>;
}

impl TimedRead for TcpStream {
    fn limit_next_read(&mut self, limit: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(limit))
    }
}

impl TimedRead for &TcpStream {
    fn limit_next_read(&mut self, limit: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(limit))
    }
}

/// A byte stream whose next `write()` can be bounded in time (a socket's send timeout).
pub trait TimedWrite: Write {
    /// Lets the next writes block at most `limit` (never zero).
    fn limit_next_write(&mut self, limit: Duration) -> io::Result<()>;
}

impl TimedWrite for TcpStream {
    fn limit_next_write(&mut self, limit: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(limit))
    }
}

impl TimedWrite for &TcpStream {
    fn limit_next_write(&mut self, limit: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(limit))
    }
}

/// Memory never blocks: a frame written to a buffer (tests, a frame built to be sent later).
impl TimedWrite for Vec<u8> {
    fn limit_next_write(&mut self, _limit: Duration) -> io::Result<()> {
        Ok(())
    }
}

/// Writes one message, all of it before `deadline`.
pub fn write_message<T: Serialize>(
    out: &mut impl TimedWrite,
    msg: &T,
    deadline: Instant,
) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_MESSAGE)
        .ok_or(WireError::TooLarge(u32::MAX, MAX_MESSAGE))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    write_until(out, &frame, deadline)
}

/// Writes all of `bytes` before `deadline`, each write limited to the time left: a peer that
/// reads a little now and then does not extend it.
fn write_until(
    out: &mut impl TimedWrite,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), WireError> {
    let mut sent = 0;
    while sent < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::TimedOut);
        }
        out.limit_next_write(left)?;
        match out.write(&bytes[sent..]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.flush()?;
    Ok(())
}

/// Reads one message of at most `max` bytes, all of it before `deadline`.
pub fn read_message<T: DeserializeOwned>(
    input: &mut impl TimedRead,
    deadline: Instant,
    max: u32,
) -> Result<T, WireError> {
    let body = read_frame(input, deadline, max)?;
    decode(&body)
}

/// Reads one frame's body (at most `max` bytes) before `deadline`.
pub(crate) fn read_frame(
    input: &mut impl TimedRead,
    deadline: Instant,
    max: u32,
) -> Result<Vec<u8>, WireError> {
    let mut prefix = Vec::with_capacity(4);
    read_until(input, &mut prefix, 4, deadline)?;
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len > max.min(MAX_MESSAGE) {
        return Err(WireError::TooLarge(len, max.min(MAX_MESSAGE)));
    }
    let mut body = Vec::new();
    read_until(input, &mut body, len as usize, deadline)?;
    Ok(body)
}

/// Decodes a frame's body.
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    // serde's errors quote the peer's text (an unknown message type, say) as it came.
    serde_json::from_slice(body).map_err(|e| {
        let text = printable(&e.to_string());
        // The plan is strict (`plan::TestPlan`): a parameter one side has and the other
        // lacks is a version difference, not noise on the line.
        if text.starts_with("unknown field") || text.starts_with("missing field") {
            return WireError::Malformed(format!(
                "{text} (the peer runs an rdmabench with other test parameters: run the same \
                 version on both sides)"
            ));
        }
        WireError::Malformed(text)
    })
}

/// Appends bytes to `buf` until it holds `want`, each read limited to the time left.
fn read_until(
    input: &mut impl TimedRead,
    buf: &mut Vec<u8>,
    want: usize,
    deadline: Instant,
) -> Result<(), WireError> {
    let mut chunk = [0u8; 8192];
    while buf.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::TimedOut);
        }
        input.limit_next_read(left)?;
        let n = chunk.len().min(want - buf.len());
        match input.read(&mut chunk[..n]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(got) => buf.extend_from_slice(&chunk[..got]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Bytes of a sealed frame's sequence number.
const SEQUENCE_BYTES: usize = 8;

/// Bytes of a sealed frame's MAC.
const MAC_BYTES: usize = 32;

/// How a channel writes and reads its frames after the handshake: plain (no token), or
/// sealed with the connection's frame keys (see the module's documentation). Its methods take
/// `&self`, so the threads that share a connection (`companion.rs`) share one sequence per
/// direction: a frame is numbered and written under one lock, so frames leave in the order
/// of their numbers.
#[derive(Debug, Default)]
pub struct Framing {
    sealed: Option<Sealed>,
}

/// A sealed channel's keys and counts.
struct Sealed {
    send: Hmac<Sha256>,
    receive: Hmac<Sha256>,
    peer: SocketAddr,
    /// Frames sent so far.
    sent: Mutex<u64>,
    /// Frames taken so far, and whether one failed its MAC (after which none is taken).
    received: Mutex<(u64, bool)>,
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Framing {
    /// Frames as they are without a token.
    pub(crate) fn plain() -> Framing {
        Framing::default()
    }

    /// Frames sealed with `keys` (this side's), to and from `peer`.
    pub fn sealed(keys: &FrameKeys, peer: SocketAddr) -> Framing {
        Framing {
            sealed: Some(Sealed {
                send: keys.send.mac(),
                receive: keys.receive.mac(),
                peer,
                sent: Mutex::new(0),
                received: Mutex::new((0, false)),
            }),
        }
    }

    /// Writes one message, all of it before `deadline`.
    pub fn write<T: Serialize>(
        &self,
        out: &mut impl TimedWrite,
        msg: &T,
        deadline: Instant,
    ) -> Result<(), WireError> {
        match &self.sealed {
            None => write_message(out, msg, deadline),
            Some(sealed) => sealed.write(out, msg, deadline),
        }
    }

    /// Reads one message of at most `max` bytes (its whole frame), all of it before
    /// `deadline`; a sealed frame is taken only if it is the next one and its MAC checks.
    pub fn read<T: DeserializeOwned>(
        &self,
        input: &mut impl TimedRead,
        deadline: Instant,
        max: u32,
    ) -> Result<T, WireError> {
        let Some(sealed) = &self.sealed else {
            return read_message(input, deadline, max);
        };
        let body = read_frame(input, deadline, max)?;
        decode(sealed.open(&body)?)
    }
}

impl Sealed {
    /// Numbers, seals and writes one message (one allocation: the frame) before `deadline`.
    fn write<T: Serialize>(
        &self,
        out: &mut impl TimedWrite,
        msg: &T,
        deadline: Instant,
    ) -> Result<(), WireError> {
        let mut frame = vec![0u8; 4 + SEQUENCE_BYTES];
        serde_json::to_writer(&mut frame, msg).map_err(|e| WireError::Malformed(e.to_string()))?;
        let body = frame.len() - 4 + MAC_BYTES;
        let len = u32::try_from(body)
            .ok()
            .filter(|&n| n <= MAX_MESSAGE)
            .ok_or(WireError::TooLarge(
                u32::try_from(body).unwrap_or(u32::MAX),
                MAX_MESSAGE,
            ))?;
        let mut sent = lock(&self.sent);
        let sequence = *sent + 1;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        frame[4..4 + SEQUENCE_BYTES].copy_from_slice(&sequence.to_be_bytes());
        let mut mac = self.send.clone();
        mac.update(&frame);
        frame.extend_from_slice(&mac.finalize().into_bytes());
        *sent = sequence;
        write_until(out, &frame, deadline)
    }

    /// The JSON of a frame's body, if it is the next frame and its MAC checks.
    fn open<'a>(&self, body: &'a [u8]) -> Result<&'a [u8], WireError> {
        let mut received = lock(&self.received);
        let expected = received.0 + 1;
        let good = !received.1 && self.checks(body, expected);
        if !good {
            received.1 = true;
            return Err(WireError::Forged {
                frame: expected,
                peer: self.peer,
            });
        }
        received.0 = expected;
        Ok(&body[SEQUENCE_BYTES..body.len() - MAC_BYTES])
    }

    /// Whether `body` carries sequence `expected` and a MAC of its frame under the peer's key.
    fn checks(&self, body: &[u8], expected: u64) -> bool {
        let Some(signed_len) = body.len().checked_sub(MAC_BYTES) else {
            return false;
        };
        let (signed, tag) = body.split_at(signed_len);
        let (Some(sequence), Ok(len)) = (signed.get(..SEQUENCE_BYTES), u32::try_from(body.len()))
        else {
            return false;
        };
        let mut mac = self.receive.clone();
        mac.update(&len.to_be_bytes());
        mac.update(signed);
        let mac_ok = mac.verify_slice(tag).is_ok();
        mac_ok && sequence == expected.to_be_bytes()
    }
}

/// An in-memory peer for tests: reads come from `input` (at most `step` bytes each, each
/// taking `delay`), writes go to `output`.
#[derive(Debug, Default)]
pub struct MemoryPeer {
    /// What the peer sends.
    pub input: io::Cursor<Vec<u8>>,
    /// What was written to the peer.
    pub output: Vec<u8>,
    /// Bytes per read (0: as many as asked).
    pub step: usize,
    /// How long each read takes.
    pub delay: Duration,
}

impl MemoryPeer {
    /// A peer that sends `bytes` and then closes.
    pub fn sending(bytes: Vec<u8>) -> Self {
        MemoryPeer {
            input: io::Cursor::new(bytes),
            ..MemoryPeer::default()
        }
    }
}

impl Read for MemoryPeer {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        std::thread::sleep(self.delay);
        let n = if self.step == 0 {
            buf.len()
        } else {
            self.step.min(buf.len())
        };
        self.input.read(&mut buf[..n])
    }
}

impl TimedRead for MemoryPeer {
    fn limit_next_read(&mut self, _limit: Duration) -> io::Result<()> {
        Ok(())
    }
}

impl TimedWrite for MemoryPeer {
    fn limit_next_write(&mut self, _limit: Duration) -> io::Result<()> {
        Ok(())
    }
}

impl Write for MemoryPeer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Frames `body` as the peer would (for tests of what a peer may send).
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::token::{Nonce, Prover, Token};
    use std::sync::Arc;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn read<T: DeserializeOwned>(bytes: Vec<u8>) -> Result<T, WireError> {
        read_message(&mut MemoryPeer::sending(bytes), soon(), MAX_MESSAGE)
    }

    #[test]
    fn a_message_round_trips() {
        let mut buf = Vec::new();
        write_message(&mut buf, &vec![1u32, 2, 3], soon()).unwrap();
        assert_eq!(&buf[..4], &7u32.to_be_bytes());
        let back: Vec<u32> = read(buf).unwrap();
        assert_eq!(back, vec![1, 2, 3]);
    }

    #[test]
    fn an_oversized_length_is_refused_without_allocating_it() {
        let mut frame = u32::MAX.to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read::<serde_json::Value>(frame).unwrap_err();
        assert!(matches!(err, WireError::TooLarge(u32::MAX, _)), "{err}");
    }

    #[test]
    fn a_reader_may_cap_messages_below_the_protocol_limit() {
        let err = read_message::<serde_json::Value>(
            &mut MemoryPeer::sending(frame(&[b' '; 5000])),
            soon(),
            4096,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("5000 bytes exceeds the 4096-byte"),
            "{err}"
        );
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let err = read::<serde_json::Value>(frame(b"GET /")).unwrap_err();
        assert!(matches!(err, WireError::Malformed(_)), "{err}");
    }

    #[test]
    fn a_plan_with_a_parameter_this_side_lacks_is_refused_naming_it() {
        let plan = crate::plan::PlanRequest::default()
            .resolve(crate::plan::TestKind::ALL[0])
            .unwrap();
        let mut json = serde_json::to_value(super::super::Message::Plan(Box::new(plan))).unwrap();
        json["tclass_from_the_future"] = serde_json::json!(106);
        let err = decode::<super::super::Message>(json.to_string().as_bytes()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("unknown field `tclass_from_the_future`"),
            "{text}"
        );
        assert!(
            text.contains("run the same version on both sides"),
            "{text}"
        );
    }

    #[test]
    fn a_short_frame_means_the_peer_closed() {
        let mut frame = 10u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read::<serde_json::Value>(frame).unwrap_err();
        assert!(matches!(err, WireError::Closed), "{err}");
    }

    #[test]
    fn a_trickling_peer_runs_out_of_time_for_the_whole_message() {
        let mut peer = MemoryPeer::sending(frame(b"[1,2,3,4,5,6,7,8,9]"));
        peer.step = 1;
        peer.delay = Duration::from_millis(20);
        let start = Instant::now();
        let deadline = start + Duration::from_millis(150);
        let err = read_message::<Vec<u32>>(&mut peer, deadline, MAX_MESSAGE).unwrap_err();
        assert!(matches!(err, WireError::TimedOut), "{err}");
        assert!(
            start.elapsed() < Duration::from_millis(400),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_peers_text_quoted_by_a_decoding_error_cannot_drive_the_terminal() {
        let err = read::<crate::control::Message>(frame(br#"{"type":"\u001b[2J"}"#)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("unknown variant `\\u{1b}[2J`"), "{text}");
        assert!(!text.contains('\x1b'), "{text:?}");
    }

    /// A connected pair of loopback sockets: this side's end and the peer's.
    fn socket_pair() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mine = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (theirs, _) = l.accept().unwrap();
        (mine, theirs)
    }

    /// Reads 64 KiB every 100 ms from `peer` until `stop`: a peer that keeps a writer's
    /// every send() call making progress, and yet takes seconds per message.
    fn read_slowly(mut peer: TcpStream, stop: &std::sync::atomic::AtomicBool) {
        use std::sync::atomic::Ordering;
        let _ = peer.set_read_timeout(Some(Duration::from_millis(100)));
        let mut buf = vec![0u8; 64 * 1024];
        while !stop.load(Ordering::Acquire) {
            if matches!(peer.read(&mut buf), Ok(0)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[test]
    fn a_slow_reader_cannot_keep_a_write_going_past_the_messages_deadline() {
        let (mut out, peer) = socket_pair();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let big = "x".repeat(MAX_MESSAGE as usize - 64);
        let limit = Duration::from_millis(300);
        let failed = std::thread::scope(|s| {
            s.spawn(|| read_slowly(peer, &stop));
            // The socket buffers take the first messages; the first one they cannot take
            // must fail at its deadline, not when the slow reader has taken all of it.
            let slow = (0..64).find_map(|_| {
                let start = Instant::now();
                let got = write_message(&mut out, &big, start + limit);
                let took = start.elapsed();
                let late = took > limit + Duration::from_millis(200);
                (got.is_err() || late).then_some((got, took))
            });
            stop.store(true, std::sync::atomic::Ordering::Release);
            slow
        });
        let (got, took) = failed.expect("a write should have met the slow reader");
        assert!(matches!(got, Err(WireError::TimedOut)), "{got:?}");
        assert!(took < limit + Duration::from_millis(700), "{took:?}");
    }

    /// A client's and a server's frame keys of one connection.
    fn keys() -> (FrameKeys, FrameKeys) {
        let t = Token::new(b"the cluster's shared secret", "test").unwrap();
        let (s, c) = (Nonce::new().unwrap(), Nonce::new().unwrap());
        (
            t.frame_keys(Prover::Client, &s, &c),
            t.frame_keys(Prover::Server, &s, &c),
        )
    }

    fn client_addr() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 2], 18515))
    }

    /// `msgs` sealed by a client, one frame each, and the server's keys that read them.
    fn sealed(msgs: &[u32]) -> (Vec<Vec<u8>>, FrameKeys) {
        let (client, server) = keys();
        let out = Framing::sealed(&client, SocketAddr::from(([10, 0, 0, 1], 18515)));
        let frames = msgs
            .iter()
            .map(|m| {
                let mut f = Vec::new();
                out.write(&mut f, &vec![*m], soon()).unwrap();
                f
            })
            .collect();
        (frames, server)
    }

    /// A fresh server framing with `keys`.
    fn reader(keys: &FrameKeys) -> Framing {
        Framing::sealed(keys, client_addr())
    }

    fn read_all(framing: &Framing, frames: &[Vec<u8>]) -> Vec<Result<Vec<u32>, String>> {
        let mut peer = MemoryPeer::sending(frames.concat());
        (0..frames.len())
            .map(|_| {
                framing
                    .read::<Vec<u32>>(&mut peer, soon(), MAX_MESSAGE)
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    const FORGED: &str = "from 10.0.0.2:18515 failed its MAC: altered, replayed or out of order";

    #[test]
    fn sealed_frames_carry_their_sequence_and_read_in_order() {
        let (frames, keys) = sealed(&[7, 8, 9]);
        assert_eq!(&frames[1][..4], &43u32.to_be_bytes());
        assert_eq!(&frames[1][4..12], &2u64.to_be_bytes());
        assert_eq!(&frames[1][12..15], b"[8]");
        assert_eq!(frames[1].len(), 4 + 8 + 3 + 32);
        let got = read_all(&reader(&keys), &frames);
        assert_eq!(got, [Ok(vec![7]), Ok(vec![8]), Ok(vec![9])]);
    }

    #[test]
    fn any_altered_byte_of_a_sealed_frame_is_refused() {
        let (frames, keys) = sealed(&[4096]);
        assert_eq!(read_all(&reader(&keys), &frames), [Ok(vec![4096])]);
        for at in 0..frames[0].len() {
            let mut altered = frames.clone();
            altered[0][at] ^= 0x01;
            let got = read_all(&reader(&keys), &altered);
            assert!(got[0].is_err(), "byte {at} altered: {got:?}");
        }
        // An altered byte of the JSON ("[4096]" becomes "[5096]") is named as such.
        let mut altered = frames.clone();
        altered[0][13] ^= 0x01;
        let got = read_all(&reader(&keys), &altered);
        assert_eq!(got, [Err(format!("frame 1 {FORGED}"))]);
    }

    #[test]
    fn a_replayed_or_reordered_sealed_frame_is_refused() {
        let (frames, keys) = sealed(&[1, 2]);
        let replayed = [frames[0].clone(), frames[0].clone()];
        let got = read_all(&reader(&keys), &replayed);
        assert_eq!(got, [Ok(vec![1]), Err(format!("frame 2 {FORGED}"))]);
        let swapped = [frames[1].clone(), frames[0].clone()];
        let got = read_all(&reader(&keys), &swapped);
        assert_eq!(
            got,
            [
                Err(format!("frame 1 {FORGED}")),
                Err(format!("frame 1 {FORGED}"))
            ],
            "after one refused frame, none is taken"
        );
    }

    #[test]
    fn a_sealed_frame_sent_back_to_its_writer_or_another_connection_is_refused() {
        let (client, _) = keys();
        let writer = Framing::sealed(&client, client_addr());
        let mut frame = Vec::new();
        writer.write(&mut frame, &vec![1u32], soon()).unwrap();
        // The same side's keys read it as the peer's: the other direction's key is needed.
        assert!(read_all(&writer, &[frame.clone()])[0].is_err());
        let (_, elsewhere) = sealed(&[]);
        assert!(read_all(&reader(&elsewhere), &[frame])[0].is_err());
        // Plain frames (a peer without the token) are refused by a sealed reader.
        assert!(read_all(&reader(&elsewhere), &[frame_of(&[1])])[0].is_err());
    }

    fn frame_of(v: &[u32]) -> Vec<u8> {
        frame(&serde_json::to_vec(v).unwrap())
    }

    #[test]
    fn plain_framing_is_the_unauthenticated_format() {
        let mut out = Vec::new();
        Framing::plain()
            .write(&mut out, &vec![1u32, 2], soon())
            .unwrap();
        assert_eq!(out, frame_of(&[1, 2]));
        let back: Vec<u32> = Framing::plain()
            .read(&mut MemoryPeer::sending(out), soon(), MAX_MESSAGE)
            .unwrap();
        assert_eq!(back, [1, 2]);
    }

    /// A writer the threads of a test share, as they share a socket.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            lock(&*self.0).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl TimedWrite for Shared {
        fn limit_next_write(&mut self, _limit: Duration) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn threads_sharing_a_sealed_channel_send_frames_in_the_order_of_their_numbers() {
        let (client, server) = keys();
        let writer = Framing::sealed(&client, client_addr());
        let out = Shared::default();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (writer, mut out) = (&writer, out.clone());
                s.spawn(move || {
                    for i in 0..100 {
                        writer.write(&mut out, &vec![t, i], soon()).unwrap();
                    }
                });
            }
        });
        let bytes = lock(&*out.0).clone();
        let reader = Framing::sealed(&server, client_addr());
        let mut peer = MemoryPeer::sending(bytes);
        for n in 0..400 {
            let got = reader.read::<Vec<u32>>(&mut peer, soon(), MAX_MESSAGE);
            assert!(got.is_ok(), "frame {n}: {got:?}");
        }
    }
}
