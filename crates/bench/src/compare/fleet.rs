//! `rdmabench compare BEFORE.json AFTER.json` on two sweep records (`rdmabench.cluster/1`):
//! what a firmware roll-out (or a cable swap, a switch setting) did to every pair of NICs.
//!
//! Pairs are matched by test and by the two NICs they joined, known by host and device
//! (`RankRecord::nic_key`), not by rank numbers, which a second launch may hand out
//! differently. Each pair stands for one measurement (`SweepRecord::measurements`), so a
//! pair's verdict is its change against the threshold alone (`--threshold` for bandwidth,
//! `--threshold-lat` for latency): there are no repetitions to test the noise with. A pair
//! that now fails counts as a regression. The NICs common to several worse pairs are named:
//! a NIC slower with every partner is the NIC, not its partners.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use anyhow::{bail, Result};
use serde::Serialize;

use super::CompareArgs;
use crate::plan::PlanError;
use crate::report::sweep::{load_sweep, lower_is_better};
use crate::report::{PairRecord, RankRecord, RunStatus, SweepRecord};
use crate::text::printable;

/// The schema of `compare --json` on two sweeps.
pub(crate) const SWEEP_COMPARE_SCHEMA: &str = "rdmabench.compare.cluster/1";

/// A NIC is named when at least this many of its pairs (of one test) got worse.
pub(crate) const NAMED_AT: usize = 2;

/// What happened to one pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PairVerdict {
    /// Slower beyond the threshold.
    Slower,
    /// Faster beyond the threshold.
    Faster,
    /// Within the threshold.
    Same,
    /// Measured before, failed after: a regression.
    FailedAfter,
    /// Failed before, measured after.
    FailedBefore,
    /// Failed in both sweeps.
    FailedBoth,
}

impl PairVerdict {
    /// The word the outputs print.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PairVerdict::Slower => "slower",
            PairVerdict::Faster => "faster",
            PairVerdict::Same => "same",
            PairVerdict::FailedAfter => "failed after",
            PairVerdict::FailedBefore => "failed before",
            PairVerdict::FailedBoth => "failed in both",
        }
    }

    /// Slower, or failing where it did not: what makes a regression.
    pub(crate) fn is_worse(self) -> bool {
        matches!(self, PairVerdict::Slower | PairVerdict::FailedAfter)
    }
}

/// One pair measured in both sweeps.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct PairChange {
    /// The test.
    pub test: String,
    /// The two NICs, as labels ("mlx5_3 of node17"), in the order of their keys.
    pub nics: [String; 2],
    /// "GB/s" or "us".
    pub unit: String,
    /// The figure before (null: the test failed).
    pub before: Option<f64>,
    /// The figure after.
    pub after: Option<f64>,
    /// (after - before) / before, percent.
    pub change_pct: Option<f64>,
    /// The verdict.
    pub verdict: PairVerdict,
}

/// A pair measured in one sweep only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct LonePair {
    /// The test.
    pub test: String,
    /// The two NICs.
    pub nics: [String; 2],
}

/// A NIC common to several pairs that got worse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct NicTally {
    /// Its label.
    pub nic: String,
    /// The test.
    pub test: String,
    /// Its pairs that got worse (slower or now failing).
    pub worse: usize,
    /// Its pairs compared.
    pub pairs: usize,
}

/// A NIC whose firmware differs between the sweeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct FirmwareChange {
    /// Its label.
    pub nic: String,
    /// Before.
    pub before: String,
    /// After.
    pub after: String,
}

/// Everything `compare` found between two sweeps.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SweepComparison {
    /// [`SWEEP_COMPARE_SCHEMA`].
    pub schema: &'static str,
    /// The before sweep's file.
    pub before: String,
    /// The after sweep's file.
    pub after: String,
    /// The before sweep, in a line.
    pub before_desc: String,
    /// The after sweep, in a line.
    pub after_desc: String,
    /// `--threshold`: the bandwidth change that counts, percent.
    pub threshold_pct: f64,
    /// `--threshold-lat`: the latency change that counts, percent.
    pub threshold_lat_pct: f64,
    /// Firmware that changed, NIC by NIC (information: usually the point).
    pub(crate) firmware: Vec<FirmwareChange>,
    /// Every pair measured in both, by test then NICs.
    pub(crate) pairs: Vec<PairChange>,
    /// Pairs measured only before.
    pub(crate) only_in_before: Vec<LonePair>,
    /// Pairs measured only after.
    pub(crate) only_in_after: Vec<LonePair>,
    /// NICs in at least [`NAMED_AT`] worse pairs of a test, most first.
    pub(crate) nics: Vec<NicTally>,
    /// Pairs slower.
    pub slower: usize,
    /// Pairs faster.
    pub faster: usize,
    /// Pairs the same.
    pub same: usize,
    /// Pairs that failed after but not before.
    pub failed_after: usize,
    /// True when a pair is slower or now fails.
    pub regressed: bool,
    /// Per test, the unit the terminal and Markdown show its figures in and the factor from
    /// the recorded unit: the before sweep's [`SweepRecord::shown_unit`], the unit its own
    /// summary showed (`--json` keeps the recorded units).
    #[serde(skip)]
    pub shown_units: BTreeMap<String, (String, f64)>,
}

/// One side of a matched pair: its two NICs' labels and its measurement.
type Side<'a> = ([&'a str; 2], &'a PairRecord);

/// (test, NIC key, NIC key), the keys in order.
type PairKey<'a> = (&'a str, &'a str, &'a str);

/// Each rank's NIC key and label, made once (a sweep has several pairs per rank), and a
/// stand-in for a rank a pair names that the ranks do not list.
fn nic_names(sweep: &SweepRecord) -> HashMap<u32, (String, String)> {
    let mut known: HashMap<u32, (String, String)> = sweep
        .ranks
        .iter()
        .map(|r| (r.rank, (r.nic_key(), printable(&r.shown()))))
        .collect();
    for p in &sweep.pairs {
        for rank in [p.client, p.server] {
            known
                .entry(rank)
                .or_insert_with(|| (format!("rank {rank}"), format!("rank {rank}")));
        }
    }
    known
}

/// Every pair of `sweep` that stands for a measurement, by test and NIC keys (`names`: its
/// [`nic_names`]); the keys and labels are borrowed, nothing is copied per pair.
fn pairs_by_nic<'a>(
    sweep: &'a SweepRecord,
    names: &'a HashMap<u32, (String, String)>,
) -> BTreeMap<PairKey<'a>, Side<'a>> {
    let nic = |rank: u32| {
        names
            .get(&rank)
            .map_or(("", ""), |(key, label)| (key.as_str(), label.as_str()))
    };
    let mut tests: Vec<&str> = sweep.tests.iter().map(String::as_str).collect();
    let mut seen: HashSet<&str> = tests.iter().copied().collect();
    for p in &sweep.pairs {
        if seen.insert(&p.test) {
            tests.push(&p.test);
        }
    }
    let mut out = BTreeMap::new();
    for test in tests {
        for (&(a, b), &p) in &sweep.measurements(test) {
            let (mut x, mut y) = (nic(a), nic(b));
            if y.0 < x.0 {
                std::mem::swap(&mut x, &mut y);
            }
            out.insert((test, x.0, y.0), ([x.1, y.1], p));
        }
    }
    out
}

/// The verdict on one pair.
fn verdict(before: Option<f64>, after: Option<f64>, unit: &str, args: &Thresholds) -> PairVerdict {
    let (b, a) = match (before, after) {
        (Some(b), Some(a)) => (b, a),
        (Some(_), None) => return PairVerdict::FailedAfter,
        (None, Some(_)) => return PairVerdict::FailedBefore,
        (None, None) => return PairVerdict::FailedBoth,
    };
    let change = if b != 0.0 { (a - b) / b * 100.0 } else { 0.0 };
    let (threshold, worse) = if lower_is_better(unit) {
        (args.lat, change)
    } else {
        (args.bw, -change)
    };
    if worse > threshold {
        PairVerdict::Slower
    } else if -worse > threshold {
        PairVerdict::Faster
    } else {
        PairVerdict::Same
    }
}

/// The thresholds, percent.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// Bandwidth.
    pub bw: f64,
    /// Latency.
    pub lat: f64,
}

/// Compares two sweeps (`before` and `after` are (file, record)).
pub fn compare_sweeps(
    before: (&str, &SweepRecord),
    after: (&str, &SweepRecord),
    thresholds: Thresholds,
) -> SweepComparison {
    let (names_b, names_a) = (nic_names(before.1), nic_names(after.1));
    let (b, a) = (
        pairs_by_nic(before.1, &names_b),
        pairs_by_nic(after.1, &names_a),
    );
    let owned = |nics: &[&str; 2]| [nics[0].to_string(), nics[1].to_string()];
    let mut pairs = Vec::new();
    let mut only_in_before = Vec::new();
    for (key, (nics, pb)) in &b {
        let Some((after_nics, pa)) = a.get(key) else {
            only_in_before.push(LonePair {
                test: key.0.to_string(),
                nics: owned(nics),
            });
            continue;
        };
        let unit = pa.unit.clone();
        pairs.push(PairChange {
            test: key.0.to_string(),
            nics: owned(after_nics),
            change_pct: match (pb.value, pa.value) {
                (Some(x), Some(y)) if x != 0.0 => Some((y - x) / x * 100.0),
                _ => None,
            },
            verdict: verdict(pb.value, pa.value, &unit, &thresholds),
            before: pb.value,
            after: pa.value,
            unit,
        });
    }
    let only_in_after = a
        .iter()
        .filter(|(key, _)| !b.contains_key(*key))
        .map(|(key, (nics, _))| LonePair {
            test: key.0.to_string(),
            nics: owned(nics),
        })
        .collect();
    let count = |v: PairVerdict| pairs.iter().filter(|p| p.verdict == v).count();
    let tests: BTreeSet<&str> = pairs.iter().map(|p| p.test.as_str()).collect();
    let shown_units = tests
        .into_iter()
        .map(|t| (t.to_string(), before.1.shown_unit(t)))
        .collect();
    SweepComparison {
        schema: SWEEP_COMPARE_SCHEMA,
        before: before.0.to_string(),
        after: after.0.to_string(),
        before_desc: describe(before.1),
        after_desc: describe(after.1),
        threshold_pct: thresholds.bw,
        threshold_lat_pct: thresholds.lat,
        firmware: firmware(before.1, after.1),
        nics: tally(&pairs),
        slower: count(PairVerdict::Slower),
        faster: count(PairVerdict::Faster),
        same: count(PairVerdict::Same),
        failed_after: count(PairVerdict::FailedAfter),
        regressed: pairs.iter().any(|p| p.verdict.is_worse()),
        pairs,
        only_in_before,
        only_in_after,
        shown_units,
    }
}

impl SweepComparison {
    /// What regressed, in a few words for stderr; `None` when nothing did.
    pub(crate) fn regression(&self) -> Option<String> {
        if !self.regressed {
            return None;
        }
        let pairs = |n: usize| if n == 1 { "pair" } else { "pairs" };
        Some(match self.failed_after {
            0 => format!("{} {} slower", self.slower, pairs(self.slower)),
            f => format!(
                "{} {} slower, {f} {} failing only after",
                self.slower,
                pairs(self.slower),
                pairs(f)
            ),
        })
    }
}

/// The NICs in at least [`NAMED_AT`] worse pairs of one test, most worse pairs first.
fn tally(pairs: &[PairChange]) -> Vec<NicTally> {
    let mut count: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for p in pairs {
        for nic in &p.nics {
            let c = count.entry((p.test.clone(), nic.clone())).or_default();
            c.1 += 1;
            if p.verdict.is_worse() {
                c.0 += 1;
            }
        }
    }
    let mut named: Vec<NicTally> = count
        .into_iter()
        .filter(|(_, (worse, _))| *worse >= NAMED_AT)
        .map(|((test, nic), (worse, pairs))| NicTally {
            nic,
            test,
            worse,
            pairs,
        })
        .collect();
    // Most worse pairs first, then the larger share of its pairs, then by name.
    named.sort_by(|x, y| {
        y.worse
            .cmp(&x.worse)
            .then((y.worse * x.pairs).cmp(&(x.worse * y.pairs)))
            .then(x.nic.cmp(&y.nic))
    });
    named
}

/// The NICs in both sweeps whose firmware differs.
fn firmware(before: &SweepRecord, after: &SweepRecord) -> Vec<FirmwareChange> {
    // The first rank of each NIC before, as a linear search would find it.
    let mut before_by_key: HashMap<String, &RankRecord> = HashMap::new();
    for b in &before.ranks {
        before_by_key.entry(b.nic_key()).or_insert(b);
    }
    let mut out: BTreeMap<String, FirmwareChange> = BTreeMap::new();
    for a in &after.ranks {
        let Some(b) = before_by_key.get(&a.nic_key()) else {
            continue;
        };
        if let (Some(fb), Some(fa)) = (&b.fw_ver, &a.fw_ver) {
            if fb != fa {
                let nic = printable(&a.shown());
                out.entry(nic.clone()).or_insert_with(|| FirmwareChange {
                    nic,
                    before: printable(fb),
                    after: printable(fa),
                });
            }
        }
    }
    out.into_values().collect()
}

/// A sweep in a line: "4 ranks, pairs pattern (Slurm), 2026-12-01T08:00:00Z: write-bw".
pub(crate) fn describe(s: &SweepRecord) -> String {
    let status = match s.status {
        RunStatus::Complete => String::new(),
        RunStatus::Incomplete => ", INCOMPLETE (stopped without a word)".to_string(),
        RunStatus::Failed => format!(
            ", FAILED: {}",
            s.error.as_deref().unwrap_or("no error recorded")
        ),
    };
    printable(&format!(
        "{} ranks, {} pattern ({}), {}: {}{status}",
        s.ranks.len(),
        s.pattern,
        s.launcher,
        s.started_at,
        s.tests.join(", ")
    ))
}

/// The options of result records' comparisons that two sweeps have no use for.
fn refuse_record_options(args: &CompareArgs) -> Result<(), PlanError> {
    let given = [
        (!args.sizes.is_empty(), "--size"),
        (args.per_size, "--per-size"),
        (args.mixed_tests, "--mixed-tests"),
    ];
    let given: Vec<&str> = given.iter().filter(|g| g.0).map(|g| g.1).collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(PlanError::Value(format!(
        "{} appl{} to result records, not to sweeps (a sweep's pair has one figure)",
        given.join(", "),
        if given.len() == 1 { "ies" } else { "y" }
    )))
}

/// Loads the two sweeps `args` names and compares them.
pub(crate) fn build(args: &CompareArgs) -> Result<SweepComparison> {
    refuse_record_options(args)?;
    let after_path = match args.candidates.as_slice() {
        [one] => one,
        more => bail!(PlanError::Value(format!(
            "two sweeps are compared at a time (before and after); {} after-sweeps were given",
            more.len()
        ))),
    };
    let before = load_sweep(&args.baseline)?;
    let after = load_sweep(after_path)?;
    let (bname, aname) = (
        args.baseline.display().to_string(),
        after_path.display().to_string(),
    );
    for (name, s) in [(&bname, &before), (&aname, &after)] {
        if !s.groups.is_empty() {
            bail!(PlanError::Value(format!(
                "'{name}' is a congestion sweep (--pattern {}): compare diffs the pairs of \
                 pair sweeps (quick, pairs, ring, one-to-all, file); read a congestion \
                 sweep's groups in its record, or draw them with plot",
                s.pattern
            )));
        }
    }
    let thresholds = Thresholds {
        bw: args.threshold,
        lat: args.threshold_lat,
    };
    let comp = compare_sweeps((&bname, &before), (&aname, &after), thresholds);
    if comp.pairs.is_empty() {
        bail!(PlanError::Value(format!(
            "nothing to compare: '{bname}' and '{aname}' share no pair of NICs (host and \
             device) with a test in common"
        )));
    }
    Ok(comp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sweep::{sample_pair, sample_sweep};

    const T: Thresholds = Thresholds { bw: 5.0, lat: 10.0 };

    fn cmp(b: &SweepRecord, a: &SweepRecord) -> SweepComparison {
        compare_sweeps(("before.json", b), ("after.json", a), T)
    }

    /// The sweep with its ranks renumbered (rank k becomes 3 - k) and every figure of
    /// `test` between ranks with `slow` (old numbering) scaled by `factor`.
    fn renumbered(test: &str, slow: u32, factor: f64) -> SweepRecord {
        let mut s = sample_sweep();
        for p in &mut s.pairs {
            if p.test == test && (p.client == slow || p.server == slow) {
                p.value = p.value.map(|v| v * factor);
            }
            (p.client, p.server) = (3 - p.client, 3 - p.server);
        }
        for r in &mut s.ranks {
            r.rank = 3 - r.rank;
        }
        s.ranks.reverse();
        s
    }

    #[test]
    fn pairs_match_by_nic_not_by_rank() {
        let before = sample_sweep();
        let after = renumbered("write-bw", 0, 0.8);
        let c = cmp(&before, &after);
        assert_eq!(c.pairs.len(), 12, "{:#?}", c.pairs);
        assert!(c.only_in_before.is_empty() && c.only_in_after.is_empty());
        // mlx5_0 of node1 (rank 0 before, rank 3 after) is 20% slower with all three.
        let slower: Vec<&PairChange> = c
            .pairs
            .iter()
            .filter(|p| p.verdict == PairVerdict::Slower)
            .collect();
        assert_eq!(slower.len(), 3, "{slower:#?}");
        assert!(slower
            .iter()
            .all(|p| p.nics.contains(&"mlx5_0 of node1".to_string())));
        assert!((slower[0].change_pct.unwrap() + 20.0).abs() < 1e-9);
        assert_eq!((c.slower, c.same, c.faster), (3, 9, 0));
        assert_eq!(
            c.nics,
            [NicTally {
                nic: "mlx5_0 of node1".to_string(),
                test: "write-bw".to_string(),
                worse: 3,
                pairs: 3
            }]
        );
        assert!(c.regressed);
    }

    #[test]
    fn sweeps_with_leaves_and_paths_compare_as_others_and_older_ones_read() {
        let before = sample_sweep();
        let mut after = renumbered("write-bw", 0, 0.8);
        for r in &mut after.ranks {
            (r.leaf, r.rail) = (Some(format!("leaf{}", r.rank % 2)), Some("rail0".into()));
        }
        after.paths.push(crate::report::NamedPath {
            kind: "between leaves".into(),
            between: ["leaf0".into(), "leaf1".into()],
            ranks: [vec![0, 2], vec![1, 3]],
            why: "write-bw 43% of the median in 4 of 4 pairs across, 100% inside".into(),
        });
        // Through JSON, as compare reads it.
        let text = serde_json::to_string(&after).unwrap();
        assert!(text.contains(r#""leaf":"leaf1","rail":"rail0""#), "{text}");
        let read: SweepRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(read, after);
        let c = cmp(&before, &read);
        assert_eq!((c.pairs.len(), c.slower, c.same), (12, 3, 9));
        // A record from before --topology: no leaf, no rail, no paths.
        let mut old = serde_json::to_value(&before).unwrap();
        old.as_object_mut().unwrap().remove("paths");
        let old: SweepRecord = serde_json::from_value(old).unwrap();
        assert!(old.paths.is_empty() && old.ranks.iter().all(|r| r.leaf.is_none()));
        assert!(!serde_json::to_string(&old).unwrap().contains("leaf"));
    }

    #[test]
    fn latency_is_slower_when_it_rises_beyond_its_own_threshold() {
        let before = sample_sweep();
        let c = cmp(&before, &renumbered("write-lat", 1, 1.08));
        assert!(
            !c.regressed,
            "8% is within the latency threshold: {:#?}",
            c.pairs
        );
        let c = cmp(&before, &renumbered("write-lat", 1, 1.2));
        assert_eq!(c.slower, 3);
        assert_eq!(c.nics[0].nic, "mlx5_1 of node1");
        let c = cmp(&before, &renumbered("write-lat", 1, 0.7));
        assert_eq!((c.faster, c.regressed), (3, false));
    }

    #[test]
    fn failures_and_pairs_in_one_sweep_only() {
        let before = sample_sweep();
        let mut after = sample_sweep();
        let bw = |p: &PairRecord| p.test == "write-bw";
        after
            .pairs
            .retain(|p| !(bw(p) && (p.client, p.server) == (0, 1)));
        after
            .pairs
            .retain(|p| !(bw(p) && (p.client, p.server) == (1, 2)));
        after
            .pairs
            .push(sample_pair(2, 1, 2, "write-bw", "GB/s", None, 46.0));
        after.ranks[3].host = "node9".to_string();
        let c = cmp(&before, &after);
        assert_eq!(c.failed_after, 1);
        assert!(c.regressed);
        let lone = |v: &[LonePair]| v.iter().filter(|p| p.test == "write-bw").count();
        // 0-1 and the three pairs of the NIC that moved to node9.
        assert_eq!(lone(&c.only_in_before), 4, "{:#?}", c.only_in_before);
        assert_eq!(lone(&c.only_in_after), 3, "{:#?}", c.only_in_after);
        assert!(
            c.nics.is_empty(),
            "one worse pair names no NIC: {:#?}",
            c.nics
        );
    }

    #[test]
    fn firmware_changes_are_listed() {
        let before = sample_sweep();
        let mut after = sample_sweep();
        after.ranks[2].fw_ver = Some("28.40.1000".to_string());
        let c = cmp(&before, &after);
        assert_eq!(
            c.firmware,
            [FirmwareChange {
                nic: "mlx5_0 of node2".to_string(),
                before: "28.39.1002".to_string(),
                after: "28.40.1000".to_string()
            }]
        );
        assert!(!c.regressed && c.slower == 0);
    }
}
