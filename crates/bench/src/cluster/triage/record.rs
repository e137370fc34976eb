//! The triage record (`schema` "rdmabench.triage/1"): the collective, every step of the
//! split with every flow it measured, and the verdict. Rank 0 writes it (`--json FILE`)
//! after every round, so a triage that fails keeps what it measured; `--expect FILE` reads
//! one a healthy run wrote; `plot` draws its ring.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::split::StepKind;
use crate::files::read_bounded;
use crate::plan::PlanError;
use crate::report::{RankRecord, RunStatus, ToolRecord};

/// The schema name and version of the triage record.
pub(crate) const TRIAGE_SCHEMA: &str = "rdmabench.triage/1";

/// The largest triage record read back (`--expect`, `plot`): 64 MiB.
const READ_LIMIT: u64 = 64 << 20;

/// One triage across the ranks of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct TriageRecord {
    /// Always [`TRIAGE_SCHEMA`].
    pub schema: String,
    /// The tool that coordinated.
    pub tool: ToolRecord,
    /// When the triage started, RFC 3339 in UTC.
    pub started_at: String,
    /// The launcher the ranks were started by.
    pub launcher: String,
    /// The test every flow ran ("write-bw").
    pub test: String,
    /// A link below this percentage of the reference (the expected rate, else the ring's
    /// median link) is slow.
    pub min_pct: f64,
    /// The link rate expected, when known.
    pub expected: Option<ExpectedRecord>,
    /// The most rounds the split may take, stated before it starts.
    pub max_rounds: u32,
    /// Every rank, in rank order.
    pub ranks: Vec<RankRecord>,
    /// The collective in isolation: the ring's figures, once its round ran.
    pub collective: Option<CollectiveRecord>,
    /// Every round, in order: the ring first.
    pub steps: Vec<StepRecord>,
    /// What the split found; null until it ends.
    pub verdict: Option<VerdictRecord>,
    /// "complete", or "failed" with `error`.
    pub status: RunStatus,
    /// Why the triage failed.
    pub error: Option<String>,
}

/// The link rate expected and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ExpectedRecord {
    /// GB/s: the bus bandwidth a ring should reach (its slowest link's rate).
    pub busbw_gbps: f64,
    /// "--expect FILE" (a healthy run's busbw) or "ceilings" (the slowest rank's).
    pub from: String,
}

/// The ring all-reduce's data movement over every link at once, as nccl-tests reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CollectiveRecord {
    /// How many ranks the ring holds.
    pub ranks: u32,
    /// The all-reduce's size the times are for, bytes (bandwidth-bound: the figures below do
    /// not depend on it).
    pub size_bytes: u64,
    /// Its time: 2(n-1) steps of size/n bytes each, every step as long as the slowest link
    /// takes; null when a link failed.
    pub seconds: Option<f64>,
    /// size / seconds, GB/s.
    pub algbw_gbps: Option<f64>,
    /// algbw x 2(n-1)/n, GB/s: the slowest link's rate.
    pub busbw_gbps: Option<f64>,
    /// busbw as a percentage of the expected, when one is known.
    pub pct_of_expected: Option<f64>,
    /// Each rank's part, in ring order.
    pub per_rank: Vec<RankShare>,
}

/// One rank's part of the ring: the time it sends to the next rank, the time it waits for its
/// predecessor (the rest of each step).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RankShare {
    /// The rank.
    pub rank: u32,
    /// The rank it writes into.
    pub next: u32,
    /// Its link's rate, GB/s; null when it failed.
    pub link_gbps: Option<f64>,
    /// Seconds sending, over the whole all-reduce.
    pub send_seconds: Option<f64>,
    /// Seconds waiting for its predecessor's chunk.
    pub wait_seconds: Option<f64>,
}

/// One round of the triage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct StepRecord {
    /// The round (0-based).
    pub round: u32,
    /// What it measured: "ring", "halves", "across" or "partners".
    pub kind: StepKind,
    /// Its groups: rings for ring and halves, pairs otherwise.
    pub groups: Vec<Vec<u32>>,
    /// Every flow it ran, all at once.
    pub flows: Vec<FlowRecord>,
    /// Below this a flow was slow, GB/s.
    pub bar_gbps: f64,
    /// Its seconds, set-up included.
    pub seconds: f64,
}

/// One flow: `from` wrote into `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FlowRecord {
    /// The sending rank.
    pub from: u32,
    /// The receiving rank.
    pub to: u32,
    /// GB/s; null when it failed.
    pub gbps: Option<f64>,
    /// Below the step's bar, or failed.
    pub slow: bool,
    /// Why it failed.
    pub error: Option<String>,
    /// The error, loss and congestion counters that climbed on the sender's NIC during it
    /// (empty: none did); null when they were not read (the port exposes none, or the flow
    /// failed).
    pub from_counters: Option<BTreeMap<String, u64>>,
    /// The same for the receiver's NIC.
    pub to_counters: Option<BTreeMap<String, u64>>,
}

/// What the triage found, in the words of its first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct VerdictRecord {
    /// "healthy", "rank", "link", "one_of", "cut", "everywhere" or "unexplained".
    pub kind: String,
    /// The ranks it names: one list (a rank, a link's two, the candidates), or a cut's two
    /// sides.
    pub ranks: Vec<Vec<u32>>,
    /// The first line a person reads.
    pub line: String,
    /// What the node checks on the named ranks found (counters during the load, topology,
    /// GPUDirect), one a line.
    pub checks: Vec<String>,
    /// The exit status: 0 healthy, 3 a finding.
    pub exit: i32,
}

/// The `busbw_gbps` of the triage record at `path` (`--expect`): a complete record of a
/// healthy triage. Anything else is refused (exit 2) naming the file and why.
pub(crate) fn expected_busbw(path: &Path) -> Result<f64> {
    #[derive(Deserialize)]
    struct Schema {
        schema: Option<String>,
    }
    let shown = path.display();
    let bytes = read_bounded("the --expect record", path, READ_LIMIT)
        .map_err(|e| PlanError::Value(format!("--expect: {e:#}")))?;
    let schema = serde_json::from_slice::<Schema>(&bytes)
        .ok()
        .and_then(|s| s.schema);
    if schema.as_deref() != Some(TRIAGE_SCHEMA) {
        bail!(PlanError::Value(format!(
            "--expect '{shown}' has schema '{}', not '{TRIAGE_SCHEMA}': give the --json FILE a \
             healthy `rdmabench triage` wrote",
            crate::text::printable(schema.as_deref().unwrap_or("none"))
        )));
    }
    let rec: TriageRecord = serde_json::from_slice(&bytes).map_err(|e| {
        PlanError::Value(format!(
            "--expect '{shown}' is not a valid {TRIAGE_SCHEMA} record ({e})"
        ))
    })?;
    let healthy = rec.verdict.as_ref().is_some_and(|v| v.kind == "healthy");
    match rec.collective.and_then(|c| c.busbw_gbps) {
        Some(b) if healthy && b > 0.0 && b.is_finite() => Ok(b),
        _ => bail!(PlanError::Value(format!(
            "--expect '{shown}' is not a healthy triage with a busbw (its verdict: {}); give \
             the record of a run that exited 0",
            rec.verdict
                .map(|v| crate::text::printable(&v.kind))
                .unwrap_or_else(|| "none".into())
        ))),
    }
}

/// Whether the file at `path` is a triage record: its first 4 KiB name the schema (the
/// record's first field), so a large sweep record is not read for it.
pub(crate) fn is_triage_file(path: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| f.take(4096).read_to_end(&mut head));
    let text = String::from_utf8_lossy(&head);
    read.is_ok() && text.contains(&format!("\"schema\": \"{TRIAGE_SCHEMA}\""))
}

/// Reads a triage record for `plot` (bounded; a wrong schema exits 2).
pub(crate) fn load(path: &Path) -> Result<TriageRecord> {
    let shown = path.display();
    let bytes = read_bounded("the triage record", path, READ_LIMIT)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        PlanError::Value(format!(
            "'{shown}' is not a valid {TRIAGE_SCHEMA} record ({e})"
        ))
        .into()
    })
}
