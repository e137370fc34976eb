//! `--kind timeline`: a `-D --interval` run's bandwidth interval by interval across its
//! measured window, one line per record, each with its intervals' median (dashed) and its
//! worst interval marked and named in the legend (its share of the median and the
//! coefficient of variation): where an average hides a link that dipped, this shows when
//! and how deep.

use anyhow::{bail, Result};

use super::axis::linear_axis;
use super::spec::SpecOptions;
use super::spec::{bw_unit, legend_labels, subtitle, ChartSpec, Dash, Input, Marker, Series};
use crate::plan::PlanError;
use crate::report::{IntervalFigures, SizeResult};
use crate::units::format_size;
use model::stats::median;

/// The size of `input` to draw and its intervals: `wanted`, else its only size with
/// intervals, else 64 KiB among them, else the largest.
fn intervals_of(input: &Input, wanted: Option<u64>) -> Result<(u64, &IntervalFigures)> {
    let with: Vec<&SizeResult> = input
        .record
        .results
        .iter()
        .filter(|r| r.intervals.is_some())
        .collect();
    if with.is_empty() {
        bail!(PlanError::Value(format!(
            "'{}' has no intervals to draw: run the test with -D SECS --interval SECS",
            input.stem
        )));
    }
    let chosen = match wanted {
        Some(size) => with
            .iter()
            .find(|r| r.size == size)
            .copied()
            .ok_or_else(|| {
                let sizes: Vec<String> = with.iter().map(|r| format_size(r.size)).collect();
                PlanError::Value(format!(
                    "--size {size}: '{}' has intervals at {} only",
                    input.stem,
                    sizes.join(", ")
                ))
            })?,
        None => with
            .iter()
            .find(|r| r.size == 65536)
            .or(with.last())
            .copied()
            .unwrap_or(with[0]),
    };
    match &chosen.intervals {
        Some(i) => Ok((chosen.size, i)),
        None => bail!("internal error: a size with intervals has none"),
    }
}

/// Bandwidth per interval against seconds into the window, per record.
pub(crate) fn timeline_spec(inputs: &[Input], opts: &SpecOptions) -> Result<ChartSpec> {
    let labels = legend_labels(inputs, &opts.labels);
    let (scale, unit) = bw_unit(opts.gbits);
    let (mut series, mut end, mut top) = (Vec::new(), 0.0_f64, 0.0_f64);
    let mut every = Vec::new();
    for (k, input) in inputs.iter().enumerate() {
        let (size, i) = intervals_of(input, opts.size)?;
        every.push(i.every_s);
        let points: Vec<(f64, f64)> = i
            .list
            .iter()
            .map(|f| (f.start_s + f.seconds / 2.0, f.bw_gbps * scale))
            .collect();
        end = end.max(i.list.last().map_or(0.0, |f| f.end_s()));
        top = top.max(points.iter().map(|p| p.1).fold(0.0, f64::max));
        let bws: Vec<f64> = i.list.iter().map(|f| f.bw_gbps * scale).collect();
        let mid = median(&bws).unwrap_or(0.0);
        let last = i.list.last().map_or(0.0, |f| f.end_s());
        let w = &i.worst;
        series.push(line(
            format!("{} at {}", labels[k], format_size(size)),
            k,
            points,
        ));
        series.push(Series {
            label: format!("median of its intervals: {mid:.4} {unit}"),
            dash: Dash::Dashed,
            marker: Marker::None,
            ..line(String::new(), k, vec![(0.0, mid), (last, mid)])
        });
        series.push(Series {
            label: format!(
                "worst {:.2}-{:.2} s: {:.1}% of the median; CoV {:.3}",
                w.start_s,
                w.end_s(),
                i.worst_pct_of_median,
                i.cov
            ),
            marker: Marker::Triangle,
            ..line(
                String::new(),
                k,
                vec![(w.start_s + w.seconds / 2.0, w.bw_gbps * scale)],
            )
        });
    }
    let title = match every.first() {
        Some(e) if every.iter().all(|x| x == e) => format!("Bandwidth every {e} s of the window"),
        _ => "Bandwidth interval by interval".to_string(),
    };
    Ok(ChartSpec {
        title: opts.title.clone().unwrap_or(title),
        subtitle: subtitle(inputs),
        x: linear_axis("seconds into the measured window", 0.0, end, 8),
        y: linear_axis(&format!("bandwidth [{unit}]"), 0.0, top, 6),
        series,
    })
}

/// A solid line with a circle at each point, in colour `k`.
fn line(label: String, k: usize, points: Vec<(f64, f64)>) -> Series {
    Series {
        label,
        color: Some(k),
        dash: Dash::Solid,
        marker: Marker::Circle,
        points,
        bars: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::IntervalFigure;

    fn with_dip() -> Input {
        let mut record = crate::report::samples::write_bw().record;
        let list = (0..8)
            .map(|k| {
                let ops = if (3..6).contains(&k) { 10 } else { 1000 };
                IntervalFigure::new(65536, k as f64, 1.0, ops)
            })
            .collect();
        for r in &mut record.results {
            if r.size == 65536 {
                r.intervals = IntervalFigures::from_list(1.0, list);
                break;
            }
        }
        Input {
            stem: "dip".to_string(),
            record,
        }
    }

    #[test]
    fn the_dip_is_drawn_with_the_median_and_the_worst_interval_named() {
        let spec = timeline_spec(&[with_dip()], &SpecOptions::default()).unwrap();
        assert_eq!(spec.title, "Bandwidth every 1 s of the window");
        assert_eq!(spec.series.len(), 3);
        let bw: Vec<f64> = spec.series[0].points.iter().map(|p| p.1).collect();
        assert_eq!(bw.len(), 8);
        assert!(bw[4] < 0.02 * bw[0], "{bw:?}");
        assert_eq!(spec.series[0].points[0].0, 0.5);
        assert!(spec.series[2]
            .label
            .starts_with("worst 3.00-4.00 s: 1.0% of the median"));
        assert!(spec.x.hi >= 8.0);
    }

    #[test]
    fn a_record_without_intervals_or_the_size_is_refused_saying_how_to_get_them() {
        let plain = Input {
            stem: "plain".to_string(),
            record: crate::report::samples::write_bw().record,
        };
        let e = timeline_spec(&[plain], &SpecOptions::default()).unwrap_err();
        assert!(e.to_string().contains("-D SECS --interval SECS"), "{e}");
        let opts = SpecOptions {
            size: Some(2),
            ..SpecOptions::default()
        };
        let e = timeline_spec(&[with_dip()], &opts).unwrap_err();
        assert!(e.to_string().contains("intervals at 64 KiB only"), "{e}");
    }
}
