//! `plot SWEEP.json`: one test of a sweep record as a rank x rank heat map. Cell (i, j) is
//! the pair of rank i and rank j (one measurement fills both cells: `SweepRecord::
//! measurements` picks it), coloured by its figure as a percentage of the fleet's median, on
//! a scale where slow is red whichever way the test counts (bandwidth: low is slow; latency:
//! high is slow). Pairs not measured stay blank, failed ones are hatched, the diagonal is
//! grey; the NICs the verdict names carry a "*" and a caption line, and so do the paths it
//! names. Where ranks have leaves (`--topology`), they are ordered by leaf (leaves by name,
//! ranks without one last, by rank within each), with a line between leaves and each leaf's
//! name over its columns. Past [`MAX_RANKS_DRAWN`] ranks the map draws blocks of ranks (each
//! leaf, or runs of consecutive ranks), each cell the worst pair between two blocks, and its
//! caption calls out the worst pairs: a 4,096-rank map stays legible and small. The model
//! ([`HeatMap`]) is pure data; [`draw`] lays it out on any plotters backend.
//!
//! Long because the map's model, its colour scale and its layout are one concern, with about
//! 150 lines of tests.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

use super::text_style as style;
use super::{draw_titles, FONT_FAMILY as FONT, SUBTITLE_GREY as GREY};
use crate::cluster::locate::headline;
use crate::cluster::median::{badness, vs_median};
use crate::report::sweep::lower_is_better;
use crate::report::{RunStatus, SweepRecord};
use crate::text::printable_within;

/// Values are printed in the cells of maps of at most this many ranks.
pub(crate) const MAX_RANKS_WITH_VALUES: usize = 16;

/// Past this many ranks a map draws blocks of ranks instead of ranks.
pub(crate) const MAX_RANKS_DRAWN: usize = 128;

/// The most blocks a map of blocks draws along each axis: each label keeps a row of its own.
pub(crate) const MAX_BLOCKS: usize = 32;

/// The most characters of a rank's or a leaf's label drawn (the labels size the picture).
pub(crate) const MAX_LABEL_CHARS: usize = 40;

/// The most characters of a title, subtitle or caption line drawn.
pub(crate) const MAX_LINE_CHARS: usize = 200;

/// The worst pairs a map of blocks calls out in its caption.
const WORST_CALLED_OUT: usize = 5;

/// One cell of the map.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Cell {
    /// A rank with itself.
    Itself,
    /// The pair was not measured (not in the schedule, or the sweep stopped before it).
    NotMeasured,
    /// The pair's test failed.
    Failed,
    /// The pair's figure and its percentage of the fleet's median (when there is one).
    Measured {
        /// GB/s or us.
        value: f64,
        /// Percent of the fleet's median.
        pct: Option<f64>,
    },
}

/// What a heat map shows.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatMap {
    /// "write-bw: fleet median 46.0 GB/s" (or `--title`).
    pub title: String,
    /// The sweep in a line.
    pub subtitle: String,
    /// True for latency: a high figure is slow.
    pub lower_is_better: bool,
    /// Per rank, in the map's order (rank order, or by leaf): its label, with " *" when the
    /// verdict names it.
    pub labels: Vec<String>,
    /// Per rank, in the map's order: named by the verdict.
    pub named: Vec<bool>,
    /// The leaves along both axes, in the map's order: each leaf and how many ranks it holds
    /// ("no leaf" for ranks without one); empty when no rank has a leaf.
    pub leaves: Vec<(String, usize)>,
    /// Lines under the map: the named NICs and paths, and why.
    pub caption: Vec<String>,
    /// `cells[i][j]`: the rank at i against the rank at j (indices as in `labels`).
    pub(crate) cells: Vec<Vec<Cell>>,
    /// Whether each cell prints its figure.
    pub show_values: bool,
}

/// A figure in at most four characters' precision: 46.0, 4.50, 123.
pub(crate) fn short(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// What a rank without a leaf is listed under when others have one.
const NO_LEAF: &str = "no leaf";

/// The ranks in the map's order (indices into `sweep.ranks`) and the leaves' blocks: by leaf
/// when a rank has one (leaves by name, ranks without one last; by rank within each), else
/// in rank order with no blocks.
pub(crate) fn rank_order(sweep: &SweepRecord) -> (Vec<usize>, Vec<(String, usize)>) {
    let mut order: Vec<usize> = (0..sweep.ranks.len()).collect();
    order.sort_by_key(|&i| sweep.ranks[i].rank);
    if sweep.ranks.iter().all(|r| r.leaf.is_none()) {
        return (order, Vec::new());
    }
    // None sorts first: ranks without a leaf go last with `(true, "")`.
    order.sort_by_key(|&i| match &sweep.ranks[i].leaf {
        Some(leaf) => (false, leaf.as_str()),
        None => (true, ""),
    });
    let mut blocks: Vec<(String, usize)> = Vec::new();
    for &i in &order {
        let leaf = sweep.ranks[i].leaf.as_deref().unwrap_or(NO_LEAF);
        match blocks.last_mut() {
            Some((name, count)) if name == leaf => *count += 1,
            _ => blocks.push((leaf.to_string(), 1)),
        }
    }
    (order, blocks)
}

/// What the map's rows and columns are: ranks, or blocks of them.
struct Rows {
    /// Each row's label and whether the verdict names a rank in it.
    labels: Vec<(String, bool)>,
    /// Each rank (by rank number) to its row.
    row_of: std::collections::BTreeMap<u32, usize>,
    /// The leaves along the axes, as [`HeatMap::leaves`].
    leaves: Vec<(String, usize)>,
    /// Ranks per row: 1 for a map of ranks.
    block: usize,
}

/// The rows of `sweep`'s map: one per rank up to [`MAX_RANKS_DRAWN`]; past it one per leaf
/// where there are few enough leaves, else runs of consecutive ranks in the map's order.
fn rows(sweep: &SweepRecord) -> Rows {
    let (order, leaves) = rank_order(sweep);
    let named: std::collections::HashSet<u32> = sweep.named.iter().map(|nic| nic.rank).collect();
    let n = order.len();
    let groups: Vec<(String, Vec<usize>)> = if n <= MAX_RANKS_DRAWN {
        order
            .iter()
            .map(|&i| (sweep.ranks[i].shown(), vec![i]))
            .collect()
    } else if !leaves.is_empty() && leaves.len() <= MAX_BLOCKS {
        let mut at = 0;
        leaves
            .iter()
            .map(|(leaf, count)| {
                let members = order[at..at + count].to_vec();
                at += count;
                (format!("{leaf} ({count})"), members)
            })
            .collect()
    } else {
        order
            .chunks(n.div_ceil(MAX_BLOCKS))
            .map(|c| {
                let (first, last) = (sweep.ranks[c[0]].rank, sweep.ranks[c[c.len() - 1]].rank);
                (format!("ranks {first}-{last}"), c.to_vec())
            })
            .collect()
    };
    let mut row_of = std::collections::BTreeMap::new();
    let mut labels = Vec::with_capacity(groups.len());
    for (row, (label, members)) in groups.iter().enumerate() {
        let star = members
            .iter()
            .any(|&i| named.contains(&sweep.ranks[i].rank));
        row_of.extend(members.iter().map(|&i| (sweep.ranks[i].rank, row)));
        // Escaped and cut before the star, which stays.
        let label = printable_within(label, MAX_LABEL_CHARS);
        labels.push((if star { format!("{label} *") } else { label }, star));
    }
    let block = groups.iter().map(|(_, m)| m.len()).max().unwrap_or(1);
    let leaves = match (block, groups.len() == leaves.len()) {
        (1, _) => leaves,
        (_, true) => leaves.iter().map(|(l, _)| (l.clone(), 1)).collect(),
        _ => Vec::new(),
    };
    Rows {
        labels,
        row_of,
        leaves,
        block,
    }
}

/// The worse of two cells of one block pair: a failure, else the lower score.
fn worse(kept: Cell, new: Cell, lower_is_better: bool) -> Cell {
    match (kept, new) {
        (Cell::Failed, _) | (_, Cell::Itself | Cell::NotMeasured) => kept,
        (_, Cell::Failed) => new,
        (Cell::Measured { pct: Some(a), .. }, Cell::Measured { pct: Some(b), .. }) => {
            if score(b, lower_is_better) < score(a, lower_is_better) {
                new
            } else {
                kept
            }
        }
        (Cell::Measured { .. }, _) => kept,
        _ => new,
    }
}

/// The heat map of `test` in `sweep`.
pub fn heat_map(sweep: &SweepRecord, test: &str, title: Option<&str>) -> HeatMap {
    let measured = sweep.measurements(test);
    let unit = sweep.unit_of(test);
    let lower = lower_is_better(&unit);
    let fleet_median = sweep.fleet_median(test);
    let (shown_unit, factor) = sweep.shown_unit(test);
    let rows = rows(sweep);
    let n = rows.labels.len();
    let mut cells = vec![vec![Cell::NotMeasured; n]; n];
    if rows.block == 1 {
        for (i, row) in cells.iter_mut().enumerate() {
            row[i] = Cell::Itself;
        }
    }
    for (&(a, b), p) in &measured {
        let (Some(&i), Some(&j)) = (rows.row_of.get(&a), rows.row_of.get(&b)) else {
            continue;
        };
        let cell = match p.value {
            Some(value) => Cell::Measured {
                value: value * factor,
                pct: p
                    .pct_of_median
                    .or_else(|| fleet_median.filter(|m| *m > 0.0).map(|m| value / m * 100.0)),
            },
            None => Cell::Failed,
        };
        cells[i][j] = worse(cells[i][j], cell, lower);
        cells[j][i] = cells[i][j];
    }
    let paths = sweep
        .paths
        .iter()
        .map(|p| format!("path {}: {}", headline(p), p.why));
    let mut caption: Vec<String> = sweep
        .named
        .iter()
        .map(|nic| format!("* {} ({}): {}", nic.label, nic.kind, nic.why))
        .chain(paths)
        .collect();
    if rows.block > 1 {
        caption.extend(worst_called_out(sweep, &measured, rows.block));
    }
    let title = match (title, fleet_median) {
        (Some(t), _) => t.to_string(),
        (None, Some(m)) => format!("{test}: fleet median {} {shown_unit}", short(m * factor)),
        (None, None) => format!("{test}: no figures ({unit})"),
    };
    // Text from the record is escaped and cut: a label sizes the picture, and a control
    // character would make the SVG invalid XML.
    let line = |text: &str| printable_within(text, MAX_LINE_CHARS);
    HeatMap {
        title: line(&title),
        subtitle: line(&subtitle(sweep, lower, !rows.leaves.is_empty())),
        lower_is_better: lower,
        named: rows.labels.iter().map(|(_, star)| *star).collect(),
        labels: rows.labels.into_iter().map(|(label, _)| label).collect(),
        leaves: rows
            .leaves
            .iter()
            .map(|(l, n)| (printable_within(l, MAX_LABEL_CHARS), *n))
            .collect(),
        caption: caption.iter().map(|c| line(c)).collect(),
        cells,
        show_values: n <= MAX_RANKS_WITH_VALUES && rows.block == 1,
    }
}

/// A map of blocks says so, and names its worst pairs (each block hides its ranks).
fn worst_called_out(
    sweep: &SweepRecord,
    measured: &std::collections::BTreeMap<(u32, u32), &crate::report::PairRecord>,
    block: usize,
) -> Vec<String> {
    let mut pairs: Vec<&crate::report::PairRecord> = measured
        .values()
        .copied()
        .filter(|p| p.pct_of_median.is_some())
        .collect();
    pairs.sort_by(|a, b| badness(b).total_cmp(&badness(a)));
    let label = |rank: u32| {
        sweep
            .rank(rank)
            .map_or(format!("rank {rank}"), |r| r.shown())
    };
    let mut out = vec![format!(
        "each cell: the worst pair between two blocks of up to {block} ranks; the worst pairs:"
    )];
    out.extend(pairs.iter().take(WORST_CALLED_OUT).map(|p| {
        format!(
            "  {} <- {}: {}",
            label(p.server),
            label(p.client),
            vs_median(p.pct_of_median.unwrap_or(0.0))
        )
    }));
    out
}

fn subtitle(sweep: &SweepRecord, lower_is_better: bool, by_leaf: bool) -> String {
    let status = match sweep.status {
        RunStatus::Complete => String::new(),
        RunStatus::Incomplete => ", INCOMPLETE".to_string(),
        RunStatus::Failed => ", FAILED".to_string(),
    };
    format!(
        "{} ranks{}, {} pattern, {}{status}; colour: % of the fleet median ({} is slow)",
        sweep.ranks.len(),
        if by_leaf { " by leaf" } else { "" },
        sweep.pattern,
        sweep.started_at,
        if lower_is_better { "high" } else { "low" }
    )
}

/// How a figure did, in percent, on one scale for every test: 100 is the fleet's median and
/// lower is slower (a latency at 200% of the median scores 50).
pub(crate) fn score(pct: f64, lower_is_better: bool) -> f64 {
    if lower_is_better {
        if pct > 0.0 {
            10_000.0 / pct
        } else {
            f64::INFINITY
        }
    } else {
        pct
    }
}

/// The colour scale: (score, colour), from slow (dark red) through the median (near white)
/// to faster than the median (light blue). ColorBrewer's RdBu.
const STOPS: [(f64, (u8, u8, u8)); 7] = [
    (50.0, (103, 0, 31)),
    (65.0, (178, 24, 43)),
    (80.0, (214, 96, 77)),
    (90.0, (244, 165, 130)),
    (97.0, (253, 219, 199)),
    (100.0, (247, 247, 247)),
    (110.0, (209, 229, 240)),
];

/// The colour of a score (clamped to the scale's ends).
pub(crate) fn colour(score: f64) -> RGBColor {
    let (first, last) = (STOPS[0], STOPS[STOPS.len() - 1]);
    let rgb = |c: (u8, u8, u8)| RGBColor(c.0, c.1, c.2);
    if score.is_nan() || score <= first.0 {
        return rgb(first.1);
    }
    if score >= last.0 {
        return rgb(last.1);
    }
    for w in STOPS.windows(2) {
        let ((s0, c0), (s1, c1)) = (w[0], w[1]);
        if score <= s1 {
            let f = (score - s0) / (s1 - s0);
            let mix =
                |a: u8, b: u8| (f64::from(a) + f * (f64::from(b) - f64::from(a))).round() as u8;
            return RGBColor(mix(c0.0, c1.0), mix(c0.1, c1.1), mix(c0.2, c1.2));
        }
    }
    rgb(last.1)
}

/// Black or white, whichever reads on `c`.
fn ink_on(c: RGBColor) -> RGBColor {
    let luma = 0.299 * f64::from(c.0) + 0.587 * f64::from(c.1) + 0.114 * f64::from(c.2);
    if luma < 140.0 {
        WHITE
    } else {
        BLACK
    }
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the heat map failed: {e}")
}

const MARGIN: i32 = 14;
const NAMED: RGBColor = RGBColor(178, 24, 43);
/// The colour bar's width and the room its tick labels take.
const BAR_W: i32 = 18;
const BAR_ROOM: i32 = 120;
const CAPTION_ROW: i32 = 20;
/// The grid's top: under the title, the subtitle and the colour bar's heading.
const TOP: i32 = 88;

/// Where things go.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    /// The grid's left and top edges.
    left: i32,
    top: i32,
    /// A cell's side.
    cell: i32,
    /// Ranks.
    n: i32,
    /// The longest label's width.
    label_w: i32,
}

impl Layout {
    fn right(self) -> i32 {
        self.left + self.n * self.cell
    }
    fn bottom(self) -> i32 {
        self.top + self.n * self.cell
    }
}

fn layout(size: (u32, u32), label_w: i32, n: usize, captions: usize) -> Layout {
    let (w, h) = (size.0 as i32, size.1 as i32);
    let top = TOP;
    let left = MARGIN + label_w + 10;
    let bottom_room = label_w + 16 + (captions as i32 + 1) * CAPTION_ROW + MARGIN;
    let avail_w = w - left - BAR_ROOM - MARGIN;
    let avail_h = h - top - bottom_room;
    let n = n.max(1) as i32;
    let cell = (avail_w.min(avail_h) / n).clamp(6, 120);
    // The labels, the grid and the colour bar together, centred.
    let spare = (avail_w - n * cell).max(0);
    let left = left + spare / 2;
    Layout {
        left,
        top,
        cell,
        n,
        label_w,
    }
}

/// The smallest cell that prints its figure legibly.
const CELL_WITH_VALUE: i32 = 44;

/// The smallest cell without a figure: one row of a 14-pixel label.
const CELL_WITH_LABEL: i32 = 16;

/// The picture's size: `asked` (`--width`, `--height`), grown where the grid would leave a
/// cell too small to print its figure (or its rank's label a row of its own), or the caption
/// no room.
pub(crate) fn picture_size(map: &HeatMap, asked: (u32, u32)) -> (u32, u32) {
    // About 8.5 pixels a character at 14 pixels: enough for DejaVu Sans's digits and letters.
    let chars = map
        .labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0);
    let label_w = (chars as f64 * 8.5).ceil() as i32;
    let n = map.labels.len() as i32;
    let grid = n * if map.show_values {
        CELL_WITH_VALUE
    } else {
        CELL_WITH_LABEL
    };
    let w = 2 * MARGIN + label_w + 10 + grid + BAR_ROOM;
    let h = TOP + grid + label_w + 16 + (map.caption.len() as i32 + 1) * CAPTION_ROW + MARGIN;
    (asked.0.max(w as u32), asked.1.max(h as u32))
}

/// Draws `map` on `root`.
pub(crate) fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, map: &HeatMap) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let (w, h) = root.dim_in_pixel();
    let label_style = style(14, &BLACK);
    let label_w = map
        .labels
        .iter()
        .map(|l| {
            root.estimate_text_size(l, &label_style)
                .map_or(0, |s| s.0 as i32)
        })
        .max()
        .unwrap_or(0);
    let at = layout((w, h), label_w, map.labels.len(), map.caption.len());
    draw_titles(root, &map.title, &map.subtitle).map_err(err)?;
    for (i, row) in map.cells.iter().enumerate() {
        for (j, cell) in row.iter().enumerate() {
            draw_cell(root, map, at, (i as i32, j as i32), *cell)?;
        }
    }
    draw_leaves(root, map, at)?;
    draw_labels(root, map, at)?;
    draw_bar(root, map, at)?;
    draw_caption(root, map, at)?;
    root.present().map_err(err)?;
    Ok(())
}

fn draw_cell<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    map: &HeatMap,
    at: Layout,
    (i, j): (i32, i32),
    cell: Cell,
) -> Result<()> {
    let (x0, y0) = (at.left + j * at.cell, at.top + i * at.cell);
    let (x1, y1) = (x0 + at.cell, y0 + at.cell);
    let (fill, text) = match cell {
        Cell::Itself => (RGBColor(205, 205, 205), None),
        Cell::NotMeasured => (WHITE, None),
        Cell::Failed => (RGBColor(240, 240, 240), Some("failed".to_string())),
        Cell::Measured { value, pct } => (
            pct.map_or(WHITE, |p| colour(score(p, map.lower_is_better))),
            Some(short(value)),
        ),
    };
    root.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))
        .map_err(err)?;
    if cell == Cell::Failed {
        hatch(root, (x0, y0), at.cell)?;
    }
    if cell == Cell::NotMeasured {
        dash(root, ((x0 + x1) / 2, (y0 + y1) / 2), at.cell)?;
    }
    root.draw(&Rectangle::new(
        [(x0, y0), (x1, y1)],
        RGBColor(160, 160, 160),
    ))
    .map_err(err)?;
    let font = (at.cell / 4).min(16);
    if let (true, Some(t), true) = (map.show_values, text, font >= 8) {
        let pos = Pos::new(HPos::Center, VPos::Center);
        let ink = if cell == Cell::Failed {
            GREY
        } else {
            ink_on(fill)
        };
        root.draw(&Text::new(
            t,
            ((x0 + x1) / 2, (y0 + y1) / 2),
            style(font, &ink).pos(pos),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// A short grey line in the middle of a cell not measured, so that it is not taken for a
/// pair at the median (near white).
fn dash<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (xc, yc): (i32, i32),
    side: i32,
) -> Result<()> {
    let half = (side / 8).max(2);
    let line = RGBColor(120, 120, 120).stroke_width(2);
    root.draw(&PathElement::new(
        vec![(xc - half, yc), (xc + half, yc)],
        line,
    ))
    .map_err(err)?;
    Ok(())
}

/// Diagonal lines across a square cell.
fn hatch<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (x0, y0): (i32, i32),
    side: i32,
) -> Result<()> {
    let line = RGBColor(150, 150, 150).stroke_width(1);
    let mut k = 8;
    while k < 2 * side {
        let a = (x0 + k.min(side), y0 + k - k.min(side));
        let b = (x0 + k - k.min(side), y0 + k.min(side));
        root.draw(&PathElement::new(vec![a, b], line))
            .map_err(err)?;
        k += 8;
    }
    Ok(())
}

fn draw_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    map: &HeatMap,
    at: Layout,
) -> Result<()> {
    for (k, (label, &named)) in map.labels.iter().zip(&map.named).enumerate() {
        let c = at.cell * k as i32 + at.cell / 2;
        let ink = if named { NAMED } else { BLACK };
        let row = style(14, &ink).pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(label.clone(), (at.left - 8, at.top + c), row))
            .map_err(err)?;
        let column = TextStyle::from((FONT, 14).into_font().transform(FontTransform::Rotate270))
            .color(&ink)
            .pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(
            label.clone(),
            (at.left + c, at.bottom() + 8),
            column,
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// Where ranks are ordered by leaf: a line between leaves across the grid, both ways, and
/// each leaf's name over its columns.
fn draw_leaves<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    map: &HeatMap,
    at: Layout,
) -> Result<()> {
    let line = BLACK.stroke_width(2);
    let name = style(13, &BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    let mut start = 0;
    for (leaf, count) in &map.leaves {
        let x_mid = at.left + at.cell * (2 * start + *count as i32) / 2;
        root.draw(&Text::new(leaf.clone(), (x_mid, at.top - 4), name.clone()))
            .map_err(err)?;
        start += *count as i32;
        if start < at.n {
            let edge = at.cell * start;
            let (x, y) = (at.left + edge, at.top + edge);
            root.draw(&PathElement::new(vec![(x, at.top), (x, at.bottom())], line))
                .map_err(err)?;
            root.draw(&PathElement::new(vec![(at.left, y), (at.right(), y)], line))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// The colour bar right of the grid: the scale from 110 (top) to 50 (bottom), its ticks in
/// percent of the fleet's median.
fn draw_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    map: &HeatMap,
    at: Layout,
) -> Result<()> {
    let x0 = at.right() + 24;
    let (top, bottom) = (at.top, at.bottom().max(at.top + 120));
    let (hi, lo) = (110.0, 50.0);
    let y_of = |s: f64| top + ((hi - s) / (hi - lo) * f64::from(bottom - top)).round() as i32;
    // In bands of 3 pixels: smooth to the eye, and an SVG of a few dozen rectangles.
    for y in (top..bottom).step_by(3) {
        let s = hi - f64::from(y + 1 - top) / f64::from(bottom - top) * (hi - lo);
        let end = (y + 3).min(bottom);
        root.draw(&Rectangle::new(
            [(x0, y), (x0 + BAR_W, end)],
            colour(s).filled(),
        ))
        .map_err(err)?;
    }
    root.draw(&Rectangle::new([(x0, top), (x0 + BAR_W, bottom)], GREY))
        .map_err(err)?;
    let ticks: &[f64] = if map.lower_is_better {
        &[100.0, 110.0, 125.0, 150.0, 200.0]
    } else {
        &[110.0, 100.0, 90.0, 80.0, 70.0, 60.0, 50.0]
    };
    let tick_style = style(13, &BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for &pct in ticks {
        let y = y_of(score(pct, map.lower_is_better));
        root.draw(&PathElement::new(
            vec![(x0 + BAR_W, y), (x0 + BAR_W + 4, y)],
            GREY,
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            format!("{pct:.0}%"),
            (x0 + BAR_W + 7, y),
            tick_style.clone(),
        ))
        .map_err(err)?;
    }
    let head = style(13, &GREY).pos(Pos::new(HPos::Left, VPos::Bottom));
    root.draw(&Text::new("% of median".to_string(), (x0, top - 12), head))
        .map_err(err)?;
    Ok(())
}

/// Under the column labels: the key to blank and hatched cells, then the named NICs.
fn draw_caption<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    map: &HeatMap,
    at: Layout,
) -> Result<()> {
    let y = at.bottom() + at.label_w + 20;
    let text = style(14, &BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    let x0 = (at.left - at.label_w - 10).max(MARGIN);
    let (sw, x) = (14, x0);
    root.draw(&Rectangle::new(
        [(x, y - sw / 2), (x + sw, y + sw / 2)],
        WHITE.filled(),
    ))
    .map_err(err)?;
    root.draw(&Rectangle::new(
        [(x, y - sw / 2), (x + sw, y + sw / 2)],
        GREY,
    ))
    .map_err(err)?;
    root.draw(&Text::new(
        "not measured".to_string(),
        (x + sw + 6, y),
        text.clone(),
    ))
    .map_err(err)?;
    let x = x + sw + 6 + 110;
    let fill = RGBColor(240, 240, 240).filled();
    root.draw(&Rectangle::new(
        [(x, y - sw / 2), (x + sw, y + sw / 2)],
        fill,
    ))
    .map_err(err)?;
    root.draw(&PathElement::new(
        vec![(x + sw, y - sw / 2), (x, y + sw / 2)],
        GREY,
    ))
    .map_err(err)?;
    root.draw(&Rectangle::new(
        [(x, y - sw / 2), (x + sw, y + sw / 2)],
        GREY,
    ))
    .map_err(err)?;
    root.draw(&Text::new("failed".to_string(), (x + sw + 6, y), text))
        .map_err(err)?;
    let named = style(14, &NAMED).pos(Pos::new(HPos::Left, VPos::Center));
    for (k, line) in map.caption.iter().enumerate() {
        let y = y + (k as i32 + 1) * CAPTION_ROW;
        root.draw(&Text::new(line.clone(), (x0, y), named.clone()))
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::sweep::{sample_pair, sample_sweep};

    fn value(c: Cell) -> Option<f64> {
        match c {
            Cell::Measured { value, .. } => Some(value),
            _ => None,
        }
    }

    #[test]
    fn each_pair_fills_both_of_its_cells() {
        let m = heat_map(&sample_sweep(), "write-bw", None);
        assert_eq!(m.cells.len(), 4);
        for i in 0..4 {
            assert_eq!(m.cells[i][i], Cell::Itself);
            for j in 0..4 {
                assert_eq!(m.cells[i][j], m.cells[j][i]);
            }
        }
        assert_eq!(value(m.cells[0][1]), Some(46.0));
        assert_eq!(value(m.cells[2][3]), Some(20.0));
        assert_eq!(value(m.cells[3][0]), Some(20.0));
        assert_eq!(m.title, "write-bw: fleet median 46.0 GB/s");
        assert_eq!(m.labels[3], "mlx5_1 of node2 *");
        assert_eq!(m.named, [false, false, false, true]);
        assert!(
            m.caption[0].contains("43% of the fleet median"),
            "{:?}",
            m.caption
        );
        assert!(m.show_values);
    }

    /// A sweep of `n` ranks (rank r on node r, in leaf r / 32 when `leaves`), each with its
    /// quick-pattern partners: rank 700 slow, the pair 1-(n-2) (round 1's second) failed.
    fn large_sweep(n: u32, leaves: bool) -> SweepRecord {
        let mut s = sample_sweep();
        s.ranks = (0..n)
            .map(|r| {
                let mut rank =
                    crate::report::RankRecord::new(r, &format!("node{r}"), "mlx5_0", None);
                rank.leaf = leaves.then(|| format!("leaf{:02}", r / 32));
                rank
            })
            .collect();
        s.pairs.clear();
        for round in crate::cluster::schedule::quick(n as usize).unwrap() {
            for p in round {
                let value = (p.a.min(p.b), p.a.max(p.b)) != (1, n as usize - 2);
                let value = value.then_some(if p.a == 700 || p.b == 700 { 10.0 } else { 46.0 });
                s.pairs.push(sample_pair(
                    0, p.b as u32, p.a as u32, "write-bw", "GB/s", value, 46.0,
                ));
            }
        }
        s.named.truncate(1);
        s.named[0].rank = 700;
        s.paths.clear();
        s
    }

    #[test]
    fn a_map_of_1024_ranks_draws_blocks_each_its_worst_pair_and_names_the_worst() {
        let m = heat_map(&large_sweep(1024, false), "write-bw", None);
        assert_eq!(m.labels.len(), 32);
        assert_eq!(m.labels[0], "ranks 0-31");
        assert_eq!(m.labels[21], "ranks 672-703 *");
        assert_eq!(m.named.iter().filter(|&&n| n).count(), 1);
        assert!(m.leaves.is_empty() && !m.show_values);
        assert_eq!(m.cells[0][31], Cell::Failed, "the failed pair 1-1022");
        assert_eq!(m.cells[31][0], Cell::Failed);
        let slow_row = &m.cells[21];
        let worst = slow_row.iter().filter_map(|c| match c {
            Cell::Measured { pct: Some(p), .. } => Some(*p),
            _ => None,
        });
        assert!(worst.fold(f64::INFINITY, f64::min) < 25.0);
        let called = m.caption.join("\n");
        assert!(
            called.contains("each cell: the worst pair between two blocks of up to 32 ranks"),
            "{called}"
        );
        assert!(called.contains("mlx5_0 of node700"), "{called}");
        // With leaves: one row per leaf.
        let m = heat_map(&large_sweep(1024, true), "write-bw", None);
        assert_eq!(m.labels.len(), 32);
        assert_eq!(m.labels[21], "leaf21 (32) *");
        assert_eq!(m.leaves.len(), 32);
        assert!(m.leaves.iter().all(|(_, count)| *count == 1));
    }

    #[test]
    fn blanks_for_pairs_not_measured_and_failures() {
        let mut s = sample_sweep();
        s.pairs
            .retain(|p| !(p.test == "write-bw" && (p.client, p.server) == (0, 1)));
        s.pairs
            .retain(|p| !(p.test == "write-bw" && (p.client, p.server) == (1, 2)));
        s.pairs
            .push(sample_pair(2, 2, 1, "write-bw", "GB/s", None, 46.0));
        let m = heat_map(&s, "write-bw", Some("mine"));
        assert_eq!(m.cells[0][1], Cell::NotMeasured);
        assert_eq!(m.cells[1][0], Cell::NotMeasured);
        assert_eq!(m.cells[1][2], Cell::Failed);
        assert_eq!(m.cells[2][1], Cell::Failed);
        assert_eq!(m.title, "mine");
        // A test the sweep did not run is all blanks.
        let m = heat_map(&s, "read-bw", None);
        assert!(m.cells[0][1..].iter().all(|c| *c == Cell::NotMeasured));
    }

    #[test]
    fn a_slow_rank_is_red_whichever_way_the_test_counts() {
        let bw = heat_map(&sample_sweep(), "write-bw", None);
        let lat = heat_map(&sample_sweep(), "write-lat", None);
        assert!(!bw.lower_is_better && lat.lower_is_better);
        let tint = |m: &HeatMap, i: usize, j: usize| match m.cells[i][j] {
            Cell::Measured { pct: Some(p), .. } => colour(score(p, m.lower_is_better)),
            c => panic!("{c:?}"),
        };
        for m in [&bw, &lat] {
            let (good, slow) = (tint(m, 0, 1), tint(m, 0, 3));
            // The median is near white; the slow rank's pairs are a dark red.
            assert!(good.0 > 240 && good.1 > 240 && good.2 > 240, "{good:?}");
            assert!(slow.0 > 90 && slow.1 < 30 && slow.2 < 50, "{slow:?}");
            assert_eq!(ink_on(slow), WHITE);
            assert_eq!(ink_on(good), BLACK);
        }
        assert_eq!(score(200.0, true), 50.0);
        assert_eq!(score(80.0, false), 80.0);
        // Faster than the median is a light blue, not an alarm.
        let fast = colour(score(120.0, false));
        assert!(fast.2 > fast.0, "{fast:?}");
    }

    #[test]
    fn ranks_are_ordered_by_leaf_with_the_leaves_marked() {
        let mut s = sample_sweep();
        let leaves = [Some("b"), Some("a"), None, Some("a")];
        for (r, leaf) in s.ranks.iter_mut().zip(leaves) {
            r.leaf = leaf.map(str::to_string);
        }
        let m = heat_map(&s, "write-bw", None);
        let blocks: Vec<(&str, usize)> = m.leaves.iter().map(|(l, n)| (l.as_str(), *n)).collect();
        assert_eq!(blocks, [("a", 2), ("b", 1), ("no leaf", 1)]);
        // Ranks 1 and 3 (leaf a), 0 (leaf b), 2 (none).
        assert_eq!(
            m.labels,
            [
                "mlx5_1 of node1",
                "mlx5_1 of node2 *",
                "mlx5_0 of node1",
                "mlx5_0 of node2"
            ]
        );
        assert_eq!(m.named, [false, true, false, false]);
        assert_eq!(value(m.cells[0][1]), Some(20.0), "ranks 1 and 3");
        assert_eq!(value(m.cells[2][3]), Some(46.0), "ranks 0 and 2");
        assert_eq!(m.cells[1][1], Cell::Itself);
        assert!(
            m.subtitle.starts_with("4 ranks by leaf, "),
            "{}",
            m.subtitle
        );
        // Without leaves: rank order, no blocks.
        let m = heat_map(&sample_sweep(), "write-bw", None);
        assert!(m.leaves.is_empty() && m.labels[0] == "mlx5_0 of node1");
    }

    #[test]
    fn values_are_short() {
        assert_eq!(short(46.0), "46.0");
        assert_eq!(short(4.5), "4.50");
        assert_eq!(short(123.4), "123");
    }

    #[test]
    fn the_picture_grows_until_each_cell_can_print_its_figure() {
        let mut m = heat_map(&sample_sweep(), "write-bw", None);
        assert_eq!(picture_size(&m, (1000, 620)), (1000, 620));
        let row = m.cells[0].clone();
        m.labels = vec!["mlx5_1 of node16 *".to_string(); 16];
        m.cells = vec![row; 16];
        let (w, h) = picture_size(&m, (1000, 620));
        let at = layout((w, h), 18 * 9, 16, m.caption.len());
        assert!(at.cell >= CELL_WITH_VALUE - 2, "{at:?} in {w} x {h}");
        m.show_values = false;
        assert_eq!(picture_size(&m, (1000, 620)), (1000, 620));
    }

    #[test]
    fn the_grid_fits_the_picture() {
        let at = layout((1000, 620), 120, 4, 1);
        assert!(at.right() + BAR_ROOM <= 1000, "{at:?}");
        assert!(at.bottom() + at.label_w + 2 * CAPTION_ROW <= 620, "{at:?}");
        assert!(at.cell >= 60, "{at:?}");
    }
}
