//! What `rdmabench cluster`'s arguments mean, the same on every rank (`SweepSpec`): the tests
//! each pair runs with their resolved plans, the schedule's pattern and its rounds, the
//! verdict's thresholds, and the options every rank must share. `args.rs` reads the command
//! line into it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use super::congestion;
use super::fabric::Fabric;
pub(crate) use super::pattern::Pattern;
use super::schedule::{self, Rounds, ScheduleError};
use crate::plan::{shown, Mode, TestKind, TestPlan};
use crate::run::RunOptions;

/// Seconds a run's set-up takes besides its measured loop (opening the device, QPs, the
/// handshakes, rank 0's assignment and the answers): the cost model's allowance per test and
/// round. Measured in the four-node soft-RoCE guest (TCG, debug build): rounds of write-bw
/// (1 s) and write-lat (1000 iterations) took 4.1-5.9 s, 4.9 s on average over 6 rounds,
/// so 1.9 s per test beside 1.01 s of loops. Hardware sets up in tenths of a second: there
/// the model overestimates, which is the side a plan should err on.
pub(crate) const SETUP_SECS: f64 = 2.0;

/// One test of the sweep: its plan and this rank's options for it.
#[derive(Debug, Clone)]
pub struct SweepTest {
    /// The test.
    pub kind: TestKind,
    /// Its plan, every default filled.
    pub plan: TestPlan,
    /// This rank's options for one run of it (quiet, no files).
    pub opts: RunOptions,
}

impl SweepTest {
    /// The unit of the pair's figure: bandwidth or latency.
    pub fn unit(&self) -> &'static str {
        match self.kind.mode {
            Mode::Bw => "GB/s",
            Mode::Lat => "us",
        }
    }

    /// What a plan line shows of it: "write-bw (64 KiB, 1 s)", "write-lat (2 B, 1000
    /// iterations)".
    pub(crate) fn describe(&self) -> String {
        let size = self.plan.sizes.first().map_or(0, |&s| s);
        let stop = match self.plan.duration {
            Some(d) => format!("{d} s"),
            None => format!("{} iterations", self.plan.iters),
        };
        format!(
            "{} ({}, {stop})",
            self.kind,
            crate::units::format_size(size)
        )
    }

    /// About how long one run takes: set-up plus the measured loop.
    pub(crate) fn estimate_secs(&self) -> f64 {
        SETUP_SECS + self.loop_secs()
    }

    /// About how long the measured loops of one run take: the duration, or for an iteration
    /// count 10 us per operation (a slow link's figure), per size and repetition.
    pub(crate) fn loop_secs(&self) -> f64 {
        let each = match self.plan.duration {
            Some(d) => d,
            None => self.plan.iters as f64 * 10e-6,
        };
        each * f64::from(self.plan.repeat) * self.plan.sizes.len() as f64
    }
}

/// What the arguments mean, the same on every rank.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// The tests, in order.
    pub tests: Vec<SweepTest>,
    /// The pattern.
    pub(crate) pattern: Pattern,
    /// --root.
    pub root: Option<usize>,
    /// --fan-in.
    pub fan_in: Option<usize>,
    /// --pattern file's pairs.
    pub file_pairs: Vec<(usize, usize)>,
    /// --per-rail.
    pub per_rail: bool,
    /// --min-pct.
    pub min_pct: f64,
    /// --max-lat-factor.
    pub max_lat_factor: f64,
    /// --topology: where each NIC attaches (rank 0 places the ranks by it).
    pub(crate) fabric: Option<Fabric>,
    /// Where rank 0 writes the sweep record.
    pub json: Option<PathBuf>,
    /// Where rank 0 writes the sweep's metrics (`--prom`).
    pub prom: Option<PathBuf>,
    /// --timeout.
    pub timeout: Duration,
    /// Everything above that every rank must share, as (option, value) in a fixed order:
    /// what a rank's `Join` carries ([`differing_options`] compares two).
    pub options: Vec<(String, String)>,
}

/// Differences named in a refusal; the rest are counted.
const DIFFERENCES_NAMED: usize = 4;

impl SweepSpec {
    /// The planned rounds for `size` ranks.
    pub(crate) fn rounds(&self, size: usize) -> Result<Rounds, ScheduleError> {
        match self.pattern {
            Pattern::Quick => schedule::quick(size),
            Pattern::Pairs => schedule::round_robin(size),
            Pattern::Ring => schedule::ring(size),
            Pattern::OneToAll => schedule::one_to_all(size, self.root.unwrap_or(0)),
            Pattern::File => schedule::packed(size, &self.file_pairs),
            Pattern::Incast => congestion::incast(size, self.fan_in.unwrap_or(1), self.root),
            Pattern::Bisection => congestion::bisection(size),
            Pattern::AllToAll => congestion::all_to_all(size),
        }
    }

    /// About how long one round takes: every test once.
    pub(crate) fn round_secs(&self) -> f64 {
        self.tests.iter().map(SweepTest::estimate_secs).sum()
    }

    /// The tests' names, in order.
    pub(crate) fn test_names(&self) -> Vec<String> {
        self.tests.iter().map(|t| t.kind.to_string()).collect()
    }

    /// The options every rank must share, by name: the tests, each test's plan field by
    /// field ("write-bw tx-depth"), the schedule and the verdict's settings. A pairs file's
    /// pairs travel as their count and a digest (a large file would not fit a message).
    pub(super) fn canonical_options(&self) -> Vec<(String, String)> {
        let mut out = vec![("--tests".to_string(), self.test_names().join(","))];
        for t in &self.tests {
            out.push((format!("{} size", t.kind), t.plan.sizes_text()));
            let fields = serde_json::to_value(&t.plan).unwrap_or_default();
            for (key, value) in fields.as_object().into_iter().flatten() {
                if key != "test" && key != "sizes" {
                    out.push((
                        format!("{} {}", t.kind, key.replace('_', "-")),
                        shown(value),
                    ));
                }
            }
        }
        let named = |name: &str, value: String| (name.to_string(), value);
        out.extend([
            named("--pattern", self.pattern.name().to_string()),
            named("--root", self.root.map_or("none".into(), |r| r.to_string())),
            named(
                "--fan-in",
                self.fan_in.map_or("none".into(), |k| k.to_string()),
            ),
            named("--pairs-file", pairs_text(&self.file_pairs)),
            named("--per-rail", self.per_rail.to_string()),
            named("--min-pct", self.min_pct.to_string()),
            named("--max-lat-factor", self.max_lat_factor.to_string()),
            named("--timeout", format!("{} s", self.timeout.as_secs_f64())),
        ]);
        out
    }
}

/// A pairs file's pairs in a line: none, or their count and a digest of them.
fn pairs_text(pairs: &[(usize, usize)]) -> String {
    use sha2::{Digest, Sha256};
    if pairs.is_empty() {
        return "none".to_string();
    }
    let text: String = pairs.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
    let hash: String = Sha256::digest(text.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{} pairs (sha256 {hash})", pairs.len())
}

/// How rank `rank`'s options (`theirs`) differ from rank 0's (`ours`), one entry per option
/// that differs ("write-bw size: rank 0 4 KiB, rank 3 8 KiB"), the first few named and the
/// rest counted; empty when they agree. A different `--tests` is named alone (every test's
/// options would differ with it).
pub(crate) fn differing_options<'a>(
    ours: &'a [(String, String)],
    theirs: &'a [(String, String)],
    rank: u32,
) -> Vec<String> {
    let index = |list: &'a [(String, String)]| -> BTreeMap<&'a str, &'a str> {
        list.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    };
    let (mine, yours) = (index(ours), index(theirs));
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (key, _) in ours.iter().chain(theirs) {
        let (a, b) = (mine.get(key.as_str()), yours.get(key.as_str()));
        if seen.insert(key.as_str()) && a != b {
            out.push(format!(
                "{key}: rank 0 {}, rank {rank} {}",
                a.unwrap_or(&"none"),
                b.unwrap_or(&"none")
            ));
        }
    }
    if let Some(tests) = out.iter().position(|d| d.starts_with("--tests:")) {
        out = vec![out.swap_remove(tests)];
    }
    if out.len() > DIFFERENCES_NAMED {
        let more = out.len() - DIFFERENCES_NAMED;
        out.truncate(DIFFERENCES_NAMED);
        out.push(format!("{more} more"));
    }
    out
}

/// The rounds a sweep runs over ranks whose local ranks are `local_ranks` (one entry per
/// rank): `spec`'s pattern over all of them, or with `--per-rail` within each rail (the
/// ranks of one local rank), the rails' rounds side by side ([`schedule::rail_aligned`]). Rank 0
/// schedules the sweep by it and `--dry-run` plans by it, so the plan is what runs.
pub(crate) fn for_sweep(spec: &SweepSpec, local_ranks: &[usize]) -> Result<Rounds, ScheduleError> {
    if spec.per_rail {
        schedule::rail_aligned(local_ranks, |n| spec.rounds(n))
    } else {
        spec.rounds(local_ranks.len())
    }
}
