//! What `health` reports: the report (`--json`, with a published schema: the JSON
//! exporter's), its text (the first line a Nagios status line and a Slurm drain reason, then
//! a line per finding, then the time each check took against the budget) and its Prometheus
//! metrics (`--prom`), each an [`Exporter`] of the [`HealthReport`].

use std::fmt::Write as _;

use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bandwidth::BandwidthRun;
use super::findings::{Finding, Severity};
use crate::report::prom::{escape, number};
use crate::report::Exporter;
use crate::text::printable;

/// The `schema` of a health report.
pub(crate) const HEALTH_SCHEMA: &str = "rdmabench.health/1";

/// How long one check took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CheckTime {
    /// "nics", "gpus", "gdr", "counters", "bandwidth".
    pub check: String,
    /// Seconds it took.
    pub seconds: f64,
    /// Whether it ran (a snapshot of another machine's sysfs has no counters to watch nor
    /// NICs to run).
    pub ran: bool,
    /// Why it did not run, or what it covered.
    pub note: String,
}

/// One `rdmabench health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct HealthReport {
    /// Always `rdmabench.health/1`.
    pub schema: String,
    /// rdmabench's version.
    pub version: String,
    /// The node's host name, when known.
    pub host: Option<String>,
    /// When it started, RFC 3339, UTC.
    pub started_at: String,
    /// The worst finding's severity (`ok` with none).
    pub status: Severity,
    /// The exit status: 0 ok, 1 warning, 2 critical, 3 unknown.
    pub exit_code: u8,
    /// The first line of the text: a Nagios status line, usable as a drain reason.
    pub summary: String,
    /// What `--expect` named, or "this node as found" without it.
    pub expected: String,
    /// Every finding, worst first.
    pub findings: Vec<Finding>,
    /// Each loopback bandwidth run.
    pub bandwidth: Vec<BandwidthRun>,
    /// Each check's time.
    pub checks: Vec<CheckTime>,
    /// Seconds it took in all.
    pub seconds: f64,
    /// The budget it kept to (`--budget`).
    pub budget_s: f64,
}

/// `health`'s text, on stdout (on stderr when `--json -` or `--prom -` takes stdout).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

/// `health --prom`: the report as Prometheus metrics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PromExporter;

impl Exporter<HealthReport> for TextExporter {
    fn render(&self, report: &HealthReport) -> Result<Vec<u8>> {
        Ok(report.render().into_bytes())
    }
}

impl Exporter<HealthReport> for PromExporter {
    fn render(&self, report: &HealthReport) -> Result<Vec<u8>> {
        Ok(report.prom().into_bytes())
    }
}

/// The status line: "HEALTH CRITICAL - mlx5_3 NIC_MISSING: expected, ...; 2 more" (at most
/// 200 characters: Slurm keeps a drain reason short), always one printable line: names read
/// from sysfs or `--expect` have their control characters escaped.
pub(crate) fn summary(findings: &[Finding], subjects: &str) -> String {
    let status = Severity::of(findings);
    let Some(first) = findings.first() else {
        return format!("HEALTH OK - {}", printable(subjects));
    };
    let more = match findings.len() {
        1 => String::new(),
        n => format!("; {} more", n - 1),
    };
    let mut line = format!(
        "HEALTH {} - {} {}: {}",
        status.word(),
        printable(&first.subject),
        printable(&first.code),
        printable(&first.message)
    );
    let room = 200usize.saturating_sub(more.len());
    if line.chars().count() > room {
        line = line
            .chars()
            .take(room.saturating_sub(3))
            .collect::<String>()
            + "...";
    }
    line + &more
}

impl HealthReport {
    /// The text: the status line, a line per finding, each bandwidth run, the checks' times
    /// (what came from sysfs or `--expect` made printable, a line each).
    pub(crate) fn render(&self) -> String {
        let mut out = format!("{}\n", printable(&self.summary));
        for f in &self.findings {
            let _ = writeln!(
                out,
                "{:<8} {:<20} {:<14} {}",
                f.severity.word(),
                printable(&f.code),
                printable(&f.subject),
                printable(&f.message)
            );
        }
        for b in &self.bandwidth {
            let figure = b
                .gbits
                .map_or("failed".to_string(), |g| format!("{g:.2} Gb/s"));
            let min = b
                .min_gbits
                .map_or(" (not judged: no min_gbits)".to_string(), |m| {
                    format!(" (at least {m:.2} expected)")
                });
            let nic = printable(&b.nic);
            let _ = writeln!(out, "bandwidth {nic} port {}: {figure}{min}", b.port);
        }
        let times: Vec<String> = self
            .checks
            .iter()
            .map(|c| {
                let how = if c.ran { "" } else { ", skipped" };
                format!("{} {:.2} s{how}", c.check, c.seconds)
            })
            .collect();
        let times = match times.is_empty() {
            true => "none ran".to_string(),
            false => times.join(", "),
        };
        let _ = writeln!(
            out,
            "checks: {times}; {:.2} s of the {:.0} s budget (expected: {})",
            self.seconds,
            self.budget_s,
            printable(&self.expected)
        );
        for c in self.checks.iter().filter(|c| !c.ran) {
            let _ = writeln!(out, "  {} skipped: {}", c.check, c.note);
        }
        out
    }

    /// Prometheus' text format: the status, each finding, each bandwidth run, each check's
    /// time.
    pub(crate) fn prom(&self) -> String {
        let host = escape(self.host.as_deref().unwrap_or(""));
        let mut out = String::new();
        gauge(
            &mut out,
            "rdmabench_health_status",
            "The node's health: 0 ok, 1 warning, 2 critical, 3 unknown (Nagios' codes).",
            &[format!(
                "rdmabench_health_status{{host=\"{host}\"}} {}",
                self.exit_code
            )],
        );
        let findings: Vec<String> = self
            .findings
            .iter()
            .map(|f| {
                format!(
                    "rdmabench_health_finding{{host=\"{host}\",code=\"{}\",subject=\"{}\",severity=\"{}\"}} {}",
                    escape(&f.code),
                    escape(&f.subject),
                    f.severity.word().to_lowercase(),
                    f.severity.code()
                )
            })
            .collect();
        gauge(
            &mut out,
            "rdmabench_health_finding",
            "Each finding, by its stable code and subject; the value is its severity's code.",
            &findings,
        );
        let bw: Vec<String> = self
            .bandwidth
            .iter()
            .filter_map(|b| {
                let g = b.gbits?;
                Some(format!(
                    "rdmabench_health_loopback_bytes_per_second{{host=\"{host}\",nic=\"{}\",port=\"{}\"}} {}",
                    escape(&b.nic),
                    b.port,
                    number(g * 1e9 / 8.0)
                ))
            })
            .collect();
        gauge(
            &mut out,
            "rdmabench_health_loopback_bytes_per_second",
            "Each NIC's loopback write-bw, in bytes per second.",
            &bw,
        );
        let times: Vec<String> = self
            .checks
            .iter()
            .map(|c| {
                format!(
                    "rdmabench_health_check_seconds{{host=\"{host}\",check=\"{}\"}} {}",
                    escape(&c.check),
                    number(c.seconds)
                )
            })
            .collect();
        gauge(
            &mut out,
            "rdmabench_health_check_seconds",
            "How long each check took.",
            &times,
        );
        out
    }
}

/// A gauge family of the run records' exporter's form.
fn gauge(out: &mut String, name: &str, help: &str, samples: &[String]) {
    crate::report::prom::family(out, (name, "gauge"), help, samples);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_of_a_report_with_findings_and_runs_pass_promtool() {
        let report = HealthReport {
            schema: HEALTH_SCHEMA.into(),
            version: "0".into(),
            host: Some("node\"1".into()),
            started_at: "2026-12-03T00:00:00Z".into(),
            status: Severity::Critical,
            exit_code: 2,
            summary: String::new(),
            expected: String::new(),
            findings: vec![Finding {
                severity: Severity::Critical,
                code: "BW_LOW".into(),
                subject: "mlx5_0".into(),
                message: "x".into(),
            }],
            bandwidth: vec![BandwidthRun {
                nic: "mlx5_0".into(),
                port: 1,
                gbits: Some(380.5),
                min_gbits: Some(390.0),
                error: None,
                seconds: 3.2,
            }],
            checks: vec![CheckTime {
                check: "bandwidth".into(),
                seconds: 3.2,
                ran: true,
                note: String::new(),
            }],
            seconds: 3.3,
            budget_s: 30.0,
        };
        let text = report.prom();
        assert_eq!(crate::promtool_check::check(text.as_bytes()), "", "{text}");
        assert!(text.contains(
            "rdmabench_health_loopback_bytes_per_second{host=\"node\\\"1\",nic=\"mlx5_0\",port=\"1\"} 47562500000"
        ), "{text}");
    }
}
