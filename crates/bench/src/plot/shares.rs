//! The picture of a congestion sweep (`--pattern incast`, `bisection`, `all-to-all`): one
//! stacked bar per group, each segment a sender's share of the group's total, the
//! receivers' ceiling drawn across the bar as a red line, and under the chart one caption
//! line per group (total, share of the ceiling, fairness, failed flows).

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::element::{EmptyElement, Text};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::draw_titles;
use super::heatmap::MAX_LINE_CHARS;
use super::render::PALETTE;
use super::text_style as style;
use crate::cluster::triage::record::TriageRecord;
use crate::report::SweepRecord;
use crate::text::printable_within;

/// What the picture shows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SharesChart {
    /// "incast: write-bw".
    pub title: String,
    /// What the bars and the line are.
    pub subtitle: String,
    /// The bars' unit: "GB/s" (a congestion sweep's flows), "s" (a triage ring's times).
    pub unit: &'static str,
    /// One bar per group, in the record's order.
    pub bars: Vec<Bar>,
    /// One line per group.
    pub caption: Vec<String>,
}

/// One group's bar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bar {
    /// Under the bar: "into rank 0".
    pub label: String,
    /// Each measured flow's sender and figure (GB/s), bottom to top.
    pub segments: Vec<(String, f64)>,
    /// The receivers' ceiling (GB/s), when known.
    pub ceiling: Option<f64>,
}

/// The shares chart of `test`'s groups in `sweep`.
pub(crate) fn shares_chart(sweep: &SweepRecord, test: &str, title: Option<&str>) -> SharesChart {
    let groups: Vec<_> = sweep.groups.iter().filter(|g| g.test == test).collect();
    let bars = groups
        .iter()
        .map(|g| Bar {
            label: match g.receivers.as_slice() {
                [one] => format!("into rank {one}"),
                all => format!("into {} ranks", all.len()),
            },
            segments: g
                .flows
                .iter()
                .filter_map(|p| Some((format!("rank {}", p.client), p.value?)))
                .collect(),
            ceiling: g.ceiling_gbps,
        })
        .collect();
    let caption = groups
        .iter()
        .map(|g| {
            let pct = g
                .pct_of_ceiling
                .map(|p| format!(", {p:.0} % of the ceiling"))
                .unwrap_or_default();
            let fair = g
                .fairness
                .map(|f| format!(", fairness {f:.2}"))
                .unwrap_or_default();
            let failed = g.flows.iter().filter(|p| p.error.is_some()).count();
            let failed = match failed {
                0 => String::new(),
                n => format!(", {n} flow(s) failed"),
            };
            let into = g
                .receivers
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",");
            let total = g.total_gbps.unwrap_or(0.0);
            let (unit, k) = crate::units::display_unit("GB/s", Some(total));
            let from = g
                .flows
                .iter()
                .filter(|p| p.value.is_some())
                .map(|p| p.client.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "round {} into rank(s) {into} from rank(s) {from} (bottom to top): {} flow(s), \
                 total {} {unit}{pct}{fair}{failed}",
                g.round + 1,
                g.flows.len(),
                crate::units::four_digits(total * k)
            )
        })
        .collect();
    SharesChart {
        title: title.map_or_else(
            || printable_within(&format!("{}: {test}", sweep.pattern), MAX_LINE_CHARS),
            str::to_string,
        ),
        subtitle: "each segment a sender's GB/s, stacked; red: the receivers' ceiling".into(),
        unit: "GB/s",
        bars,
        caption,
    }
}

const CEILING: RGBColor = RGBColor(178, 24, 43);
/// The height of a caption line.
const LINE_H: u32 = 20;

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the shares chart failed: {e}")
}

/// Draws `chart` on `root`.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &SharesChart,
) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let h = root.dim_in_pixel().1;
    draw_titles(root, &chart.title, &chart.subtitle).map_err(err)?;
    let caption_h = LINE_H * chart.caption.len() as u32 + 10;
    let (area, below) = root
        .margin(64, 0, 10, 20)
        .split_vertically(h.saturating_sub(64 + caption_h));
    draw_bars(&area, chart)?;
    for (i, line) in chart.caption.iter().enumerate() {
        below
            .draw(&Text::new(
                line.clone(),
                (10, 4 + (LINE_H * i as u32) as i32),
                style(13, &BLACK),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &SharesChart) -> Result<()> {
    let n = chart.bars.len().max(1);
    let highest = chart
        .bars
        .iter()
        .map(|b| {
            let total: f64 = b.segments.iter().map(|s| s.1).sum();
            total.max(b.ceiling.unwrap_or(0.0))
        })
        .fold(0.0, f64::max);
    let y_max = if highest > 0.0 { highest * 1.12 } else { 1.0 };
    let mut c = ChartBuilder::on(area)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
        .map_err(err)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(chart.unit)
        .label_style(style(13, &BLACK))
        .draw()
        .map_err(err)?;
    for (i, bar) in chart.bars.iter().enumerate() {
        let x = i as f64;
        let mut y = 0.0;
        for (k, (who, v)) in bar.segments.iter().enumerate() {
            let colour = PALETTE[k % PALETTE.len()];
            let rect = Rectangle::new([(x + 0.2, y), (x + 0.8, y + v)], colour.filled());
            c.draw_series(std::iter::once(rect)).map_err(err)?;
            if *v > y_max * 0.05 {
                let mid = (x + 0.5, y + v / 2.0);
                let text = Text::new(
                    who.clone(),
                    mid,
                    style(12, &WHITE).pos(Pos::new(HPos::Center, VPos::Center)),
                );
                c.draw_series(std::iter::once(text)).map_err(err)?;
            }
            y += v;
        }
        // Under the bar its receivers, over it its total (the segments may be too thin to
        // read against a far ceiling).
        let under = EmptyElement::at((x + 0.5, 0.0))
            + Text::new(
                bar.label.clone(),
                (0, 8),
                style(13, &BLACK).pos(Pos::new(HPos::Center, VPos::Top)),
            );
        let (unit, k) = crate::units::display_unit(chart.unit, Some(y));
        let over = EmptyElement::at((x + 0.5, y))
            + Text::new(
                format!("{} {unit}", crate::units::four_digits(y * k)),
                (0, -6),
                style(13, &BLACK).pos(Pos::new(HPos::Center, VPos::Bottom)),
            );
        c.draw_series([under, over]).map_err(err)?;
        if let Some(ceiling) = bar.ceiling {
            let line = PathElement::new(
                vec![(x + 0.1, ceiling), (x + 0.9, ceiling)],
                CEILING.stroke_width(3),
            );
            c.draw_series(std::iter::once(line)).map_err(err)?;
        }
    }
    Ok(())
}

/// The picture of a triage's ring: one bar per rank, its seconds sending to the next rank
/// and waiting for its predecessor stacked, the all-reduce's time drawn across each (a rank
/// that sends all of it is the ring's slowest link).
pub(crate) fn ring_chart(rec: &TriageRecord, title: Option<&str>) -> Option<SharesChart> {
    let c = rec.collective.as_ref()?;
    let bars = c
        .per_rank
        .iter()
        .map(|r| Bar {
            label: format!("rank {}", r.rank),
            segments: [("sending", r.send_seconds), ("waiting", r.wait_seconds)]
                .into_iter()
                .filter_map(|(what, v)| Some((what.to_string(), v?)))
                .collect(),
            ceiling: c.seconds,
        })
        .collect();
    let caption = c
        .per_rank
        .iter()
        .map(|r| {
            let link = r.link_gbps.map_or_else(
                || "failed".to_string(),
                |g| {
                    let (unit, k) = crate::units::display_unit("GB/s", Some(g));
                    format!("{} {unit}", crate::units::four_digits(g * k))
                },
            );
            format!("rank {} into rank {}: {link}", r.rank, r.next)
        })
        .collect();
    let verdict = rec.verdict.as_ref().map(|v| v.line.as_str()).unwrap_or("");
    Some(SharesChart {
        title: title.map_or_else(
            || printable_within(&format!("triage: a ring of {} ranks", c.ranks), MAX_LINE_CHARS),
            str::to_string,
        ),
        subtitle: printable_within(
            &format!(
                "each rank's seconds sending and waiting in a {} all-reduce; red: its time. {verdict}",
                crate::units::format_size(c.size_bytes)
            ),
            MAX_LINE_CHARS,
        ),
        unit: "s",
        bars,
        caption,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::GroupRecord;

    fn incast_sweep() -> SweepRecord {
        let mut rec = crate::cluster::verdict::tests::sweep(4, Vec::new());
        rec.pattern = "incast".into();
        let flow = |client: u32, value: Option<f64>| {
            let mut p = crate::cluster::verdict::tests::pair(0, client, value.unwrap_or(0.0));
            p.value = value;
            if value.is_none() {
                p.error = Some("no completion for 30.0 s".into());
            }
            p
        };
        let flows = vec![flow(1, Some(3.1)), flow(2, Some(2.9)), flow(3, None)];
        rec.groups = vec![GroupRecord {
            round: 0,
            test: "write-bw".into(),
            receivers: vec![0],
            flows,
            total_gbps: Some(6.0),
            ceiling_gbps: Some(12.5),
            pct_of_ceiling: Some(48.0),
            fairness: Some(0.998),
            receiver_counters: Default::default(),
        }];
        rec
    }

    #[test]
    fn a_triage_ring_is_a_bar_per_rank_of_its_sending_and_waiting_against_the_time() {
        let rec = crate::cluster::triage::samples::sample([12.0, 3.0, 12.0, 12.0], "rank");
        let chart = ring_chart(&rec, None).unwrap();
        assert_eq!(chart.unit, "s");
        assert_eq!(chart.title, "triage: a ring of 4 ranks");
        assert_eq!(chart.bars.len(), 4);
        let time = rec.collective.as_ref().unwrap().seconds.unwrap();
        for bar in &chart.bars {
            assert_eq!(bar.ceiling, Some(time));
            let total: f64 = bar.segments.iter().map(|s| s.1).sum();
            assert!((total - time).abs() < 1e-9, "{bar:?}");
        }
        // Rank 1's link is the slowest: it sends all the time.
        assert_eq!(chart.bars[1].segments[0].0, "sending");
        assert!((chart.bars[1].segments[0].1 - time).abs() < 1e-9);
        assert_eq!(chart.caption[1], "rank 1 into rank 2: 3.000 GB/s");
        let svg = super::super::to_svg((800, 500), |root| draw(root, &chart)).unwrap();
        assert!(svg.contains("rank 3") && svg.contains("sending"), "{svg}");
    }

    #[test]
    fn each_group_is_a_bar_of_its_senders_with_its_ceiling_and_a_caption() {
        let chart = shares_chart(&incast_sweep(), "write-bw", None);
        assert_eq!(chart.title, "incast: write-bw");
        assert_eq!(chart.bars.len(), 1);
        let bar = &chart.bars[0];
        assert_eq!(bar.label, "into rank 0");
        assert_eq!(
            bar.segments,
            [("rank 1".to_string(), 3.1), ("rank 2".to_string(), 2.9)]
        );
        assert_eq!(bar.ceiling, Some(12.5));
        assert_eq!(
            chart.caption,
            [
                "round 1 into rank(s) 0 from rank(s) 1, 2 (bottom to top): 3 flow(s), total \
              6.000 GB/s, 48 % of the ceiling, fairness 1.00, 1 flow(s) failed"
            ]
        );
        let svg = super::super::to_svg((800, 500), |root| draw(root, &chart)).unwrap();
        assert!(
            svg.contains("into rank 0") && svg.contains("rank 2"),
            "{svg}"
        );
    }
}
