//! The outputs of `compare` on two sweeps: the terminal table and Markdown exporters
//! (`--json` is the JSON exporter's, of the serialized [`SweepComparison`]).

use std::fmt::Write as _;

use anyhow::Result;

use super::fleet::{LonePair, PairChange, PairVerdict, SweepComparison};
use super::output::{columns, markdown_title, md, sig4, MarkdownExporter, TableExporter};
use crate::report::Exporter;
use crate::text::printable;

impl Exporter<SweepComparison> for TableExporter {
    fn render(&self, c: &SweepComparison) -> Result<Vec<u8>> {
        Ok(table(c).into_bytes())
    }
}

impl Exporter<SweepComparison> for MarkdownExporter {
    fn render(&self, c: &SweepComparison) -> Result<Vec<u8>> {
        Ok(markdown(c).into_bytes())
    }
}

/// The method, in one sentence for the outputs.
pub(crate) const SWEEP_METHOD: &str = "pairs matched by test and by the host and device of both \
NICs (ranks may be numbered differently between launches); each pair is one measurement, so \
a change counts when it exceeds the threshold, without a test of the noise; a pair that \
fails after but not before counts as slower";

fn figure(v: Option<f64>) -> String {
    v.map_or_else(|| "failed".to_string(), sig4)
}

/// The pair's unit as shown and its figures in it (before, after). The test's name and its
/// unit are the record's text: escaped where they are shown (the NICs' labels already are).
fn shown(c: &SweepComparison, p: &PairChange) -> (String, String, String) {
    let (unit, k) = c
        .shown_units
        .get(&p.test)
        .cloned()
        .unwrap_or_else(|| (p.unit.clone(), 1.0));
    (
        printable(&unit),
        figure(p.before.map(|v| v * k)),
        figure(p.after.map(|v| v * k)),
    )
}

fn change(p: &PairChange) -> String {
    p.change_pct
        .map_or_else(|| "n/a".to_string(), |c| format!("{c:+.1}%"))
}

fn pair_name(nics: &[String; 2]) -> String {
    format!("{} <-> {}", nics[0], nics[1])
}

fn cells(c: &SweepComparison, p: &PairChange) -> Vec<String> {
    let (unit, before, after) = shown(c, p);
    vec![
        printable(&p.test),
        pair_name(&p.nics),
        unit,
        before,
        after,
        change(p),
        p.verdict.as_str().to_string(),
    ]
}

const HEADER: [&str; 7] = [
    "test", "pair", "unit", "before", "after", "change", "verdict",
];

fn thresholds(c: &SweepComparison) -> String {
    format!(
        "{}% bandwidth, {}% latency",
        c.threshold_pct, c.threshold_lat_pct
    )
}

fn summary(c: &SweepComparison) -> String {
    format!(
        "{} slower, {} faster, {} same, {} failed after: {}",
        c.slower,
        c.faster,
        c.same,
        c.failed_after,
        if c.regressed {
            "REGRESSION"
        } else {
            "no regression"
        }
    )
}

/// The lines after the table: the worse pairs, the NICs they share, the lone pairs.
fn findings(c: &SweepComparison, bullet: &str) -> Vec<String> {
    let mut out = Vec::new();
    let worse: Vec<&PairChange> = c.pairs.iter().filter(|p| p.verdict.is_worse()).collect();
    if !worse.is_empty() {
        out.push(format!("Slower beyond the threshold ({}):", thresholds(c)));
        for p in worse {
            let (unit, before, after) = shown(c, p);
            let what = match p.verdict {
                PairVerdict::FailedAfter => "now fails".to_string(),
                _ => format!("{after} {unit} ({})", change(p)),
            };
            out.push(format!(
                "{bullet}{} {}: {before} {unit} -> {what}",
                printable(&p.test),
                pair_name(&p.nics),
            ));
        }
    }
    if !c.nics.is_empty() {
        out.push("NICs common to several slower pairs:".to_string());
        for n in &c.nics {
            out.push(format!(
                "{bullet}{}: slower in {} of {} {} pairs",
                n.nic,
                n.worse,
                n.pairs,
                printable(&n.test)
            ));
        }
    }
    for (file, lone) in [(&c.before, &c.only_in_before), (&c.after, &c.only_in_after)] {
        if !lone.is_empty() {
            out.push(format!("Only in {file} (not compared):"));
            out.extend(lone.iter().map(|p: &LonePair| {
                format!("{bullet}{} {}", printable(&p.test), pair_name(&p.nics))
            }));
        }
    }
    out
}

/// The terminal table.
fn table(c: &SweepComparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Before: {}: {}", c.before, c.before_desc);
    let _ = writeln!(out, "After : {}: {}", c.after, c.after_desc);
    if !c.firmware.is_empty() {
        let _ = writeln!(out, "Firmware changed (information):");
        for f in &c.firmware {
            let _ = writeln!(out, "  {}: {} -> {}", f.nic, f.before, f.after);
        }
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = c.pairs.iter().map(|p| cells(c, p)).collect();
    let right = [false, false, false, true, true, true, false];
    out.push_str(&columns(&HEADER, &rows, &right));
    out.push('\n');
    for line in findings(c, "  ") {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "Summary: {}", summary(c));
    let _ = writeln!(
        out,
        "Method: {SWEEP_METHOD} (thresholds {}).",
        thresholds(c)
    );
    out
}

/// Markdown for a pull request or a ticket.
fn markdown(c: &SweepComparison) -> String {
    let mut out = markdown_title(
        "sweep ",
        ("Before", &c.before, &c.before_desc),
        ("After", &c.after, &c.after_desc),
    );
    for f in &c.firmware {
        let _ = writeln!(
            out,
            "- Firmware changed: {}: `{}` → `{}`",
            md(&f.nic),
            md(&f.before),
            md(&f.after)
        );
    }
    out.push('\n');
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|:--|:--|:--|--:|--:|--:|:--|");
    for p in &c.pairs {
        let mut row = cells(c, p);
        if p.verdict != PairVerdict::Same {
            row[6] = format!("**{}**", row[6]);
        }
        if row[2] == "us" {
            row[2] = "µs".to_string();
        }
        let row: Vec<String> = row.iter().map(|s| md(s)).collect();
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    for (k, line) in findings(c, "- ").iter().enumerate() {
        let sep = if k > 0 && !line.starts_with("- ") {
            "\n"
        } else {
            ""
        };
        let _ = writeln!(out, "{sep}{}", md(line));
    }
    if out.ends_with("|\n\n") {
        out.pop();
    }
    let _ = writeln!(out, "\n**Summary**: {}\n", summary(c));
    let _ = writeln!(
        out,
        "*Method*: {SWEEP_METHOD} (thresholds {}).",
        thresholds(c)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::fleet::{compare_sweeps, Thresholds};
    use super::*;
    use crate::report::sweep::sample_sweep;

    #[test]
    fn the_table_names_the_slower_pairs_and_their_nic() {
        let before = sample_sweep();
        let mut after = sample_sweep();
        for p in &mut after.pairs {
            if p.test == "write-bw" && (p.client == 3 || p.server == 3) {
                p.value = p.value.map(|v| v * 0.5);
            }
        }
        let t = Thresholds { bw: 5.0, lat: 10.0 };
        let c = compare_sweeps(("b.json", &before), ("a.json", &after), t);
        let text = table(&c);
        assert!(
            text.contains("mlx5_1 of node2: slower in 3 of 3 write-bw pairs"),
            "{text}"
        );
        assert!(
            text.contains("-50.0%") && text.contains("REGRESSION"),
            "{text}"
        );
        assert!(text.contains("20.00 GB/s -> 10.00 GB/s (-50.0%)"), "{text}");
        let md = markdown(&c);
        assert!(
            md.contains("| write-bw | mlx5_0 of node1 <-> mlx5_1 of node2 |"),
            "{md}"
        );
        assert!(
            md.contains("**slower**") && md.contains("- mlx5_1 of node2: slower in 3 of 3"),
            "{md}"
        );
        assert!(md.contains("| µs |"), "{md}");
    }

    #[test]
    fn a_slow_fleet_shows_in_the_unit_of_its_sweep_summary() {
        // An emulated fleet: about 0.9 MB/s, which rank 0's summary shows in KB/s.
        let mut before = sample_sweep();
        before.pairs.retain(|p| p.test == "write-bw");
        before.fleet.retain(|f| f.test == "write-bw");
        before.tests = vec!["write-bw".into()];
        for p in &mut before.pairs {
            p.value = p.value.map(|v| v / 50_000.0);
        }
        before.fleet[0].median /= 50_000.0;
        let mut after = before.clone();
        for p in &mut after.pairs {
            p.value = p.value.map(|v| v * 0.5);
        }
        let summary_unit = before.shown_unit("write-bw");
        assert_eq!(summary_unit.0, "KB/s");
        let t = Thresholds { bw: 5.0, lat: 10.0 };
        let c = compare_sweeps(("b.json", &before), ("a.json", &after), t);
        let text = table(&c);
        let row = text
            .lines()
            .find(|l| l.contains("node1 <-> mlx5_1 of node1"));
        assert!(
            row.is_some_and(|r| r.contains(" KB/s ") && r.contains(" 920.0  460.0 ")),
            "{text}"
        );
        assert!(text.contains("920.0 KB/s -> 460.0 KB/s (-50.0%)"), "{text}");
        assert!(!text.contains("GB/s"), "{text}");
        // The JSON keeps the recorded unit.
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["pairs"][0]["unit"], "GB/s");
    }
}
