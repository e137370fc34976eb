//! What a chart shows, worked out from the records before anything is drawn: axes, series,
//! legend labels and titles. Pure data, so it is tested without a backend.
//!
//! Long because what a chart shows (series, axes, titles, refusals) is decided in one place,
//! with about 140 lines of tests; the trend chart is in `trend.rs`.

use std::collections::BTreeSet;

use anyhow::Result;

use super::axis::{linear_axis, log_axis, size_axis, Axis};
use super::heatmap::{MAX_LABEL_CHARS, MAX_LINE_CHARS};
use crate::plan::PlanError;
use crate::report::{LatencyStats, RunRecord, SizeResult};
use crate::text::printable_within;

/// A record and the name of its file.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// The file's name without folder and extension.
    pub stem: String,
    /// The record.
    pub record: RunRecord,
}

/// Which chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// Bandwidth vs message size, with each record's binding ceiling
    Bw,
    /// Latency percentiles (p50, p99, p99.9) vs message size
    Lat,
    /// One size's bandwidth (or latency) across records, in order of date or firmware
    Trend,
    /// A -D --interval run's bandwidth interval by interval, its worst interval marked
    Timeline,
}

/// The order of a trend's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Order {
    /// By `started_at`
    Date,
    /// By firmware version (`device.fw_ver`, numerically), then date
    Fw,
}

/// Line pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dash {
    /// Continuous.
    Solid,
    /// Long dashes (ceilings, p99).
    Dashed,
    /// Short dashes (p99.9).
    Dotted,
}

/// Point marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// Filled circle.
    Circle,
    /// Filled triangle.
    Triangle,
    /// Cross.
    Cross,
    /// None (a plain line).
    None,
}

/// One line on the chart, in drawn coordinates.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// Legend text.
    pub label: String,
    /// Palette index; `None` is grey.
    pub color: Option<usize>,
    /// Line pattern.
    pub dash: Dash,
    /// Marker at each point.
    pub marker: Marker,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Error bars (x, low, high): the spread of the repetitions.
    pub bars: Vec<(f64, f64, f64)>,
}

/// A whole chart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChartSpec {
    /// Title.
    pub title: String,
    /// What the records share, in a line.
    pub subtitle: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Lines, in legend order.
    pub series: Vec<Series>,
}

/// Options of the spec.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecOptions {
    /// Legend labels given on the command line, in record order.
    pub labels: Vec<String>,
    /// Title given on the command line.
    pub title: Option<String>,
    /// Trend: the message size.
    pub size: Option<u64>,
    /// Trend: the order.
    pub order: Option<Order>,
    /// Bandwidth in Gb/s instead of GB/s.
    pub gbits: bool,
    /// A logarithmic bandwidth axis.
    pub log_y: bool,
    /// Width of the plotting area in pixels (to thin out category labels).
    pub width_px: u32,
}

/// The default chart: latency when every record has latency figures, the timeline when
/// every record has intervals (`--interval`), else bandwidth.
pub(crate) fn default_kind(inputs: &[Input]) -> Kind {
    let all_intervals = inputs
        .iter()
        .all(|i| i.record.results.iter().any(|r| r.intervals.is_some()));
    if !inputs.is_empty() && all_intervals {
        return Kind::Timeline;
    }
    let all_lat = inputs.iter().all(|i| {
        !i.record.results.is_empty() && i.record.results.iter().all(|r| r.lat_us.is_some())
    });
    if all_lat {
        Kind::Lat
    } else {
        Kind::Bw
    }
}

/// Legend labels: from what differs between the records (test, memory mode, device,
/// firmware, host, date), else the file names; `--label` overrides.
pub(crate) fn legend_labels(inputs: &[Input], explicit: &[String]) -> Vec<String> {
    let facts = |r: &RunRecord| -> Vec<String> {
        vec![
            r.params.test.clone(),
            r.params.mem.clone(),
            r.device.name.clone(),
            format!("fw {}", r.device.fw_ver),
            r.host.hostname.clone().unwrap_or_default(),
            r.started_at
                .get(..16)
                .unwrap_or(&r.started_at)
                .replace('T', " "),
        ]
    };
    let all: Vec<Vec<String>> = inputs.iter().map(|i| facts(&i.record)).collect();
    let mut labels: Vec<String> = if inputs.len() == 1 {
        let r = &inputs[0].record;
        vec![format!(
            "{} {} on {} (fw {})",
            r.params.test, r.params.mem, r.device.name, r.device.fw_ver
        )]
    } else {
        let differing: Vec<usize> = (0..all.first().map_or(0, Vec::len))
            .filter(|&k| all.iter().any(|f| f[k] != all[0][k]))
            // The date only when nothing else tells the records apart.
            .collect();
        let pick: Vec<usize> = if differing.iter().any(|&k| k < 5) {
            differing.into_iter().filter(|&k| k < 5).collect()
        } else {
            differing
        };
        if pick.is_empty() {
            inputs.iter().map(|i| i.stem.clone()).collect()
        } else {
            all.iter()
                .map(|f| {
                    pick.iter()
                        .map(|&k| f[k].as_str())
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect()
        }
    };
    // Labels that still collide get their file's name.
    let dup: Vec<bool> = labels
        .iter()
        .map(|l| labels.iter().filter(|m| *m == l).count() > 1)
        .collect();
    for (i, d) in dup.into_iter().enumerate() {
        if d && labels[i] != inputs[i].stem {
            labels[i] = format!("{} [{}]", labels[i], inputs[i].stem);
        }
    }
    for (i, l) in explicit.iter().enumerate() {
        if let Some(slot) = labels.get_mut(i) {
            slot.clone_from(l);
        }
    }
    // Names from the records, escaped and cut: a control character would make the SVG
    // invalid XML, and a label sizes the legend.
    labels
        .iter()
        .map(|l| printable_within(l, MAX_LABEL_CHARS))
        .collect()
}

fn same<T: PartialEq>(inputs: &[Input], f: impl Fn(&RunRecord) -> T) -> Option<T> {
    let first = f(&inputs.first()?.record);
    inputs
        .iter()
        .all(|i| f(&i.record) == first)
        .then_some(first)
}

/// What the records share, for the subtitle; soft-RoCE runs are marked as emulated.
pub(crate) fn subtitle(inputs: &[Input]) -> String {
    let mut parts = Vec::new();
    if let Some(t) = same(inputs, |r| r.params.test.clone()) {
        parts.push(t);
    }
    if let Some(c) = same(inputs, |r| {
        format!(
            "{}, {} QP{}{}",
            r.params.connection,
            r.params.qps,
            if r.params.qps == 1 { "" } else { "s" },
            r.params
                .tx_depth
                .map(|d| format!(", depth {d}"))
                .unwrap_or_default()
        )
    }) {
        parts.push(c);
    }
    if let Some(m) = same(inputs, |r| r.params.mem.clone()) {
        parts.push(format!("mem {m}"));
    }
    if let Some(d) = same(inputs, |r| r.device.name.clone()) {
        parts.push(format!("device {d}"));
    }
    if let Some(m) = same(inputs, |r| r.device.active_mtu) {
        parts.push(format!("MTU {m}"));
    }
    if let Some(Some(s)) = same(inputs, |r| r.device.active_speed.clone()) {
        parts.push(s);
    }
    if inputs
        .iter()
        .all(|i| i.record.device.name.starts_with("rxe"))
    {
        parts.push("soft-RoCE: EMULATED figures".to_string());
    }
    printable_within(&parts.join(", "), MAX_LINE_CHARS)
}

pub(super) fn reps_range(r: &SizeResult, f: impl Fn(f64) -> f64) -> Option<(f64, f64)> {
    if r.repetitions.len() < 2 {
        return None;
    }
    let v: Vec<f64> = r.repetitions.iter().map(|x| f(x.bw_gbps)).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

fn sorted_results(r: &RunRecord) -> Vec<&SizeResult> {
    let mut v: Vec<&SizeResult> = r.results.iter().collect();
    v.sort_by_key(|s| s.size);
    v
}

fn size_range(inputs: &[Input]) -> (u64, u64) {
    let sizes: BTreeSet<u64> = inputs
        .iter()
        .flat_map(|i| i.record.results.iter().map(|r| r.size))
        .collect();
    (
        sizes.first().copied().unwrap_or(1),
        sizes.last().copied().unwrap_or(1),
    )
}

pub(super) fn bw_unit(gbits: bool) -> (f64, &'static str) {
    if gbits {
        (8.0, "Gb/s")
    } else {
        (1.0, "GB/s")
    }
}

/// A ceiling more than this many times the highest figure is named in the legend but kept
/// off a linear axis, so that the figures are not squashed against the bottom.
pub(crate) const OFF_CHART: f64 = 3.0;

/// Bandwidth vs size, one line per record, its ceiling dashed.
pub(crate) fn bw_spec(inputs: &[Input], opts: &SpecOptions) -> Result<ChartSpec> {
    let labels = legend_labels(inputs, &opts.labels);
    let (scale, unit) = bw_unit(opts.gbits);
    let (lo, hi) = size_range(inputs);
    let x = size_axis(lo, hi, 14);
    let log = opts.log_y;
    let (mut series, values) = bw_series(inputs, &labels, scale, log);
    let data_max = values.iter().copied().fold(0.0, f64::max);
    let ceilings = bw_ceilings(inputs, &labels, scale, unit);
    let y = bw_axis(unit, &values, data_max, &ceilings, log);
    for s in &mut series {
        for p in &mut s.points {
            p.1 = bw_on_axis(p.1, log);
        }
        for b in &mut s.bars {
            *b = (b.0, bw_on_axis(b.1, log), bw_on_axis(b.2, log));
        }
    }
    for (label, color, v) in ceilings {
        series.push(bw_ceiling_series(label, color, v, &x, data_max, log));
    }
    Ok(ChartSpec {
        title: opts
            .title
            .clone()
            .unwrap_or_else(|| "Bandwidth vs message size".to_string()),
        subtitle: subtitle(inputs),
        x,
        y,
        series,
    })
}

/// One line per record, in the bandwidth unit (not yet on the axis's scale), and every
/// figure drawn (points and error bars).
fn bw_series(
    inputs: &[Input],
    labels: &[String],
    scale: f64,
    log: bool,
) -> (Vec<Series>, Vec<f64>) {
    let mut series = Vec::new();
    let mut values = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let mut s = Series {
            label: labels[i].clone(),
            color: Some(i),
            dash: Dash::Solid,
            marker: Marker::Circle,
            points: Vec::new(),
            bars: Vec::new(),
        };
        for r in sorted_results(&input.record) {
            let px = (r.size.max(1) as f64).log2();
            let v = r.bw_gbps * scale;
            if log && v <= 0.0 {
                continue;
            }
            s.points.push((px, v));
            values.push(v);
            if let Some((l, h)) = reps_range(r, |v| v * scale) {
                s.bars.push((px, l, h));
                values.extend([l, h]);
            }
        }
        series.push(s);
    }
    (series, values)
}

/// A record's binding ceiling (its kind, and the figure in the bandwidth unit), if it has one.
fn run_ceiling(r: &RunRecord, scale: f64) -> Option<(String, f64)> {
    let g = r
        .ceilings
        .limit_gbps
        .filter(|g| g.is_finite() && *g > 0.0)?;
    Some((r.ceilings.limit.clone().unwrap_or_default(), g * scale))
}

/// The ceilings to draw (legend label, colour, figure): one grey line when every record has
/// the same one, else one per record in its colour.
fn bw_ceilings(
    inputs: &[Input],
    labels: &[String],
    scale: f64,
    unit: &str,
) -> Vec<(String, Option<usize>, f64)> {
    let mut ceilings = Vec::new();
    match same(inputs, |r| run_ceiling(r, scale)) {
        Some(Some((kind, v))) => {
            ceilings.push((format!("binding ceiling ({kind}): {v:.3} {unit}"), None, v));
        }
        _ => {
            for (i, input) in inputs.iter().enumerate() {
                if let Some((kind, v)) = run_ceiling(&input.record, scale) {
                    ceilings.push((
                        format!("{}: ceiling ({kind}) {v:.3} {unit}", labels[i]),
                        Some(i),
                        v,
                    ));
                }
            }
        }
    }
    ceilings
}

/// Whether a ceiling of `v` is kept off a linear axis whose highest figure is `data_max`.
fn off_chart(v: f64, data_max: f64, log: bool) -> bool {
    !log && data_max > 0.0 && v > OFF_CHART * data_max
}

/// A bandwidth figure on the y axis's scale: its log10 on a logarithmic axis.
fn bw_on_axis(v: f64, log: bool) -> f64 {
    if log {
        v.max(1e-300).log10()
    } else {
        v
    }
}

/// The bandwidth axis: up to the highest figure or ceiling drawn, logarithmic when asked.
fn bw_axis(
    unit: &str,
    values: &[f64],
    data_max: f64,
    ceilings: &[(String, Option<usize>, f64)],
    log: bool,
) -> Axis {
    let data_min = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let top = ceilings
        .iter()
        .map(|c| c.2)
        .filter(|v| !off_chart(*v, data_max, log))
        .fold(data_max, f64::max);
    let desc = format!("bandwidth [{unit}]");
    if log && data_min.is_finite() {
        log_axis(&desc, data_min, top, 12)
    } else {
        linear_axis(&desc, 0.0, top, 6)
    }
}

/// A ceiling's dashed line across the chart, or only its legend entry when it is off the
/// chart.
fn bw_ceiling_series(
    label: String,
    color: Option<usize>,
    v: f64,
    x: &Axis,
    data_max: f64,
    log: bool,
) -> Series {
    let (label, points) = if off_chart(v, data_max, log) {
        (
            format!(
                "{label}, off the chart ({:.0}x the highest figure)",
                v / data_max
            ),
            Vec::new(),
        )
    } else {
        let y = bw_on_axis(v, log);
        (label, vec![(x.lo, y), (x.hi, y)])
    };
    Series {
        label,
        color,
        dash: Dash::Dashed,
        marker: Marker::None,
        points,
        bars: Vec::new(),
    }
}

pub(super) fn lat_desc(inputs: &[Input]) -> &'static str {
    match same(inputs, |r| r.params.latency.clone()) {
        Some(Some(k)) if k == "one_way" => "one-way latency [µs]",
        Some(Some(k)) if k == "round_trip" => "round-trip latency [µs]",
        _ => "latency [µs]",
    }
}

/// A y axis for latencies: logarithmic when they span more than a decade.
fn lat_axis(desc: &str, values: &[f64]) -> (Axis, bool) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    if lo > 0.0 && hi / lo > 10.0 {
        (log_axis(desc, lo, hi, 12), true)
    } else {
        (linear_axis(desc, 0.0, hi, 6), false)
    }
}

pub(super) const PERCENTILES: [(&str, Dash, Marker); 3] = [
    ("p50", Dash::Solid, Marker::Circle),
    ("p99", Dash::Dashed, Marker::Triangle),
    ("p99.9", Dash::Dotted, Marker::Cross),
];

pub(super) fn pct(l: &LatencyStats, k: usize) -> f64 {
    match k {
        0 => l.p50,
        1 => l.p99,
        _ => l.p999,
    }
}

/// Latency percentiles vs size.
pub(crate) fn lat_spec(inputs: &[Input], opts: &SpecOptions) -> Result<ChartSpec> {
    for i in inputs {
        if !i.record.results.iter().any(|r| r.lat_us.is_some()) {
            return Err(PlanError::Value(format!(
                "'{}' has no latency figures (it is a {} record); plot it with --kind bw",
                i.stem, i.record.params.test
            ))
            .into());
        }
    }
    let labels = legend_labels(inputs, &opts.labels);
    let values: Vec<f64> = inputs
        .iter()
        .flat_map(|i| i.record.results.iter().filter_map(|r| r.lat_us))
        .flat_map(|l| [l.p50, l.p99, l.p999])
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let (y, log) = lat_axis(lat_desc(inputs), &values);
    let tf = |v: f64| if log { v.max(1e-12).log10() } else { v };
    let (lo, hi) = size_range(inputs);
    let x = size_axis(lo, hi, 14);
    let mut series = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        for (k, (name, dash, marker)) in PERCENTILES.iter().enumerate() {
            let points = sorted_results(&input.record)
                .into_iter()
                .filter_map(|r| {
                    r.lat_us
                        .map(|l| ((r.size.max(1) as f64).log2(), tf(pct(&l, k))))
                })
                .collect();
            series.push(Series {
                label: if inputs.len() == 1 {
                    (*name).to_string()
                } else {
                    format!("{} {name}", labels[i])
                },
                color: Some(if inputs.len() == 1 { k } else { i }),
                dash: *dash,
                marker: *marker,
                points,
                bars: Vec::new(),
            });
        }
    }
    Ok(ChartSpec {
        title: opts.title.clone().unwrap_or_else(|| {
            if inputs.len() == 1 {
                format!("Latency percentiles vs message size: {}", labels[0])
            } else {
                "Latency percentiles vs message size".to_string()
            }
        }),
        subtitle: subtitle(inputs),
        x,
        y,
        series,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::compare::tests::{lat_record, record, with_reps};

    pub(in crate::plot) fn input(stem: &str, r: RunRecord) -> Input {
        Input {
            stem: stem.to_string(),
            record: r,
        }
    }

    pub(in crate::plot) fn opts() -> SpecOptions {
        SpecOptions {
            width_px: 900,
            ..Default::default()
        }
    }

    #[test]
    fn labels_come_from_what_differs() {
        let a = record("write-bw", &[(65536, 1.0)]);
        let mut b = a.clone();
        b.device.fw_ver = "28.40.1000".to_string();
        let l = legend_labels(&[input("a", a.clone()), input("b", b.clone())], &[]);
        assert_eq!(l, ["fw 28.39.1002", "fw 28.40.1000"]);
        let mut c = a.clone();
        c.params.mem = "cuda:0".to_string();
        let l = legend_labels(&[input("a", a.clone()), input("c", c)], &[]);
        assert_eq!(l, ["host", "cuda:0"]);
        // Nothing differs: the file names.
        let l = legend_labels(&[input("run1", a.clone()), input("run2", a.clone())], &[]);
        assert_eq!(l, ["run1", "run2"]);
        // --label wins.
        let l = legend_labels(
            &[input("a", a.clone()), input("b", b)],
            &["old".to_string()],
        );
        assert_eq!(l, ["old", "fw 28.40.1000"]);
        let l = legend_labels(&[input("a", a)], &[]);
        assert_eq!(l, ["write-bw host on mlx5_0 (fw 28.39.1002)"]);
    }

    #[test]
    fn a_bandwidth_chart_has_a_line_per_record_and_the_ceiling() {
        let a = record("write-bw", &[(2, 0.01), (65536, 20.0), (8 << 20, 45.0)]);
        let spec = bw_spec(&[input("a", a)], &opts()).unwrap();
        assert_eq!(spec.series.len(), 2);
        assert_eq!(spec.series[0].points.len(), 3);
        let (x, y) = spec.series[0].points[1];
        assert!(x == 16.0 && (y - 20.0).abs() < 1e-9, "{x} {y}");
        let ceiling = &spec.series[1];
        assert_eq!(ceiling.dash, Dash::Dashed);
        assert!(ceiling.label.contains("wire") && ceiling.label.contains("48.500 GB/s"));
        assert!(spec.y.hi > 48.5, "{:?}", spec.y);
        assert!(spec.y.desc.contains("GB/s") && spec.x.desc.contains("bytes"));
    }

    #[test]
    fn a_ceiling_far_above_the_figures_is_named_but_off_the_chart() {
        let a = record("write-bw", &[(2, 0.00007), (65536, 0.05)]);
        let mut a = a;
        a.ceilings.limit_gbps = Some(1.157);
        let spec = bw_spec(&[input("a", a.clone())], &opts()).unwrap();
        let c = &spec.series[1];
        assert!(
            c.points.is_empty() && c.label.contains("off the chart (23x"),
            "{}",
            c.label
        );
        assert!(spec.y.hi < 0.1, "{:?}", spec.y);
        // On a log axis it is drawn.
        let spec = bw_spec(
            &[input("a", a)],
            &SpecOptions {
                log_y: true,
                ..opts()
            },
        )
        .unwrap();
        let c = &spec.series[1];
        assert_eq!(c.points.len(), 2);
        assert!((c.points[0].1 - 1.157f64.log10()).abs() < 1e-9);
        assert!(spec.y.hi > 1.157f64.log10() && spec.y.lo < 0.00007f64.log10());
    }

    #[test]
    fn different_ceilings_get_a_line_each() {
        let a = record("write-bw", &[(65536, 20.0)]);
        let mut b = a.clone();
        b.ceilings.limit_gbps = Some(24.0);
        b.device.fw_ver = "x".to_string();
        let spec = bw_spec(&[input("a", a), input("b", b)], &opts()).unwrap();
        let dashed: Vec<&Series> = spec
            .series
            .iter()
            .filter(|s| s.dash == Dash::Dashed)
            .collect();
        assert_eq!(dashed.len(), 2);
        assert_eq!(dashed[1].color, Some(1));
    }

    #[test]
    fn repetitions_become_error_bars() {
        let a = with_reps(record("write-bw", &[(65536, 1.0)]), &[9.0, 10.0, 11.0]);
        let spec = bw_spec(&[input("a", a)], &opts()).unwrap();
        assert_eq!(spec.series[0].bars, [(16.0, 9.0, 11.0)]);
    }

    #[test]
    fn latency_charts_have_three_percentiles_per_record() {
        let a = lat_record(&[2, 1 << 20], &[(2.0, 5.0)]);
        assert_eq!(default_kind(&[input("a", a.clone())]), Kind::Lat);
        let spec = lat_spec(&[input("a", a.clone())], &opts()).unwrap();
        let labels: Vec<&str> = spec.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["p50", "p99", "p99.9"]);
        assert!(spec.y.desc.contains("one-way") && spec.y.desc.contains("µs"));
        let b = record("write-bw", &[(65536, 1.0)]);
        assert_eq!(
            default_kind(&[input("a", a), input("b", b.clone())]),
            Kind::Bw
        );
        let err = lat_spec(&[input("b", b)], &opts()).unwrap_err();
        assert!(
            err.is::<PlanError>() && err.to_string().contains("--kind bw"),
            "{err}"
        );
    }

    #[test]
    fn emulated_runs_say_so() {
        let mut a = record("write-bw", &[(65536, 0.05)]);
        a.device.name = "rxe1".to_string();
        assert!(subtitle(&[input("a", a)]).contains("EMULATED"));
    }
}
