//! `rdmabench plot RECORD... -o FILE`: pictures of result records, with plotters.
//!
//! - `--kind bw`: bandwidth vs message size (log2 axis), one line per record (error bars
//!   when it has repetitions), each record's binding ceiling as a dashed line;
//! - `--kind lat`: latency percentiles p50 / p99 / p99.9 vs message size;
//! - `--kind trend`: one size's bandwidth (or p50/p99 latency) across records ordered by
//!   `started_at` or by firmware version, with each run's ceiling (`trend.rs`);
//! - `--kind timeline`: a `-D --interval` run's bandwidth interval by interval
//!   (`timeline.rs`).
//!
//! Bandwidth and latency records are not drawn together unless `--mixed-tests` says so.
//! The file's extension picks the format: `.svg` or `.png`. PNG text is drawn with a bundled
//! subset of DejaVu Sans (`assets/`, placed glyph by glyph in `png.rs`), so those charts look
//! the same on machines without fonts; an SVG names the font ("DejaVu Sans, sans-serif") and
//! its viewer draws the text. Each format is an [`Exporter`] of a [`Picture`]:
//! [`SvgExporter`], [`PngExporter`].

mod axis;
pub mod heatmap;
mod png;
mod render;
pub(crate) mod shares;
pub(crate) mod spec;
mod timeline;
pub(crate) mod trend;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use clap::Args;
use image::ImageEncoder;
use plotters::coord::Shift;
use plotters::prelude::{BitMapBackend, DrawingArea, DrawingBackend, IntoDrawingArea, SVGBackend};
use plotters::style::FontStyle;

use crate::compare::diff::{check_together, Together};
use crate::compare::load_record;
use crate::files::{check_writable, write_atomically};
use crate::plan::PlanError;
use crate::report::sweep::{all_sweeps, load_sweep};
use crate::report::{Exporter, RunRecord};
use crate::units::parse_size;
use heatmap::{heat_map, HeatMap};
use png::Png;
use shares::SharesChart;
use spec::{default_kind, Input, Kind, Order, SpecOptions};

/// The bundled font (see `assets/DejaVuSans-subset.LICENSE`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");

/// The font family every text names: PNG text is drawn with the bundled font registered
/// under this name; an SVG names it, and its viewer draws the text with its own DejaVu Sans,
/// or its sans-serif font when it has none.
pub(crate) const FONT_FAMILY: &str = "DejaVu Sans, sans-serif";

/// Text in the pictures' font, `size` pixels high.
fn text_style(size: i32, color: &plotters::style::RGBColor) -> plotters::style::TextStyle<'_> {
    use plotters::style::IntoFont as _;
    plotters::style::TextStyle::from((FONT_FAMILY, size).into_font()).color(color)
}

/// The grey of a picture's subtitle and notes.
const SUBTITLE_GREY: plotters::style::RGBColor = plotters::style::RGBColor(90, 90, 90);

/// A picture's title and, under it, its subtitle, centred at its top (the heat map's and the
/// shares chart's).
fn draw_titles<DB: plotters::prelude::DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: &str,
) -> Result<(), plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>> {
    use plotters::element::Text;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let centre = Pos::new(HPos::Center, VPos::Top);
    let x = root.dim_in_pixel().0 as i32 / 2;
    let black = plotters::style::RGBColor(0, 0, 0);
    root.draw(&Text::new(
        title.to_string(),
        (x, 10),
        text_style(22, &black).pos(centre),
    ))?;
    let grey = text_style(14, &SUBTITLE_GREY).pos(centre);
    root.draw(&Text::new(subtitle.to_string(), (x, 42), grey))
}

/// `rdmabench plot`'s options.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// Result records (JSON), or one sweep record (a heat map)
    ///
    /// Result records (JSON files written by a test's --json), or one sweep record (written
    /// by `rdmabench cluster`), drawn as a rank x rank heat map
    #[arg(value_name = "RECORD", required = true, num_args = 1..)]
    pub records: Vec<PathBuf>,

    /// The picture to write: FILE.svg or FILE.png
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true, value_parser = parse_output)]
    pub output: PathBuf,

    /// What to draw: bw, lat, trend, timeline [default: by records]
    ///
    /// What to draw [default: lat when every record has latency figures, timeline when every
    /// record has intervals (-D --interval), else bw]
    #[arg(long, value_enum, hide_possible_values = true)]
    pub(crate) kind: Option<Kind>,

    /// With --kind trend or timeline: the message size
    ///
    /// With --kind trend or timeline: the message size [default: 64K when every record has it, else the largest size they share (timeline: that has intervals)]
    #[arg(short = 's', long, value_parser = parse_size, value_name = "SIZE")]
    pub size: Option<u64>,

    /// With --kind trend: order by date or fw [default: date]
    ///
    /// With --kind trend: order the records by date or by firmware version [default: date]
    #[arg(long, value_enum, hide_possible_values = true)]
    pub(crate) order: Option<Order>,

    /// Legend label of the records, in order (repeat it; trend: the x labels)
    #[arg(long = "label", value_name = "TEXT")]
    pub labels: Vec<String>,

    /// Title of the chart
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// Bandwidth in Gb/s instead of GB/s
    #[arg(long)]
    pub gbits: bool,

    /// With --kind bw: a logarithmic bandwidth axis
    ///
    /// With --kind bw: a logarithmic bandwidth axis (small messages become visible)
    #[arg(long)]
    pub log_y: bool,

    /// Width of the picture in pixels
    #[arg(long, default_value_t = 1000, value_name = "PX",
          value_parser = clap::value_parser!(u32).range(320..=8000))]
    pub width: u32,

    /// Draw bandwidth and latency records together
    ///
    /// Draw bandwidth and latency records together instead of refusing them (a latency
    /// record then shows as the bandwidth its round trips moved)
    #[arg(long)]
    pub mixed_tests: bool,

    /// With a sweep record: the test to draw [default: the sweep's first test]
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,

    /// Height of the picture in pixels
    #[arg(long, default_value_t = 620, value_name = "PX",
          value_parser = clap::value_parser!(u32).range(240..=8000))]
    pub height: u32,
}

/// The output formats, each an [`Exporter`] of a [`Picture`] ([`Format::exporter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Scalable vector graphics.
    Svg,
    /// Portable network graphics.
    Png,
}

/// The format a path's extension asks for.
pub(crate) fn format_of(path: &Path) -> Result<Format, String> {
    let shown = path.display();
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(Format::Svg),
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(Format::Png),
        Some(e) => Err(format!(
            "'{shown}': plot cannot write '.{e}' files; end the name in .svg or .png"
        )),
        None => Err(format!(
            "'{shown}' has no extension; end the name in .svg or .png"
        )),
    }
}

fn parse_output(text: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(text);
    if crate::files::is_dash(&p) {
        return Err(
            "plot writes its chart to a file, not to stdout; give a file name ending in .svg or \
             .png"
                .to_string(),
        );
    }
    format_of(&p)?;
    Ok(p)
}

fn register_font() -> Result<()> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT).is_ok()
    });
    if !ok {
        bail!(
            "internal error: the bundled font (assets/DejaVuSans-subset.ttf) could not be loaded"
        );
    }
    Ok(())
}

/// Works out the chart for these records and options.
pub(crate) fn build_spec(inputs: &[Input], args: &PlotArgs) -> Result<(Kind, spec::ChartSpec)> {
    let kind = args.kind.unwrap_or_else(|| default_kind(inputs));
    if args.log_y && kind != Kind::Bw {
        bail!(PlanError::Value(
            "--log-y applies to --kind bw only (latency charts choose a log axis themselves)"
                .to_string()
        ));
    }
    if !matches!(kind, Kind::Trend | Kind::Timeline) {
        if let Some(s) = args.size {
            bail!(PlanError::Value(format!(
                "--size {s} applies to --kind trend and timeline only; bw and lat charts show \
                 every size"
            )));
        }
    }
    if kind != Kind::Trend && args.order.is_some() {
        bail!(PlanError::Value(
            "--order applies to --kind trend only".to_string()
        ));
    }
    if args.labels.len() > inputs.len() {
        bail!(PlanError::Value(format!(
            "{} --label values for {} records; give at most one per record",
            args.labels.len(),
            inputs.len()
        )));
    }
    for i in inputs {
        if i.record.results.is_empty() {
            bail!("'{}' has no results to plot", i.stem);
        }
    }
    let opts = SpecOptions {
        labels: args.labels.clone(),
        title: args.title.clone(),
        size: args.size,
        order: args.order,
        gbits: args.gbits,
        log_y: args.log_y,
        width_px: args.width.saturating_sub(140),
    };
    let spec = match kind {
        Kind::Bw => spec::bw_spec(inputs, &opts)?,
        Kind::Lat => spec::lat_spec(inputs, &opts)?,
        Kind::Trend => trend::trend_spec(inputs, &opts)?,
        Kind::Timeline => timeline::timeline_spec(inputs, &opts)?,
    };
    Ok((kind, spec))
}

/// Draws with `draw` on an SVG backend of `size` and returns the SVG text.
fn to_svg(
    size: (u32, u32),
    draw: impl for<'a> FnOnce(&DrawingArea<SVGBackend<'a>, Shift>) -> Result<()>,
) -> Result<String> {
    register_font()?;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        draw(&root)?;
    }
    Ok(buf)
}

/// Draws with `draw` in memory (the PNG backend) and returns the encoded PNG.
fn to_png(
    size: (u32, u32),
    draw: impl for<'a> FnOnce(&DrawingArea<Png<'a>, Shift>) -> Result<()>,
) -> Result<Vec<u8>> {
    register_font()?;
    let (w, h) = size;
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = Png(BitMapBackend::with_buffer(&mut pixels, size)).into_drawing_area();
        draw(&root)?;
    }
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(&pixels, w, h, image::ColorType::Rgb8)
        .context("encoding the chart as PNG")?;
    Ok(png)
}

/// What a picture shows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Drawing<'a> {
    /// A chart of result records (bw, lat, trend, timeline).
    Chart(&'a spec::ChartSpec),
    /// A sweep's rank x rank heat map.
    HeatMap(&'a HeatMap),
    /// A congestion sweep's senders' shares.
    Shares(&'a SharesChart),
}

impl Drawing<'_> {
    /// Draws it on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        match *self {
            Drawing::Chart(spec) => render::draw(root, spec),
            Drawing::HeatMap(map) => heatmap::draw(root, map),
            Drawing::Shares(chart) => shares::draw(root, chart),
        }
    }
}

/// What `plot` writes: a drawing, `size` pixels wide and high.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Picture<'a> {
    /// What it shows.
    pub drawing: Drawing<'a>,
    /// Width and height in pixels.
    pub size: (u32, u32),
}

/// `plot -o FILE.svg`: the picture as SVG text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SvgExporter;

/// `plot -o FILE.png`: the picture drawn in memory, then encoded as PNG.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PngExporter;

impl Exporter<Picture<'_>> for SvgExporter {
    fn render(&self, picture: &Picture<'_>) -> Result<Vec<u8>> {
        Ok(to_svg(picture.size, |root| picture.drawing.draw(root))?.into_bytes())
    }
}

impl Exporter<Picture<'_>> for PngExporter {
    fn render(&self, picture: &Picture<'_>) -> Result<Vec<u8>> {
        to_png(picture.size, |root| picture.drawing.draw(root))
    }
}

impl Format {
    /// The exporter that writes this format.
    pub(crate) fn exporter(self) -> &'static dyn for<'a> Exporter<Picture<'a>> {
        match self {
            Format::Svg => &SvgExporter,
            Format::Png => &PngExporter,
        }
    }
}

/// Renders a chart to SVG text.
#[cfg(test)]
pub(crate) fn render_svg(spec: &spec::ChartSpec, size: (u32, u32)) -> Result<String> {
    let picture = Picture {
        drawing: Drawing::Chart(spec),
        size,
    };
    Ok(String::from_utf8(SvgExporter.render(&picture)?)?)
}

/// Renders a chart to PNG bytes (drawn in memory, then encoded).
#[cfg(test)]
pub(crate) fn render_png(spec: &spec::ChartSpec, size: (u32, u32)) -> Result<Vec<u8>> {
    let picture = Picture {
        drawing: Drawing::Chart(spec),
        size,
    };
    PngExporter.render(&picture)
}

/// Renders a heat map to SVG text or PNG bytes.
#[cfg(test)]
pub(crate) fn render_heat_map(map: &HeatMap, format: Format, size: (u32, u32)) -> Result<Vec<u8>> {
    let picture = Picture {
        drawing: Drawing::HeatMap(map),
        size,
    };
    format.exporter().render(&picture)
}

/// Runs `rdmabench plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let format = format_of(&args.output).map_err(PlanError::Value)?;
    check_writable("-o", &args.output)?;
    let paths: Vec<&Path> = args.records.iter().map(PathBuf::as_path).collect();
    if let [one] = paths.as_slice() {
        if crate::cluster::triage::record::is_triage_file(one) {
            return run_ring(args, format, one);
        }
    }
    if all_sweeps(&paths)? {
        return run_sweep(args, format);
    }
    if args.test.is_some() {
        bail!(PlanError::Value(
            "--test applies to sweep records only (a result record holds one test)".to_string()
        ));
    }
    let mut inputs = Vec::new();
    for path in &args.records {
        let record = load_record(path)?;
        if record.status != crate::report::RunStatus::Complete {
            // Drawn all the same: what a run measured before it stopped is worth a look.
            eprintln!(
                "rdmabench: note: '{}' is not a complete run{}; its {} measured sizes are drawn",
                path.display(),
                crate::compare::status_text(&record),
                record.results.len()
            );
        }
        inputs.push(Input {
            stem: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string()),
            record,
        });
    }
    let names: Vec<String> = args
        .records
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let named: Vec<(&str, &RunRecord)> = names
        .iter()
        .map(String::as_str)
        .zip(inputs.iter().map(|i| &i.record))
        .collect();
    check_together(&named, Together::SameMeasure, args.mixed_tests)?;
    let (kind, spec) = build_spec(&inputs, args)?;
    let picture = Picture {
        drawing: Drawing::Chart(&spec),
        size: (args.width, args.height),
    };
    write_atomically(&args.output, &format.exporter().render(&picture)?)?;
    let kind = match kind {
        Kind::Bw => "bandwidth",
        Kind::Lat => "latency",
        Kind::Trend => "trend",
        Kind::Timeline => "timeline",
    };
    println!(
        "rdmabench: wrote {} ({kind} chart of {} record{})",
        args.output.display(),
        inputs.len(),
        if inputs.len() == 1 { "" } else { "s" }
    );
    Ok(())
}

/// The options of charts of result records that a heat map has no use for, when given.
fn chart_options_given(args: &PlotArgs) -> Vec<&'static str> {
    let given = [
        (args.kind.is_some(), "--kind"),
        (args.size.is_some(), "--size"),
        (args.order.is_some(), "--order"),
        (!args.labels.is_empty(), "--label"),
        (args.gbits, "--gbits"),
        (args.log_y, "--log-y"),
        (args.mixed_tests, "--mixed-tests"),
    ];
    given.iter().filter(|g| g.0).map(|g| g.1).collect()
}

/// Works out the heat map of a sweep record for these options.
pub(crate) fn build_heat_map(
    sweep: &crate::report::SweepRecord,
    args: &PlotArgs,
) -> Result<HeatMap> {
    let given = chart_options_given(args);
    if !given.is_empty() {
        bail!(PlanError::Value(format!(
            "{} appl{} to charts of result records, not to a sweep's heat map",
            given.join(", "),
            if given.len() == 1 { "ies" } else { "y" }
        )));
    }
    let test = match &args.test {
        Some(t) if !sweep.tests.contains(t) => bail!(PlanError::Value(format!(
            "--test {t}: the sweep ran {}",
            sweep.tests.join(", ")
        ))),
        Some(t) => t.clone(),
        None => match sweep.tests.first() {
            Some(t) => t.clone(),
            None => bail!("the sweep record names no test (its \"tests\" is empty)"),
        },
    };
    Ok(heat_map(sweep, &test, args.title.as_deref()))
}

/// `rdmabench plot SWEEP.json`: the heat map of one test of one sweep.
fn run_sweep(args: &PlotArgs, format: Format) -> Result<()> {
    if let [first, second, ..] = args.records.as_slice() {
        bail!(PlanError::Value(format!(
            "'{}' and '{}': plot draws one sweep at a time; give one sweep record",
            first.display(),
            second.display()
        )));
    }
    let path = &args.records[0];
    let sweep = load_sweep(path)?;
    if !sweep.groups.is_empty() {
        return run_shares(args, format, &sweep);
    }
    let map = build_heat_map(&sweep, args)?;
    let picture = Picture {
        drawing: Drawing::HeatMap(&map),
        size: heatmap::picture_size(&map, (args.width, args.height)),
    };
    write_atomically(&args.output, &format.exporter().render(&picture)?)?;
    let test = args
        .test
        .as_deref()
        .or(sweep.tests.first().map(String::as_str));
    let others: Vec<&str> = sweep
        .tests
        .iter()
        .map(String::as_str)
        .filter(|t| Some(*t) != test)
        .collect();
    println!(
        "rdmabench: wrote {} (heat map of {} over {} ranks{})",
        args.output.display(),
        test.unwrap_or("?"),
        sweep.ranks.len(),
        if others.is_empty() {
            String::new()
        } else {
            format!(
                "; the sweep also ran {}: pick one with --test",
                others.join(", ")
            )
        }
    );
    Ok(())
}

/// `rdmabench plot TRIAGE.json`: the ring's per-rank times.
fn run_ring(args: &PlotArgs, format: Format, path: &Path) -> Result<()> {
    let given = chart_options_given(args);
    if !given.is_empty() || args.test.is_some() {
        bail!(PlanError::Value(
            "a triage record is drawn as its ring: leave out the options of charts and --test"
                .to_string()
        ));
    }
    let rec = crate::cluster::triage::record::load(path)?;
    let Some(chart) = shares::ring_chart(&rec, args.title.as_deref()) else {
        bail!(PlanError::Value(format!(
            "'{}' holds no ring figures (the triage failed before its first round)",
            path.display()
        )));
    };
    let picture = Picture {
        drawing: Drawing::Shares(&chart),
        size: (args.width, args.height),
    };
    write_atomically(&args.output, &format.exporter().render(&picture)?)?;
    println!(
        "rdmabench: wrote {} (triage ring of {} ranks: each rank's seconds sending and waiting)",
        args.output.display(),
        chart.bars.len()
    );
    Ok(())
}

/// `rdmabench plot SWEEP.json` of a congestion sweep: each group's senders stacked, against
/// the receivers' ceiling.
fn run_shares(args: &PlotArgs, format: Format, sweep: &crate::report::SweepRecord) -> Result<()> {
    let given = chart_options_given(args);
    if !given.is_empty() {
        bail!(PlanError::Value(format!(
            "{} appl{} to charts of result records, not to a congestion sweep's shares",
            given.join(", "),
            if given.len() == 1 { "ies" } else { "y" }
        )));
    }
    let test = match &args.test {
        Some(t) if !sweep.groups.iter().any(|g| &g.test == t) => bail!(PlanError::Value(format!(
            "--test {t}: the sweep ran {}",
            sweep.tests.join(", ")
        ))),
        Some(t) => t.clone(),
        None => sweep.groups[0].test.clone(),
    };
    let chart = shares::shares_chart(sweep, &test, args.title.as_deref());
    let picture = Picture {
        drawing: Drawing::Shares(&chart),
        size: (args.width, args.height),
    };
    write_atomically(&args.output, &format.exporter().render(&picture)?)?;
    println!(
        "rdmabench: wrote {} ({} of {}: {} group(s), each sender's share against the \
         receivers' ceiling)",
        args.output.display(),
        sweep.pattern,
        test,
        chart.bars.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::{lat_record, record, with_reps};
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: PlotArgs,
    }

    fn args(extra: &[&str]) -> PlotArgs {
        Wrap::try_parse_from(std::iter::once("plot").chain(extra.iter().copied()))
            .unwrap()
            .args
    }

    fn inputs() -> Vec<Input> {
        let a = with_reps(
            record(
                "write-bw",
                &[(2, 0.01), (1024, 2.0), (65536, 30.0), (8 << 20, 46.0)],
            ),
            &[29.0, 30.0, 31.0],
        );
        let mut b = record(
            "write-bw",
            &[(2, 0.009), (1024, 1.9), (65536, 28.0), (8 << 20, 45.0)],
        );
        b.device.fw_ver = "28.40.1000".to_string();
        vec![
            Input {
                stem: "a".to_string(),
                record: a,
            },
            Input {
                stem: "b & <c>".to_string(),
                record: b,
            },
        ]
    }

    #[test]
    fn the_extension_picks_the_format() {
        assert_eq!(format_of(Path::new("x.svg")), Ok(Format::Svg));
        assert_eq!(format_of(Path::new("x.PNG")), Ok(Format::Png));
        let e = format_of(Path::new("x.jpg")).unwrap_err();
        assert!(e.contains("'.jpg'") && e.contains(".svg"), "{e}");
        assert!(format_of(Path::new("chart"))
            .unwrap_err()
            .contains("no extension"));
    }

    #[test]
    fn svg_output_is_well_formed_xml_with_labelled_axes() {
        for kind in ["bw", "trend"] {
            let a = args(&["r.json", "-o", "x.svg", "--kind", kind]);
            let (_, spec) = build_spec(&inputs(), &a).unwrap();
            let svg = render_svg(&spec, (1000, 620)).unwrap();
            let doc = roxmltree::Document::parse(&svg).unwrap();
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            let texts: Vec<String> = doc
                .descendants()
                .filter(|n| n.has_tag_name("text"))
                .filter_map(|n| n.text().map(|t| t.trim().to_string()))
                .collect();
            assert!(
                texts.iter().any(|t| t.contains("bandwidth [GB/s]")),
                "{texts:?}"
            );
            if kind == "bw" {
                assert!(
                    texts.iter().any(|t| t.contains("message size")),
                    "{texts:?}"
                );
                assert!(texts.iter().any(|t| t == "32K"), "{texts:?}");
                assert!(
                    texts.iter().any(|t| t.contains("binding ceiling")),
                    "{texts:?}"
                );
                assert!(
                    texts.iter().any(|t| t.contains("fw 28.40.1000")),
                    "{texts:?}"
                );
            }
        }
    }

    #[test]
    fn latency_svg_and_png() {
        let l = vec![Input {
            stem: "lat".to_string(),
            record: lat_record(&[2, 64, 4096, 1 << 20], &[(2.0, 5.0), (2.2, 5.5)]),
        }];
        let a = args(&["r.json", "-o", "x.svg"]);
        let (kind, spec) = build_spec(&l, &a).unwrap();
        assert_eq!(kind, Kind::Lat);
        let svg = render_svg(&spec, (800, 500)).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
        assert!(svg.contains("p99.9"));
        // The SVG names the font the PNG is drawn with, then the generic family.
        assert!(
            svg.contains(r#"font-family="DejaVu Sans, sans-serif""#),
            "{svg}"
        );
        assert!(!svg.contains(r#"font-family="sans-serif""#));

        let bytes = render_png(&spec, (800, 500)).unwrap();
        assert!(bytes.len() > 1000, "{} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn bandwidth_png_is_a_png() {
        let a = args(&["r.json", "-o", "x.png"]);
        let (_, spec) = build_spec(&inputs(), &a).unwrap();
        let bytes = render_png(&spec, (1000, 620)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn a_sweep_is_drawn_as_a_heat_map() {
        let sweep = crate::report::sweep::sample_sweep();
        let map = build_heat_map(&sweep, &args(&["s.json", "-o", "x.svg"])).unwrap();
        assert!(map.title.starts_with("write-bw"), "{}", map.title);
        let map = build_heat_map(
            &sweep,
            &args(&["s.json", "-o", "x.svg", "--test", "write-lat"]),
        )
        .unwrap();
        assert!(map.lower_is_better);
        let svg =
            String::from_utf8(render_heat_map(&map, Format::Svg, (1000, 620)).unwrap()).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
        let png = render_heat_map(&map, Format::Png, (1000, 620)).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let map = build_heat_map(&sweep, &args(&["s.json", "-o", "x.svg"])).unwrap();
        let svg =
            String::from_utf8(render_heat_map(&map, Format::Svg, (1000, 620)).unwrap()).unwrap();
        insta::assert_snapshot!("heat_map_of_a_4_rank_sweep", svg);
    }

    #[test]
    fn a_sweep_with_leaves_is_drawn_by_leaf_with_its_slow_path() {
        use crate::cluster::verdict::judge;
        use crate::cluster::verdict::tests::{pair, sweep};
        // Six ranks, alternately on leaf0 and leaf1; the pairs between the leaves slow.
        let leaf = |r: u32| format!("leaf{}", r % 2);
        let mut pairs = Vec::new();
        for a in 0..6u32 {
            for b in a + 1..6 {
                let v = 40.0 + f64::from((a * 7 + b * 3) % 5);
                pairs.push(pair(a, b, if leaf(a) == leaf(b) { v } else { v / 10.0 }));
            }
        }
        let mut rec = sweep(6, pairs);
        for r in &mut rec.ranks {
            r.leaf = Some(leaf(r.rank));
        }
        judge(&mut rec);
        assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
        let map = build_heat_map(&rec, &args(&["s.json", "-o", "x.svg"])).unwrap();
        let svg =
            String::from_utf8(render_heat_map(&map, Format::Svg, (1000, 620)).unwrap()).unwrap();
        roxmltree::Document::parse(&svg).unwrap();
        insta::assert_snapshot!("heat_map_of_a_sweep_by_leaf", svg);
    }

    #[test]
    fn a_heat_map_refuses_the_options_of_charts_and_unknown_tests() {
        let sweep = crate::report::sweep::sample_sweep();
        for extra in [&["--kind", "bw"][..], &["--gbits"], &["--label", "a"]] {
            let a = args(&[&["s.json", "-o", "x.svg"][..], extra].concat());
            let e = build_heat_map(&sweep, &a).unwrap_err();
            assert!(
                e.is::<PlanError>() && e.to_string().contains(extra[0]),
                "{e}"
            );
        }
        let a = args(&["s.json", "-o", "x.svg", "--test", "read-bw"]);
        let e = build_heat_map(&sweep, &a).unwrap_err();
        assert!(e.to_string().contains("write-bw, write-lat"), "{e}");
    }

    #[test]
    fn options_that_do_not_apply_are_usage_errors() {
        let e = build_spec(&inputs(), &args(&["r", "-o", "x.svg", "--size", "64K"])).unwrap_err();
        assert!(
            e.is::<PlanError>() && e.to_string().contains("--kind trend"),
            "{e}"
        );
        let e = build_spec(
            &inputs(),
            &args(&[
                "r", "-o", "x.svg", "--label", "a", "--label", "b", "--label", "c",
            ]),
        )
        .unwrap_err();
        assert!(e.is::<PlanError>(), "{e}");
        let e = build_spec(&inputs(), &args(&["r", "-o", "x.svg", "--kind", "lat"])).unwrap_err();
        assert!(e.is::<PlanError>(), "{e}");
    }
}
