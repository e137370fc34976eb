//! The sweep record (`schema` "rdmabench.cluster/1"): what `rdmabench cluster` measured
//! across a fleet. One document per sweep, written by rank 0 after every round, so that a
//! sweep that fails keeps the pairs it measured. `plot` draws it as a heat map and `compare`
//! diffs two of them; `results/schema.md` defines every field.

use serde::{Deserialize, Serialize};

use super::{RunRecord, RunStatus, ToolRecord};

/// The schema name and version of the sweep record.
pub const SWEEP_SCHEMA: &str = "rdmabench.cluster/1";

/// One sweep across the ranks of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// Always [`SWEEP_SCHEMA`].
    pub schema: String,
    /// The tool that coordinated.
    pub tool: ToolRecord,
    /// When the sweep started, RFC 3339 in UTC.
    pub started_at: String,
    /// The launcher the ranks were started by ("Open MPI", "Slurm", ...).
    pub launcher: String,
    /// The schedule's pattern: "pairs", "ring", "one-to-all" or "file".
    pub pattern: String,
    /// The tests each pair ran, in order (e.g. ["write-bw", "write-lat"]).
    pub tests: Vec<String>,
    /// A pair below this percentage of the fleet's median bandwidth is a suspect.
    pub min_pct: f64,
    /// A pair above this multiple of the fleet's median latency is a suspect.
    pub max_lat_factor: f64,
    /// Every rank, in rank order.
    pub ranks: Vec<RankRecord>,
    /// The planned rounds: each a list of `[client rank, server rank]` pairs.
    pub schedule: Vec<Vec<[u32; 2]>>,
    /// Every test of every pair measured so far, in the order they ran (re-runs last).
    pub pairs: Vec<PairRecord>,
    /// Per test: the fleet's figures.
    pub fleet: Vec<FleetFigures>,
    /// The ranks whose NICs the verdict names (slow, or with climbing counters).
    pub named: Vec<NamedNic>,
    /// Whether the sweep ran to its end.
    pub status: RunStatus,
    /// Why the sweep stopped early (`status: failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One rank: where it ran and on which NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRecord {
    /// Its rank in the launch.
    pub rank: u32,
    /// Its host name.
    pub host: String,
    /// Its RDMA device ("mlx5_3").
    pub device: String,
    /// The device's firmware version, when known.
    #[serde(default)]
    pub fw_ver: Option<String>,
    /// The label a person reads: "mlx5_3 of node17".
    pub label: String,
}

/// One test between two ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRecord {
    /// The round it ran in (0-based; re-runs come after the planned rounds).
    pub round: u32,
    /// The rank that ran the client side.
    pub client: u32,
    /// The rank that served.
    pub server: u32,
    /// The test ("write-bw").
    pub test: String,
    /// True for a re-run of a suspect against a known-good partner.
    #[serde(default)]
    pub rerun: bool,
    /// True for the second attempt of a test that failed in its planned round.
    #[serde(default)]
    pub retry: bool,
    /// The pair's figure: GB/s for a bandwidth test, the median latency in microseconds for
    /// a latency test; null when the test failed.
    pub value: Option<f64>,
    /// "GB/s" or "us".
    pub unit: String,
    /// The figure as a percentage of the fleet's median for this test.
    #[serde(default)]
    pub pct_of_median: Option<f64>,
    /// Bandwidth as a percentage of the pair's own ceiling, when one is known.
    #[serde(default)]
    pub pct_of_ceiling: Option<f64>,
    /// Below `min_pct` of the median (bandwidth) or above `max_lat_factor` times it
    /// (latency).
    #[serde(default)]
    pub suspect: bool,
    /// Why the test failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The client's result record, in sweeps of at most [`FULL_RECORDS_UP_TO`] ranks (a
    /// larger sweep keeps each pair's figures only, so that its record stays small).
    #[serde(default)]
    pub record: Option<Box<RunRecord>>,
    /// The client NIC's error, loss and congestion counters that climbed during the test
    /// (sysfs name to change; traffic counters left out).
    #[serde(default)]
    pub client_counters: std::collections::BTreeMap<String, u64>,
    /// The same for the server's NIC.
    #[serde(default)]
    pub server_counters: std::collections::BTreeMap<String, u64>,
}

/// Sweeps of up to this many ranks keep every pair's full result record.
pub const FULL_RECORDS_UP_TO: usize = 64;

/// The fleet's figures for one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetFigures {
    /// The test.
    pub test: String,
    /// "GB/s" or "us".
    pub unit: String,
    /// Pairs measured.
    pub pairs: u32,
    /// Median over the planned pairs.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// The lowest ceiling among the pairs, GB/s (bandwidth tests, when known).
    #[serde(default)]
    pub ceiling_gbps: Option<f64>,
}

/// A NIC the verdict names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedNic {
    /// Its rank.
    pub rank: u32,
    /// "mlx5_3 of node17".
    pub label: String,
    /// "slow" (its pairs are suspects, with more than one partner or against a known-good
    /// one) or "counters" (error or congestion counters climbed during its tests).
    pub kind: String,
    /// What a person reads: "write-bw 42% of the fleet median in 3 of 3 pairs".
    pub why: String,
}
