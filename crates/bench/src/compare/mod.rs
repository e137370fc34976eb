//! `rdmabench compare BASELINE.json CANDIDATE.json [...]`: did anything get slower?
//!
//! Every candidate record is compared to the baseline size by size: both medians, the change
//! in percent, and a verdict (faster / same / slower) that takes the runs' noise into account
//! ([`stats`] documents the method). Bandwidth records compare `bw_gbps` (higher is better);
//! latency records (a latency test's) compare p99 (lower is better) and show p50 beside it.
//! Differences between the records that make them incomparable (NIC model, link rate, MTU,
//! memory mode, test, parameters, sizes) are warned about and named; firmware, kernel and
//! host differences, usually the point of the comparison, are shown as information.
//!
//! Records of different tests are refused unless `--mixed-tests` says the user means it; a
//! bandwidth record and a latency record share no figure and are refused even then.
//! Two sweep records (`rdmabench.cluster/1`) are compared pair by pair ([`fleet`]); a sweep
//! with a result record is refused (exit 2).
//!
//! Exit codes: 0 nothing regressed; 3 something did (stderr says what in a line, the report
//! is on stdout); 1 a record could not be read; 2 what was asked cannot be compared (a
//! record that is not there or is a folder, records of different tests, no shared size: a
//! comparison of nothing is refused, never a pass) or bad usage.
//!
//! Long because of its tests (about 300 lines of fixtures and end-to-end comparisons); the code
//! above them is the comparison's one flow.

pub(crate) mod diff;
pub mod fleet;
mod fleet_output;
mod output;
pub(crate) mod stats;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::plan::PlanError;
use crate::report::{Exporter, JsonExporter, RunRecord, RunStatus, SizeResult, SCHEMA};
use diff::{
    check_shared_figure, check_together, describe_sizes, differences, sizes, Differences, Together,
};
use output::{MarkdownExporter, TableExporter};
use stats::{judge, median, Judgement, Settings, Verdict};

/// The schema of `compare --json`.
pub(crate) const COMPARE_SCHEMA: &str = "rdmabench.compare/1";

/// `rdmabench compare`'s options.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline record, or the sweep record before
    ///
    /// The baseline record (a JSON file written by a test's --json), or the sweep record
    /// before (written by `rdmabench cluster`)
    #[arg(value_name = "BASELINE")]
    pub baseline: PathBuf,

    /// Records compared to it, or the sweep record after
    ///
    /// One or more candidate records, each compared to the baseline; or the one sweep record
    /// after, compared to the one before pair by pair
    #[arg(value_name = "CANDIDATE", required = true, num_args = 1..)]
    pub candidates: Vec<PathBuf>,

    /// Smallest bandwidth change that counts, in percent
    ///
    /// Smallest bandwidth change that counts, in percent (the noise must be exceeded too,
    /// where records have repetitions; a sweep's pairs have none)
    #[arg(long, default_value_t = 3.0, value_name = "PCT", value_parser = parse_pct)]
    pub threshold: f64,

    /// Smallest p99 latency change that counts, in percent
    ///
    /// Smallest p99 latency change that counts, in percent (a sweep's pairs: their median
    /// latency)
    #[arg(long = "threshold-lat", default_value_t = 10.0, value_name = "PCT", value_parser = parse_pct)]
    pub threshold_lat: f64,

    /// Significance level of the test on the repetitions
    ///
    /// Significance level of the test on the repetitions (Mann-Whitney U, two-sided)
    #[arg(long, default_value_t = 0.05, value_name = "P", value_parser = parse_alpha)]
    pub alpha: f64,

    /// Judge each size on its own p-value (no adjustment)
    ///
    /// Judge each size on its own p-value, without the adjustment across sizes
    /// (Benjamini-Hochberg) that keeps a sweep of many sizes from raising false alarms
    #[arg(long)]
    pub per_size: bool,

    /// Compare only this size (repeat it) [default: every size]
    ///
    /// Compare only this message size (repeat it for several; accepts 64K, 1M) [default: every size both have]
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub sizes: Vec<u64>,

    /// Print the comparison as Markdown (for a pull request or a ticket)
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,

    /// Print the comparison as JSON
    ///
    /// Print the comparison as JSON (schema rdmabench.compare/1; of two sweeps,
    /// rdmabench.compare.cluster/1)
    #[arg(long)]
    pub json: bool,

    /// Compare records of different tests instead of refusing
    ///
    /// Compare records of different tests (write-bw against read-bw or write-lat) instead of
    /// refusing them; the difference is still warned about
    #[arg(long)]
    pub mixed_tests: bool,
}

fn parse_pct(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let t = t.strip_suffix('%').unwrap_or(t);
    match t.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..1000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{text}' is not a percentage: give a number from 0 to 1000, e.g. 3 or 3%"
        )),
    }
}

fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a significance level: give a number between 0 and 1, e.g. 0.05"
        )),
    }
}

/// Reads and parses a result record; the error names the file and the JSON error.
pub(crate) fn load_record(path: &Path) -> Result<RunRecord> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read the record '{}'; give a JSON file written by a test's --json",
            path.display()
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "'{}' is not valid JSON; give a record written by a test's --json",
            path.display()
        )
    })?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(SCHEMA) => {}
        Some(other) => bail!(
            "'{}' has schema '{other}', but this rdmabench reads '{SCHEMA}'; compare it with the rdmabench version that wrote it",
            path.display()
        ),
        None => bail!(
            "'{}' is not an rdmabench result record: it has no \"schema\": \"{SCHEMA}\"",
            path.display()
        ),
    }
    // Parsed again from the text, so that an error says the line and column.
    serde_json::from_str(&text).with_context(|| {
        format!(
            "'{}' is not a valid {SCHEMA} record; see results/schema.md",
            path.display()
        )
    })
}

/// What a row compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Metric {
    /// Payload bandwidth, GB/s; higher is better.
    BwGbps,
    /// 99th percentile latency, µs; lower is better.
    LatP99Us,
}

impl Metric {
    /// Short column title with the unit.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Metric::BwGbps => "BW [GB/s]",
            Metric::LatP99Us => "p99 [us]",
        }
    }
}

/// One size's comparison.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct Row {
    /// Message size in bytes.
    pub size: u64,
    /// What is compared.
    pub metric: Metric,
    /// Repetitions in the baseline (1 when it has none).
    pub baseline_n: usize,
    /// Repetitions in the candidate (1 when it has none).
    pub candidate_n: usize,
    /// Latency records: the baseline's median p50, µs.
    pub baseline_p50_us: Option<f64>,
    /// Latency records: the candidate's median p50, µs.
    pub candidate_p50_us: Option<f64>,
    /// The threshold applied, percent.
    pub threshold_pct: f64,
    /// The baseline's values compared: one per repetition (GB/s or p99 µs).
    pub baseline_values: Vec<f64>,
    /// The candidate's values compared.
    pub candidate_values: Vec<f64>,
    /// Medians, change, test and verdict.
    #[serde(flatten)]
    pub judgement: Judgement,
}

/// One candidate against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct Comparison {
    /// The baseline's file.
    pub baseline: String,
    /// The candidate's file.
    pub candidate: String,
    /// The baseline's record, described in one line.
    pub baseline_desc: String,
    /// The candidate's record, described in one line.
    pub candidate_desc: String,
    /// What differs besides the figures.
    #[serde(flatten)]
    pub differences: Differences,
    /// Sizes measured only in the baseline (not compared).
    pub only_in_baseline: Vec<u64>,
    /// Sizes measured only in the candidate (not compared).
    pub only_in_candidate: Vec<u64>,
    /// One row per size measured in both.
    pub rows: Vec<Row>,
    /// Rows judged slower.
    pub slower: usize,
    /// Rows judged faster.
    pub faster: usize,
    /// Rows judged the same.
    pub same: usize,
}

/// The settings of a comparison, as `--json` reports them.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct MethodSettings {
    /// `--threshold`.
    pub threshold_pct: f64,
    /// `--threshold-lat`.
    pub threshold_lat_pct: f64,
    /// `--alpha`.
    pub alpha: f64,
    /// The method in words.
    pub method: String,
}

/// Everything `compare` found.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct Report {
    /// [`COMPARE_SCHEMA`].
    pub schema: &'static str,
    /// The settings.
    pub settings: MethodSettings,
    /// One per candidate.
    pub comparisons: Vec<Comparison>,
    /// True when any candidate has a size judged slower.
    pub regressed: bool,
}

/// The method, in one sentence for the outputs.
pub(crate) const METHOD: &str =
    "a change counts only if it exceeds the threshold and, with repetitions, \
the runs' noise: two-sided Mann-Whitney U test (exact p-value) of the candidate's repetitions \
against the baseline's moved by the threshold, p-values adjusted across sizes by \
Benjamini-Hochberg (q), or no overlap of the repetitions when there are too few to reach alpha; \
without repetitions, the threshold alone";

/// What a record's rows compare: p99 for a latency record, bandwidth otherwise
/// ([`diff::check_shared_figure`] keeps the two kinds apart).
fn metric_of(r: &RunRecord) -> Metric {
    match diff::measure(r) {
        "latency" => Metric::LatP99Us,
        _ => Metric::BwGbps,
    }
}

/// The figures one size contributes: one value per repetition (or the single figure), and
/// the median p50 for latency; `None` for a size without the metric's figure (a latency
/// size without latency figures is not compared by its bandwidth).
fn values(r: &SizeResult, metric: Metric) -> Option<(Vec<f64>, Option<f64>)> {
    match metric {
        Metric::BwGbps => {
            if r.repetitions.is_empty() {
                Some((vec![r.bw_gbps], None))
            } else {
                Some((r.repetitions.iter().map(|x| x.bw_gbps).collect(), None))
            }
        }
        Metric::LatP99Us => {
            let reps: Option<Vec<_>> = r.repetitions.iter().map(|x| x.lat_us).collect();
            match reps {
                Some(reps) if !reps.is_empty() => {
                    let p50: Vec<f64> = reps.iter().map(|l| l.p50).collect();
                    Some((reps.iter().map(|l| l.p99).collect(), median(&p50)))
                }
                _ => r.lat_us.as_ref().map(|l| (vec![l.p99], Some(l.p50))),
            }
        }
    }
}

fn describe(r: &RunRecord) -> String {
    let reps = if r.params.repeat > 1 {
        format!(", {} repetitions", r.params.repeat)
    } else {
        String::new()
    };
    format!(
        "{} {} on {} (fw {}), {}{reps}{}",
        r.params.test,
        r.params.mem,
        r.device.name,
        r.device.fw_ver,
        r.started_at,
        status_text(r)
    )
}

/// How a run that did not measure its whole plan ended, for its one-line description.
pub(crate) fn status_text(r: &RunRecord) -> String {
    let n = r.results.len();
    match r.status {
        RunStatus::Complete => String::new(),
        RunStatus::Incomplete => format!(
            ", INCOMPLETE: {n} sizes recorded, then the run stopped without a word (killed?)"
        ),
        RunStatus::Failed => format!(
            ", FAILED after {n} sizes: {}",
            r.error.as_deref().unwrap_or("no error recorded")
        ),
    }
}

/// Compares one candidate to the baseline.
pub(crate) fn compare_records(
    baseline: (&str, &RunRecord),
    candidate: (&str, &RunRecord),
    threshold_pct: f64,
    threshold_lat_pct: f64,
    alpha: f64,
) -> Comparison {
    let (bname, b) = baseline;
    let (cname, c) = candidate;
    let mut by_size: BTreeMap<u64, &SizeResult> = BTreeMap::new();
    for r in c.results.iter().rev() {
        by_size.insert(r.size, r);
    }
    let mut rows = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let metric = metric_of(b);
    for br in &b.results {
        if !seen.insert(br.size) {
            continue;
        }
        let Some(cr) = by_size.get(&br.size) else {
            continue;
        };
        let (Some((bv, bp50)), Some((cv, cp50))) = (values(br, metric), values(cr, metric)) else {
            continue;
        };
        let threshold = match metric {
            Metric::BwGbps => threshold_pct,
            Metric::LatP99Us => threshold_lat_pct,
        };
        let settings = Settings {
            threshold_pct: threshold,
            alpha,
            higher_is_better: metric == Metric::BwGbps,
        };
        rows.push(Row {
            size: br.size,
            metric,
            baseline_n: bv.len(),
            candidate_n: cv.len(),
            baseline_p50_us: bp50,
            candidate_p50_us: cp50,
            threshold_pct: threshold,
            judgement: judge(&bv, &cv, &settings),
            baseline_values: bv,
            candidate_values: cv,
        });
    }
    rows.sort_by_key(|r| r.size);
    let (bs, cs) = (sizes(b), sizes(c));
    let mut comp = Comparison {
        baseline: bname.to_string(),
        candidate: cname.to_string(),
        baseline_desc: describe(b),
        candidate_desc: describe(c),
        differences: differences(b, c),
        only_in_baseline: bs.difference(&cs).copied().collect(),
        only_in_candidate: cs.difference(&bs).copied().collect(),
        slower: 0,
        faster: 0,
        same: 0,
        rows,
    };
    comp.recount();
    comp
}

impl Comparison {
    /// Counts the verdicts again.
    fn recount(&mut self) {
        let count = |v: Verdict| {
            self.rows
                .iter()
                .filter(|r| r.judgement.verdict == v)
                .count()
        };
        (self.slower, self.faster, self.same) = (
            count(Verdict::Slower),
            count(Verdict::Faster),
            count(Verdict::Same),
        );
    }

    /// Judges again, with the p-values of the sizes beyond their threshold (and decided by
    /// the U test) adjusted across those sizes by Benjamini-Hochberg, when there are several.
    pub(crate) fn adjust_across_sizes(&mut self, alpha: f64) {
        let family: Vec<(usize, f64)> = self
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r.judgement.spread {
                stats::SpreadTest::MannWhitney { p, .. }
                    if r.judgement
                        .change_pct
                        .is_some_and(|c| c.abs() > r.threshold_pct) =>
                {
                    Some((i, p))
                }
                _ => None,
            })
            .collect();
        if family.len() < 2 {
            return;
        }
        let q = stats::bh_adjust(&family.iter().map(|f| f.1).collect::<Vec<_>>());
        for (&(i, _), q) in family.iter().zip(q) {
            let r = &mut self.rows[i];
            let settings = Settings {
                threshold_pct: r.threshold_pct,
                alpha,
                higher_is_better: r.metric == Metric::BwGbps,
            };
            r.judgement = stats::judge_adjusted(
                &r.baseline_values,
                &r.candidate_values,
                &settings,
                Some((q, family.len())),
            );
        }
        self.recount();
    }
}

/// Loads every record, compares each candidate to the baseline.
pub(crate) fn build_report(args: &CompareArgs) -> Result<Report> {
    let baseline = load_record(&args.baseline)?;
    let bname = args.baseline.display().to_string();
    let mut candidates = Vec::new();
    for path in &args.candidates {
        candidates.push((path.display().to_string(), load_record(path)?));
    }
    let all: Vec<(&str, &RunRecord)> = std::iter::once((bname.as_str(), &baseline))
        .chain(candidates.iter().map(|(n, r)| (n.as_str(), r)))
        .collect();
    check_together(&all, Together::SameTest, args.mixed_tests)?;
    check_shared_figure(&all)?;
    let mut comparisons = Vec::new();
    for (cname, c) in &candidates {
        let mut comp = compare_records(
            (&bname, &baseline),
            (cname, c),
            args.threshold,
            args.threshold_lat,
            args.alpha,
        );
        if !args.sizes.is_empty() {
            for size in &args.sizes {
                if !comp.rows.iter().any(|r| r.size == *size) {
                    bail!(PlanError::Value(format!(
                        "--size {size}: not measured in both '{bname}' ({}) and '{cname}' ({})",
                        describe_sizes(&sizes(&baseline)),
                        describe_sizes(&sizes(c))
                    )));
                }
            }
            comp.rows.retain(|r| args.sizes.contains(&r.size));
            comp.only_in_baseline.clear();
            comp.only_in_candidate.clear();
            comp.recount();
        }
        if !args.per_size {
            comp.adjust_across_sizes(args.alpha);
        }
        if comp.rows.is_empty() {
            bail!(PlanError::Value(format!(
                "nothing to compare: '{bname}' ({}) and '{cname}' ({}) share no message size; run both with the same -s or -a",
                describe_sizes(&sizes(&baseline)),
                describe_sizes(&sizes(c))
            )));
        }
        comparisons.push(comp);
    }
    let regressed = comparisons.iter().any(|c| c.slower > 0);
    Ok(Report {
        schema: COMPARE_SCHEMA,
        settings: MethodSettings {
            threshold_pct: args.threshold,
            threshold_lat_pct: args.threshold_lat,
            alpha: args.alpha,
            method: METHOD.to_string(),
        },
        comparisons,
        regressed,
    })
}

/// Runs `rdmabench compare`: prints the report and exits with status 3 when something
/// regressed.
pub fn run(args: &CompareArgs) -> Result<()> {
    let paths: Vec<&Path> = std::iter::once(&args.baseline)
        .chain(&args.candidates)
        .map(PathBuf::as_path)
        .collect();
    if paths.iter().any(|p| crate::files::is_dash(p)) {
        bail!(PlanError::Value(
            "'-' is not a record: compare reads records from files, not from stdin (and --json \
             takes no FILE: it prints the comparison to stdout)"
                .to_string()
        ));
    }
    // A missing baseline is refused, never compared as nothing (exit 2, naming what is there).
    crate::files::check_input(
        "the baseline",
        &args.baseline,
        "a record written by a test's --json, or a sweep record",
    )?;
    for path in &args.candidates {
        crate::files::check_input(
            "the candidate",
            path,
            "a record written by a test's --json, or a sweep record",
        )?;
    }
    if crate::report::sweep::all_sweeps(&paths)? {
        return run_sweeps(args);
    }
    let report = build_report(args)?;
    emit(args, &report, regression(&report))
}

/// What regressed, in a few words for stderr; `None` when nothing did.
fn regression(report: &Report) -> Option<String> {
    if !report.regressed {
        return None;
    }
    let slower: usize = report.comparisons.iter().map(|c| c.slower).sum();
    let worse = report.comparisons.iter().filter(|c| c.slower > 0).count();
    let sizes = if slower == 1 { "size" } else { "sizes" };
    Some(match report.comparisons.len() {
        1 => format!("{slower} {sizes} slower than the baseline"),
        n => format!("{slower} {sizes} slower than the baseline, in {worse} of {n} candidates"),
    })
}

/// Prints `report` as `args` asks (JSON, Markdown or the terminal table); a regression
/// (`regressed` says what) makes the run exit 3.
fn emit<T>(args: &CompareArgs, report: &T, regressed: Option<String>) -> Result<()>
where
    JsonExporter: Exporter<T>,
    MarkdownExporter: Exporter<T>,
    TableExporter: Exporter<T>,
{
    let exporter: &dyn Exporter<T> = if args.json {
        &JsonExporter
    } else if args.markdown {
        &MarkdownExporter
    } else {
        &TableExporter
    };
    print(&exporter.render(report)?)?;
    if let Some(what) = regressed {
        return Err(crate::exit::Regressed(what).into());
    }
    Ok(())
}

fn print(bytes: &[u8]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .context("writing the comparison to stdout")
}

/// `rdmabench compare BEFORE.json AFTER.json` on two sweep records.
fn run_sweeps(args: &CompareArgs) -> Result<()> {
    let comp = fleet::build(args)?;
    let regressed = comp.regression();
    emit(args, &comp, regressed)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::*;

    /// A bandwidth record with one figure per (size, GB/s).
    pub(crate) fn record(test: &str, sizes: &[(u64, f64)]) -> RunRecord {
        RunRecord {
            schema: SCHEMA.to_string(),
            tool: ToolRecord {
                version: "0.1.0".to_string(),
                git: None,
            },
            started_at: "2026-11-30T03:05:35Z".to_string(),
            role: None,
            host: HostRecord {
                hostname: Some("node1".to_string()),
                kernel: Some("6.1.0-40-amd64".to_string()),
            },
            device: DeviceRecord {
                name: "mlx5_0".to_string(),
                fw_ver: "28.39.1002".to_string(),
                vendor_id: 0x02c9,
                part_id: 4129,
                port: 1,
                link_layer: "InfiniBand".to_string(),
                active_mtu: 4096,
                active_speed: Some("400 Gb/sec (4X NDR)".to_string()),
                gid_index: Some(0),
                gid_kind: None,
                gid: None,
            },
            pcie: PcieRecord::default(),
            params: ParamsRecord {
                test: test.to_string(),
                mem: "host".to_string(),
                connection: "RC".to_string(),
                qps: 1,
                tx_depth: Some(128),
                rx_depth: None,
                outs: None,
                atomic: None,
                inline: 0,
                post_list: Some(1),
                cq_mod: Some(100),
                path_mtu: Some(1024),
                qp_timeout: Some(14),
                validate: false,
                iters: Some(5000),
                duration: None,
                warmup: None,
                bidirectional: false,
                latency: None,
                repeat: 1,
                relaxed_ordering: true,
                clock: None,
                clock_hz: None,
                cpus: None,
                numa_node: None,
                placement: None,
                threads: 1,
                ..ParamsRecord::default()
            },
            ceilings: CeilingsRecord {
                wire_gbps: Some(48.5),
                pcie_gbps: Some(52.0),
                staged_gbps: None,
                limit: Some("wire".to_string()),
                limit_gbps: Some(48.5),
            },
            counters: None,
            gpu: None,
            warnings: Vec::new(),
            notes: Vec::new(),
            status: RunStatus::Complete,
            error: None,
            results: sizes
                .iter()
                .map(|&(size, bw)| {
                    SizeResult::from_window(size, 1000, size as f64 * 1000.0 / (bw * 1e9))
                        .unwrap()
                        .with_ceiling(Some(48.5))
                })
                .collect(),
            rails: Vec::new(),
        }
    }

    /// Gives every size of `r` these repetitions (GB/s); the top level gets their median.
    pub(crate) fn with_reps(mut r: RunRecord, bws: &[f64]) -> RunRecord {
        r.params.repeat = bws.len() as u32;
        for s in &mut r.results {
            s.repetitions = bws
                .iter()
                .map(|&bw| Repetition {
                    iterations: 1000,
                    seconds: s.size as f64 * 1000.0 / (bw * 1e9),
                    bw_gbps: bw,
                    msg_rate_mpps: bw * 1e9 / s.size as f64 / 1e6,
                    lat_us: None,
                })
                .collect();
            s.bw_gbps = median(bws).unwrap();
        }
        r
    }

    /// Latency statistics around a p99.
    pub(crate) fn lat(p50: f64, p99: f64) -> LatencyStats {
        LatencyStats {
            min: p50 * 0.9,
            p50,
            p90: (p50 + p99) / 2.0,
            p99,
            p999: p99 * 1.2,
            p9999: p99 * 1.5,
            max: p99 * 2.0,
            mean: p50 * 1.05,
            stdev: p50 * 0.1,
        }
    }

    /// A latency record: per size, repetitions of (p50, p99).
    pub(crate) fn lat_record(sizes: &[u64], reps: &[(f64, f64)]) -> RunRecord {
        let mut r = record(
            "write-lat",
            &sizes.iter().map(|&s| (s, 0.1)).collect::<Vec<_>>(),
        );
        r.params.latency = Some("one_way".to_string());
        r.params.repeat = reps.len() as u32;
        for s in &mut r.results {
            s.lat_us = Some(lat(
                median(&reps.iter().map(|x| x.0).collect::<Vec<_>>()).unwrap(),
                median(&reps.iter().map(|x| x.1).collect::<Vec<_>>()).unwrap(),
            ));
            if reps.len() > 1 {
                s.repetitions = reps
                    .iter()
                    .map(|&(p50, p99)| Repetition {
                        iterations: 1000,
                        seconds: 0.01,
                        bw_gbps: 0.1,
                        msg_rate_mpps: 0.1,
                        lat_us: Some(lat(p50, p99)),
                    })
                    .collect();
            }
        }
        r
    }

    const SETTINGS: (f64, f64, f64) = (3.0, 10.0, 0.05);

    #[test]
    fn a_failed_candidate_is_compared_on_what_it_measured_and_says_so() {
        let b = record("write-bw", &[(2, 1.0), (65536, 10.0), (1 << 20, 12.0)]);
        let mut c = record("write-bw", &[(2, 1.0), (65536, 10.0)]);
        c.status = RunStatus::Failed;
        c.error = Some("size 1048576 bytes: the peer closed the connection".to_string());
        let comp = cmp(&b, &c);
        assert_eq!(comp.rows.len(), 2);
        assert_eq!(comp.only_in_baseline, [1 << 20]);
        assert!(
            comp.candidate_desc.ends_with(
                ", FAILED after 2 sizes: size 1048576 bytes: the peer closed the connection"
            ),
            "{}",
            comp.candidate_desc
        );
        assert!(!comp.baseline_desc.contains("FAILED"));
    }

    fn cmp(a: &RunRecord, b: &RunRecord) -> Comparison {
        compare_records(
            ("a.json", a),
            ("b.json", b),
            SETTINGS.0,
            SETTINGS.1,
            SETTINGS.2,
        )
    }

    #[test]
    fn sizes_are_matched_and_the_rest_listed() {
        let a = record("write-bw", &[(4096, 10.0), (65536, 20.0), (1 << 20, 30.0)]);
        let b = record("write-bw", &[(65536, 20.1), (4096, 9.0), (2, 0.01)]);
        let c = cmp(&a, &b);
        let sizes: Vec<u64> = c.rows.iter().map(|r| r.size).collect();
        assert_eq!(sizes, [4096, 65536]);
        assert_eq!(c.only_in_baseline, [1 << 20]);
        assert_eq!(c.only_in_candidate, [2]);
        // Without repetitions: 4096 down 10% is slower (threshold only), 64K up 0.5% same.
        assert_eq!(c.rows[0].judgement.verdict, Verdict::Slower);
        assert_eq!(c.rows[0].judgement.spread, stats::SpreadTest::ThresholdOnly);
        assert_eq!(c.rows[1].judgement.verdict, Verdict::Same);
        assert_eq!((c.slower, c.faster, c.same), (1, 0, 1));
        assert!(c
            .differences
            .warnings
            .iter()
            .any(|w| w.what.contains("sizes")));
    }

    #[test]
    fn repetitions_are_what_is_tested() {
        let base = with_reps(
            record("write-bw", &[(65536, 1.0)]),
            &[10.0, 10.2, 9.9, 10.1, 10.0],
        );
        let drop = with_reps(
            record("write-bw", &[(65536, 1.0)]),
            &[9.0, 9.1, 8.9, 9.0, 9.05],
        );
        let c = cmp(&base, &drop);
        let r = &c.rows[0];
        assert_eq!((r.baseline_n, r.candidate_n), (5, 5));
        assert_eq!(r.judgement.verdict, Verdict::Slower);
        assert!(matches!(
            r.judgement.spread,
            stats::SpreadTest::MannWhitney { exact: true, .. }
        ));
        let same = with_reps(
            record("write-bw", &[(65536, 1.0)]),
            &[10.1, 9.8, 10.2, 9.95, 10.0],
        );
        assert_eq!(cmp(&base, &same).rows[0].judgement.verdict, Verdict::Same);
    }

    #[test]
    fn many_sizes_share_one_false_discovery_rate() {
        let sizes: Vec<(u64, f64)> = (1..=10).map(|p| (1u64 << p, 1.0)).collect();
        let base = with_reps(record("write-bw", &sizes), &[10.0, 10.2, 9.9, 10.1, 10.0]);
        // A clear drop at every size stays slower after the adjustment.
        let drop = with_reps(record("write-bw", &sizes), &[9.0, 9.1, 8.9, 9.0, 9.05]);
        let mut c = cmp(&base, &drop);
        c.adjust_across_sizes(0.05);
        assert_eq!(c.slower, 10);
        assert!(c.rows.iter().all(|r| r.judgement.q.is_some()));
        // One size with a drop (p = 0.0079 on its own) among nine that wobble by +22% in
        // plain noise: after the adjustment over the ten sizes (q = 0.079) it is no discovery.
        let mut lone = drop.clone();
        for r in lone.results.iter_mut().skip(1) {
            for (rep, bw) in r.repetitions.iter_mut().zip([12.5, 7.0, 13.0, 8.0, 12.2]) {
                rep.bw_gbps = bw;
            }
        }
        let mut c = cmp(&base, &lone);
        assert_eq!(
            c.rows[0].judgement.verdict,
            Verdict::Slower,
            "{:?}",
            c.rows[0]
        );
        assert_eq!(c.slower, 1);
        c.adjust_across_sizes(0.05);
        let r = &c.rows[0];
        assert_eq!(r.judgement.verdict, Verdict::Same, "{r:?}");
        assert!((r.judgement.q.unwrap() - 0.079_365).abs() < 1e-5, "{r:?}");
        assert_eq!(c.slower, 0);
        assert!(
            r.judgement.reason.contains("q=0.079"),
            "{}",
            r.judgement.reason
        );
    }

    #[test]
    fn latency_records_compare_p99_and_show_p50() {
        let base = lat_record(&[2, 64], &[(2.0, 5.0), (2.1, 5.1), (2.0, 4.9), (2.05, 5.0)]);
        let worse = lat_record(&[2, 64], &[(2.1, 6.0), (2.1, 6.1), (2.0, 5.9), (2.2, 6.0)]);
        let c = cmp(&base, &worse);
        for r in &c.rows {
            assert_eq!(r.metric, Metric::LatP99Us);
            assert_eq!(r.judgement.verdict, Verdict::Slower, "{r:?}");
            assert!((r.judgement.change_pct.unwrap() - 20.0).abs() < 1.0);
            assert_eq!(r.threshold_pct, 10.0);
            assert!(r.baseline_p50_us.is_some() && r.candidate_p50_us.is_some());
        }
        // Without repetitions, the top-level p99.
        let a = lat_record(&[2], &[(2.0, 5.0)]);
        let b = lat_record(&[2], &[(2.0, 5.2)]);
        let c = cmp(&a, &b);
        assert_eq!(c.rows[0].judgement.verdict, Verdict::Same);
        assert_eq!(c.rows[0].baseline_n, 1);
    }

    #[test]
    fn records_load_with_errors_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("rdmabench-cmp-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        let rec = record("write-bw", &[(65536, 1.0)]);
        std::fs::write(&good, serde_json::to_vec(&rec).unwrap()).unwrap();
        let loaded = load_record(&good).unwrap();
        assert_eq!((loaded.params, loaded.device), (rec.params, rec.device));
        assert_eq!(loaded.results.len(), 1);

        let bad = dir.join("bad.json");
        std::fs::write(&bad, b"{\"schema\": ").unwrap();
        let err = format!("{:#}", load_record(&bad).unwrap_err());
        assert!(err.contains("bad.json") && err.contains("EOF"), "{err}");

        let other = dir.join("other.json");
        std::fs::write(&other, br#"{"schema": "rdmabench.result/9"}"#).unwrap();
        let err = format!("{:#}", load_record(&other).unwrap_err());
        assert!(
            err.contains("other.json") && err.contains("rdmabench.result/9"),
            "{err}"
        );

        let partial = dir.join("partial.json");
        std::fs::write(&partial, br#"{"schema": "rdmabench.result/1"}"#).unwrap();
        let err = format!("{:#}", load_record(&partial).unwrap_err());
        assert!(
            err.contains("partial.json") && err.contains("missing field"),
            "{err}"
        );

        let err = format!("{:#}", load_record(&dir.join("none.json")).unwrap_err());
        assert!(err.contains("none.json"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn percentages_and_levels_parse() {
        assert_eq!(parse_pct("3"), Ok(3.0));
        assert_eq!(parse_pct("2.5%"), Ok(2.5));
        assert!(parse_pct("-1").unwrap_err().contains("'-1'"));
        assert!(parse_pct("x").is_err());
        assert_eq!(parse_alpha("0.01"), Ok(0.01));
        assert!(parse_alpha("1").is_err());
        assert!(parse_alpha("0").is_err());
    }
}
