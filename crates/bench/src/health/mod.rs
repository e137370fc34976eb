//! `rdmabench health`: may a job land on this node? A node-local verdict within a budget
//! (30 s by default, Slurm kills a `HealthCheckProgram` after 60), for Slurm's health check
//! and prolog, NHC and Kubernetes' node-problem-detector. Checks, each timed:
//!
//! - `nics`: every expected NIC present, its port ACTIVE at its rate, its PCIe link as fast
//!   and wide as expected;
//! - `gpus`: every expected GPU present, its PCIe link, its nearest NIC over the expected
//!   class of path (PIX, PXB, ...);
//! - `gdr`: GPUDirect RDMA ready (dma-buf or a peer-memory module) where GPUs are expected;
//! - `counters`: the link error counters of every NIC read twice, `--sample-secs` apart;
//! - `bandwidth`: a `write-bw --loopback` on each NIC at once (`bandwidth.rs`) against its
//!   `min_gbits`.
//!
//! What is expected comes from `--expect FILE` (`expect.rs`), which `--learn FILE` writes
//! on a known-good node; without one, the node as found (every NIC's port ACTIVE, every link
//! at its capability). Each finding has a stable code and a severity (`findings.rs`); the
//! exit status is Nagios' (0 ok, 1 warning, 2 critical, 3 unknown) and the first line of the
//! output its status line (`outcome.rs`). A check that cannot read its input is UNKNOWN, never
//! fine; `runner.rs` holds the whole check to `--budget` and writes the outputs without ever
//! changing the verdict.

pub(crate) mod bandwidth;
pub(crate) mod expect;
pub(crate) mod findings;
pub(crate) mod outcome;
pub(crate) mod runner;

pub use runner::run;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use topo::{Sysfs, Topology};

use crate::doctor::congestion;
use crate::doctor::host::GdrFacts;
use crate::doctor::verdict::Verdict;
use crate::files::write_atomically;
use crate::report::{Exporter, HostRecord, JsonExporter};
use crate::sysroot::{is_live, parse_sysfs_root, sysfs_for};
use bandwidth::BandwidthRun;
use expect::Expectations;
use findings::{Finding, Severity};
use outcome::{CheckTime, HealthReport, HEALTH_SCHEMA};

/// The options of `rdmabench health`.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// What the node should have: a file --learn wrote
    ///
    /// What the node should have: a file `--learn` wrote on a known-good node of its SKU
    /// [default: the node as found: every NIC's port ACTIVE, every PCIe link at its
    /// capability]
    #[arg(long, value_name = "FILE", conflicts_with = "learn")]
    pub expect: Option<PathBuf>,

    /// Write what this node has to FILE, for --expect
    ///
    /// Write what this node has to FILE, to give other nodes of its SKU as --expect (each
    /// NIC's least loopback bandwidth set to 90% of the least of three runs here)
    #[arg(long, value_name = "FILE")]
    pub learn: Option<PathBuf>,

    /// Seconds the whole check may take
    ///
    /// Seconds the whole check may take; the bandwidth runs are stopped at its end
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = parse_budget)]
    pub budget: f64,

    /// Seconds between the two readings of the link error counters
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = parse_secs)]
    pub sample_secs: f64,

    /// Seconds of each NIC's loopback write-bw (0: none)
    ///
    /// Seconds of each NIC's loopback write-bw (0: no bandwidth check)
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = parse_secs)]
    pub bw_secs: f64,

    /// Write the report as JSON to FILE (`-`: stdout, the text then on stderr)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the report as Prometheus metrics to FILE
    ///
    /// Write the report as Prometheus metrics to FILE, for node_exporter's textfile collector
    #[arg(long, value_name = "FILE")]
    pub prom: Option<PathBuf>,

    /// Read this copy of another machine's sysfs instead of /
    ///
    /// Read this copy of another machine's sysfs instead of / (no counters are watched and
    /// no bandwidth is run on a copy)
    #[arg(long, value_name = "DIR", value_parser = parse_sysfs_root)]
    pub sysfs_root: Option<PathBuf>,
}

/// Seconds from `lo` to `hi`, else an error saying what they are for.
fn secs_within(text: &str, (lo, hi): (f64, f64), what: &str) -> Result<f64, String> {
    match crate::units::parse_secs(text) {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{text}' is not {what}: give seconds from {lo} to {hi}"
        )),
    }
}

fn parse_secs(text: &str) -> Result<f64, String> {
    secs_within(text, (0.0, 60.0), "a time here")
}

fn parse_budget(text: &str) -> Result<f64, String> {
    secs_within(
        text,
        (1.0, 3600.0),
        "a budget (Slurm kills a HealthCheckProgram after 60)",
    )
}

/// The node's health, its story already printed: the error `main` turns into the exit
/// status (0 is no error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("health: {0}")]
pub(crate) struct HealthStatus(pub u8);

/// Times `f` as check `name`.
fn timed<T>(times: &mut Vec<CheckTime>, name: &str, note: String, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    times.push(CheckTime {
        check: name.to_string(),
        seconds: t.elapsed().as_secs_f64(),
        ran: true,
        note,
    });
    out
}

fn skipped(times: &mut Vec<CheckTime>, name: &str, why: &str) {
    times.push(CheckTime {
        check: name.to_string(),
        seconds: 0.0,
        ran: false,
        note: why.to_string(),
    });
}

/// The whole check; `wait` passes the time between the counters' two readings (a test
/// changes them there). An error is a check that could not run at all (UNKNOWN).
pub(crate) fn check(args: &HealthArgs, wait: &dyn Fn(Duration)) -> Result<HealthReport> {
    let start = Instant::now();
    let started_at = crate::report::now_rfc3339();
    // The check's own deadline falls a little before the budget's end, where `run` stops
    // waiting for it: what is killed at the deadline is still reported.
    let margin = (args.budget / 10.0).min(0.5);
    let deadline = start + Duration::from_secs_f64(args.budget - margin);
    let sysfs = sysfs_for(args.sysfs_root.as_deref());
    let given = args.expect.as_deref().map(Expectations::read).transpose()?;
    let mut times = Vec::new();
    let topology = timed(&mut times, "inventory", String::new(), || {
        Topology::scan(&sysfs)
    })
    .context("cannot read the PCIe and RDMA devices")?;
    let (mut found, want) = device_findings(&sysfs, &topology, given, &mut times);
    let up = nics_up(&want, &found);
    // The counters' wait takes at most half of what is left of the budget.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    let sample = args.sample_secs.min(left / 2.0);
    found.extend(watch_counters(&sysfs, &up, sample, wait, &mut times));
    let runs = bandwidth_runs(&sysfs, args, &up, deadline, &mut times);
    found.extend(findings::bandwidth(&runs));
    found.sort_by_key(|f| std::cmp::Reverse(f.severity.rank()));
    // A node teaches only what it has: one with a finding writes nothing (`run` says why).
    if let (Some(path), true) = (&args.learn, found.is_empty()) {
        learn(path, findings::of_node(&topology), &runs)?;
    }
    Ok(report(
        (started_at, start),
        args,
        (found, runs, times),
        &want,
    ))
}

/// The findings of the device checks, from `nics` to `gdr`, and what was expected.
fn device_findings(
    sysfs: &Sysfs,
    topology: &Topology,
    given: Option<Expectations>,
    times: &mut Vec<CheckTime>,
) -> (Vec<Finding>, Expectations) {
    let unread = |path: &Path| sysfs.why_unreadable(path);
    let mut found: Vec<Finding> = Vec::new();
    if given.is_none() {
        found.extend(findings::as_found(topology, &unread));
    }
    let want = given.unwrap_or_else(|| findings::of_node(topology));
    let note = format!("{} NIC(s)", want.nics.len());
    found.extend(timed(times, "nics", note, || {
        findings::nics(topology, &want, &unread)
    }));
    let note = format!("{} GPU(s)", want.gpus.len());
    found.extend(timed(times, "gpus", note, || {
        findings::gpus(topology, &want, &unread)
    }));
    found.extend(timed(times, "gdr", String::new(), || {
        findings::gdr(want.gdr, gdr_ready(sysfs, topology))
    }));
    (found, want)
}

/// The expected NICs that are neither missing nor down: name, port and least bandwidth.
fn nics_up(want: &Expectations, found: &[Finding]) -> Vec<(String, u32, Option<f64>)> {
    let gone = findings::gone(found);
    want.nics
        .iter()
        .filter(|n| !gone.contains(&n.name))
        .map(|n| (n.name.clone(), n.port, n.min_gbits))
        .collect()
}

/// The loopback bandwidth runs on the NICs `up`: none on a sysfs copy or with `--bw-secs 0`.
fn bandwidth_runs(
    sysfs: &Sysfs,
    args: &HealthArgs,
    up: &[(String, u32, Option<f64>)],
    deadline: Instant,
    times: &mut Vec<CheckTime>,
) -> Vec<BandwidthRun> {
    if !is_live(sysfs) {
        skipped(times, "bandwidth", "a copy of another machine's sysfs");
        return Vec::new();
    }
    if args.bw_secs == 0.0 {
        skipped(times, "bandwidth", "--bw-secs 0");
        return Vec::new();
    }
    // Learning takes each NIC's least of a few rounds; a check, one round.
    let rounds = if args.learn.is_some() {
        bandwidth::LEARN_ROUNDS
    } else {
        1
    };
    let note = format!("{} NIC(s) at once, {} s each", up.len(), args.bw_secs);
    let (runs, ran) = timed(times, "bandwidth", note, || {
        bandwidth::least_of_rounds(up, args.bw_secs, deadline, rounds)
    });
    if let Some(t) = times.last_mut().filter(|_| rounds > 1) {
        t.note += &format!(", the least of {ran} rounds");
        if ran < rounds {
            t.note += &format!(" (no more fitted the budget; {rounds} are run when they do)");
        }
    }
    runs
}

/// Whether GPUDirect RDMA can work here for the node's GPUs (the first one's vendor: a node
/// is of one), and how (doctor's check of the same).
fn gdr_ready(sysfs: &Sysfs, topology: &Topology) -> Result<String, String> {
    let kind = topology
        .gpus
        .first()
        .map_or(topo::Accelerator::Nvidia, |g| g.kind);
    let check = crate::doctor::checks::gpudirect_for(kind, &GdrFacts::read(sysfs));
    // A GPU no runtime of rdmabench drives is not judged (Skip), not failed.
    match check.verdict {
        Verdict::Pass | Verdict::Skip | Verdict::Info => Ok(check.evidence),
        Verdict::Warn | Verdict::Fail => Err(check.evidence),
    }
}

/// Reads every NIC's link error counters, waits `secs`, reads them again.
fn watch_counters(
    sysfs: &Sysfs,
    nics: &[(String, u32, Option<f64>)],
    secs: f64,
    wait: &dyn Fn(Duration),
    times: &mut Vec<CheckTime>,
) -> Vec<Finding> {
    let note = format!("{} NIC(s), {secs} s apart", nics.len());
    timed(times, "counters", note, || {
        let read = || -> Vec<congestion::Sample> {
            nics.iter()
                .map(|(nic, port, _)| congestion::read(sysfs, nic, *port, &[]))
                .collect()
        };
        let before = read();
        wait(Duration::from_secs_f64(secs));
        let after = read();
        nics.iter()
            .zip(before.iter().zip(&after))
            .flat_map(|((nic, port, _), (b, a))| match b.is_empty() {
                true => vec![findings::no_counters(nic, *port)],
                false => findings::counters(nic, b, a, secs),
            })
            .collect()
    })
}

/// Writes `--learn`'s file (the expectations as JSON): the node as found, each NIC's `min_gbits` 90% of its least run.
fn learn(path: &Path, mut learned: Expectations, runs: &[BandwidthRun]) -> Result<()> {
    for nic in &mut learned.nics {
        nic.min_gbits = runs
            .iter()
            .find(|r| r.nic == nic.name)
            .and_then(|r| r.gbits)
            .map(|g| (g * 0.9 * 100.0).round() / 100.0);
    }
    learned.learned_from = Some(format!(
        "{} at {}",
        HostRecord::current()
            .hostname
            .unwrap_or_else(|| "this node".to_string()),
        crate::report::now_rfc3339()
    ));
    write_atomically(path, &JsonExporter.render(&learned)?)
        .with_context(|| format!("--learn {}", path.display()))
}

/// The report of a finished check.
fn report(
    (started_at, start): (String, Instant),
    args: &HealthArgs,
    (found, bandwidth, checks): (Vec<Finding>, Vec<BandwidthRun>, Vec<CheckTime>),
    want: &Expectations,
) -> HealthReport {
    let status = Severity::of(&found);
    let judged = bandwidth.iter().filter(|b| b.gbits.is_some()).count();
    let subjects = format!(
        "{} NIC(s), {} GPU(s){}{}",
        want.nics.len(),
        want.gpus.len(),
        if want.gdr {
            ", GPUDirect RDMA ready"
        } else {
            ""
        },
        if bandwidth.is_empty() {
            String::new()
        } else {
            format!(", {judged} loopback run(s) measured")
        }
    );
    HealthReport {
        schema: HEALTH_SCHEMA.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        host: HostRecord::current().hostname,
        started_at,
        status,
        exit_code: status.code(),
        summary: outcome::summary(&found, &subjects),
        // A file given was read (else the check ended UNKNOWN before): it is what was expected.
        expected: runner::expected(args),
        findings: found,
        bandwidth,
        checks,
        seconds: start.elapsed().as_secs_f64(),
        budget_s: args.budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the dgx-h100 fixture tree under the temporary folder.
    fn dgx_copy(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rdmabench-health-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let from = format!(
            "{}/../topo/tests/fixtures/dgx-h100",
            env!("CARGO_MANIFEST_DIR")
        );
        let status = std::process::Command::new("cp")
            .args(["-a", &from])
            .arg(dir.join("tree"))
            .status()
            .unwrap();
        assert!(status.success());
        dir.join("tree")
    }

    fn args(root: &Path) -> HealthArgs {
        HealthArgs {
            expect: None,
            learn: None,
            budget: 30.0,
            sample_secs: 0.5,
            bw_secs: 0.0,
            json: None,
            prom: None,
            sysfs_root: Some(root.to_path_buf()),
        }
    }

    #[test]
    fn counters_that_climb_between_the_readings_are_found() {
        let root = dgx_copy("counters");
        let counters = root.join("sys/class/infiniband/mlx5_0/ports/1/counters");
        let climb = |_: Duration| {
            std::fs::write(counters.join("symbol_error"), "7\n").unwrap();
            std::fs::write(counters.join("link_downed"), "1\n").unwrap();
        };
        let report = check(&args(&root), &climb).unwrap();
        let found: Vec<(Severity, &str, &str)> = report
            .findings
            .iter()
            .map(|f| (f.severity, f.code.as_str(), f.subject.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (Severity::Critical, "LINK_FLAPPING", "mlx5_0"),
                (Severity::Warning, "LINK_ERRORS_CLIMBING", "mlx5_0")
            ]
        );
        assert!(report.findings[1]
            .message
            .contains("counters/symbol_error +7"));
        assert_eq!(report.exit_code, 2);
        assert!(report
            .summary
            .starts_with("HEALTH CRITICAL - mlx5_0 LINK_FLAPPING"));
        let counted = report
            .checks
            .iter()
            .find(|c| c.check == "counters")
            .unwrap();
        assert!(
            counted.ran && counted.note == "2 NIC(s), 0.5 s apart",
            "{counted:?}"
        );
        std::fs::remove_dir_all(root.parent().unwrap()).ok();
    }

    #[test]
    fn the_counters_wait_at_most_half_of_what_is_left_of_the_budget() {
        let root = dgx_copy("budget");
        let short = HealthArgs {
            budget: 1.0,
            sample_secs: 60.0,
            ..args(&root)
        };
        let waited = std::cell::Cell::new(Duration::MAX);
        let report = check(&short, &|d| waited.set(d)).unwrap();
        assert!(
            waited.get() <= Duration::from_millis(500),
            "{:?}",
            waited.get()
        );
        assert_eq!(report.exit_code, 0, "{}", report.render());
        std::fs::remove_dir_all(root.parent().unwrap()).ok();
    }

    #[test]
    fn a_status_line_stays_short_enough_for_a_drain_reason() {
        let f = |n: usize| Finding {
            severity: Severity::Warning,
            code: "PLACEMENT".into(),
            subject: format!("gpu{n}"),
            message: "x".repeat(300),
        };
        let line = outcome::summary(&[f(0), f(1), f(2)], "");
        assert!(line.chars().count() <= 200, "{line}");
        assert!(
            line.starts_with("HEALTH WARNING - gpu0 PLACEMENT: xxx")
                && line.ends_with("...; 2 more")
        );
        assert_eq!(outcome::summary(&[], "2 NIC(s)"), "HEALTH OK - 2 NIC(s)");
    }
}
