//! `--kind trend`: one size's bandwidth (or p50/p99 latency) across records, ordered by
//! `started_at` or by firmware version, with each run's binding ceiling.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use anyhow::{bail, Result};

use super::axis::{category_axis, linear_axis, Axis};
use super::spec::{bw_unit, lat_desc, pct, reps_range, subtitle, ChartSpec, Dash, Input};
use super::spec::{Marker, Order, Series, SpecOptions, OFF_CHART, PERCENTILES};
use crate::plan::PlanError;
use crate::report::{RunRecord, SizeResult};
use crate::units::format_size;

/// Compares firmware versions numerically by their digit groups ("28.9.10" < "28.10.2").
pub(crate) fn version_cmp(a: &str, b: &str) -> Ordering {
    let parts = |s: &str| -> Vec<(u64, String)> {
        s.split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            .map(|p| (p.parse::<u64>().unwrap_or(u64::MAX), p.to_string()))
            .collect()
    };
    parts(a).cmp(&parts(b))
}

/// The size a trend shows: `--size`, else 64 KiB when every record has it, else the largest
/// size every record has.
pub(crate) fn trend_size(inputs: &[Input], wanted: Option<u64>) -> Result<u64> {
    let sets: Vec<BTreeSet<u64>> = inputs
        .iter()
        .map(|i| i.record.results.iter().map(|r| r.size).collect())
        .collect();
    let common: BTreeSet<u64> = sets
        .iter()
        .skip(1)
        .fold(sets.first().cloned().unwrap_or_default(), |acc, s| {
            acc.intersection(s).copied().collect()
        });
    if let Some(size) = wanted {
        let missing: Vec<&str> = inputs
            .iter()
            .zip(&sets)
            .filter(|(_, s)| !s.contains(&size))
            .map(|(i, _)| i.stem.as_str())
            .collect();
        if !missing.is_empty() {
            bail!(PlanError::Value(format!(
                "--size {size}: not measured in {}; sizes every record has: {}",
                missing.join(", "),
                list_sizes(&common)
            )));
        }
        return Ok(size);
    }
    if common.contains(&65536) {
        return Ok(65536);
    }
    match common.last() {
        Some(s) => Ok(*s),
        None => bail!(
            "the records share no message size, so there is no trend to draw; run them with the same -s or -a"
        ),
    }
}

fn list_sizes(s: &BTreeSet<u64>) -> String {
    if s.is_empty() {
        return "none".to_string();
    }
    s.iter()
        .map(|x| format_size(*x))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One size across records, ordered by date or firmware.
pub(crate) fn trend_spec(inputs: &[Input], opts: &SpecOptions) -> Result<ChartSpec> {
    let size = trend_size(inputs, opts.size)?;
    let order = opts.order.unwrap_or(Order::Date);
    let ordered = trend_order(inputs, order);
    let rows: Vec<&SizeResult> = ordered
        .iter()
        .filter_map(|i| i.record.results.iter().find(|r| r.size == size))
        .collect();
    let x = trend_x_axis(&ordered, order, opts);
    let latency = rows.iter().all(|r| r.lat_us.is_some());
    let (y, series) = if latency {
        trend_latency(inputs, &rows, size)
    } else {
        trend_bandwidth(&ordered, &rows, size, opts.gbits)
    };
    let what = if latency { "Latency" } else { "Bandwidth" };
    Ok(ChartSpec {
        title: opts.title.clone().unwrap_or_else(|| {
            format!(
                "{what} at {} across {} runs, by {}",
                format_size(size),
                inputs.len(),
                match order {
                    Order::Date => "date",
                    Order::Fw => "firmware",
                }
            )
        }),
        subtitle: subtitle(inputs),
        x,
        y,
        series,
    })
}

/// The records in the trend's order: by date, or by firmware version then date.
fn trend_order(inputs: &[Input], order: Order) -> Vec<&Input> {
    let mut ordered: Vec<&Input> = inputs.iter().collect();
    match order {
        Order::Date => ordered.sort_by(|a, b| a.record.started_at.cmp(&b.record.started_at)),
        Order::Fw => ordered.sort_by(|a, b| {
            version_cmp(&a.record.device.fw_ver, &b.record.device.fw_ver)
                .then_with(|| a.record.started_at.cmp(&b.record.started_at))
        }),
    }
    ordered
}

/// The category axis of the ordered records: their firmware versions or dates, or the
/// `--label` values given.
fn trend_x_axis(ordered: &[&Input], order: Order, opts: &SpecOptions) -> Axis {
    let dates: Vec<&str> = ordered
        .iter()
        .map(|i| {
            i.record
                .started_at
                .get(..10)
                .unwrap_or(&i.record.started_at)
        })
        .collect();
    let dates_unique = dates.iter().collect::<BTreeSet<_>>().len() == dates.len();
    let mut labels: Vec<String> = ordered
        .iter()
        .map(|i| match order {
            Order::Fw => i.record.device.fw_ver.clone(),
            Order::Date if dates_unique => dates_of(&i.record, 10),
            Order::Date => dates_of(&i.record, 16)
                .get(5..)
                .unwrap_or_default()
                .to_string(),
        })
        .collect();
    for (k, l) in opts.labels.iter().enumerate() {
        if let Some(slot) = labels.get_mut(k) {
            slot.clone_from(l);
        }
    }
    // About 7.5 px per character at the label size.
    let px: Vec<u32> = labels
        .iter()
        .map(|l| (l.chars().count() as f64 * 7.5) as u32)
        .collect();
    let xdesc = match order {
        Order::Date => "run (by start time, UTC)",
        Order::Fw => "firmware version (device.fw_ver)",
    };
    category_axis(xdesc, &labels, &px, opts.width_px.max(200))
}

/// The latency trend: its y axis, and a p50 and a p99 line.
fn trend_latency(inputs: &[Input], rows: &[&SizeResult], size: u64) -> (Axis, Vec<Series>) {
    let values: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.lat_us)
        .flat_map(|l| [l.p50, l.p99])
        .collect();
    let hi = values.iter().copied().fold(0.0, f64::max);
    let y = linear_axis(lat_desc(inputs), 0.0, hi, 6);
    let mut series = Vec::new();
    for (k, (name, dash, marker)) in PERCENTILES.iter().take(2).enumerate() {
        series.push(Series {
            label: format!("{name} at {}", format_size(size)),
            color: Some(k),
            dash: *dash,
            marker: *marker,
            points: rows
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.lat_us.map(|l| (i as f64, pct(&l, k))))
                .collect(),
            bars: Vec::new(),
        });
    }
    (y, series)
}

/// The bandwidth trend: its y axis, the bandwidth line, and each run's ceiling where the
/// runs have one.
fn trend_bandwidth(
    ordered: &[&Input],
    rows: &[&SizeResult],
    size: u64,
    gbits: bool,
) -> (Axis, Vec<Series>) {
    let (scale, unit) = bw_unit(gbits);
    let mut ymax: f64 = 0.0;
    let mut s = Series {
        label: format!("bandwidth at {}", format_size(size)),
        color: Some(0),
        dash: Dash::Solid,
        marker: Marker::Circle,
        points: Vec::new(),
        bars: Vec::new(),
    };
    for (i, r) in rows.iter().enumerate() {
        s.points.push((i as f64, r.bw_gbps * scale));
        ymax = ymax.max(r.bw_gbps * scale);
        if let Some((l, h)) = reps_range(r, |v| v * scale) {
            s.bars.push((i as f64, l, h));
            ymax = ymax.max(h);
        }
    }
    let mut series = vec![s];
    let (ceiling, ymax) = trend_ceiling(ordered, scale, unit, ymax);
    series.extend(ceiling);
    let y = linear_axis(&format!("bandwidth [{unit}]"), 0.0, ymax, 6);
    (y, series)
}

/// The dashed line of each run's binding ceiling (none when no run has one; only a legend
/// entry when it is off the chart), and the top of the y axis with it.
fn trend_ceiling(ordered: &[&Input], scale: f64, unit: &str, ymax: f64) -> (Option<Series>, f64) {
    let ceilings: Vec<(f64, f64)> = ordered
        .iter()
        .enumerate()
        .filter_map(|(i, inp)| {
            inp.record
                .ceilings
                .limit_gbps
                .filter(|g| g.is_finite() && *g > 0.0)
                .map(|g| (i as f64, g * scale))
        })
        .collect();
    if ceilings.is_empty() {
        return (None, ymax);
    }
    let cmax = ceilings.iter().map(|c| c.1).fold(0.0, f64::max);
    if ymax > 0.0 && cmax > OFF_CHART * ymax {
        let line = Series {
            label: format!(
                "binding ceiling of each run: up to {cmax:.3} {unit}, off the chart ({:.0}x the highest figure)",
                cmax / ymax
            ),
            color: None,
            dash: Dash::Dashed,
            marker: Marker::None,
            points: Vec::new(),
            bars: Vec::new(),
        };
        (Some(line), ymax)
    } else {
        let line = Series {
            label: "binding ceiling of each run".to_string(),
            color: None,
            dash: Dash::Dashed,
            marker: Marker::None,
            points: ceilings,
            bars: Vec::new(),
        };
        (Some(line), ymax.max(cmax))
    }
}

fn dates_of(r: &RunRecord, len: usize) -> String {
    r.started_at
        .get(..len)
        .unwrap_or(&r.started_at)
        .replace('T', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::record;
    use crate::plot::spec::tests::{input, opts};

    #[test]
    fn trends_order_by_date_or_firmware() {
        let mut runs = Vec::new();
        for (i, (fw, day, bw)) in [
            ("28.10.1", "03", 20.0),
            ("28.9.5", "01", 21.0),
            ("28.11.0", "02", 19.0),
        ]
        .iter()
        .enumerate()
        {
            let mut r = record("write-bw", &[(4096, 5.0), (65536, *bw), (1 << 20, 40.0)]);
            r.device.fw_ver = fw.to_string();
            r.started_at = format!("2026-12-{day}T10:00:00Z");
            runs.push(input(&format!("r{i}"), r));
        }
        let spec = trend_spec(&runs, &opts()).unwrap();
        assert!(spec.title.contains("64 KiB"), "{}", spec.title);
        let ys: Vec<f64> = spec.series[0].points.iter().map(|p| p.1.round()).collect();
        assert_eq!(ys, [21.0, 19.0, 20.0]);
        assert_eq!(spec.x.ticks[0].1, "2026-12-01");
        let spec = trend_spec(
            &runs,
            &SpecOptions {
                order: Some(Order::Fw),
                size: Some(4096),
                ..opts()
            },
        )
        .unwrap();
        let labels: Vec<&str> = spec.x.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["28.9.5", "28.10.1", "28.11.0"]);
        let err = trend_spec(
            &runs,
            &SpecOptions {
                size: Some(8),
                ..opts()
            },
        )
        .unwrap_err();
        assert!(err.is::<PlanError>(), "{err}");
        assert!(
            err.to_string().contains("r0") && err.to_string().contains("64 KiB"),
            "{err}"
        );
    }

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(version_cmp("28.9.10", "28.10.2"), Ordering::Less);
        assert_eq!(version_cmp("20.31.1014", "20.31.1014"), Ordering::Equal);
        assert_eq!(version_cmp("1.2", "1.2.1"), Ordering::Less);
    }
}
