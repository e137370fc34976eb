//! The terminal output of a run: the header block's layout, the column titles and one row
//! per size ([`Table`]). What the header says is `header.rs`'s.

use std::fmt::Write as _;

use crate::report::{IntervalFigure, IntervalFigures, ParamsRecord, SizeResult};
use crate::units::bandwidth_unit;

/// The rule's width, which every header line of pairs keeps to.
pub(crate) const WIDTH: usize = 87;

/// The width of one of the header's two columns: a one-space margin, two columns and two
/// spaces between them make [`WIDTH`].
const COLUMN: usize = (WIDTH - 3) / 2;

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Renders the header block: the rule, `title` centred, the label/value pairs, the rule.
///
/// The layout adapts to what it shows. Every label is padded to the longest label, then
/// ": " and the value, so the values start in one column. A pair whose text fits one of
/// two columns of 42 characters (half of the rule's 87, less the margins) is *short*; two
/// short pairs in a row share a line, the second starting at character 46 on every line. A
/// pair too long for a column gets a line of its own (as does a short pair left alone just
/// before it), so pairs keep their display order, a line of two pairs never passes the
/// rule, and no value is cut or pushes its neighbour out of its column.
pub(crate) fn header(title: &str, fields: &[(&str, String)]) -> String {
    let width = fields
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(out, "{title:^WIDTH$}");
    let mut pending: Option<String> = None;
    for (label, value) in fields {
        let cell = format!("{label:<width$}: {value}");
        let short = cell.chars().count() <= COLUMN;
        match (pending.take(), short) {
            (Some(left), true) => {
                let _ = writeln!(out, " {left:<COLUMN$}  {cell}");
            }
            (Some(left), false) => {
                let _ = writeln!(out, " {left}");
                let _ = writeln!(out, " {cell}");
            }
            (None, true) => pending = Some(cell),
            (None, false) => {
                let _ = writeln!(out, " {cell}");
            }
        }
    }
    if let Some(left) = pending {
        let _ = writeln!(out, " {left}");
    }
    let _ = writeln!(out, "{RULE}");
    out
}

/// How a run's table looks: bandwidth or latency columns, the bandwidth unit, and whether
/// rows carry their repetition (`--repeat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    /// Bandwidth in Gb/s instead of GB/s (`--report-gbits`).
    pub gbits: bool,
    /// A latency test.
    pub lat: bool,
    /// How many times the plan runs.
    pub repeat: u32,
}

impl Table {
    /// The table of a run with these parameters (in Gb/s with `--report-gbits`).
    pub(crate) fn of(params: &ParamsRecord) -> Self {
        Table {
            gbits: params.report_gbits,
            lat: params.latency.is_some(),
            repeat: params.repeat,
        }
    }

    fn plain_columns(&self) -> String {
        if self.lat {
            lat_columns()
        } else {
            columns(self.gbits)
        }
    }

    fn plain_row(&self, r: &SizeResult) -> String {
        if self.lat {
            lat_row(r)
        } else {
            row(r, self.gbits)
        }
    }

    /// The column titles printed under the header (with a repetition column under
    /// `--repeat`).
    pub(crate) fn columns(&self) -> String {
        let prefix = if self.repeat > 1 { " rep " } else { "" };
        format!("{prefix}{}", self.plain_columns())
    }

    /// The lines of one size as it finishes, each ending in a newline: its row, under `-b`
    /// each direction's, and under `--interval` each interval's and the worst of them.
    pub(crate) fn rows(&self, rep: u32, r: &SizeResult) -> String {
        let prefix = if self.repeat > 1 {
            format!(" {:<3} ", rep + 1)
        } else {
            String::new()
        };
        let mut out = format!("{prefix}{}\n", self.plain_row(r));
        if let Some(d) = &r.directions {
            for (label, figures) in [
                ("client->server", &d.client_to_server),
                ("server->client", &d.server_to_client),
            ] {
                let line = direction_row(label, figures, self.gbits);
                let _ = writeln!(out, "{prefix}{line}");
            }
        }
        if let Some(i) = &r.intervals {
            out.push_str(&interval_rows(i, self.gbits));
        }
        out
    }

    /// The end of the table: under `--repeat`, the medians of every size; then the rule.
    pub(crate) fn summary(&self, results: &[SizeResult]) -> String {
        let mut out = String::new();
        if self.repeat > 1 {
            let _ = writeln!(out, "{RULE}");
            let _ = writeln!(out, " medians of {} repetitions:", self.repeat);
            let _ = writeln!(out, "{}", self.plain_columns());
            for r in results {
                let _ = writeln!(out, "{}", self.plain_row(r));
            }
        }
        let _ = writeln!(out, "{RULE}");
        out
    }
}

/// The lines of a multi-rail run: each line of `lines` behind its rail's label ("0", "all"),
/// each ending in a newline.
pub(crate) fn with_rail(label: &str, lines: &str) -> String {
    lines.lines().map(|l| format!(" {label:<5}{l}\n")).collect()
}

impl Table {
    /// The end of a multi-rail run's table: under `--repeat`, each size's medians of every
    /// rail (each labelled) in turn; then the rule.
    pub(crate) fn summary_rails(&self, rails: &[(String, Vec<SizeResult>)]) -> String {
        let mut out = String::new();
        if self.repeat > 1 {
            let _ = writeln!(out, "{RULE}");
            let _ = writeln!(out, " medians of {} repetitions:", self.repeat);
            out.push_str(&with_rail("rail", &self.plain_columns()));
            let sizes = rails.first().map_or(0, |(_, r)| r.len());
            for i in 0..sizes {
                for (label, results) in rails {
                    if let Some(r) = results.get(i) {
                        out.push_str(&with_rail(label, &self.plain_row(r)));
                    }
                }
            }
        }
        let _ = writeln!(out, "{RULE}");
        out
    }
}

/// The column titles of a bandwidth test.
fn columns(gbits: bool) -> String {
    let unit = format!("BW average[{}]", bandwidth_unit(gbits).0);
    format!(
        " {:<10} {:<13} {:<18} {:<15} {}",
        "#bytes", "#iterations", unit, "MsgRate[Mpps]", "% of ceiling"
    )
}

/// One row of a bandwidth test.
fn row(r: &SizeResult, gbits: bool) -> String {
    let bw = r.bw_gbps * bandwidth_unit(gbits).1;
    let pct = r
        .pct_of_ceiling
        .map(|p| format!("{p:.1}%"))
        .unwrap_or_else(|| "-".to_string());
    format!(
        " {:<10} {:<13} {:<18.6} {:<15.6} {}",
        r.size, r.iterations, bw, r.msg_rate_mpps, pct
    )
}

/// The column titles of a latency test.
fn lat_columns() -> String {
    format!(
        " {:<10} {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "#bytes",
        "#iterations",
        "min[us]",
        "p50[us]",
        "p90[us]",
        "p99[us]",
        "p99.9[us]",
        "max[us]",
        "mean[us]",
        "stdev[us]"
    )
}

/// One row of a latency test (microseconds with three decimals: no truncation to whole us).
fn lat_row(r: &SizeResult) -> String {
    match &r.lat_us {
        Some(l) => format!(
            " {:<10} {:<12} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            r.size, r.iterations, l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.mean, l.stdev
        ),
        None => format!(" {:<10} {:<12} (no latency recorded)", r.size, r.iterations),
    }
}

/// `--interval`: a row per interval, indented under its size's (from the window's opening,
/// the columns of bandwidth and message rate), then the worst interval and the variation.
fn interval_rows(i: &IntervalFigures, gbits: bool) -> String {
    let (unit, scale) = bandwidth_unit(gbits);
    let span = |f: &IntervalFigure| format!("{:.2}-{:.2} s", f.start_s, f.end_s());
    let mut out = String::new();
    for f in &i.list {
        let mpps = f.iterations as f64 / f.seconds / 1e6;
        let bw = f.bw_gbps * scale;
        let _ = writeln!(out, "   {:<21} {bw:<18.6} {mpps:.6}", span(f));
    }
    let _ = writeln!(
        out,
        "   worst interval {}: {:.6} {unit}, {:.1}% of the intervals' median; CoV {:.3}",
        span(&i.worst),
        i.worst.bw_gbps * scale,
        i.worst_pct_of_median,
        i.cov
    );
    out
}

/// One direction of a bidirectional row, indented under it.
fn direction_row(label: &str, d: &crate::report::DirectionFigures, gbits: bool) -> String {
    let bw = d.bw_gbps * bandwidth_unit(gbits).1;
    format!("   {label:<21} {bw:<18.6} {:<15.6}", d.msg_rate_mpps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_the_unit_asked_for() {
        let r = SizeResult::from_window(65536, 5000, 1.0).unwrap();
        assert!(columns(false).contains("GB/s"));
        assert!(columns(true).contains("Gb/s"));
        assert!(row(&r, false).contains("0.327680"), "{}", row(&r, false));
        assert!(row(&r, true).contains("2.621440"), "{}", row(&r, true));
    }

    #[test]
    fn rail_lines_carry_their_label_in_a_column_of_their_own() {
        let r = SizeResult::from_window(65536, 5000, 1.0).unwrap();
        let table = Table {
            gbits: false,
            lat: false,
            repeat: 1,
        };
        let cols = with_rail("rail", &table.columns());
        let row0 = with_rail("0", &table.rows(0, &r));
        let all = with_rail("all", &table.rows(0, &r));
        assert!(cols.starts_with(" rail  #bytes"), "{cols}");
        assert!(row0.starts_with(" 0     65536 "), "{row0}");
        assert!(all.starts_with(" all   65536 "), "{all}");
        assert!(row0.ends_with('\n') && row0.lines().count() == 1);
    }

    #[test]
    fn intervals_are_rows_under_their_size_and_the_worst_is_named() {
        let mut r = SizeResult::from_window(65536, 3000, 3.0).unwrap();
        let list = [(0.0, 1000), (1.0, 100), (2.0, 1900)]
            .iter()
            .map(|&(at, ops)| IntervalFigure::new(65536, at, 1.0, ops))
            .collect();
        r.intervals = IntervalFigures::from_list(1.0, list);
        let table = Table {
            gbits: false,
            lat: false,
            repeat: 1,
        };
        insta::assert_snapshot!(table.rows(0, &r));
    }

    #[test]
    fn latency_rows_keep_sub_microsecond_digits() {
        let mut r = SizeResult::from_window(2, 1000, 0.01).unwrap();
        r.lat_us = Some(crate::report::LatencyStats {
            min: 1.234,
            p50: 2.5,
            p90: 3.0,
            p99: 4.125,
            p999: 5.0,
            p9999: 6.0,
            max: 7.0,
            mean: 2.75,
            stdev: 0.5,
        });
        let row = lat_row(&r);
        assert!(row.contains("1.234") && row.contains("4.125"), "{row}");
        assert!(lat_columns().contains("p99[us]"));
    }

    #[test]
    fn short_pairs_share_a_line_and_long_ones_take_their_own() {
        let fields = [
            ("Device", "rxe1".to_string()),
            ("GID index", "1 (RoCE v2)".to_string()),
            (
                "Run",
                "5000 iterations per QP and size, 5 repetitions".to_string(),
            ),
            ("QPs", "1".to_string()),
            ("Relaxed order", "true".to_string()),
            ("Path MTU", "1024".to_string()),
        ];
        let text = header("RDMA_Write BW Test (client)", &fields);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], RULE);
        assert!(lines[1].contains("RDMA_Write BW Test (client)"));
        // The labels are padded to the longest, "Relaxed order".
        assert_eq!(
            lines[2],
            format!(" {:<42}  GID index    : 1 (RoCE v2)", "Device       : rxe1")
        );
        assert_eq!(
            lines[3],
            " Run          : 5000 iterations per QP and size, 5 repetitions"
        );
        assert_eq!(lines[4].find("Relaxed order"), Some(45), "{text}");
        assert!(lines[4].starts_with(" QPs          : 1 "), "{text}");
        assert_eq!(lines[5], " Path MTU     : 1024");
        assert_eq!(lines[6], RULE);
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{text}");
    }
}
