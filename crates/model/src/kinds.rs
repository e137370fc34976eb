//! The kinds a plan is made of: the tests (a verb and a mode), the side's role, the
//! transport, the atomic operation and when a loop stops.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The RDMA operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND / RECV.
    Send,
    /// Atomic fetch-and-add or compare-and-swap on 8 bytes.
    Atomic,
}

/// Bandwidth (operations kept in flight) or latency (ping-pong, one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Bandwidth and message rate.
    Bw,
    /// Latency.
    Lat,
}

/// The tests rdmabench runs: a verb and a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestKind {
    /// The operation.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub mode: Mode,
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.verb {
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Send => "send",
            Verb::Atomic => "atomic",
        };
        let mode = match self.mode {
            Mode::Bw => "bw",
            Mode::Lat => "lat",
        };
        write!(f, "{verb}-{mode}")
    }
}

impl TestKind {
    /// A test by verb and mode.
    pub const fn new(verb: Verb, mode: Mode) -> Self {
        TestKind { verb, mode }
    }

    /// The title perftest users know.
    pub fn title(self) -> &'static str {
        match (self.verb, self.mode) {
            (Verb::Write, Mode::Bw) => "RDMA_Write BW Test",
            (Verb::Read, Mode::Bw) => "RDMA_Read BW Test",
            (Verb::Send, Mode::Bw) => "Send BW Test",
            (Verb::Atomic, Mode::Bw) => "Atomic BW Test",
            (Verb::Write, Mode::Lat) => "RDMA_Write Latency Test",
            (Verb::Read, Mode::Lat) => "RDMA_Read Latency Test",
            (Verb::Send, Mode::Lat) => "Send Latency Test",
            (Verb::Atomic, Mode::Lat) => "Atomic Latency Test",
        }
    }

    /// Every test.
    pub const ALL: [TestKind; 8] = [
        TestKind::new(Verb::Write, Mode::Bw),
        TestKind::new(Verb::Read, Mode::Bw),
        TestKind::new(Verb::Send, Mode::Bw),
        TestKind::new(Verb::Atomic, Mode::Bw),
        TestKind::new(Verb::Write, Mode::Lat),
        TestKind::new(Verb::Read, Mode::Lat),
        TestKind::new(Verb::Send, Mode::Lat),
        TestKind::new(Verb::Atomic, Mode::Lat),
    ];

    /// The test named `name` ("write-bw"), as records and the command line name it.
    pub fn parse(name: &str) -> Option<TestKind> {
        TestKind::ALL.into_iter().find(|t| t.to_string() == name)
    }

    /// True for tests whose latency is reported one-way (RTT/2): WRITE and SEND ping-pong.
    pub fn one_way(self) -> bool {
        matches!(self.verb, Verb::Write | Verb::Send)
    }
}

/// Which end of a run this side is: the client sends the plan and initiates; the server
/// adopts the plan and is the passive target, the SEND receiver or the latency responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Connects to the server and drives the run.
    Client,
    /// Waits for a client and serves its run.
    Server,
}

impl Role {
    /// "client" or "server".
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
        }
    }
}

/// The transport service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Connection {
    /// Reliable connection.
    #[serde(rename = "RC")]
    Rc,
    /// Unreliable connection.
    #[serde(rename = "UC")]
    Uc,
    /// Unreliable datagram.
    #[serde(rename = "UD")]
    Ud,
}

impl Connection {
    /// "RC", "UC" or "UD".
    pub fn name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Uc => "UC",
            Connection::Ud => "UD",
        }
    }

    /// Parses `-c`: RC, UC or UD in any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_uppercase().as_str() {
            "RC" => Ok(Connection::Rc),
            "UC" => Ok(Connection::Uc),
            "UD" => Ok(Connection::Ud),
            _ => Err(format!(
                "'{text}' is not a connection type: use RC, UC or UD"
            )),
        }
    }
}

/// The atomic operation of the atomic tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AtomicOp {
    /// Fetch-and-add of 1.
    #[serde(rename = "FETCH_AND_ADD")]
    FetchAdd,
    /// Compare-and-swap of a running count.
    #[serde(rename = "CMP_AND_SWAP")]
    CompareSwap,
}

impl AtomicOp {
    /// Parses `-A`: FETCH_AND_ADD or CMP_AND_SWAP (perftest's names), any case.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.to_ascii_uppercase().as_str() {
            "FETCH_AND_ADD" | "FAA" => Ok(AtomicOp::FetchAdd),
            "CMP_AND_SWAP" | "CAS" => Ok(AtomicOp::CompareSwap),
            _ => Err(format!(
                "'{text}' is not an atomic type: use FETCH_AND_ADD or CMP_AND_SWAP"
            )),
        }
    }

    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::FetchAdd => "FETCH_AND_ADD",
            AtomicOp::CompareSwap => "CMP_AND_SWAP",
        }
    }
}

/// When a loop ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many operations per QP.
    Iters(u64),
    /// After this long; the window leaves out `margin` at both ends.
    Duration {
        /// Whole run.
        total: Duration,
        /// Left out at the start and at the end.
        margin: Duration,
    },
}

impl Stop {
    /// The duration mode's margin for a run of `secs`: a tenth, at most two seconds.
    pub fn for_duration(secs: f64) -> Stop {
        let total = Duration::from_secs_f64(secs);
        Stop::Duration {
            total,
            margin: (total / 10).min(Duration::from_secs(2)),
        }
    }

    /// Operations per QP to post: the count, or `u64::MAX` until the time is up.
    pub fn limit(self) -> u64 {
        match self {
            Stop::Iters(n) => n,
            Stop::Duration { .. } => u64::MAX,
        }
    }

    /// The planned window's length (duration mode).
    pub fn window(self) -> Option<Duration> {
        match self {
            Stop::Iters(_) => None,
            Stop::Duration { total, margin } => Some(total.saturating_sub(margin * 2)),
        }
    }
}
