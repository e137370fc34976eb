//! The sweep record (`schema` "rdmabench.cluster/1"): what `rdmabench cluster` measured
//! across a fleet. One document per sweep, written by rank 0 after every round, so that a
//! sweep that fails keeps the pairs it measured. `plot` draws it as a heat map and `compare`
//! diffs two of them; `results/schema.md` defines every field.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{RunRecord, RunStatus, ToolRecord};
use crate::plan::PlanError;

/// The schema name and version of the sweep record.
pub(crate) const SWEEP_SCHEMA: &str = "rdmabench.cluster/1";

/// One sweep across the ranks of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    pub(crate) ranks: Vec<RankRecord>,
    /// The planned rounds: each a list of `[client rank, server rank]` pairs.
    pub schedule: Vec<Vec<[u32; 2]>>,
    /// The wall seconds of each round run, in order: the planned rounds, then the retries
    /// and re-runs (what the cost model `--dry-run` prints is checked against).
    #[serde(default)]
    pub round_secs: Vec<f64>,
    /// Every test of every pair measured so far, in the order they ran (re-runs last).
    pub pairs: Vec<PairRecord>,
    /// A congestion pattern's groups (`incast`, `bisection`, `all-to-all`): runs that went
    /// on at once, with their total against the receivers' ceilings; empty for the other
    /// patterns (whose tests are in `pairs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) groups: Vec<GroupRecord>,
    /// Per test: the fleet's figures.
    pub(crate) fleet: Vec<FleetFigures>,
    /// The ranks whose NICs the verdict names (slow, failing, with climbing counters, or
    /// unreachable).
    pub(crate) named: Vec<NamedNic>,
    /// The parts of the fabric beyond one NIC the verdict names: a path between two leaves
    /// (from `--topology`, or a cut inferred from the matrix), or one node's path toward a
    /// leaf.
    #[serde(default)]
    pub(crate) paths: Vec<NamedPath>,
    /// The configuration outliers rank 0 found in the ranks' facts before measuring
    /// (`cluster::preflight::outliers`): one per rank and fact.
    #[serde(default)]
    pub(crate) preflight: Vec<Outlier>,
    /// Whether the sweep ran to its end.
    pub status: RunStatus,
    /// Why the sweep stopped early (`status: failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One rank: where it ran and on which NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RankRecord {
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
    /// Its leaf switch, from `--topology`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf: Option<String>,
    /// Its rail group, from `--topology`, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<String>,
    /// Since when and why rank 0 could not reach it; its pairs from then on were not
    /// measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<Unreachable>,
    /// What its host said of itself when it joined (fact name to value: "active_mtu",
    /// "fw_ver", "link", "kernel", ...), for the preflight's outliers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, String>,
}

/// One test between two ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// Bandwidth as a percentage of the pair's own ceiling, when one is known (bandwidth
    /// tests only: a latency has no ceiling).
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

/// Runs of a congestion pattern that went on at once, their measured windows started
/// together: an incast's senders into one receiver, a bisection's halves, an all-to-all's
/// group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct GroupRecord {
    /// The round it ran in (0-based).
    pub round: u32,
    /// The test ("write-bw").
    pub test: String,
    /// The ranks whose NICs received: an incast's receiver, a bisection's second half,
    /// every rank of an all-to-all.
    pub receivers: Vec<u32>,
    /// Each run, as a pair: `client` the sender, `server` the receiver, `value` in GB/s.
    pub flows: Vec<PairRecord>,
    /// The measured flows' bandwidth summed, GB/s; null when none was measured.
    pub total_gbps: Option<f64>,
    /// The receivers' ceilings summed, GB/s, when every receiver's is known.
    pub ceiling_gbps: Option<f64>,
    /// `total_gbps` as a percentage of `ceiling_gbps`.
    pub pct_of_ceiling: Option<f64>,
    /// Jain's fairness index of the measured flows' figures: 1 when every flow got the
    /// same share, 1/k when one of k took all.
    pub fairness: Option<f64>,
    /// Each receiver's error, loss and congestion counters (ECN marks, CNPs, pause frames,
    /// retransmissions, ...) over the group's runs, by rank: sysfs name to change, zeros
    /// included (a zero says the NIC counted and nothing happened); empty where the NIC has
    /// none.
    #[serde(default)]
    pub receiver_counters: BTreeMap<u32, BTreeMap<String, u64>>,
}

/// Sweeps of up to this many ranks keep every pair's full result record.
pub(crate) const FULL_RECORDS_UP_TO: usize = 64;

/// The fleet's figures for one test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FleetFigures {
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
    /// How widely the pairs of no NIC named slow spread: a robust standard deviation of the
    /// logarithm of their figures (1.4826 x its median absolute deviation); null with fewer
    /// than three such pairs.
    #[serde(default)]
    pub spread: Option<f64>,
    /// The figure a pair must fall below (bandwidth) or rise above (latency) to be a
    /// suspect: the threshold, or three spreads from the median where that is further out.
    #[serde(default)]
    pub suspect_bar: f64,
}

/// A NIC the verdict names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct NamedNic {
    /// Its rank.
    pub rank: u32,
    /// "mlx5_3 of node17".
    pub label: String,
    /// "slow" (its pairs are suspects, with more than one partner or against a known-good
    /// one), "failing" (its tests failed, also on their retry, with most of its partners),
    /// "counters" (error or congestion counters climbed during its tests) or "unreachable"
    /// (rank 0 lost it: it never joined, died, or stopped answering).
    pub kind: String,
    /// What a person reads: "write-bw 42% of the median in 3 of 3 pairs" (a figure beyond
    /// twice the median as a multiple: "write-lat 380x the median ...").
    pub why: String,
}

/// A rank rank 0 lost: it never joined, died, or stopped answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Unreachable {
    /// The round it was lost in (0-based, as `pairs[].round`; 0 for a rank that never
    /// joined).
    pub round: u32,
    /// What rank 0 saw: "never joined within 60 s (--timeout)", "left the sweep: the peer
    /// closed the connection", "did not answer within 185 s".
    pub why: String,
}

/// A part of the fabric beyond one NIC that the verdict names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct NamedPath {
    /// "between leaves" (every pair across two leaves slow, pairs inside each fine),
    /// "cut" (the same, inferred from the matrix without a topology) or "toward leaf" (one
    /// node's pairs slow only toward one leaf).
    pub kind: String,
    /// The two sides: leaf names, or for "toward leaf" the NIC's label and the leaf; for a
    /// cut, each side's ranks ("ranks 0-2").
    pub between: [String; 2],
    /// The ranks on each side.
    pub ranks: [Vec<u32>; 2],
    /// What a person reads: "write-bw 9% of the median in 9 of 9 pairs across, 100% inside".
    pub why: String,
}

/// One rank whose configuration differs from most of the fleet's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Outlier {
    /// Its rank.
    pub rank: u32,
    /// The fact ("active_mtu").
    pub fact: String,
    /// Its value.
    pub value: String,
    /// The value a strict majority of the ranks that told this fact have (at least two).
    pub usual: String,
    /// How many ranks have the usual value, of how many that told this fact.
    pub usual_count: u32,
    /// Ranks that told this fact.
    pub of: u32,
    /// What a person reads: "rxe3 of node3: active MTU 1024 where 3 of 4 have 4096".
    pub why: String,
}

/// Whether a figure of this unit is better when lower: latency ("us") is, bandwidth is not.
pub(crate) fn lower_is_better(unit: &str) -> bool {
    unit == "us"
}

impl RankRecord {
    /// A rank as it joined: "`device` of `host`", nothing else known yet.
    pub(crate) fn new(rank: u32, host: &str, device: &str, fw_ver: Option<String>) -> Self {
        RankRecord {
            rank,
            host: host.to_string(),
            device: device.to_string(),
            fw_ver,
            label: format!("{device} of {host}"),
            leaf: None,
            rail: None,
            unreachable: None,
            facts: BTreeMap::new(),
        }
    }

    /// The NIC's identity across launches, which may number the ranks differently:
    /// "host/device", or the label when the host or the device is unknown.
    pub(crate) fn nic_key(&self) -> String {
        if self.host.is_empty() || self.device.is_empty() {
            self.label.clone()
        } else {
            format!("{}/{}", self.host, self.device)
        }
    }

    /// The label a person reads ("mlx5_3 of node17"), made up when the record has none.
    pub(crate) fn shown(&self) -> String {
        if self.label.is_empty() {
            format!("{} of {}", self.device, self.host)
        } else {
            self.label.clone()
        }
    }
}

impl SweepRecord {
    /// The record of rank `rank`.
    pub(crate) fn rank(&self, rank: u32) -> Option<&RankRecord> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// The fleet's figures for `test`.
    pub(crate) fn fleet_for(&self, test: &str) -> Option<&FleetFigures> {
        self.fleet.iter().find(|f| f.test == test)
    }

    /// The unit of `test`'s figures as recorded ("GB/s" or "us").
    pub(crate) fn unit_of(&self, test: &str) -> String {
        self.pairs
            .iter()
            .find(|p| p.test == test)
            .map(|p| p.unit.clone())
            .or_else(|| self.fleet_for(test).map(|f| f.unit.clone()))
            .unwrap_or_default()
    }

    /// The median `test`'s figures stand against: the fleet's, as rank 0 judged it, or for a
    /// record without fleet figures the median of its pairs' measurements.
    pub(crate) fn fleet_median(&self, test: &str) -> Option<f64> {
        self.fleet_for(test).map(|f| f.median).or_else(|| {
            let values: Vec<f64> = self
                .measurements(test)
                .values()
                .filter_map(|p| p.value)
                .collect();
            model::stats::median(&values)
        })
    }

    /// The unit `test`'s figures are shown in and the factor from the recorded one:
    /// [`display_unit`](crate::units::display_unit) on the fleet median, so that rank 0's
    /// summary, the heat map and `compare` of two sweeps (on the before sweep) show a sweep's
    /// figures alike.
    pub(crate) fn shown_unit(&self, test: &str) -> (String, f64) {
        crate::units::display_unit(&self.unit_of(test), self.fleet_median(test))
    }

    /// The one measurement of `test` that stands for each pair of ranks, keyed by the two
    /// ranks in increasing order (a pair is one whichever side was the client): the first
    /// planned measurement with a figure (a retry's, where the planned round's failed), else
    /// the first planned one (it failed); a re-run only where the schedule did not plan the
    /// pair.
    pub fn measurements(&self, test: &str) -> BTreeMap<(u32, u32), &PairRecord> {
        let priority = |p: &PairRecord| (p.rerun, p.value.is_none());
        let mut chosen: BTreeMap<(u32, u32), &PairRecord> = BTreeMap::new();
        for p in self.pairs.iter().filter(|p| p.test == test) {
            if p.client == p.server {
                continue;
            }
            let key = (p.client.min(p.server), p.client.max(p.server));
            match chosen.get(&key) {
                Some(kept) if priority(kept) <= priority(p) => {}
                _ => {
                    chosen.insert(key, p);
                }
            }
        }
        chosen
    }
}

/// Whether the file at `path` is a sweep record: a JSON document whose `schema` names
/// `rdmabench.cluster/…`. A file that cannot be read or parsed is not one (the reader of
/// result records then says why it cannot be read).
pub(crate) fn is_sweep_file(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    schema_of(&text).is_ok_and(|s| s.is_some_and(|s| s.starts_with("rdmabench.cluster/")))
}

/// The `schema` field of a JSON document, the rest skipped unbuilt (a sweep of 100,000 ranks
/// is hundreds of MB: a `serde_json::Value` of it would take several times that).
fn schema_of(text: &str) -> serde_json::Result<Option<String>> {
    #[derive(Deserialize)]
    struct Schema {
        schema: Option<String>,
    }
    match serde_json::from_str::<Schema>(text) {
        Ok(s) => Ok(s.schema),
        // Valid JSON of another shape (an array, a schema that is not a string) has none.
        Err(e) if e.is_data() => serde_json::from_str::<serde::de::IgnoredAny>(text).map(|_| None),
        Err(e) => Err(e),
    }
}

/// Reads and parses a sweep record. A file that cannot be read is an error (exit 1); one
/// that is not a valid sweep record of this version is a [`PlanError`] (exit 2); both name
/// the file.
pub fn load_sweep(path: &Path) -> Result<SweepRecord> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the sweep record '{shown}'"))?;
    let schema = schema_of(&text)
        .map_err(|e| PlanError::Value(format!("'{shown}' is not valid JSON: {e}")))?;
    match schema.as_deref() {
        Some(SWEEP_SCHEMA) => {}
        other => bail!(PlanError::Value(format!(
            "'{shown}' has schema '{}', but this rdmabench reads sweep records of '{SWEEP_SCHEMA}'",
            other.unwrap_or("none")
        ))),
    }
    // Parsed again from the text, so that an error says the line and column.
    serde_json::from_str(&text).map_err(|e| {
        PlanError::Value(format!(
            "'{shown}' is not a valid {SWEEP_SCHEMA} record ({e}); see results/schema.md"
        ))
        .into()
    })
}

/// Whether `paths` are all sweep records (true) or all result records (false); a mix is
/// refused, naming a file of each kind.
pub(crate) fn all_sweeps(paths: &[&Path]) -> Result<bool, PlanError> {
    let kinds: Vec<bool> = paths.iter().map(|p| is_sweep_file(p)).collect();
    let sweep = kinds.iter().position(|&k| k);
    let result = kinds.iter().position(|&k| !k);
    match (sweep, result) {
        (Some(s), Some(r)) => Err(PlanError::Value(format!(
            "'{}' is a sweep record ({SWEEP_SCHEMA}) and '{}' is not: sweeps and result \
             records cannot be used together; give sweep records only, or result records only",
            paths[s].display(),
            paths[r].display()
        ))),
        (Some(_), None) => Ok(true),
        _ => Ok(false),
    }
}

/// A synthetic sweep for tests: four ranks on two hosts (rank 3, "mlx5_1 of node2", is
/// slow), a round-robin schedule, write-bw (46 GB/s; 20 GB/s with rank 3) and write-lat
/// (2.0 us; 4.5 us with rank 3), and the fleet's figures as rank 0 would write them.
#[cfg(test)]
pub(crate) fn sample_sweep() -> SweepRecord {
    let hosts = [
        ("node1", "mlx5_0"),
        ("node1", "mlx5_1"),
        ("node2", "mlx5_0"),
        ("node2", "mlx5_1"),
    ];
    let ranks: Vec<RankRecord> = hosts
        .iter()
        .enumerate()
        .map(|(i, (host, device))| {
            RankRecord::new(i as u32, host, device, Some("28.39.1002".to_string()))
        })
        .collect();
    let schedule = vec![
        vec![[0, 1], [2, 3]],
        vec![[0, 2], [1, 3]],
        vec![[0, 3], [1, 2]],
    ];
    let mut pairs = Vec::new();
    for (test, unit, good, slow) in [
        ("write-bw", "GB/s", 46.0, 20.0),
        ("write-lat", "us", 2.0, 4.5),
    ] {
        for (round, list) in schedule.iter().enumerate() {
            for &[client, server] in list {
                let value = if server == 3 || client == 3 {
                    slow
                } else {
                    good
                };
                pairs.push(sample_pair(
                    round as u32,
                    client,
                    server,
                    test,
                    unit,
                    Some(value),
                    good,
                ));
            }
        }
    }
    let fleet = vec![
        sample_fleet("write-bw", "GB/s", &[46.0, 20.0]),
        sample_fleet("write-lat", "us", &[2.0, 4.5]),
    ];
    SweepRecord {
        schema: SWEEP_SCHEMA.to_string(),
        tool: ToolRecord {
            version: "0.1.0".to_string(),
            git: None,
        },
        started_at: "2026-12-01T08:00:00Z".to_string(),
        launcher: "Slurm".to_string(),
        pattern: "pairs".to_string(),
        tests: vec!["write-bw".to_string(), "write-lat".to_string()],
        min_pct: 80.0,
        max_lat_factor: 1.5,
        ranks,
        schedule,
        round_secs: vec![10.2, 9.8, 10.1],
        pairs,
        groups: Vec::new(),
        fleet,
        named: vec![NamedNic {
            rank: 3,
            label: "mlx5_1 of node2".to_string(),
            kind: "slow".to_string(),
            why: "write-bw 43% of the fleet median in 3 of 3 pairs".to_string(),
        }],
        paths: Vec::new(),
        preflight: Vec::new(),
        status: RunStatus::Complete,
        error: None,
    }
}

/// One synthetic measurement; `median` is the fleet's.
#[cfg(test)]
pub(crate) fn sample_pair(
    round: u32,
    client: u32,
    server: u32,
    test: &str,
    unit: &str,
    value: Option<f64>,
    median: f64,
) -> PairRecord {
    let pct = value.map(|v| v / median * 100.0);
    let suspect = match (pct, lower_is_better(unit)) {
        (Some(p), false) => p < 80.0,
        (Some(p), true) => p > 150.0,
        (None, _) => false,
    };
    PairRecord {
        round,
        client,
        server,
        test: test.to_string(),
        rerun: false,
        retry: false,
        value,
        unit: unit.to_string(),
        pct_of_median: pct,
        pct_of_ceiling: None,
        suspect,
        error: value
            .is_none()
            .then(|| "the peer closed the connection".to_string()),
        record: None,
        client_counters: BTreeMap::new(),
        server_counters: BTreeMap::new(),
    }
}

#[cfg(test)]
fn sample_fleet(test: &str, unit: &str, values: &[f64; 2]) -> FleetFigures {
    FleetFigures {
        test: test.to_string(),
        unit: unit.to_string(),
        pairs: 6,
        median: values[0],
        min: values[0].min(values[1]),
        max: values[0].max(values[1]),
        ceiling_gbps: None,
        spread: None,
        suspect_bar: if lower_is_better(unit) {
            values[0] * 2.0
        } else {
            values[0] * 0.9
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_round_trips_through_json() {
        let s = sample_sweep();
        let text = serde_json::to_string(&s).unwrap();
        let back: SweepRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_pair_is_measured_once_whichever_side_was_the_client() {
        let mut s = sample_sweep();
        let bw = |p: &PairRecord| p.test == "write-bw";
        // Both directions of 0-1 and a re-run of 0-1: the first planned one stands.
        s.pairs
            .push(sample_pair(3, 1, 0, "write-bw", "GB/s", Some(40.0), 46.0));
        let mut rerun = sample_pair(4, 0, 1, "write-bw", "GB/s", Some(10.0), 46.0);
        rerun.rerun = true;
        s.pairs.push(rerun);
        // 2-3 failed in the plan; a re-run does not replace it.
        s.pairs
            .retain(|p| !(bw(p) && p.client == 2 && p.server == 3));
        s.pairs
            .push(sample_pair(0, 2, 3, "write-bw", "GB/s", None, 46.0));
        let mut rerun = sample_pair(4, 3, 2, "write-bw", "GB/s", Some(30.0), 46.0);
        rerun.rerun = true;
        s.pairs.push(rerun);
        let m = s.measurements("write-bw");
        assert_eq!(m.len(), 6);
        assert_eq!(m[&(0, 1)].value, Some(46.0));
        assert_eq!(m[&(2, 3)].value, None);
        assert!(!m[&(2, 3)].rerun);
        // A pair only re-run is shown by its re-run.
        s.pairs
            .retain(|p| !(bw(p) && (p.client, p.server) == (0, 3)));
        let mut only = sample_pair(4, 3, 0, "write-bw", "GB/s", Some(21.0), 46.0);
        only.rerun = true;
        s.pairs.push(only);
        assert_eq!(s.measurements("write-bw")[&(0, 3)].value, Some(21.0));
    }

    #[test]
    fn a_retry_that_measured_stands_for_its_pair_and_the_failure_stays_recorded() {
        // The six-node guest: round 1's write-bw 2<-3 failed (rxe's remote invalid request),
        // its retry measured it. The record keeps both; the pair's figure is the retry's.
        let mut s = sample_sweep();
        s.pairs
            .retain(|p| !(p.test == "write-bw" && (p.client, p.server) == (2, 3)));
        let mut failed = sample_pair(0, 2, 3, "write-bw", "GB/s", None, 46.0);
        failed.error = Some("work request 1 completed with status 'remote invalid request'".into());
        s.pairs.push(failed);
        let mut retry = sample_pair(5, 2, 3, "write-bw", "GB/s", Some(0.5), 46.0);
        retry.retry = true;
        s.pairs.push(retry);
        let m = s.measurements("write-bw");
        assert_eq!(m[&(2, 3)].value, Some(0.5));
        assert!(m[&(2, 3)].retry);
        let failed = s.pairs.iter().find(|p| p.error.is_some()).unwrap();
        assert!(!failed.retry && failed.value.is_none(), "{failed:?}");
    }

    #[test]
    fn nics_are_known_by_host_and_device_else_by_label() {
        let mut r = sample_sweep().ranks[3].clone();
        assert_eq!(r.nic_key(), "node2/mlx5_1");
        r.host.clear();
        assert_eq!(r.nic_key(), "mlx5_1 of node2");
    }

    #[test]
    fn files_are_told_apart_by_their_schema() {
        let dir = std::env::temp_dir().join(format!("rdmabench-sweep-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sweep = dir.join("sweep.json");
        std::fs::write(&sweep, serde_json::to_vec(&sample_sweep()).unwrap()).unwrap();
        let result = dir.join("result.json");
        std::fs::write(&result, br#"{"schema": "rdmabench.result/1"}"#).unwrap();
        assert_eq!(load_sweep(&sweep).unwrap(), sample_sweep());
        assert_eq!(all_sweeps(&[&sweep, &sweep]), Ok(true));
        assert_eq!(all_sweeps(&[&result]), Ok(false));
        let e = all_sweeps(&[&result, &sweep])
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            e.contains("'") && e.contains("sweep.json") && e.contains("result.json"),
            "{e}"
        );

        let broken = dir.join("broken.json");
        std::fs::write(&broken, br#"{"schema": "rdmabench.cluster/1", "ranks": 3}"#).unwrap();
        let e = load_sweep(&broken).unwrap_err();
        assert!(e.is::<PlanError>(), "{e}");
        assert!(e.to_string().contains("broken.json"), "{e}");
        let e = load_sweep(&dir.join("none.json")).unwrap_err();
        assert!(
            !e.is::<PlanError>() && format!("{e:#}").contains("none.json"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
