//! `rdmabench health` from the command line to the exit status: the check runs within its
//! `--budget` whatever it waits on (a worker thread the status does not wait past the budget
//! for), a check that cannot run is an UNKNOWN report like any other, and the outputs are
//! written without ever changing the verdict: a `--json` or `--prom` that cannot be written
//! is said on stderr, the other still written, the exit status the report's.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::findings::{Finding, Severity};
use super::outcome::{self, HealthReport, PromExporter, TextExporter, HEALTH_SCHEMA};
use super::{check, HealthArgs, HealthStatus};
use crate::files::write_atomically;
use crate::plan::PlanError;
use crate::report::{Exporter, HostRecord, JsonExporter};
use crate::text::printable;

/// The path that means stdout for `--json` and `--prom`.
const STDOUT: &str = "-";

/// Runs `rdmabench health`; the report's status is the exit status (`--learn` on a node that
/// is not healthy: 2, nothing written).
pub fn run(args: &HealthArgs) -> Result<()> {
    let started = (crate::report::now_rfc3339(), Instant::now());
    let outputs = [args.json.as_deref(), args.prom.as_deref()];
    let report = if outputs.iter().all(|o| o == &Some(Path::new(STDOUT))) {
        let why = "--json - and --prom - cannot both take stdout: give one of them a file";
        unknown(args, started, why)
    } else {
        within_budget(args).unwrap_or_else(|why| unknown(args, started, &why))
    };
    deliver(args, &report);
    if let (Some(path), false) = (&args.learn, report.status == Severity::Ok) {
        return Err(PlanError::Value(format!(
            "health --learn {}: refused, nothing written: this node is not healthy ({}); a \
             node teaches only what it has: mend it, or learn on a healthy node of its SKU",
            path.display(),
            report.summary
        ))
        .into());
    }
    match report.exit_code {
        0 => Ok(()),
        code => Err(HealthStatus(code).into()),
    }
}

/// The check's report, or why there is none: the check failed, or did not end within the
/// budget (a read that never returns is left behind: the process ends without it).
fn within_budget(args: &HealthArgs) -> Result<HealthReport, String> {
    let (done, result) = mpsc::channel();
    let worker = args.clone();
    std::thread::spawn(move || {
        let report = check(&worker, &|d| std::thread::sleep(d));
        let _ = done.send(report.map_err(|e| format!("{e:#}")));
    });
    match result.recv_timeout(Duration::from_secs_f64(args.budget)) {
        Ok(report) => report,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "the check did not end within the --budget of {} s (a file under the sysfs root \
             or a device that does not answer) and was abandoned",
            args.budget
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Err("the check stopped without a report (a bug: please report it)".to_string())
        }
    }
}

/// What `--expect` named, or "this node as found" without it.
pub(super) fn expected(args: &HealthArgs) -> String {
    args.expect
        .as_ref()
        .map_or("this node as found".to_string(), |p| {
            p.display().to_string()
        })
}

/// The report of a check that could not run: UNKNOWN, its one finding `CHECK_FAILED` saying
/// why.
fn unknown(args: &HealthArgs, (started_at, start): (String, Instant), why: &str) -> HealthReport {
    let findings = vec![Finding {
        severity: Severity::Unknown,
        code: "CHECK_FAILED".to_string(),
        subject: "node".to_string(),
        message: why.to_string(),
    }];
    HealthReport {
        schema: HEALTH_SCHEMA.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        host: HostRecord::current().hostname,
        started_at,
        status: Severity::Unknown,
        exit_code: Severity::Unknown.code(),
        summary: outcome::summary(&findings, ""),
        expected: expected(args),
        findings,
        bandwidth: Vec::new(),
        checks: Vec::new(),
        seconds: start.elapsed().as_secs_f64(),
        budget_s: args.budget,
    }
}

/// Prints the text (on stderr when an output takes stdout) and writes `--json` and `--prom`,
/// each rendered by its [`Exporter`] and each failure said on stderr: none changes the verdict.
fn deliver(args: &HealthArgs, report: &HealthReport) {
    let taken = [&args.json, &args.prom]
        .iter()
        .any(|o| o.as_deref() == Some(Path::new(STDOUT)));
    match TextExporter.render(report) {
        Ok(text) if taken => eprint!("{}", String::from_utf8_lossy(&text)),
        Ok(text) => print!("{}", String::from_utf8_lossy(&text)),
        Err(e) => unwritten(report, "the text", &e),
    }
    let outputs: [(&str, &Option<PathBuf>, &dyn Exporter<HealthReport>); 2] = [
        ("--json", &args.json, &JsonExporter),
        ("--prom", &args.prom, &PromExporter),
    ];
    for (option, path, exporter) in outputs {
        let Some(path) = path else { continue };
        if let Err(e) = exporter.render(report).and_then(|body| emit(path, &body)) {
            unwritten(report, option, &e);
        }
    }
}

/// Says on stderr that `what` could not be written, and that the status stays.
fn unwritten(report: &HealthReport, what: &str, e: &anyhow::Error) {
    let why = printable(&format!("{e:#}"));
    eprintln!(
        "rdmabench: health: {what}: {why}; the status stays {} (exit {})",
        report.status.word(),
        report.exit_code
    );
}

/// Writes `body` to `path`, or to stdout for `-`.
fn emit(path: &Path, body: &[u8]) -> Result<()> {
    if path == Path::new(STDOUT) {
        let mut out = std::io::stdout().lock();
        out.write_all(body)?;
        out.flush()?;
        return Ok(());
    }
    write_atomically(path, body)
}
