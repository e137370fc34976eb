//! Draws a [`ChartSpec`] with plotters on any backend (SVG or bitmap): title and subtitle,
//! the chart with labelled axes, and the legend in its own strip below the chart, so that it
//! never covers a line and its entries never overlap (they wrap).

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::element::{Cross, EmptyElement, PathElement, Text, TriangleMarker};
use plotters::prelude::*;

use super::axis::Axis;
use super::spec::{ChartSpec, Dash, Marker, Series};

/// A linear coordinate whose tick marks (bold grid lines, labelled) and light grid lines
/// are exactly the [`Axis`]'s.
#[derive(Debug, Clone)]
struct TickCoord {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

impl TickCoord {
    fn new(a: &Axis) -> Self {
        TickCoord {
            lo: a.lo,
            hi: if a.hi > a.lo { a.hi } else { a.lo + 1.0 },
            ticks: a.ticks.iter().map(|t| t.0).collect(),
            minor: a.minor.clone(),
        }
    }
}

impl Ranged for TickCoord {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let f = (value - self.lo) / (self.hi - self.lo);
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// Tableau 10: distinguishable, and readable on white.
pub(super) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const GREY: RGBColor = RGBColor(80, 80, 80);
use super::FONT_FAMILY as FONT;

fn color(s: &Series) -> RGBColor {
    s.color.map_or(GREY, |i| PALETTE[i % PALETTE.len()])
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart failed: {e}")
}

/// Legend geometry.
const SWATCH: i32 = 34;
const ROW_H: i32 = 22;
const ENTRY_GAP: i32 = 26;

/// Lays the legend out in rows: (row, x) of each entry, and the number of rows.
fn legend_layout(widths: &[i32], avail: i32) -> (Vec<(i32, i32)>, i32) {
    let mut pos = Vec::new();
    let (mut row, mut x) = (0, 0);
    for &w in widths {
        let need = SWATCH + 8 + w;
        if x > 0 && x + need > avail {
            row += 1;
            x = 0;
        }
        pos.push((row, x));
        x += need + ENTRY_GAP;
    }
    (pos, if widths.is_empty() { 0 } else { row + 1 })
}

/// Shortens `text` with an ellipsis until it fits `max_px` at `style`.
fn fit<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle,
    max_px: u32,
) -> String {
    let mut t = text.to_string();
    loop {
        let w = area.estimate_text_size(&t, style).map(|s| s.0).unwrap_or(0);
        if w <= max_px || t.chars().count() < 4 {
            return t;
        }
        let keep = t.chars().count().saturating_sub(2);
        t = t.chars().take(keep).collect::<String>();
        t = format!("{}…", t.trim_end_matches('…').trim_end());
    }
}

/// Draws `spec` on `root`.
pub(crate) fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &ChartSpec,
) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let (w, h) = root.dim_in_pixel();
    let margin = 14;
    let legend_style = TextStyle::from((FONT, 15).into_font()).color(&BLACK);
    let avail = w as i32 - 2 * margin;

    // The legend's strip.
    let (labels, pos, rows) = legend_entries(root, spec, &legend_style, avail);
    let legend_h = (rows * ROW_H + 16).min(h as i32 / 2);
    let (upper, lower) = root.split_vertically(h as i32 - legend_h);

    let upper = title_area(root, upper, spec, avail)?;
    let mut chart = draw_axes(root, &upper, spec, margin)?;
    for s in &spec.series {
        draw_series(&mut chart, s)?;
    }
    draw_legend(&lower, spec, &labels, &pos, margin, &legend_style)?;
    root.present().map_err(err)?;
    Ok(())
}

/// The legend's labels (shortened to fit `avail`), the (row, x) of each entry, and the
/// number of rows.
fn legend_entries<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    legend_style: &TextStyle,
    avail: i32,
) -> (Vec<String>, Vec<(i32, i32)>, i32) {
    let labels: Vec<String> = spec
        .series
        .iter()
        .map(|s| {
            fit(
                root,
                &s.label,
                legend_style,
                (avail - SWATCH - 8).max(40) as u32,
            )
        })
        .collect();
    let widths: Vec<i32> = labels
        .iter()
        .map(|l| {
            root.estimate_text_size(l, legend_style)
                .map(|s| s.0 as i32)
                .unwrap_or(0)
        })
        .collect();
    let (pos, rows) = legend_layout(&widths, avail);
    (labels, pos, rows)
}

/// The area under the title and subtitle, drawn on `upper`.
fn title_area<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    upper: DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    avail: i32,
) -> Result<DrawingArea<DB, Shift>> {
    let title_style = TextStyle::from((FONT, 22).into_font()).color(&BLACK);
    let sub_style = TextStyle::from((FONT, 14).into_font()).color(&GREY);
    let title = fit(root, &spec.title, &title_style, avail as u32);
    let upper = upper.titled(&title, title_style).map_err(err)?;
    if spec.subtitle.is_empty() {
        Ok(upper)
    } else {
        let sub = fit(root, &spec.subtitle, &sub_style, avail as u32);
        upper.titled(&sub, sub_style).map_err(err)
    }
}

/// The chart on `upper`, its axes, tick labels, descriptions and grid drawn.
fn draw_axes<'a, DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    upper: &'a DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    margin: i32,
) -> Result<Chart<'a, DB>> {
    let label_style = TextStyle::from((FONT, 14).into_font()).color(&BLACK);
    let desc_style = TextStyle::from((FONT, 15).into_font()).color(&BLACK);
    // Room for the widest y label and the axis description.
    let y_label_w = spec
        .y
        .ticks
        .iter()
        .map(|(_, l)| {
            root.estimate_text_size(l, &label_style)
                .map(|s| s.0)
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    let mut chart = ChartBuilder::on(upper)
        .margin_left(margin)
        .margin_right(margin + 12)
        .margin_top(8)
        .margin_bottom(4)
        .x_label_area_size(52)
        .y_label_area_size(y_label_w + 44)
        .build_cartesian_2d(TickCoord::new(&spec.x), TickCoord::new(&spec.y))
        .map_err(err)?;
    let x_fmt = |v: &f64| spec.x.label(*v);
    let y_fmt = |v: &f64| spec.y.label(*v);
    chart
        .configure_mesh()
        .x_desc(spec.x.desc.as_str())
        .y_desc(spec.y.desc.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(label_style.clone())
        .axis_desc_style(desc_style)
        .bold_line_style(RGBColor(200, 200, 200))
        .light_line_style(RGBColor(238, 238, 238))
        .axis_style(GREY)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// Draws one series: its line, its error bars and its markers.
fn draw_series<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, s: &Series) -> Result<()> {
    let c = color(s);
    let line = ShapeStyle::from(&c).stroke_width(2);
    match s.dash {
        Dash::Solid => {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), line))
                .map_err(err)?;
        }
        Dash::Dashed => {
            chart
                .draw_series(DashedLineSeries::new(s.points.iter().copied(), 10, 6, line))
                .map_err(err)?;
        }
        Dash::Dotted => {
            chart
                .draw_series(DashedLineSeries::new(s.points.iter().copied(), 3, 4, line))
                .map_err(err)?;
        }
    }
    let bar = ShapeStyle::from(&c).stroke_width(1);
    for &(x, lo, hi) in &s.bars {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, lo), (x, hi)],
                bar,
            )))
            .map_err(err)?;
        for y in [lo, hi] {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((x, y)) + PathElement::new(vec![(-4, 0), (4, 0)], bar),
                ))
                .map_err(err)?;
        }
    }
    draw_markers(chart, s, c)
}

/// Draws the legend in its strip under the chart: each entry's swatch and label at `pos`.
fn draw_legend<DB: DrawingBackend>(
    lower: &DrawingArea<DB, Shift>,
    spec: &ChartSpec,
    labels: &[String],
    pos: &[(i32, i32)],
    margin: i32,
    legend_style: &TextStyle,
) -> Result<()> {
    for ((s, label), (row, x)) in spec.series.iter().zip(labels).zip(pos) {
        let c = color(s);
        let x0 = margin + x;
        let yc = 8 + row * ROW_H + ROW_H / 2;
        legend_swatch(lower, s, c, x0, yc)?;
        let th = lower
            .estimate_text_size(label, legend_style)
            .map(|s| s.1 as i32)
            .unwrap_or(15);
        lower
            .draw(&Text::new(
                label.clone(),
                (x0 + SWATCH + 8, yc - th / 2),
                legend_style.clone(),
            ))
            .map_err(err)?;
    }
    Ok(())
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<TickCoord, TickCoord>>;

fn draw_markers<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    s: &Series,
    c: RGBColor,
) -> Result<()> {
    let pts = s.points.iter().copied();
    match s.marker {
        Marker::Circle => chart
            .draw_series(pts.map(|p| Circle::new(p, 4, c.filled())))
            .map(|_| ()),
        Marker::Triangle => chart
            .draw_series(pts.map(|p| TriangleMarker::new(p, 5, c.filled())))
            .map(|_| ()),
        Marker::Cross => chart
            .draw_series(pts.map(|p| Cross::new(p, 4, c.stroke_width(2))))
            .map(|_| ()),
        Marker::None => Ok(()),
    }
    .map_err(err)
}

fn legend_swatch<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &Series,
    c: RGBColor,
    x0: i32,
    yc: i32,
) -> Result<()> {
    let line = ShapeStyle::from(&c).stroke_width(2);
    let (dash, gap) = match s.dash {
        Dash::Solid => (SWATCH, 0),
        Dash::Dashed => (10, 6),
        Dash::Dotted => (3, 4),
    };
    let mut x = x0;
    while x < x0 + SWATCH {
        let end = (x + dash).min(x0 + SWATCH);
        area.draw(&PathElement::new(vec![(x, yc), (end, yc)], line))
            .map_err(err)?;
        x = end + gap.max(1);
    }
    let mid = (x0 + SWATCH / 2, yc);
    match s.marker {
        Marker::Circle => area.draw(&Circle::new(mid, 4, c.filled())),
        Marker::Triangle => area.draw(&TriangleMarker::new(mid, 5, c.filled())),
        Marker::Cross => area.draw(&Cross::new(mid, 4, c.stroke_width(2))),
        Marker::None => Ok(()),
    }
    .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_entries_wrap_instead_of_overlapping() {
        let (pos, rows) = legend_layout(&[100, 100, 100], 400);
        assert_eq!(rows, 2);
        assert_eq!(pos[0], (0, 0));
        assert_eq!(pos[1], (0, SWATCH + 8 + 100 + ENTRY_GAP));
        assert_eq!(pos[2], (1, 0));
        // Entries in one row never overlap.
        for w in pos.windows(2) {
            if w[0].0 == w[1].0 {
                assert!(w[1].1 >= w[0].1 + SWATCH + 8 + 100);
            }
        }
        assert_eq!(legend_layout(&[], 400).1, 0);
    }
}
