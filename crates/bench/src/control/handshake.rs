//! The handshake, before any run: hellos with each side's nonce, then the client's proof of the
//! shared token and the server's answer.
//!
//! ```text
//! client                                   server
//!   Hello { magic, protocol, nonce Nc }  ->
//!                                        <-  Hello { magic, protocol, nonce Ns }
//!   Auth { proof: HMAC(token, client, Ns, Nc) or none }  ->
//!                                        <-  Welcome { proof: HMAC(token, server, Nc, Ns) or none }
//!                                            | Busy | Reject { reason }
//! ```
//!
//! The server reads at most [`HANDSHAKE_MAX`] bytes per message and gives a new connection one
//! deadline for its hello and its proof together, whatever `--timeout` says; a connection that
//! misses it, or says anything else, is a stranger: dropped, with one line naming why. Both
//! sides check each other's proof, so a wrong or missing token fails both, naming neither
//! secret. With a token, both sides then derive the connection's frame keys from the secret and
//! both nonces ([`Token::frame_keys`]), and every frame after `Welcome` is sealed with them
//! (`wire.rs`): the proofs alone would let an on-path relay pass the handshake through and
//! rewrite what follows. The functions here take any [`TimedRead`] stream, so that they can
//! be driven by a hostile in-memory peer in tests.
//!
//! Before a client proved the token it learns the protocol's version and nothing else of the
//! server: a server with a token names no rdmabench version in its hello, and its refusals
//! say what the client must change, never a host, a device or a setting of the server.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};

use super::token::{FrameKeys, Nonce, Prover, Token, TOKEN_ENV};
use super::wire::{read_message, write_message, Framing, TimedRead, TimedWrite, WireError};
use super::{Message, MAGIC, PROTOCOL_VERSION};

/// The largest handshake message accepted, in bytes (a hello takes about 150).
pub const HANDSHAKE_MAX: u32 = 4096;

/// Why a connection was not taken for a run: the server's one line about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stranger(pub String);

/// A client that said hello and proved the token (or that needed none): the nonces the
/// server's welcome must cover, and the server's frame keys of the connection (with a token).
#[derive(Debug)]
pub struct Admitted {
    server: Nonce,
    client: Nonce,
    keys: Option<FrameKeys>,
}

impl Admitted {
    /// How the server's channel to this client frames what follows the welcome: sealed with
    /// the connection's keys when there is a token, plain otherwise.
    pub(crate) fn framing(&self, peer: SocketAddr) -> Framing {
        match &self.keys {
            Some(keys) => Framing::sealed(keys, peer),
            None => Framing::plain(),
        }
    }
}

pub(crate) use crate::text::printable;

fn stranger(text: impl Into<String>) -> Stranger {
    Stranger(text.into())
}

/// The server's side: reads the client's hello and proof, all before `deadline`, answering
/// each; a client that cannot be admitted was told why when it speaks the protocol.
pub fn admit<S: TimedRead + TimedWrite>(
    stream: &mut S,
    token: Option<&Token>,
    deadline: Instant,
) -> Result<Admitted, Stranger> {
    let client = read_hello(stream, token, deadline)?;
    let server = Nonce::new().map_err(|e| stranger(format!("no random nonce: {e}")))?;
    write_message(stream, &server_hello(token, &server), deadline)
        .map_err(|e| stranger(format!("could not answer its hello: {e}")))?;
    let proof = match read_message::<Message>(stream, deadline, HANDSHAKE_MAX) {
        Ok(Message::Auth { proof }) => proof,
        Ok(other) => {
            return Err(stranger(format!(
                "it sent {} instead of Auth",
                other.name()
            )))
        }
        Err(e) => {
            return Err(stranger(format!(
                "no Auth after its hello: {}",
                wire_why(&e)
            )))
        }
    };
    let refusal = match (token, proof) {
        (None, None) => None,
        (Some(_), None) => Some((
            "it gave no token",
            format!(
                "this server requires a token: give the client the server's token (--token FILE \
                 or {TOKEN_ENV})"
            ),
        )),
        (None, Some(_)) => Some((
            "it gave a token, and this server has none",
            format!(
                "this server has no token, but the client gave one: give the server the same \
                 token (--token FILE or {TOKEN_ENV}), or run the client without one"
            ),
        )),
        (Some(t), Some(p)) if t.verify(Prover::Client, &server, &client, &p) => None,
        (Some(_), Some(_)) => Some((
            "wrong token",
            format!(
                "the client's token is not the server's: give both sides the same token \
                 (--token FILE or {TOKEN_ENV})"
            ),
        )),
    };
    if let Some((why, reason)) = refusal {
        let _ = write_message(
            stream,
            &Message::Reject {
                reason,
                refused: false,
            },
            deadline,
        );
        return Err(stranger(why));
    }
    let keys = token.map(|t| t.frame_keys(Prover::Server, &server, &client));
    Ok(Admitted {
        server,
        client,
        keys,
    })
}

/// The server's hello: with a token, it names no rdmabench version, so that a client learns
/// no more than the protocol's version before it proved the token.
fn server_hello(token: Option<&Token>, nonce: &Nonce) -> Message {
    let mut hello = Message::hello(nonce.to_base64());
    if let (Some(_), Message::Hello { tool_version, .. }) = (token, &mut hello) {
        tool_version.clear();
    }
    hello
}

/// Reads the client's hello: its nonce, or why it is a stranger (an rdmabench client of another
/// protocol version is told, with this side's hello, so that it can say so too).
fn read_hello<S: TimedRead + TimedWrite>(
    stream: &mut S,
    token: Option<&Token>,
    deadline: Instant,
) -> Result<Nonce, Stranger> {
    let (magic, protocol, tool_version, nonce) =
        match read_message::<Message>(stream, deadline, HANDSHAKE_MAX) {
            Ok(Message::Hello {
                magic,
                protocol,
                tool_version,
                nonce,
            }) => (magic, protocol, tool_version, nonce),
            Ok(other) => {
                return Err(stranger(format!(
                    "it sent {} instead of a hello",
                    other.name()
                )))
            }
            Err(e) => {
                return Err(stranger(format!(
                    "not an rdmabench client: {}",
                    wire_why(&e)
                )))
            }
        };
    if magic != MAGIC {
        return Err(stranger("its hello is not rdmabench's"));
    }
    if protocol != PROTOCOL_VERSION {
        let reason = format!(
            "protocol mismatch: the server speaks version {PROTOCOL_VERSION}, the client ({}) \
             speaks {protocol}; run the same rdmabench on both hosts",
            printable(&tool_version)
        );
        if let Ok(n) = Nonce::new() {
            let _ = write_message(stream, &server_hello(token, &n), deadline);
        }
        let _ = write_message(
            stream,
            &Message::Reject {
                reason: reason.clone(),
                refused: false,
            },
            deadline,
        );
        return Err(Stranger(reason));
    }
    Nonce::from_base64(&nonce).ok_or_else(|| stranger("its hello carries no valid nonce"))
}

/// What went wrong reading a stranger's message, in a few words.
fn wire_why(e: &WireError) -> String {
    match e {
        WireError::TimedOut => "it sent no whole message in time".to_string(),
        WireError::Closed => "it closed the connection".to_string(),
        WireError::TooLarge(n, _) => format!("its message announced {n} bytes"),
        WireError::Malformed(_) => "it sent bytes that are not a message".to_string(),
        WireError::Forged { .. } => "its frame failed its MAC".to_string(),
        WireError::Io(e) => e.to_string(),
    }
}

/// Takes an admitted client for a run: `Welcome`, with this side's proof, all of it before
/// `deadline`.
pub(crate) fn welcome(
    stream: &mut impl TimedWrite,
    token: Option<&Token>,
    admitted: &Admitted,
    deadline: Instant,
) -> Result<(), WireError> {
    let proof = token.map(|t| t.prove(Prover::Server, &admitted.server, &admitted.client));
    write_message(stream, &Message::Welcome { proof }, deadline)
}

/// The client's side: hello, proof, and the server's answer, all before `deadline`; with a
/// token, the client's frame keys of the connection.
pub(crate) fn greet_server<S: TimedRead + TimedWrite>(
    stream: &mut S,
    token: Option<&Token>,
    deadline: Instant,
    server: SocketAddr,
) -> Result<Option<FrameKeys>> {
    let client = Nonce::new().map_err(|e| anyhow!("no random nonce: {e}"))?;
    write_message(stream, &Message::hello(client.to_base64()), deadline)
        .map_err(|e| anyhow!("sending the hello to {server} failed: {e}"))?;
    let (protocol, tool_version, nonce) = match server_says(stream, deadline, server, "hello")? {
        Message::Hello {
            magic,
            protocol,
            tool_version,
            nonce,
        } if magic == MAGIC => (protocol, tool_version, nonce),
        Message::Hello { .. } => bail!("{server} is not an rdmabench peer"),
        other => bail!("expected a hello from {server}, got {}", other.name()),
    };
    if protocol != PROTOCOL_VERSION {
        bail!(
            "protocol mismatch: this rdmabench speaks version {PROTOCOL_VERSION}, {} speaks \
             {protocol}; run the same rdmabench on both hosts",
            the_peer(&tool_version)
        );
    }
    let nonce = Nonce::from_base64(&nonce)
        .ok_or_else(|| anyhow!("the server at {server} sent no valid nonce in its hello"))?;
    let proof = token.map(|t| t.prove(Prover::Client, &nonce, &client));
    write_message(stream, &Message::Auth { proof }, deadline)
        .map_err(|e| anyhow!("sending the token's proof to {server} failed: {e}"))?;
    match server_says(stream, deadline, server, "its welcome")? {
        Message::Welcome { proof } => {
            check_server_proof(token, proof, &nonce, &client, server)?;
            Ok(token.map(|t| t.frame_keys(Prover::Client, &nonce, &client)))
        }
        Message::Busy => bail!(
            "the server at {server} is busy with another run; try again when it is done, or \
             start another server (-p)"
        ),
        other => bail!(
            "protocol error: expected a welcome from {server}, got {}",
            other.name()
        ),
    }
}

/// The server as a mismatch names it: with its version when its hello gave one (a server with
/// a token gives none before the client proved it).
fn the_peer(tool_version: &str) -> String {
    if tool_version.is_empty() {
        "the peer".to_string()
    } else {
        format!("the peer ({})", printable(tool_version))
    }
}

/// Reads the server's next handshake message; a `Reject` becomes an error with its reason.
fn server_says<S: TimedRead>(
    stream: &mut S,
    deadline: Instant,
    server: SocketAddr,
    what: &str,
) -> Result<Message> {
    match read_message::<Message>(stream, deadline, HANDSHAKE_MAX) {
        Ok(Message::Reject { reason, .. }) => bail!(
            "the server at {server} refused this client: {}",
            printable(&reason)
        ),
        Ok(msg) => Ok(msg),
        Err(WireError::TimedOut) => bail!(
            "no {what} from the server at {server} in time; is it an rdmabench server, and alive? \
             (--timeout)"
        ),
        Err(WireError::Closed) => bail!(
            "the server at {server} closed the connection before {what}; is it an rdmabench \
             server of the same version?"
        ),
        Err(e) => bail!("{server} is not an rdmabench server ({e})"),
    }
}

fn check_server_proof(
    token: Option<&Token>,
    proof: Option<String>,
    server_nonce: &Nonce,
    client_nonce: &Nonce,
    server: SocketAddr,
) -> Result<()> {
    match (token, proof) {
        (None, _) => Ok(()),
        (Some(_), None) => bail!(
            "the server at {server} did not prove that it holds the token (it runs without \
             one); give it the same token (--token FILE or {TOKEN_ENV})"
        ),
        (Some(t), Some(p)) if t.verify(Prover::Server, server_nonce, client_nonce, &p) => Ok(()),
        (Some(_), Some(_)) => bail!(
            "the server at {server} does not hold this client's token (its proof is wrong); give \
             both sides the same token"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::wire::{decode, read_frame, MemoryPeer, MAX_MESSAGE};
    use std::time::Duration;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn token(text: &str) -> Token {
        Token::new(text.as_bytes(), "test").unwrap()
    }

    /// The messages a side wrote to the in-memory peer.
    fn written(peer: &MemoryPeer) -> Vec<Message> {
        let mut out = MemoryPeer::sending(peer.output.clone());
        let mut msgs = Vec::new();
        while let Ok(body) = read_frame(&mut out, soon(), MAX_MESSAGE) {
            msgs.push(decode(&body).unwrap());
        }
        msgs
    }

    fn frames(msgs: &[Message]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for m in msgs {
            write_message(&mut bytes, m, soon()).unwrap();
        }
        bytes
    }

    fn addr() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], 18515))
    }

    #[test]
    fn an_older_client_is_told_the_versions_and_dropped() {
        let old_hello =
            br#"{"type":"hello","magic":"rdmabench","protocol":2,"tool_version":"0.0.9"}"#;
        let mut peer = MemoryPeer::sending(crate::control::frame(old_hello));
        let why = admit(&mut peer, None, soon()).unwrap_err().0;
        assert!(
            why.contains(&format!(
                "the server speaks version {PROTOCOL_VERSION}, the client (0.0.9) speaks 2"
            )),
            "{why}"
        );
        let msgs = written(&peer);
        assert!(
            matches!(&msgs[0], Message::Hello { protocol, .. } if *protocol == PROTOCOL_VERSION),
            "{msgs:?}"
        );
        assert!(
            matches!(&msgs[1], Message::Reject { reason, .. } if reason.contains("protocol mismatch"))
        );
    }

    #[test]
    fn a_client_names_a_server_of_another_version() {
        let old = Message::Hello {
            magic: MAGIC.into(),
            protocol: 2,
            tool_version: "0.0.9".into(),
            nonce: String::new(),
        };
        let mut peer = MemoryPeer::sending(frames(&[old]));
        let err = greet_server(&mut peer, None, soon(), addr()).unwrap_err();
        assert!(
            err.to_string().contains(&format!(
                "this rdmabench speaks version {PROTOCOL_VERSION}, the peer (0.0.9) speaks 2"
            )),
            "{err}"
        );
        let unnamed = Message::Hello {
            magic: MAGIC.into(),
            protocol: 2,
            tool_version: String::new(),
            nonce: String::new(),
        };
        let mut peer = MemoryPeer::sending(frames(&[unnamed]));
        let err = greet_server(&mut peer, None, soon(), addr()).unwrap_err();
        assert!(err.to_string().contains(", the peer speaks 2;"), "{err}");
    }

    /// A client's hello and a proof of another token than the server's.
    fn wrong_proof() -> MemoryPeer {
        let client = Nonce::new().unwrap();
        MemoryPeer::sending(frames(&[
            Message::hello(client.to_base64()),
            Message::Auth {
                proof: Some(token("a guess at the secret").prove(Prover::Client, &client, &client)),
            },
        ]))
    }

    #[test]
    fn the_server_refuses_a_wrong_proof_and_says_so() {
        let mut peer = wrong_proof();
        let why = admit(&mut peer, Some(&token("the real shared secret")), soon()).unwrap_err();
        assert_eq!(why.0, "wrong token");
        let msgs = written(&peer);
        assert!(
            matches!(&msgs[1], Message::Reject { reason, .. } if reason.contains("not the server's")),
            "{msgs:?}"
        );
    }

    #[test]
    fn a_client_with_a_wrong_token_learns_only_the_protocol_version() {
        let mut peer = wrong_proof();
        admit(&mut peer, Some(&token("the real shared secret")), soon()).unwrap_err();
        let msgs = written(&peer);
        let Message::Hello {
            protocol,
            tool_version,
            ..
        } = &msgs[0]
        else {
            panic!("{msgs:?}")
        };
        assert_eq!((*protocol, tool_version.as_str()), (PROTOCOL_VERSION, ""));
        let Message::Reject { reason, .. } = &msgs[1] else {
            panic!("{msgs:?}")
        };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        assert!(host.is_empty() || !reason.contains(host), "{reason}");
        let said = String::from_utf8_lossy(&peer.output);
        assert!(!said.contains(env!("CARGO_PKG_VERSION")), "{said}");
        // Without a token anyone may run tests: the hello names the version, for a mismatch.
        let client = Nonce::new().unwrap();
        let mut peer = MemoryPeer::sending(frames(&[Message::hello(client.to_base64())]));
        admit(&mut peer, None, soon()).unwrap_err();
        let said = String::from_utf8_lossy(&peer.output);
        assert!(said.contains(env!("CARGO_PKG_VERSION")), "{said}");
    }

    #[test]
    fn a_server_that_does_not_prove_the_token_is_refused_by_the_client() {
        let server = Nonce::new().unwrap();
        let input = frames(&[
            Message::hello(server.to_base64()),
            Message::Welcome { proof: None },
        ]);
        let mut peer = MemoryPeer::sending(input);
        let err = greet_server(
            &mut peer,
            Some(&token("the real shared secret")),
            soon(),
            addr(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("10.0.0.1:18515 did not prove that it holds the token"),
            "{err}"
        );
        let forged = Message::Welcome {
            proof: Some(token("a guess at the secret").prove(Prover::Server, &server, &server)),
        };
        let mut peer = MemoryPeer::sending(frames(&[Message::hello(server.to_base64()), forged]));
        let err = greet_server(
            &mut peer,
            Some(&token("the real shared secret")),
            soon(),
            addr(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("does not hold this client's token"),
            "{err}"
        );
    }
}
