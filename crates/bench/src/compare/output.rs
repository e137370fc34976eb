//! The outputs of `compare`: a terminal table and Markdown, each an [`Exporter`] (`--json`
//! is the JSON exporter's, of the serialized [`Report`]).

use std::fmt::Write as _;

use anyhow::Result;

use super::stats::{fmt_p, SpreadTest, Verdict};
use super::{Comparison, Metric, Report, Row, METHOD};
use crate::report::Exporter;
use crate::units::format_size;

/// `compare`'s terminal table, of one run's comparisons ([`Report`]) or of two sweeps'
/// ([`SweepComparison`](super::fleet::SweepComparison), `fleet_output.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableExporter;

/// `compare --markdown`: Markdown for a pull request or a ticket, of either comparison.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkdownExporter;

impl Exporter<Report> for TableExporter {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        Ok(table(report).into_bytes())
    }
}

impl Exporter<Report> for MarkdownExporter {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        Ok(markdown(report).into_bytes())
    }
}

/// A number with four significant digits (12.35, 0.0001230), never in exponent form.
pub(crate) fn sig4(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (3 - mag).clamp(0, 9) as usize;
    format!("{x:.decimals$}")
}

fn change(r: &Row) -> String {
    r.judgement
        .change_pct
        .map(|c| format!("{c:+.1}%"))
        .unwrap_or_else(|| "n/a".to_string())
}

fn p_value(r: &Row) -> String {
    match r.judgement.spread {
        SpreadTest::MannWhitney { p, .. } => fmt_p(p),
        SpreadTest::NoOverlap { .. } => "-".to_string(),
        SpreadTest::ThresholdOnly => "-".to_string(),
    }
}

fn q_value(r: &Row) -> String {
    r.judgement.q.map(fmt_p).unwrap_or_else(|| "-".to_string())
}

fn p50(r: &Row) -> String {
    match (r.baseline_p50_us, r.candidate_p50_us) {
        (Some(a), Some(b)) => format!("{} -> {}", sig4(a), sig4(b)),
        _ => String::new(),
    }
}

/// The note for rows judged without repetitions, if any.
fn no_repetitions_note(c: &Comparison) -> Option<String> {
    let n = c
        .rows
        .iter()
        .filter(|r| r.judgement.spread == SpreadTest::ThresholdOnly)
        .count();
    (n > 0).then(|| {
        format!(
            "Note: {n} of {} sizes have no repetitions on either side: their verdicts use the threshold alone and cannot tell a change from run-to-run noise; record the runs with --repeat 5 or more.",
            c.rows.len()
        )
    })
}

fn has_latency(c: &Comparison) -> bool {
    c.rows.iter().any(|r| r.metric == Metric::LatP99Us)
}

fn summary(c: &Comparison) -> String {
    format!(
        "{} slower, {} faster, {} same: {}",
        c.slower,
        c.faster,
        c.same,
        if c.slower > 0 {
            "REGRESSION"
        } else {
            "no regression"
        }
    )
}

/// What the columns mean, when they are not obvious.
fn legend(c: &Comparison) -> Option<String> {
    let q = c.rows.iter().filter(|r| r.judgement.q.is_some()).count();
    (c.rows.iter().any(|r| matches!(r.judgement.spread, SpreadTest::MannWhitney { .. }))).then(|| {
        let mut s = "p: Mann-Whitney U test of the repetitions against the baseline's moved by the threshold (for a change within the threshold: against the baseline itself)".to_string();
        if q > 0 {
            s.push_str(&format!(
                "; q: p adjusted across the {q} sizes beyond their threshold (Benjamini-Hochberg), which decides"
            ));
        }
        s.push('.');
        s
    })
}

fn thresholds(report: &Report) -> String {
    let s = &report.settings;
    format!(
        "thresholds {}% bandwidth, {}% p99 latency; alpha {}",
        s.threshold_pct, s.threshold_lat_pct, s.alpha
    )
}

/// Pads columns: `right[i]` aligns column i to the right.
pub(super) fn columns(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(cell.chars().count());
            let last = i + 1 == cells.len();
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            } else {
                s.push_str(cell);
                if !last {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                s.push_str("  ");
            }
        }
        format!(" {}\n", s.trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

fn cells(r: &Row, latency: bool) -> Vec<String> {
    let mut v = vec![
        format_size(r.size),
        r.metric.title().to_string(),
        sig4(r.judgement.baseline_median),
        sig4(r.judgement.candidate_median),
        change(r),
    ];
    if latency {
        v.push(p50(r));
    }
    v.extend([
        format!("{}/{}", r.baseline_n, r.candidate_n),
        p_value(r),
        q_value(r),
        r.judgement.verdict.as_str().to_string(),
        r.judgement.reason.clone(),
    ]);
    v
}

fn header(latency: bool) -> Vec<&'static str> {
    let mut h = vec!["size", "metric", "baseline", "candidate", "change"];
    if latency {
        h.push("p50 [us]");
    }
    h.extend(["runs", "p", "q", "verdict", "why"]);
    h
}

/// A list of differences under its heading, each value printable; nothing when the list is empty.
fn differences(out: &mut String, heading: &str, list: &[super::diff::Difference]) {
    if list.is_empty() {
        return;
    }
    let p = crate::text::printable;
    let _ = writeln!(out, "{heading}");
    for d in list {
        let _ = writeln!(
            out,
            "  {}: {} -> {}",
            d.what,
            p(&d.baseline),
            p(&d.candidate)
        );
    }
}

/// The terminal table.
fn table(report: &Report) -> String {
    let mut out = String::new();
    for (i, c) in report.comparisons.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // Text from the records (device and host names, firmware) cannot drive the terminal.
        let p = crate::text::printable;
        let _ = writeln!(out, "Baseline : {}: {}", c.baseline, p(&c.baseline_desc));
        let _ = writeln!(out, "Candidate: {}: {}", c.candidate, p(&c.candidate_desc));
        differences(
            &mut out,
            "Changed between the runs (information):",
            &c.differences.info,
        );
        differences(
            &mut out,
            "WARNING: the records differ in what makes runs comparable; read the verdicts with care:",
            &c.differences.warnings,
        );
        out.push('\n');
        let latency = has_latency(c);
        let rows: Vec<Vec<String>> = c.rows.iter().map(|r| cells(r, latency)).collect();
        let mut right = vec![false, false, true, true, true];
        if latency {
            right.push(true);
        }
        right.extend([true, true, true, false, false]);
        out.push_str(&columns(&header(latency), &rows, &right));
        out.push('\n');
        only_in(&mut out, c, |s| s.to_string());
        if let Some(l) = legend(c) {
            let _ = writeln!(out, "{l}");
        }
        if let Some(note) = no_repetitions_note(c) {
            let _ = writeln!(out, "{note}");
        }
        let _ = writeln!(out, "Summary: {}", summary(c));
    }
    let _ = writeln!(out, "Method: {METHOD} ({}).", thresholds(report));
    if report.comparisons.len() > 1 {
        let _ = writeln!(
            out,
            "Overall: {}",
            if report.regressed {
                "REGRESSION"
            } else {
                "no regression"
            }
        );
    }
    out
}

fn only_in(out: &mut String, c: &Comparison, wrap: impl Fn(&str) -> String) {
    let list = |v: &[u64]| {
        v.iter()
            .map(|s| format_size(*s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !c.only_in_baseline.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            wrap(&format!(
                "Only in the baseline (not compared): {}",
                list(&c.only_in_baseline)
            ))
        );
    }
    if !c.only_in_candidate.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            wrap(&format!(
                "Only in the candidate (not compared): {}",
                list(&c.only_in_candidate)
            ))
        );
    }
}

/// Escapes what would break a Markdown table cell or inline code.
pub(super) fn md(text: &str) -> String {
    // One line: a newline from a record would start a line of its own (a heading, a list).
    crate::text::printable(text)
        .replace('|', "\\|")
        .replace('`', "'")
}

/// Markdown for a pull request or a ticket.
fn markdown(report: &Report) -> String {
    let mut out = String::new();
    for (i, c) in report.comparisons.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&markdown_heading(c));
        out.push_str(&markdown_table(c));
        only_in(&mut out, c, |s| format!("{s}  "));
        if let Some(l) = legend(c) {
            let _ = writeln!(out, "{l}\n");
        }
        if let Some(note) = no_repetitions_note(c) {
            let _ = writeln!(out, "{note}\n");
        }
        let _ = writeln!(out, "**Summary**: {}\n", summary(c));
    }
    let _ = writeln!(out, "*Method*: {METHOD} ({}).", thresholds(report));
    out
}

/// A comparison's Markdown title ("### rdmabench compare: `after` against `before`", `what`
/// before the first name) and a line for each of its two inputs: (label, name, description),
/// the earlier first.
pub(super) fn markdown_title(
    what: &str,
    (label_a, name_a, desc_a): (&str, &str, &str),
    (label_b, name_b, desc_b): (&str, &str, &str),
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### rdmabench compare: {what}`{}` against `{}`\n",
        md(name_b),
        md(name_a)
    );
    let _ = writeln!(out, "- **{label_a}**: `{}`: {}", md(name_a), md(desc_a));
    let _ = writeln!(out, "- **{label_b}**: `{}`: {}", md(name_b), md(desc_b));
    out
}

/// The Markdown heading of a comparison: its two records, what changed and the warnings.
fn markdown_heading(c: &Comparison) -> String {
    let mut out = markdown_title(
        "",
        ("Baseline", &c.baseline, &c.baseline_desc),
        ("Candidate", &c.candidate, &c.candidate_desc),
    );
    for d in &c.differences.info {
        let _ = writeln!(
            out,
            "- Changed: {}: `{}` → `{}`",
            md(&d.what),
            md(&d.baseline),
            md(&d.candidate)
        );
    }
    out.push('\n');
    if !c.differences.warnings.is_empty() {
        let _ = writeln!(
            out,
            "> **Warning**: the records differ in what makes runs comparable; read the verdicts with care:"
        );
        for d in &c.differences.warnings {
            let _ = writeln!(
                out,
                "> - {}: `{}` → `{}`",
                md(&d.what),
                md(&d.baseline),
                md(&d.candidate)
            );
        }
        out.push('\n');
    }
    out
}

/// The Markdown table of a comparison's rows, the verdicts other than "same" in bold.
fn markdown_table(c: &Comparison) -> String {
    let mut out = String::new();
    let latency = has_latency(c);
    let h = header(latency);
    let _ = writeln!(out, "| {} |", h.join(" | ").replace("[us]", "[µs]"));
    let aligns: Vec<&str> = h
        .iter()
        .map(|t| match *t {
            "size" | "metric" | "verdict" | "why" => ":--",
            _ => "--:",
        })
        .collect();
    let _ = writeln!(out, "|{}|", aligns.join("|"));
    for r in &c.rows {
        let mut cells = cells(r, latency);
        let v = cells.len() - 2;
        if r.judgement.verdict != Verdict::Same {
            cells[v] = format!("**{}**", cells[v]);
        }
        let cells: Vec<String> = cells
            .iter()
            .map(|s| md(&s.replace("[us]", "[µs]")))
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_four_significant_digits() {
        assert_eq!(sig4(12.34567), "12.35");
        assert_eq!(sig4(0.000_123_4), "0.0001234");
        assert_eq!(sig4(1234.5), "1234");
        assert_eq!(sig4(0.0), "0");
        assert_eq!(sig4(48.5), "48.50");
    }

    #[test]
    fn columns_line_up() {
        let t = columns(
            &["a", "bb"],
            &[
                vec!["xxx".into(), "1".into()],
                vec!["y".into(), "22".into()],
            ],
            &[false, true],
        );
        assert_eq!(t, " a    bb\n xxx   1\n y    22\n");
    }
}
