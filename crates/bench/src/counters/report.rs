//! A reading as a person reads it (the rates table, the findings with what they mean and
//! what to touch first, what was checked: [`TextExporter`]) and as a record (`--json`,
//! `rdmabench.counters/1`: the JSON exporter's of a [`CountersReport`]).

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::finding::{grouped, Finding, Severity};
use super::parse::Source;
use super::rates::{Change, Class, Unit};
use super::Reading;
use crate::report::Exporter;
use crate::text::{printable, printable_within};

/// The record's `schema` value.
pub(crate) const COUNTERS_SCHEMA: &str = "rdmabench.counters/1";

/// The widest line the text wraps to.
const WIDTH: usize = 100;

/// The widest counter name the table makes room for (longer ones push their row out).
const NAME_COLUMN: usize = 40;

/// How many counters that went backwards are named (the rest are counted).
const BACKWARDS_SHOWN: usize = 5;

/// How the interval between the dumps was known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum IntervalFrom {
    /// `--interval`.
    Option,
    /// The files' modification times.
    ModificationTimes,
}

impl IntervalFrom {
    fn words(self) -> &'static str {
        match self {
            IntervalFrom::Option => "--interval",
            IntervalFrom::ModificationTimes => "from the files' modification times",
        }
    }
}

/// One counter that changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct CounterRate {
    /// `ethtool`, `counters` or `hw_counters`.
    pub source: Source,
    /// Its name.
    pub name: String,
    /// Its value in each dump.
    pub before: u64,
    pub after: u64,
    /// Its rise per second, in its unit (bytes for data counted in 4-byte words).
    pub per_second: f64,
    /// What it measures.
    pub class: Class,
    /// Its unit.
    pub unit: Unit,
    /// One queue's or channel's (the port's counters add them up).
    pub per_queue: bool,
}

/// A counter lower after than before: a reset or a wrap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Backwards {
    pub source: Source,
    pub name: String,
    pub before: u64,
    pub after: u64,
}

/// `rdmabench counters --json`'s record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct CountersReport {
    /// Always `rdmabench.counters/1`.
    pub schema: String,
    /// rdmabench's version.
    pub version: String,
    /// The dumps' paths, as given.
    pub before: String,
    pub after: String,
    /// The RDMA port the dumps' `counters/` lines name, when they do.
    pub port: Option<String>,
    /// Seconds between the dumps, and how that was known.
    pub seconds: f64,
    pub interval_from: IntervalFrom,
    /// The lossless priority, when known, and how it was known (or why not).
    pub lossless_priority: Option<u8>,
    pub lossless_from: String,
    /// Every counter that changed, the most telling first.
    pub counters: Vec<CounterRate>,
    /// Counters that went backwards.
    pub backwards: Vec<Backwards>,
    /// Findings, then notes.
    pub findings: Vec<Finding>,
    /// What the dumps let be checked, and what they had no counters for.
    pub checked: Vec<String>,
    pub not_checked: Vec<String>,
    /// 0 without a finding, 3 with one.
    pub exit_code: u8,
}

impl CountersReport {
    /// The record of `reading`, made from the dumps at `paths`.
    pub(crate) fn new(reading: &Reading, paths: [String; 2], from: IntervalFrom) -> CountersReport {
        let r = &reading.rates;
        let [before, after] = paths;
        CountersReport {
            schema: COUNTERS_SCHEMA.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            before,
            after,
            port: reading.port.clone(),
            seconds: r.secs,
            interval_from: from,
            lossless_priority: reading.lossless.prio,
            lossless_from: reading.lossless.why.clone(),
            counters: r
                .changed
                .iter()
                .map(|c| CounterRate {
                    source: c.key.0,
                    name: c.key.1.clone(),
                    before: c.before,
                    after: c.after,
                    per_second: c.per_second(r.secs),
                    class: c.class,
                    unit: c.unit,
                    per_queue: c.per_queue,
                })
                .collect(),
            backwards: r
                .backwards
                .iter()
                .map(|((source, name), before, after)| Backwards {
                    source: *source,
                    name: name.clone(),
                    before: *before,
                    after: *after,
                })
                .collect(),
            findings: reading.findings.clone(),
            checked: reading.checked.clone(),
            not_checked: reading.not_checked.clone(),
            exit_code: if reading.found() > 0 { 3 } else { 0 },
        }
    }
}

/// What the text shows: a reading, the dumps' paths as given, how the interval between them
/// was known and what each dump was read as (`Dump::describe`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadingText<'a> {
    /// The two dumps compared and judged.
    pub reading: &'a Reading,
    /// BEFORE's and AFTER's paths, as given.
    pub paths: [&'a str; 2],
    /// How the interval was known.
    pub from: IntervalFrom,
    /// What each dump was read as.
    pub read: [&'a str; 2],
}

/// `counters`' output on stdout: the text of a [`ReadingText`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<ReadingText<'_>> for TextExporter {
    fn render(&self, t: &ReadingText<'_>) -> Result<Vec<u8>> {
        Ok(text(t.reading, t.paths, t.from, t.read).into_bytes())
    }
}

/// The text of `reading`: the heading, the table, the findings, what was checked.
pub(crate) fn text(
    reading: &Reading,
    paths: [&str; 2],
    from: IntervalFrom,
    read: [&str; 2],
) -> String {
    let r = &reading.rates;
    let mut out = format!(
        "before: {}\nafter:  {} ({:.1} s later: {})\n",
        printable_within(paths[0], 200),
        printable_within(paths[1], 200),
        r.secs,
        from.words()
    );
    let _ = writeln!(out, "read: {}", read[1]);
    if read[0] != read[1] {
        let _ = writeln!(out, "  (before: {})", read[0]);
    }
    let lossless = match reading.lossless.prio {
        Some(p) => format!("{p} ({})", reading.lossless.why),
        None => reading.lossless.why.clone(),
    };
    let _ = writeln!(out, "lossless priority: {lossless}\n");
    table(&mut out, reading);
    for f in reading.findings.iter() {
        finding_lines(&mut out, f);
    }
    let checked = if reading.checked.is_empty() {
        "nothing (no counter of any check in both dumps)".to_string()
    } else {
        reading.checked.join(", ")
    };
    let _ = writeln!(out, "\nchecked: {checked}");
    if !reading.not_checked.is_empty() {
        let _ = writeln!(
            out,
            "not checked (their counters are missing from a dump or went backwards): {}",
            reading.not_checked.join(", ")
        );
    }
    out.push_str(&verdict(reading));
    out
}

/// The last line: how many findings, or none over what was checked.
fn verdict(reading: &Reading) -> String {
    match reading.found() {
        0 if reading.checked.is_empty() => "no finding, and nothing checked\n".into(),
        0 => format!("no finding over {:.1} s\n", reading.rates.secs),
        1 => "1 finding\n".into(),
        n => format!("{n} findings\n"),
    }
}

/// The changed counters, per-queue ones counted in one line, then those that went backwards.
fn table(out: &mut String, reading: &Reading) {
    let r = &reading.rates;
    let (shown, rest): (Vec<_>, Vec<_>) = r.changed.iter().partition(|c| in_table(c, r.secs));
    let name_of = |c: &Change| printable(&c.key.0.label(&c.key.1));
    let width = shown
        .iter()
        .map(|c| name_of(c).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(7, NAME_COLUMN);
    let change_width = shown
        .iter()
        .map(|c| grouped(c.rise()).len() + 1)
        .max()
        .unwrap_or(0)
        .max(6);
    if shown.is_empty() {
        out.push_str("no counter changed");
    } else {
        let _ = write!(
            out,
            "class   {:<width$}  {:>change_width$}  rate",
            "counter", "change"
        );
    }
    for c in &shown {
        let _ = write!(
            out,
            "\n{:<7} {:<width$}  {:>change_width$}  {}",
            c.class.word(),
            name_of(c),
            format!("+{}", grouped(c.rise())),
            c.shown_rate(r.secs)
        );
    }
    out.push('\n');
    if !rest.is_empty() {
        let _ = writeln!(
            out,
            "and {} more that changed (packets, per-queue, under 10 Mb/s): --json lists each",
            rest.len()
        );
    }
    if !r.backwards.is_empty() {
        out.push_str("went backwards between the dumps (reset or wrapped: no rate):\n");
    }
    for ((source, name), before, after) in r.backwards.iter().take(BACKWARDS_SHOWN) {
        let _ = writeln!(
            out,
            "  {}  {} to {}",
            printable(&source.label(name)),
            grouped(*before),
            grouped(*after)
        );
    }
    if r.backwards.len() > BACKWARDS_SHOWN {
        let _ = writeln!(out, "  and {} more", r.backwards.len() - BACKWARDS_SHOWN);
    }
}

/// Whether the table shows `c`: every counter that tells of a fault or congestion; of the
/// traffic, the byte counters (in Gb/s) at 10 Mb/s or more; no queue's own.
fn in_table(c: &Change, secs: f64) -> bool {
    match c.class {
        _ if c.per_queue => false,
        Class::Traffic | Class::Other => c.unit == Unit::Bytes && c.per_second(secs) >= 10e6 / 8.0,
        _ => true,
    }
}

/// A finding's or a note's lines: the code and what, then what it means and what first.
fn finding_lines(out: &mut String, f: &Finding) {
    let head = match f.severity {
        Severity::Finding => format!("{}: ", f.code),
        Severity::Note => format!("note {}: ", f.code),
    };
    out.push('\n');
    wrap(out, &head, "  ", &f.what);
    wrap(out, "  means: ", "         ", &f.means);
    if !f.first.is_empty() {
        wrap(out, "  first: ", "         ", &f.first);
    }
}

/// `text` after `head`, wrapped at [`WIDTH`] with `indent` before each further line.
fn wrap(out: &mut String, head: &str, indent: &str, text: &str) {
    let mut line = head.to_string();
    let mut empty = true;
    for word in printable(text).split(' ').filter(|w| !w.is_empty()) {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = indent.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_wraps_under_its_head() {
        let mut out = String::new();
        let text = "word ".repeat(40);
        wrap(&mut out, "  means: ", "         ", &text);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines.len() > 1 && lines.iter().all(|l| l.len() <= WIDTH),
            "{out}"
        );
        assert!(lines[0].starts_with("  means: word") && lines[1].starts_with("         word"));
        let mut out = String::new();
        wrap(&mut out, "X: ", "  ", "a\x1b[2J b");
        assert_eq!(out, "X: a\\u{1b}[2J b\n");
    }
}
