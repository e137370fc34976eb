//! `rdmabench counters BEFORE AFTER`: two dumps of a NIC's counters (`ethtool -S DEV`, and
//! the RDMA port's `counters/` and `hw_counters/` as `grep -r . DIR` prints them) read the way
//! an RDMA engineer reads them: each counter that changed, with its rate, the most telling
//! first; then what it means for a training job and what to touch first (pause received or
//! sent, drops, pause storms, traffic outside the lossless priority, ECN/DCQCN, the link).
//! Exit 0 without a finding, 3 with one.
//!
//! `parse.rs` reads a dump into a [`Dump`], `rates.rs` compares two, `lossless.rs` knows the
//! lossless priority and its pause, `findings.rs` and `ecn.rs` judge, `report.rs` writes the
//! text and the record. [`read`] is the whole reading, for a caller that took its own
//! samples.

pub(crate) mod ecn;
pub(crate) mod finding;
pub(crate) mod findings;
pub(crate) mod lossless;
pub(crate) mod parse;
pub(crate) mod rates;
pub(crate) mod report;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;

use crate::exit::CounterFindings;
use crate::files::{check_input, check_writable, read_bounded, write_atomically};
use crate::plan::PlanError;
use crate::report::{Exporter, JsonExporter};
use finding::{Finding, Severity};
use lossless::Lossless;
pub(crate) use parse::{Dump, Source};
use rates::Rates;
use report::{CountersReport, IntervalFrom, ReadingText, TextExporter};

/// What `counters --help` ends with: how to take the dumps, and the exit codes.
pub(crate) const AFTER_HELP: &str = "Take each dump while the job runs, some seconds apart \
    (P=/sys/class/infiniband/mlx5_0/ports/1):\n  \
    { ethtool -S eth0; grep -r . $P/counters $P/hw_counters; } > before.txt\n\n\
    Exit codes: 0 no finding, 1 a dump cannot be read, 2 a bad value or a dump that is not \
    one NIC's, 3 a finding (its count on stderr too).";

/// The most bytes read of each dump (an mlx5 `ethtool -S` with 256 queues, some 70 counters
/// each, is well under a megabyte).
pub(crate) const MAX_DUMP_BYTES: u64 = 16 << 20;

/// The longest interval between two dumps: a week.
const MAX_INTERVAL: f64 = 7.0 * 86_400.0;

/// The options of `rdmabench counters`.
#[derive(Debug, Args)]
pub struct CountersArgs {
    /// The first dump: `ethtool -S DEV` and/or `grep -r . PORT/counters PORT/hw_counters`
    ///
    /// The first dump: what `ethtool -S DEV` prints, what `grep -r .
    /// /sys/class/infiniband/DEV/ports/1/counters /sys/class/infiniband/DEV/ports/1/hw_counters`
    /// prints, or both in one file (one NIC's)
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// The second dump, taken the same way after some seconds of the job's traffic
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// Seconds between the dumps [default: the files' modification times]
    #[arg(long, value_name = "SECS", value_parser = parse_interval)]
    pub interval: Option<f64>,

    /// The lossless (PFC) priority, 0-7 [default: the one with pause activity]
    ///
    /// The lossless (PFC) priority, 0-7 [default: the one with pause activity, else the only
    /// one with PFC counters]
    #[arg(long, value_name = "N", value_parser = parse_priority)]
    pub lossless_prio: Option<u8>,

    /// Write the reading as JSON to FILE (rdmabench.counters/1)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn parse_interval(text: &str) -> Result<f64, String> {
    match crate::units::parse_secs(text) {
        Ok(v) if v > 0.0 && v <= MAX_INTERVAL => Ok(v),
        _ => Err(format!(
            "'{text}' is not an interval: give the seconds between the dumps, more than 0 and \
             at most {MAX_INTERVAL} (a week), e.g. 10 or 500ms"
        )),
    }
}

fn parse_priority(text: &str) -> Result<u8, String> {
    match text.trim().parse::<u8>() {
        Ok(p) if p <= 7 => Ok(p),
        _ => Err(format!("'{text}' is not a priority: give 0 to 7")),
    }
}

/// Two dumps read: the rates, the lossless priority, the findings and notes, and which
/// checks the dumps had counters for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub rates: Rates,
    pub lossless: Lossless,
    pub findings: Vec<Finding>,
    /// The checks the dumps had counters for ("pause on priority 3", "link errors", ...).
    pub checked: Vec<String>,
    /// Those they had none for.
    pub not_checked: Vec<String>,
    /// The RDMA port the dumps name, when they do.
    pub port: Option<String>,
}

impl Reading {
    /// How many findings (notes left out).
    pub(crate) fn found(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Finding)
            .count()
    }
}

/// Reads `before` and `after`, taken `secs` apart (more than 0), with the lossless priority
/// `lossless` if known.
pub(crate) fn read(before: &Dump, after: &Dump, secs: f64, lossless: Option<u8>) -> Reading {
    let rates = rates::compare(before, after, secs);
    let lossless = Lossless::infer(&rates, lossless);
    let findings = findings::judge(&rates, &lossless);
    let (checked, not_checked) = coverage(&rates, &lossless);
    Reading {
        rates,
        lossless,
        findings,
        checked,
        not_checked,
        port: after.port.clone().or_else(|| before.port.clone()),
    }
}

/// Which checks the dumps had counters for, and which they had none for.
fn coverage(rates: &Rates, lossless: &Lossless) -> (Vec<String>, Vec<String>) {
    let any = |names: &[(Source, &str)]| names.iter().any(|(s, n)| rates.has(*s, n));
    let pause = if lossless.pause(rates, "rx").is_some() || lossless.pause(rates, "tx").is_some() {
        Some(format!("pause on {}", lossless.subject()))
    } else {
        None
    };
    let checks = [
        (
            pause.is_some(),
            pause.unwrap_or_else(|| format!("pause on {}", lossless.subject())),
        ),
        (
            any(&[
                (Source::Ethtool, "rx_discards_phy"),
                (Source::Ethtool, "rx_out_of_buffer"),
                (Source::HwCounters, "out_of_buffer"),
            ]),
            "drops".into(),
        ),
        (
            any(&[(Source::Ethtool, "tx_pause_storm_warning_events")]),
            "pause storms".into(),
        ),
        (
            any(&[
                (Source::Ethtool, "rx_crc_errors_phy"),
                (Source::Ethtool, "rx_symbol_err_phy"),
                (Source::Counters, "symbol_error"),
            ]),
            "link errors".into(),
        ),
        (
            any(&[
                (Source::HwCounters, "np_cnp_sent"),
                (Source::HwCounters, "rp_cnp_handled"),
            ]),
            "ECN/DCQCN".into(),
        ),
        (
            any(&[
                (Source::HwCounters, "packet_seq_err"),
                (Source::HwCounters, "local_ack_timeout_err"),
            ]),
            "retransmissions".into(),
        ),
    ];
    let (yes, no): (Vec<_>, Vec<_>) = checks.into_iter().partition(|(has, _)| *has);
    (
        yes.into_iter().map(|(_, n)| n).collect(),
        no.into_iter().map(|(_, n)| n).collect(),
    )
}

/// Runs `rdmabench counters`: the reading printed, the record written (each by its
/// exporter); exit 3 on a finding.
pub fn run(args: &CountersArgs) -> Result<()> {
    let expected = "what `ethtool -S DEV` or `grep -r . /sys/class/infiniband/DEV/ports/1/\
                    counters /sys/class/infiniband/DEV/ports/1/hw_counters` printed, in a file";
    check_input("BEFORE", &args.before, expected)?;
    check_input("AFTER", &args.after, expected)?;
    if let Some(json) = &args.json {
        check_writable("--json", json)?;
    }
    let before = load("BEFORE", &args.before)?;
    let after = load("AFTER", &args.after)?;
    if !before
        .counters
        .keys()
        .any(|k| after.counters.contains_key(k))
    {
        bail!(
            "BEFORE '{}' and AFTER '{}' have no counter in common: give two dumps of the same \
             NIC, taken the same way",
            shown(&args.before),
            shown(&args.after)
        );
    }
    let (secs, from) = match args.interval {
        Some(secs) => (secs, IntervalFrom::Option),
        None => (
            interval_of(&args.before, &args.after)?,
            IntervalFrom::ModificationTimes,
        ),
    };
    let reading = read(&before, &after, secs, args.lossless_prio);
    let paths = [shown(&args.before), shown(&args.after)];
    let described = [before.describe(), after.describe()];
    let text = TextExporter.render(&ReadingText {
        reading: &reading,
        paths: [&paths[0], &paths[1]],
        from,
        read: [&described[0], &described[1]],
    })?;
    print!("{}", String::from_utf8_lossy(&text));
    if let Some(json) = &args.json {
        let record = CountersReport::new(&reading, paths, from);
        write_atomically(json, &JsonExporter.render(&record)?)?;
    }
    match reading.found() {
        0 => Ok(()),
        n => Err(CounterFindings(n).into()),
    }
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// One dump, read within [`MAX_DUMP_BYTES`] and parsed; `what` names it ("BEFORE").
fn load(what: &str, path: &Path) -> Result<Dump> {
    let bytes = read_bounded(what, path, MAX_DUMP_BYTES)?;
    let text = String::from_utf8_lossy(&bytes);
    let dump = parse::parse(&text).map_err(|e| {
        PlanError::Value(format!(
            "{what} '{}', {}: give one NIC's dump per file",
            shown(path),
            e.0
        ))
    })?;
    if dump.counters.is_empty() {
        bail!(
            "{what} '{}' holds no counter ({} lines read): give what `ethtool -S DEV` prints \
             (its lines after 'NIC statistics:'), or `grep -r . PORT/counters PORT/hw_counters` \
             of an RDMA port",
            shown(path),
            dump.skipped
        );
    }
    Ok(dump)
}

/// The seconds from `before`'s modification time to `after`'s.
fn interval_of(before: &Path, after: &Path) -> Result<f64, PlanError> {
    let time = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let secs = match (time(before), time(after)) {
        (Some(b), Some(a)) => a.duration_since(b).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        _ => 0.0,
    };
    if secs <= 0.0 || secs > MAX_INTERVAL {
        return Err(PlanError::Value(format!(
            "the files' modification times give no interval (AFTER '{}' is not newer than \
             BEFORE '{}', or by more than a week): give --interval SECS",
            shown(after),
            shown(before)
        )));
    }
    Ok(secs)
}
