//! The Prometheus exporter (`--prom FILE`): the record as metrics in the text exposition
//! format, for node_exporter's textfile collector (point `--prom` at a `.prom` file in its
//! `--collector.textfile.directory`). Written atomically like every record file, so the
//! collector never reads half of one, and rewritten as each size completes.
//!
//! Units are Prometheus' base units (bytes per second, seconds, ratios 0-1). Every sample
//! carries the run's `host`, `device`, `role` and `test` (a multi-rail run also `rail`: each
//! rail's number, and `all` for the rails together); per-size samples also `size` (bytes).
//! Latency is a summary (quantiles 0.5 to 0.9999, `_sum` and `_count` from the mean and the
//! iterations), so that a dashboard may average it over runs.

use std::fmt::Write as _;

use anyhow::Result;

use model::stats::median;

use super::{
    CeilingsRecord, DeviceRecord, Exporter, Format, RunRecord, RunStatus, SizeResult, SweepRecord,
};

/// `--prom FILE`: the figures as Prometheus metrics.
pub(crate) const PROM: Format = Format {
    flag: "prom",
    short: "Write the figures as Prometheus metrics to FILE",
    help: "Write the figures as Prometheus metrics (node_exporter's textfile format) to FILE, \
           e.g. /var/lib/node_exporter/textfile/rdmabench.prom; `-`: to stdout at the end",
    what: "the Prometheus metrics",
    exporter: &PromExporter,
};

/// Writes the record as Prometheus metrics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PromExporter;

impl Exporter for PromExporter {
    fn render(&self, record: &RunRecord) -> Result<Vec<u8>> {
        Ok(render(record).into_bytes())
    }
}

/// A sweep's metrics (`cluster --prom`).
impl Exporter<SweepRecord> for PromExporter {
    fn render(&self, record: &SweepRecord) -> Result<Vec<u8>> {
        Ok(render_sweep(record).into_bytes())
    }
}

/// One device's part of the record: its labels, ceilings and figures.
struct Part<'a> {
    labels: String,
    ceilings: &'a CeilingsRecord,
    results: &'a [SizeResult],
}

/// A family of per-size gauges: name, help, and the value of one size (none: no sample).
type Gauge = (&'static str, &'static str, fn(&SizeResult) -> Option<f64>);

/// The per-size gauges, in the file's order.
const GAUGES: &[Gauge] = &[
    (
        "rdmabench_bandwidth_bytes_per_second",
        "Bandwidth of each message size (one direction; both summed with -b).",
        |r| Some(r.bw_gbps * 1e9),
    ),
    (
        "rdmabench_message_rate_per_second",
        "Messages per second of each message size.",
        |r| Some(r.msg_rate_mpps * 1e6),
    ),
    (
        "rdmabench_ceiling_ratio",
        "Bandwidth as a share of the binding ceiling (wire, PCIe or staged), 0-1.",
        |r| r.pct_of_ceiling.map(|p| p / 100.0),
    ),
    (
        "rdmabench_worst_interval_bytes_per_second",
        "With --interval: the bandwidth of the worst interval of each message size's -D window.",
        |r| r.intervals.as_ref().map(|i| i.worst.bw_gbps * 1e9),
    ),
    (
        "rdmabench_interval_variation_ratio",
        "With --interval: the coefficient of variation of the intervals' bandwidth (0 when steady).",
        |r| r.intervals.as_ref().map(|i| i.cov),
    ),
    (
        "rdmabench_latency_min_seconds",
        "The smallest latency of each message size.",
        |r| r.lat_us.map(|l| l.min * 1e-6),
    ),
    (
        "rdmabench_latency_max_seconds",
        "The largest latency of each message size.",
        |r| r.lat_us.map(|l| l.max * 1e-6),
    ),
];

/// A latency quantile of the summary, and its figure.
type Quantile = (&'static str, fn(&super::LatencyStats) -> f64);

/// The latency quantiles of the summary.
const QUANTILES: &[Quantile] = &[
    ("0.5", |l| l.p50),
    ("0.9", |l| l.p90),
    ("0.99", |l| l.p99),
    ("0.999", |l| l.p999),
    ("0.9999", |l| l.p9999),
];

/// The record as Prometheus text: each family's HELP and TYPE, then its samples.
pub(crate) fn render(record: &RunRecord) -> String {
    let parts = parts(record);
    let mut out = String::new();
    let info: Vec<String> = parts
        .iter()
        .map(|p| {
            format!(
                "rdmabench_run_info{{{},version=\"{}\",mem=\"{}\"}} 1",
                p.labels,
                escape(&record.tool.version),
                escape(&record.params.mem)
            )
        })
        .collect();
    family(
        &mut out,
        ("rdmabench_run_info", "gauge"),
        "The run: tool version and firmware in its labels; always 1.",
        &info,
    );
    let complete = u8::from(record.status == RunStatus::Complete);
    let complete: Vec<String> = parts
        .iter()
        .map(|p| format!("rdmabench_run_complete{{{}}} {complete}", p.labels))
        .collect();
    family(
        &mut out,
        ("rdmabench_run_complete", "gauge"),
        "1 when the run measured every size it planned, 0 while it runs or after it failed.",
        &complete,
    );
    ceilings(&mut out, &parts);
    for &(name, help, value) in GAUGES {
        let samples: Vec<String> = parts
            .iter()
            .flat_map(|p| p.results.iter().map(move |r| (p, r)))
            .filter_map(|(p, r)| {
                Some(format!(
                    "{name}{{{}}} {}",
                    size_labels(p, r),
                    number(value(r)?)
                ))
            })
            .collect();
        family(&mut out, (name, "gauge"), help, &samples);
    }
    latency_summary(&mut out, &parts);
    out
}

/// The record's devices: the one device, or each rail and all rails together.
fn parts(record: &RunRecord) -> Vec<Part<'_>> {
    let base = |d: &DeviceRecord, rail: Option<String>| {
        let mut l = format!(
            "host=\"{}\",device=\"{}\",fw_ver=\"{}\",role=\"{}\",test=\"{}\"",
            escape(record.host.hostname.as_deref().unwrap_or("")),
            escape(&d.name),
            escape(&d.fw_ver),
            escape(record.role.as_deref().unwrap_or("")),
            escape(&record.params.test)
        );
        if let Some(rail) = rail {
            let _ = write!(l, ",rail=\"{rail}\"");
        }
        l
    };
    if record.rails.is_empty() {
        return vec![Part {
            labels: base(&record.device, None),
            ceilings: &record.ceilings,
            results: &record.results,
        }];
    }
    let mut parts: Vec<Part<'_>> = record
        .rails
        .iter()
        .enumerate()
        .map(|(i, r)| Part {
            labels: base(&r.device, Some(i.to_string())),
            ceilings: &r.ceilings,
            results: &r.results,
        })
        .collect();
    parts.push(Part {
        labels: base(&record.device, Some("all".to_string())),
        ceilings: &record.ceilings,
        results: &record.results,
    });
    parts
}

/// Each device's ceilings, by kind (`wire`, `pcie`, `staged`), where known.
fn ceilings(out: &mut String, parts: &[Part<'_>]) {
    let mut samples = Vec::new();
    for p in parts {
        let c = p.ceilings;
        for (kind, v) in [
            ("wire", c.wire_gbps),
            ("pcie", c.pcie_gbps),
            ("staged", c.staged_gbps),
        ] {
            if let Some(v) = v {
                let binding = c.limit.as_deref() == Some(kind);
                samples.push(format!(
                    "rdmabench_ceiling_bytes_per_second{{{},kind=\"{kind}\",binding=\"{binding}\"}} {}",
                    p.labels,
                    number(v * 1e9)
                ));
            }
        }
    }
    let help =
        "The physical ceilings of the device's path; binding=\"true\" marks the one that binds.";
    family(
        out,
        ("rdmabench_ceiling_bytes_per_second", "gauge"),
        help,
        &samples,
    );
}

/// The latency of each size as a summary: its quantiles, `_sum` and `_count`.
fn latency_summary(out: &mut String, parts: &[Part<'_>]) {
    const NAME: &str = "rdmabench_latency_seconds";
    let mut lines = Vec::new();
    for p in parts {
        for r in p.results {
            let Some(l) = &r.lat_us else {
                continue;
            };
            let labels = size_labels(p, r);
            for (q, value) in QUANTILES {
                lines.push(format!(
                    "{NAME}{{{labels},quantile=\"{q}\"}} {}",
                    number(value(l) * 1e-6)
                ));
            }
            let count = r.iterations;
            lines.push(format!(
                "{NAME}_sum{{{labels}}} {}",
                number(l.mean * 1e-6 * count as f64)
            ));
            lines.push(format!("{NAME}_count{{{labels}}} {count}"));
        }
    }
    let help = "Latency of each message size (one way: half a round trip for write, send; a round trip for read and atomics).";
    family(out, (NAME, "summary"), help, &lines);
}

/// A sweep record (`cluster --prom FILE`, written by rank 0 with the record) as metrics:
/// the sweep's state, per test the fleet's median, per NIC its median figure over its pairs
/// and whether the verdict named it (and why), per path named a sample, and per congestion
/// group its total, share of the ceiling and fairness. Per NIC, not per pair: a fleet of n
/// NICs is n series per test, where its pairs would be n^2/2.
pub(crate) fn render_sweep(rec: &SweepRecord) -> String {
    let mut out = String::new();
    let pattern = escape(&rec.pattern);
    let complete = u8::from(rec.status == RunStatus::Complete);
    family(
        &mut out,
        ("rdmabench_sweep_complete", "gauge"),
        "1 when the sweep ran every round, 0 while it runs or after it failed.",
        &[format!(
            "rdmabench_sweep_complete{{pattern=\"{pattern}\"}} {complete}"
        )],
    );
    family(
        &mut out,
        ("rdmabench_sweep_ranks", "gauge"),
        "Ranks in the sweep.",
        &[format!(
            "rdmabench_sweep_ranks{{pattern=\"{pattern}\"}} {}",
            rec.ranks.len()
        )],
    );
    fleet_medians(&mut out, rec);
    nic_figures(&mut out, rec);
    let named: Vec<String> = rec
        .ranks
        .iter()
        .map(|r| {
            let kind = rec
                .named
                .iter()
                .find(|n| n.rank == r.rank)
                .map(|n| n.kind.as_str());
            format!(
                "rdmabench_sweep_nic_named{{{},kind=\"{}\"}} {}",
                nic_labels(r),
                escape(kind.unwrap_or("")),
                u8::from(kind.is_some())
            )
        })
        .collect();
    family(
        &mut out,
        ("rdmabench_sweep_nic_named", "gauge"),
        "1 for a NIC the verdict names (kind: slow, failing, counters, unreachable), 0 for one it does not.",
        &named,
    );
    family(
        &mut out,
        ("rdmabench_sweep_paths_named", "gauge"),
        "Paths beyond one NIC the verdict names (between leaves, toward a leaf, a cut).",
        &[format!(
            "rdmabench_sweep_paths_named{{pattern=\"{pattern}\"}} {}",
            rec.paths.len()
        )],
    );
    groups(&mut out, rec);
    out
}

fn nic_labels(r: &super::RankRecord) -> String {
    format!(
        "host=\"{}\",device=\"{}\",rank=\"{}\"",
        escape(&r.host),
        escape(&r.device),
        r.rank
    )
}

/// A figure in base units: GB/s as bytes per second, microseconds as seconds.
fn base_unit(value: f64, unit: &str) -> f64 {
    if unit == "us" {
        value * 1e-6
    } else {
        value * 1e9
    }
}

/// The metric of a test's figures in `unit`: bandwidth or latency.
fn figure_metric(unit: &str, what: &str) -> String {
    match unit {
        "us" => format!("rdmabench_sweep_{what}latency_seconds"),
        _ => format!("rdmabench_sweep_{what}bandwidth_bytes_per_second"),
    }
}

fn fleet_medians(out: &mut String, rec: &SweepRecord) {
    for unit in ["GB/s", "us"] {
        let name = figure_metric(unit, "fleet_median_");
        let lines: Vec<String> = rec
            .fleet
            .iter()
            .filter(|f| f.unit == unit)
            .map(|f| {
                format!(
                    "{name}{{test=\"{}\"}} {}",
                    escape(&f.test),
                    number(base_unit(f.median, unit))
                )
            })
            .collect();
        let help = "The fleet's median figure of each test (bandwidth, or median latency).";
        family(out, (&name, "gauge"), help, &lines);
    }
}

/// Each NIC's median figure over the pairs it was in, per test (the pair's planned
/// measurement: `SweepRecord::measurements`).
fn nic_figures(out: &mut String, rec: &SweepRecord) {
    for unit in ["GB/s", "us"] {
        let name = figure_metric(unit, "nic_");
        let mut lines = Vec::new();
        for test in rec.tests.iter().filter(|t| rec.unit_of(t) == unit) {
            let pairs = rec.measurements(test);
            for r in &rec.ranks {
                let v: Vec<f64> = pairs
                    .iter()
                    .filter(|(k, _)| k.0 == r.rank || k.1 == r.rank)
                    .filter_map(|(_, p)| p.value)
                    .collect();
                let Some(median) = median(&v) else {
                    continue;
                };
                lines.push(format!(
                    "{name}{{{},test=\"{}\"}} {}",
                    nic_labels(r),
                    escape(test),
                    number(base_unit(median, unit))
                ));
            }
        }
        let help =
            "Each NIC's median figure over its pairs, per test (bandwidth, or median latency).";
        family(out, (&name, "gauge"), help, &lines);
    }
}

/// A congestion sweep's groups: total, share of the ceiling, fairness.
fn groups(out: &mut String, rec: &SweepRecord) {
    type Field = (
        &'static str,
        &'static str,
        fn(&super::GroupRecord) -> Option<f64>,
    );
    const FIELDS: &[Field] = &[
        (
            "rdmabench_sweep_group_bandwidth_bytes_per_second",
            "A congestion group's flows summed.",
            |g| g.total_gbps.map(|t| t * 1e9),
        ),
        (
            "rdmabench_sweep_group_ceiling_ratio",
            "A congestion group's total as a share of its receivers' ceilings, 0-1.",
            |g| g.pct_of_ceiling.map(|p| p / 100.0),
        ),
        (
            "rdmabench_sweep_group_fairness_ratio",
            "Jain's fairness index of a congestion group's flows (1: equal shares).",
            |g| g.fairness,
        ),
    ];
    for &(name, help, value) in FIELDS {
        let lines: Vec<String> = rec
            .groups
            .iter()
            .filter_map(|g| {
                let receivers: Vec<String> = g.receivers.iter().map(u32::to_string).collect();
                Some(format!(
                    "{name}{{pattern=\"{}\",test=\"{}\",round=\"{}\",receivers=\"{}\"}} {}",
                    escape(&rec.pattern),
                    escape(&g.test),
                    g.round + 1,
                    receivers.join(","),
                    number(value(g)?)
                ))
            })
            .collect();
        family(out, (name, "gauge"), help, &lines);
    }
}

fn size_labels(p: &Part<'_>, r: &SizeResult) -> String {
    format!("{},size=\"{}\"", p.labels, r.size)
}

/// A metric family (`name`, and `kind`: gauge, summary): its HELP and TYPE, then its
/// `samples`, one per line; nothing when it has none.
pub(crate) fn family(out: &mut String, (name, kind): (&str, &str), help: &str, samples: &[String]) {
    if samples.is_empty() {
        return;
    }
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for s in samples {
        let _ = writeln!(out, "{s}");
    }
}

/// A sample value as the exposition format writes it.
pub(crate) fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

/// A label value with `\`, `"` and newlines escaped, as the exposition format asks.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::samples;

    fn rendered(record: &RunRecord) -> String {
        String::from_utf8(PromExporter.render(record).unwrap()).unwrap()
    }

    fn promtool(text: &str) -> String {
        crate::promtool_check::check(text.as_bytes())
    }

    #[test]
    fn the_metrics_of_a_bandwidth_run() {
        insta::assert_snapshot!(rendered(&samples::write_bw().record));
    }

    #[test]
    fn the_metrics_of_a_latency_run() {
        insta::assert_snapshot!(rendered(&samples::write_lat().record));
    }

    #[test]
    fn every_record_kind_passes_promtool() {
        let mut rails = samples::write_bw().record;
        let mut b = rails.clone();
        b.device.name = "mlx5_1".into();
        rails = crate::run::rails::combined_record(&[Some(rails), Some(b)]).unwrap();
        let mut odd = samples::write_lat().record;
        odd.host.hostname = Some("node\"7\\\n".into());
        odd.status = RunStatus::Failed;
        let mut cut = samples::write_bw().record;
        let list = (0..4)
            .map(|k| crate::report::IntervalFigure::new(65536, k as f64, 1.0, 100 + k))
            .collect();
        cut.results[1].intervals = crate::report::IntervalFigures::from_list(1.0, list);
        for record in [
            samples::write_bw().record,
            samples::write_lat().record,
            rails,
            odd,
            cut.clone(),
        ] {
            let text = rendered(&record);
            assert_eq!(promtool(&text), "", "{text}");
        }
        let text = rendered(&cut);
        assert!(
            text.contains("rdmabench_worst_interval_bytes_per_second{")
                && text.contains("rdmabench_interval_variation_ratio{"),
            "{text}"
        );
    }

    #[test]
    fn a_multi_rail_run_has_each_rail_and_all() {
        let a = samples::write_bw().record;
        let mut b = a.clone();
        b.device.name = "mlx5_1".into();
        let record = crate::run::rails::combined_record(&[Some(a), Some(b)]).unwrap();
        let text = rendered(&record);
        for rail in ["rail=\"0\"", "rail=\"1\"", "rail=\"all\""] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with("rdmabench_bandwidth_bytes_per_second{")
                        && l.contains(rail)),
                "{rail}: {text}"
            );
        }
    }

    /// A judged sweep of four ranks, rank 2 slow, with a latency test too.
    fn judged_sweep() -> SweepRecord {
        use crate::cluster::verdict::{judge, tests as v};
        let mut pairs = Vec::new();
        for a in 0..4u32 {
            for b in a + 1..4 {
                pairs.push(v::pair(a, b, if a == 2 || b == 2 { 1.5 } else { 15.0 }));
                let mut lat = v::pair(a, b, 3.0);
                (lat.test, lat.unit) = ("write-lat".into(), "us".into());
                pairs.push(lat);
            }
        }
        let mut rec = v::sweep(4, pairs);
        rec.tests.push("write-lat".into());
        judge(&mut rec);
        rec
    }

    #[test]
    fn a_sweeps_metrics_name_each_nic_and_pass_promtool() {
        let rec = judged_sweep();
        let text = render_sweep(&rec);
        assert_eq!(promtool(&text), "", "{text}");
        assert!(
            text.contains(
                "rdmabench_sweep_nic_named{host=\"node\",device=\"rxe2\",rank=\"2\",kind=\"slow\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "rdmabench_sweep_nic_named{host=\"node\",device=\"rxe0\",rank=\"0\",kind=\"\"} 0"
            ),
            "{text}"
        );
        // rxe0's pairs: 15, 1.5 (with rxe2), 15 GB/s: the median 15 GB/s.
        assert!(
            text.contains(
                "rdmabench_sweep_nic_bandwidth_bytes_per_second{host=\"node\",device=\"rxe0\",rank=\"0\",test=\"write-bw\"} 15000000000"
            ),
            "{text}"
        );
        assert!(
            text.contains("rdmabench_sweep_nic_latency_seconds{"),
            "{text}"
        );
        assert!(
            text.contains(
                "rdmabench_sweep_fleet_median_bandwidth_bytes_per_second{test=\"write-bw\"}"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_congestion_sweeps_groups_pass_promtool() {
        let mut rec = crate::cluster::verdict::tests::sweep(4, Vec::new());
        rec.pattern = "incast".into();
        let flows = (1..4)
            .map(|c| crate::cluster::verdict::tests::pair(0, c, 1.0))
            .collect();
        let served = vec![None, None, None];
        rec.groups = vec![crate::cluster::congestion::group_record(
            0, "write-bw", flows, &served,
        )];
        let text = render_sweep(&rec);
        assert_eq!(promtool(&text), "", "{text}");
        assert!(
            text.contains(
                "rdmabench_sweep_group_bandwidth_bytes_per_second{pattern=\"incast\",test=\"write-bw\",round=\"1\",receivers=\"0\"} 3000000000"
            ),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(1.5e10), "15000000000");
    }
}
