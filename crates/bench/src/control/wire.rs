//! Framing: each message is a 4-byte big-endian length followed by that many bytes of JSON.
//!
//! A read has a deadline for the whole message, not for each `read()` call: a peer that
//! trickles a byte every few seconds is cut off when the message's time is up. A length above
//! the reader's cap ([`MAX_MESSAGE`], or less) is refused before anything is allocated, and
//! the body grows only as its bytes arrive, so a peer that announces a large message and
//! sends little costs little.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

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

/// Writes one message.
pub fn write_message<T: Serialize>(out: &mut impl Write, msg: &T) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_MESSAGE)
        .ok_or(WireError::TooLarge(u32::MAX, MAX_MESSAGE))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    out.write_all(&frame)?;
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
pub fn read_frame(
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
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::Malformed(e.to_string()))
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

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn read<T: DeserializeOwned>(bytes: Vec<u8>) -> Result<T, WireError> {
        read_message(&mut MemoryPeer::sending(bytes), soon(), MAX_MESSAGE)
    }

    #[test]
    fn a_message_round_trips() {
        let mut buf = Vec::new();
        write_message(&mut buf, &vec![1u32, 2, 3]).unwrap();
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
}
