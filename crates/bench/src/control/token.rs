//! The shared secret (`--token FILE`, or `RDMABENCH_TOKEN` holding the secret itself) and the
//! proofs of it that the handshake exchanges: HMAC-SHA256 over both sides' nonces, each side's
//! proof under its own label, so the secret never crosses the wire, a proof is good for one
//! connection only, and a client's proof cannot be sent back as the server's. The same secret
//! and nonces give the connection's frame keys (one per direction, under labels of their own),
//! with which every frame after the handshake is sealed (`wire.rs`).

use std::fmt;
use std::io::Read;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::plan::PlanError;

/// The environment variable that holds the secret itself (`--token FILE` wins over it).
pub(crate) const TOKEN_ENV: &str = "RDMABENCH_TOKEN";

/// The shortest secret accepted, in bytes.
pub(crate) const MIN_TOKEN_BYTES: usize = 16;

/// The largest token file accepted, in bytes: a token is one line.
pub(crate) const MAX_TOKEN_FILE: u64 = 4096;

/// Bytes of a nonce.
const NONCE_BYTES: usize = 32;

/// The shared secret. Its `Debug` shows no byte of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    secret: Vec<u8>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({} bytes)", self.secret.len())
    }
}

impl Token {
    /// A token from its text (surrounding whitespace, such as a file's last newline, left
    /// out); `origin` names where it came from in errors.
    pub fn new(text: &[u8], origin: &str) -> Result<Token, PlanError> {
        let secret = text.trim_ascii();
        if secret.len() < MIN_TOKEN_BYTES {
            return Err(PlanError::Value(format!(
                "{origin}: the token has {} bytes, fewer than the {MIN_TOKEN_BYTES} required; \
                 make one with `head -c 32 /dev/urandom | base64`",
                secret.len()
            )));
        }
        Ok(Token {
            secret: secret.to_vec(),
        })
    }

    /// The token in `path`, at most [`MAX_TOKEN_FILE`] bytes; a file that others may read is
    /// taken with a warning on stderr.
    pub(crate) fn from_file(path: &Path) -> Result<Token, PlanError> {
        let origin = format!("--token {}", path.display());
        let cannot = |e: std::io::Error| {
            PlanError::Value(format!("{origin}: cannot read the token file: {e}"))
        };
        let file = std::fs::File::open(path).map_err(cannot)?;
        let meta = file.metadata().map_err(cannot)?;
        let mut text = Vec::new();
        // One byte beyond the limit tells a file that is too large (or grows, or never ends).
        file.take(MAX_TOKEN_FILE + 1)
            .read_to_end(&mut text)
            .map_err(cannot)?;
        if text.len() as u64 > MAX_TOKEN_FILE {
            return Err(PlanError::Value(format!(
                "{origin}: the token file has {} bytes, more than the {MAX_TOKEN_FILE}-byte \
                 limit; a token is one line (`head -c 32 /dev/urandom | base64`)",
                meta.len().max(text.len() as u64)
            )));
        }
        let token = Token::new(&text, &origin)?;
        // Only a token that will be used is worth a warning.
        if let Some(warning) = readable_by_others(path, &meta) {
            eprintln!("{warning}");
        }
        Ok(token)
    }

    /// This side's token: `--token FILE` when given, else `RDMABENCH_TOKEN` when set, else none.
    pub(crate) fn resolve(file: Option<&Path>) -> Result<Option<Token>, PlanError> {
        Token::resolve_from(file, std::env::var_os(TOKEN_ENV).as_deref())
    }

    /// [`Token::resolve`] with the environment variable's value given.
    pub(crate) fn resolve_from(
        file: Option<&Path>,
        env: Option<&std::ffi::OsStr>,
    ) -> Result<Option<Token>, PlanError> {
        match (file, env) {
            (Some(path), _) => Token::from_file(path).map(Some),
            (None, Some(value)) => Token::new(value.as_encoded_bytes(), TOKEN_ENV).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// A fresh random token (`--loopback` without one: only this process knows it).
    pub fn random() -> Result<Token, getrandom::Error> {
        Ok(Token {
            secret: Nonce::new()?.0.to_vec(),
        })
    }

    fn mac(&self, prover: Prover, first: &Nonce, second: &Nonce) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(prover.label());
        mac.update(&first.0);
        mac.update(&second.0);
        mac
    }

    /// `prover`'s proof for the connection whose nonces these are, base64.
    pub(crate) fn prove(&self, prover: Prover, server: &Nonce, client: &Nonce) -> String {
        let (first, second) = prover.order(server, client);
        BASE64.encode(self.mac(prover, first, second).finalize().into_bytes())
    }

    /// The keys of the frames after the handshake on the connection whose nonces these are,
    /// for the side `me`: HMAC-SHA256(token, direction label, server nonce, client nonce), one
    /// key per direction, so a frame cannot be reflected back to its sender.
    pub fn frame_keys(&self, me: Prover, server: &Nonce, client: &Nonce) -> FrameKeys {
        let key = |label: &[u8]| {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
                .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
            mac.update(label);
            mac.update(&server.0);
            mac.update(&client.0);
            let mut bytes = [0u8; 32];
            bytes.copy_from_slice(&mac.finalize().into_bytes());
            FrameKey(bytes)
        };
        let to_server = key(b"rdmabench protocol 8 session client to server");
        let to_client = key(b"rdmabench protocol 8 session server to client");
        match me {
            Prover::Client => FrameKeys {
                send: to_server,
                receive: to_client,
            },
            Prover::Server => FrameKeys {
                send: to_client,
                receive: to_server,
            },
        }
    }

    /// Whether `proof` is `prover`'s proof for these nonces (compared in constant time).
    pub(crate) fn verify(
        &self,
        prover: Prover,
        server: &Nonce,
        client: &Nonce,
        proof: &str,
    ) -> bool {
        let Ok(bytes) = BASE64.decode(proof) else {
            return false;
        };
        let (first, second) = prover.order(server, client);
        self.mac(prover, first, second).verify_slice(&bytes).is_ok()
    }
}

/// The warning for a token file that its group or others may read (Unix permissions), naming
/// the file and the fix; `None` for a file only its owner may read.
pub(crate) fn readable_by_others(path: &Path, meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "rdmabench: warning: the token file {} can be read by other users (mode {mode:03o}); \
             anyone who reads it can run tests through your servers: chmod 600 {}",
            path.display(),
            path.display()
        )
    })
}

/// Which side a proof is from (or, for [`Token::frame_keys`], which side this is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prover {
    /// The client, over the server's nonce then its own.
    Client,
    /// The server, over the client's nonce then its own.
    Server,
}

impl Prover {
    fn label(self) -> &'static [u8] {
        match self {
            Prover::Client => b"rdmabench protocol 3 client proof",
            Prover::Server => b"rdmabench protocol 3 server proof",
        }
    }

    /// The other side's nonce first: each proof answers the other side's challenge.
    fn order<'a>(self, server: &'a Nonce, client: &'a Nonce) -> (&'a Nonce, &'a Nonce) {
        match self {
            Prover::Client => (server, client),
            Prover::Server => (client, server),
        }
    }
}

/// One direction's key of a connection's frames. Its `Debug` shows no byte of it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FrameKey([u8; 32]);

impl fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

impl FrameKey {
    /// A fresh HMAC-SHA256 keyed with it.
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"))
    }
}

/// A side's keys of one connection's frames after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameKeys {
    /// What this side's frames are sealed with.
    pub(crate) send: FrameKey,
    /// What the peer's frames are checked with.
    pub(crate) receive: FrameKey,
}

/// 32 bytes from the OS's random number generator, one per side and connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce([u8; NONCE_BYTES]);

impl Nonce {
    /// A fresh nonce.
    pub fn new() -> Result<Nonce, getrandom::Error> {
        let mut bytes = [0u8; NONCE_BYTES];
        getrandom::fill(&mut bytes)?;
        Ok(Nonce(bytes))
    }

    /// As the hello carries it.
    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0)
    }

    /// A nonce from a peer's hello; `None` unless it is base64 of exactly 32 bytes.
    pub(crate) fn from_base64(text: &str) -> Option<Nonce> {
        if text.len() > 64 {
            return None;
        }
        let bytes = BASE64.decode(text).ok()?;
        Some(Nonce(bytes.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn token(text: &str) -> Token {
        Token::new(text.as_bytes(), "test").unwrap()
    }

    #[test]
    fn a_proof_checks_only_with_the_same_token_nonces_and_side() {
        let (s, c) = (Nonce::new().unwrap(), Nonce::new().unwrap());
        let t = token("correct horse battery staple");
        let proof = t.prove(Prover::Client, &s, &c);
        assert!(t.verify(Prover::Client, &s, &c, &proof));
        assert!(!token("another secret of enough length").verify(Prover::Client, &s, &c, &proof));
        assert!(
            !t.verify(Prover::Server, &s, &c, &proof),
            "reflected as the server's"
        );
        let other = Nonce::new().unwrap();
        assert!(
            !t.verify(Prover::Client, &other, &c, &proof),
            "replayed on a new connection"
        );
        assert!(!t.verify(Prover::Client, &s, &c, "not base64!"));
        assert!(!t.verify(Prover::Client, &s, &c, ""));
    }

    #[test]
    fn frame_keys_pair_up_per_direction_and_connection() {
        let (s, c) = (Nonce::new().unwrap(), Nonce::new().unwrap());
        let t = token("correct horse battery staple");
        let client = t.frame_keys(Prover::Client, &s, &c);
        let server = t.frame_keys(Prover::Server, &s, &c);
        assert_eq!(client.send, server.receive);
        assert_eq!(client.receive, server.send);
        assert_ne!(client.send, client.receive, "one key per direction");
        let other = t.frame_keys(Prover::Client, &Nonce::new().unwrap(), &c);
        assert_ne!(other.send, client.send, "one key per connection");
        let elsewhere = token("another secret of enough length").frame_keys(Prover::Client, &s, &c);
        assert_ne!(elsewhere.send, client.send);
        assert_eq!(format!("{:?}", client.send), "FrameKey(..)");
    }

    #[test]
    fn nonces_are_random_and_parse_only_at_their_length() {
        let n = Nonce::new().unwrap();
        assert_ne!(n, Nonce::new().unwrap());
        assert_eq!(Nonce::from_base64(&n.to_base64()), Some(n));
        assert_eq!(Nonce::from_base64("AAAA"), None);
        assert_eq!(Nonce::from_base64(&"A".repeat(10_000)), None);
    }

    #[test]
    fn the_file_wins_over_the_environment() {
        let dir = std::env::temp_dir().join(format!("rdmabench-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "from the file, long enough\n").unwrap();
        let env = OsStr::new("from the environment, long enough");
        let got = Token::resolve_from(Some(&file), Some(env)).unwrap();
        assert_eq!(got, Some(token("from the file, long enough")));
        let got = Token::resolve_from(None, Some(env)).unwrap();
        assert_eq!(got, Some(token("from the environment, long enough")));
        assert_eq!(Token::resolve_from(None, None).unwrap(), None);
    }

    /// A token file in a scratch folder of its own, with `text` and permissions `mode`.
    fn token_file(name: &str, text: &[u8], mode: u32) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rdmabench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        file
    }

    #[test]
    fn a_token_file_others_may_read_is_warned_of() {
        let file = token_file("token-mode", b"a secret long enough to use\n", 0o644);
        let meta = std::fs::metadata(&file).unwrap();
        let warning = readable_by_others(&file, &meta).unwrap();
        assert!(
            warning.contains(&format!(
                "{} can be read by other users (mode 644)",
                file.display()
            )),
            "{warning}"
        );
        assert!(
            warning.contains(&format!("chmod 600 {}", file.display())),
            "{warning}"
        );
        assert!(Token::from_file(&file).is_ok(), "a warning, not a refusal");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(readable_by_others(&file, &meta), None);
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_token_file_over_the_limit_is_refused_naming_its_size() {
        let file = token_file("token-size", &[b'a'; 5000], 0o600);
        let err = Token::from_file(&file).unwrap_err();
        assert_eq!(
            err.message(),
            format!(
                "--token {}: the token file has 5000 bytes, more than the 4096-byte limit; a \
                 token is one line (`head -c 32 /dev/urandom | base64`)",
                file.display()
            )
        );
        std::fs::write(&file, [b'a'; 4096]).unwrap();
        assert!(Token::from_file(&file).is_ok(), "the limit itself is taken");
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }

    #[test]
    fn bad_tokens_are_usage_errors_that_show_no_secret() {
        let err = Token::resolve_from(None, Some(OsStr::new("short"))).unwrap_err();
        assert!(
            err.message().contains("RDMABENCH_TOKEN") && err.message().contains("5 bytes"),
            "{err}"
        );
        assert!(!err.message().contains("short"), "{err}");
        let missing = Path::new("/nonexistent/rdmabench-token");
        let err = Token::resolve_from(Some(missing), None).unwrap_err();
        assert!(
            err.message().contains("/nonexistent/rdmabench-token"),
            "{err}"
        );
        let t = token("a secret nobody may print");
        assert!(!format!("{t:?}").contains("secret"));
    }
}
