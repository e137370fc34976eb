//! The messages of the control protocol, in the order a run uses them.
//!
//! The handshake (`handshake.rs`): client `Hello` (with its nonce), server `Hello` (with its
//! nonce), client `Auth` (its proof of the token, if it has one), server `Welcome` (its own
//! proof), `Busy` (another run is going on) or `Reject`.
//! Then client -> server: `Rail` (which rail of how many this connection carries), `Plan`, `Endpoints`, `Ready`, then per size and repetition
//! `StartSize`, `Heartbeat`s while the measured loop runs, `SendsOver` once its bandwidth
//! loop's operations all completed, `SizeDone`; finally `Finish`.
//! Server -> client: `PlanAccepted` (or `Reject`), `Endpoints`, `Ready`, per size
//! `Ready`, `Heartbeat`s while it measures, `SendsOver` once its own operations completed
//! (`-b`), and `SizeReport`. Either side may send `Reject` to end the run with a reason.
//! A side that waits for a particular message passes over heartbeats.
//! With a token, every message after `Welcome`, each way, travels in a sealed frame (`wire.rs`).

use serde::{Deserialize, Serialize};
use verbs::Endpoint;

use crate::engine::staged::BounceLayout;
use crate::plan::TestPlan;
use crate::report::{RunRecord, SizeResult};

/// Identifies an rdmabench peer in the first message.
pub(crate) const MAGIC: &str = "rdmabench";
/// Bumped whenever a message or its framing changes shape or meaning. 8: with a token, every
/// frame after the handshake carries a sequence number and an HMAC-SHA256 under a key of the
/// connection (`wire.rs`); frames without a token are as in 7. 9: the plan is strict (an
/// unknown or missing field refuses it: `plan::TestPlan`), so a new test parameter needs no
/// bump: a peer that lacks it refuses the plan, naming it. Nor does a new kind of message (a
/// congestion round's `AtStart`, `Start`, `FlowsDone`, `Work::Together`): a peer that lacks
/// it refuses the message as unknown, naming it, and no older message changed. 10: a
/// sweep's `Work::Serve` and `Work::Measure` carry the run's CPU slot on its host.
pub(crate) const PROTOCOL_VERSION: u32 = 10;

/// One control message.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// First message each way.
    Hello {
        /// Always [`MAGIC`].
        magic: String,
        /// [`PROTOCOL_VERSION`] of the sender.
        protocol: u32,
        /// The sender's rdmabench version; empty in the hello of a server with a token (a
        /// client learns no more than the protocol's version before it proved the token).
        tool_version: String,
        /// 32 random bytes from the OS, base64: what the other side's proof must cover.
        /// (Absent before protocol 3, so that an older peer still gets the version check.)
        #[serde(default)]
        nonce: String,
    },
    /// The client's answer to the server's hello: its proof of the token, or none.
    Auth {
        /// Base64 of HMAC-SHA256(token, client label, server nonce, client nonce).
        proof: Option<String>,
    },
    /// The server took the client for a run, with its own proof of the token, or none.
    Welcome {
        /// Base64 of HMAC-SHA256(token, server label, client nonce, server nonce).
        proof: Option<String>,
    },
    /// The server is serving another run.
    Busy,
    /// The rail this connection carries: the client opens one connection per rail (`-d a,b`),
    /// each starting with this, and the server pairs them with its own rails by `index`.
    Rail {
        /// The rail's position in the client's `-d` list, from 0.
        index: u32,
        /// How many rails the client runs.
        count: u32,
        /// The client's devices, in rail order (for the error of a differing rail count).
        devices: Vec<String>,
        /// Random text the client gives all its rails' connections: the server takes the
        /// connections of one client only.
        run: String,
    },
    /// The client's plan.
    Plan(Box<TestPlan>),
    /// The server adopted the plan.
    PlanAccepted,
    /// The run cannot go on; the reason is shown to the user on both sides.
    Reject {
        /// Why.
        reason: String,
        /// True when the sender refused the plan as asked (a bad value or combination, or a
        /// limit of its device), which both sides report as a usage error (exit 2); false
        /// when the run failed.
        #[serde(default)]
        refused: bool,
    },
    /// One endpoint per QP.
    Endpoints {
        /// In QP order.
        qps: Vec<Endpoint>,
        /// The sender's bounce buffers when its memory is staged (`--mem cuda-staged`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bounce: Option<BounceLayout>,
    },
    /// A barrier: both sides are ready for the next step.
    Ready,
    /// The client is about to measure this size.
    StartSize {
        /// Message size in bytes.
        size: u64,
        /// Repetition, from 0.
        rep: u32,
    },
    /// The sender is alive and measuring.
    Heartbeat,
    /// The sender's operations of this size all completed: a receiver may stop waiting for
    /// more once it drained (duration runs, and UC/UD which may lose messages).
    SendsOver,
    /// The client's figures for one size, and the operations each QP carried in all.
    SizeDone {
        /// What the client measured.
        result: Box<SizeResult>,
        /// Operations per QP, warm-up included (atomic targets check their counters).
        ops_per_qp: Vec<u64>,
    },
    /// The server's verdict on one size: the figures both sides report, and whether the
    /// payload that landed on the server was right.
    SizeReport {
        /// The figures to report.
        result: Box<SizeResult>,
        /// True when the server's check passed (or there was nothing to check).
        ok: bool,
        /// What was checked, or what differed.
        detail: String,
        /// Operations the server completed per QP (with `-b` the client's atomic counters
        /// are checked against them).
        ops_per_qp: Vec<u64>,
    },
    /// The run is over.
    Finish,
    /// A cluster sweep: a rank tells the coordinator (rank 0) who it is and where its
    /// measuring server listens.
    Join(Box<Joining>),
    /// A cluster sweep: the coordinator's next step for one rank.
    Assign {
        /// The round (planned rounds first, then re-runs).
        round: u32,
        /// Which of the sweep's tests.
        test: u32,
        /// What this rank does.
        work: Work,
    },
    /// A cluster sweep: a rank's part of an assignment is over.
    PairDone {
        /// The run's record (the client's figures; the server's counters), when it ran.
        record: Option<Box<RunRecord>>,
        /// Why it failed.
        error: Option<String>,
    },
    /// A cluster sweep's congestion round: this rank's served runs are set up and wait to
    /// start (or have ended); rank 0 answers `Start` once every rank's are.
    AtStart,
    /// A cluster sweep's congestion round: every run of the round starts now.
    Start,
    /// A cluster sweep's congestion round: this rank's runs are over, one entry per run.
    FlowsDone {
        /// Its served runs, then its measured ones, in the order assigned.
        flows: Vec<FlowDone>,
    },
    /// A cluster sweep is over (or ends early): the exit status every rank takes, and why.
    SweepEnd {
        /// 0 all well, 1 a rank failed, 2 a rank cannot take part as started (other options,
        /// a rank number outside the launch), 3 a finding (a NIC named, a test that failed twice).
        exit: u8,
        /// One line for the rank's terminal.
        reason: String,
    },
}

/// What a rank says when it joins a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Joining {
    /// Its rank.
    pub rank: u32,
    /// The world's size as its launcher said.
    pub size: u32,
    /// Its rank on its node (with `--per-rail`, its rail).
    pub local_rank: u32,
    /// Its sweep options as (option, value), in the order `SweepSpec` lists them (tests,
    /// each test's plan, pattern, verdict settings, timeout): every rank must run the same
    /// sweep, and rank 0 names each option that differs with both values. (Protocol 6; a
    /// digest of them before.)
    pub options: Vec<(String, String)>,
    /// Its host name.
    pub host: String,
    /// Its RDMA device.
    pub device: String,
    /// The device's firmware version.
    pub fw_ver: Option<String>,
    /// The TCP port its measuring server listens on.
    pub port: u16,
    /// What its host says of itself (fact name to value), for rank 0's preflight:
    /// firmware, link, active MTU, PCIe, GPUDirect readiness, kernel, rdma-core, RoCE QoS.
    /// (Protocol 7.)
    pub facts: std::collections::BTreeMap<String, String>,
}

/// A rank's part in one test of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Work {
    /// Serve one run to rank `client`, and to no one else.
    Serve {
        /// The rank that will connect.
        client: u32,
        /// The address it connects from (as rank 0 saw it): a connection from any other
        /// address is dropped. (Protocol 7.)
        from: String,
        /// This run's CPU slot among the runs of the round on this rank's host
        /// (`placement::choose_for_slot`). (Protocol 10.)
        cpu_slot: u32,
    },
    /// Run the client side against rank `server` at `host`:`port`.
    Measure {
        /// The rank that serves.
        server: u32,
        /// Its address.
        host: String,
        /// Its measuring server's port.
        port: u16,
        /// This run's CPU slot among the runs of the round on this rank's host. (Protocol 10.)
        cpu_slot: u32,
    },
    /// Nothing this time: answer at once.
    Rest,
    /// A congestion round: serve the runs of `serve`'s ranks and run the client side against
    /// `measure`'s, all at once, the served runs starting their windows when rank 0 says
    /// `Start`; answer `FlowsDone`.
    Together {
        /// The ranks whose runs this rank serves.
        serve: Vec<FlowFrom>,
        /// The ranks this rank measures against.
        measure: Vec<FlowTo>,
    },
}

/// A client rank of a congestion round, as its server hears of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowFrom {
    /// The rank that will connect.
    pub client: u32,
    /// The address it connects from.
    pub from: String,
}

/// A server rank of a congestion round, as its client hears of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowTo {
    /// The rank that serves.
    pub server: u32,
    /// Its address.
    pub host: String,
    /// Its measuring server's port.
    pub port: u16,
}

/// One run of a congestion round, as the rank that served or measured it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowDone {
    /// The other rank of the run.
    pub peer: u32,
    /// The run's record (the client's figures; the server's counters and ceilings).
    pub record: Option<Box<RunRecord>>,
    /// Why it failed.
    pub error: Option<String>,
}

impl Message {
    /// The first message of this side, with its nonce.
    pub fn hello(nonce: String) -> Self {
        Message::Hello {
            magic: MAGIC.to_string(),
            protocol: PROTOCOL_VERSION,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            nonce,
        }
    }

    /// A short name for errors ("expected Ready, got Heartbeat").
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "Hello",
            Message::Auth { .. } => "Auth",
            Message::Welcome { .. } => "Welcome",
            Message::Busy => "Busy",
            Message::Rail { .. } => "Rail",
            Message::Plan(_) => "Plan",
            Message::PlanAccepted => "PlanAccepted",
            Message::Reject { .. } => "Reject",
            Message::Endpoints { .. } => "Endpoints",
            Message::Ready => "Ready",
            Message::StartSize { .. } => "StartSize",
            Message::Heartbeat => "Heartbeat",
            Message::SendsOver => "SendsOver",
            Message::SizeDone { .. } => "SizeDone",
            Message::SizeReport { .. } => "SizeReport",
            Message::Finish => "Finish",
            Message::Join(_) => "Join",
            Message::Assign { .. } => "Assign",
            Message::PairDone { .. } => "PairDone",
            Message::AtStart => "AtStart",
            Message::Start => "Start",
            Message::FlowsDone { .. } => "FlowsDone",
            Message::SweepEnd { .. } => "SweepEnd",
        }
    }
}
