//! Framing: each message is a 4-byte big-endian length followed by that many bytes of JSON.
//! A length above [`MAX_MESSAGE`] is refused before anything is allocated.

use std::io::{self, Read, Write};

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
    /// No bytes came within the read timeout.
    #[error("no message within the timeout")]
    TimedOut,
    /// The length prefix is beyond the limit.
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE}-byte limit")]
    TooLarge(u32),
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

/// Writes one message.
pub fn write_message<T: Serialize>(out: &mut impl Write, msg: &T) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Malformed(e.to_string()))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n <= MAX_MESSAGE)
        .ok_or(WireError::TooLarge(u32::MAX))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    out.write_all(&frame)?;
    out.flush()?;
    Ok(())
}

/// Reads one message.
pub fn read_message<T: DeserializeOwned>(input: &mut impl Read) -> Result<T, WireError> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_MESSAGE {
        return Err(WireError::TooLarge(len));
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| WireError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn a_message_round_trips() {
        let mut buf = Vec::new();
        write_message(&mut buf, &vec![1u32, 2, 3]).unwrap();
        assert_eq!(&buf[..4], &7u32.to_be_bytes());
        let back: Vec<u32> = read_message(&mut Cursor::new(buf)).unwrap();
        assert_eq!(back, vec![1, 2, 3]);
    }

    #[test]
    fn an_oversized_length_is_refused_without_allocating_it() {
        let mut frame = u32::MAX.to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read_message::<serde_json::Value>(&mut Cursor::new(frame)).unwrap_err();
        assert!(matches!(err, WireError::TooLarge(u32::MAX)), "{err}");
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let mut frame = 5u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"GET /");
        let err = read_message::<serde_json::Value>(&mut Cursor::new(frame)).unwrap_err();
        assert!(matches!(err, WireError::Malformed(_)), "{err}");
    }

    #[test]
    fn a_short_frame_means_the_peer_closed() {
        let mut frame = 10u32.to_be_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let err = read_message::<serde_json::Value>(&mut Cursor::new(frame)).unwrap_err();
        assert!(matches!(err, WireError::Closed), "{err}");
    }
}
