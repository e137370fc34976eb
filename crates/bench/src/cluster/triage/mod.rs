//! `rdmabench triage`: the slow all-reduce's isolation order in one command. Every rank of a
//! launch (srun, mpirun, torchrun: the same launch, token and record conventions as
//! `cluster`) serves and measures; rank 0 leads:
//!
//! 1. the collective in isolation: the ring all-reduce's data movement, every rank writing
//!    into the next at once, reported as nccl-tests does (algbw, busbw) with each rank's time
//!    sending against waiting for its predecessor (`figures.rs`);
//! 2. split until it shows (`split.rs`): halves, pairs across them, suspects with known-good
//!    partners, bounded in rounds (logarithmic in the ranks) and stated before it starts;
//! 3. the node checks on the ranks it named (`checks.rs`): counters during the load, the
//!    preflight's topology facts, GPUDirect off;
//! 4. one verdict, first line first (`verdict.rs`), exit 0 healthy, 3 a finding, 1 an
//!    error, 2 usage; the record (`record.rs`, schema "rdmabench.triage/1").
//!
//! `drive.rs` is rank 0's loop; each round is a congestion round of the sweep's coordinator,
//! so joins, deadlines, lost ranks and the workers are the sweep's own.

mod args;
mod checks;
mod drive;
mod figures;
pub(crate) mod record;
#[cfg(test)]
pub(crate) mod samples;
mod split;
mod verdict;

pub use self::args::TriageArgs;

use std::fmt::Write as _;

use anyhow::{anyhow, Result};

use self::record::{expected_busbw, ExpectedRecord, TriageRecord};
use super::launcher::{Coordinator, Place};
use super::spec::{SweepSpec, SETUP_SECS};
use super::{take_part_led, Verbs};
use crate::control::Listener;
use crate::exit::SweepFindings;
use crate::files::check_writable;
use crate::plan::PlanError;
use crate::report::Exporter;
use crate::units::{format_size, four_digits as number};

/// Runs this rank's part of the triage; rank 0 also leads it.
pub fn run(args: &TriageArgs) -> Result<()> {
    let mut spec = args.resolve()?;
    let (place, coordinator) = super::locate(&args.launch)?;
    if args.device().is_some_and(|d| d.contains(',')) {
        return Err(PlanError::Value(
            "-d lists several devices: triage runs one rank per NIC; start one rank per rail \
             with its own -d"
                .into(),
        )
        .into());
    }
    for t in &mut spec.tests {
        t.opts.side.device = args.device().map(str::to_string);
    }
    // Rank 0 judges: only it reads --expect (the other ranks need not have the file).
    let expected = match (&args.expect, place.rank == 0 || args.launch.dry_run) {
        (Some(path), true) => Some(ExpectedRecord {
            busbw_gbps: expected_busbw(path)?,
            from: format!("--expect {}", path.display()),
        }),
        _ => None,
    };
    if args.launch.dry_run {
        print!("{}", dry_run(&spec, &place, &coordinator, &expected));
        return Ok(());
    }
    if let (0, Some(path)) = (place.rank, &spec.json) {
        check_writable("--json", path)?;
    }
    let verbs = Verbs::open(&spec)?;
    let at = (args.test.bind.as_str(), args.test.port.unwrap_or(0));
    let lead = |listener: &Listener| drive::coordinate(&spec, &place, listener, &expected);
    let end = take_part_led(&spec, (&place, &coordinator), at, &verbs, &lead)?;
    match end.exit {
        0 => Ok(()),
        2 => Err(PlanError::Refused(end.reason).into()),
        3 => Err(SweepFindings(end.reason).into()),
        _ => Err(anyhow!("the triage failed: {}", end.reason)),
    }
}

/// A rate as a person reads it: "14.38 MB/s", "11.95 GB/s".
pub(crate) fn rate(gbps: f64) -> String {
    let (unit, k) = crate::units::display_unit("GB/s", Some(gbps));
    format!("{} {unit}", number(gbps * k))
}

/// What triage judges against, as its plan says it before the first round.
fn expected_text(expected: &Option<ExpectedRecord>) -> String {
    match expected {
        Some(e) => format!("{} busbw from {}", rate(e.busbw_gbps), e.from),
        None => "the slowest rank's ceiling on physical NICs, else the ring's median link".into(),
    }
}

/// `--dry-run`: this rank's view and the plan's bound, contacting nobody.
fn dry_run(
    spec: &SweepSpec,
    place: &Place,
    c: &Coordinator,
    expected: &Option<ExpectedRecord>,
) -> String {
    let t = &spec.tests[0];
    let rounds = split::max_rounds(place.size);
    let round_secs = t.loop_secs() + SETUP_SECS;
    let expected = expected_text(expected);
    let mut out = String::new();
    let _ = write!(
        out,
        "launcher     {}\nrank         {} of {} (local rank {})\ndevice       {}\n\
         coordinator  {}:{} (from {})\nplan         the ring, then at most {} rounds of split: \
         halves, pairs across, known-good partners ({rounds} in all)\nflows        {}, \
         every flow of a round at once\nexpected     {expected}\ncost         {rounds} rounds x \
         ({:.2} s + {SETUP_SECS:.1} s of set-up) = at most about {:.0} s\n",
        place.launcher.name(),
        place.rank,
        place.size,
        place.local_rank,
        t.opts
            .side
            .device
            .as_deref()
            .unwrap_or("the first with an ACTIVE port"),
        c.host,
        c.port,
        c.source,
        rounds - 1,
        t.describe(),
        t.loop_secs(),
        rounds as f64 * round_secs
    );
    out
}

/// What rank 0 prints at the end: the verdict first, then the collective, each round and the
/// checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<TriageRecord> for TextExporter {
    fn render(&self, rec: &TriageRecord) -> Result<Vec<u8>> {
        Ok(render(rec).into_bytes())
    }
}

fn render(rec: &TriageRecord) -> String {
    let mut out = String::new();
    if let Some(v) = &rec.verdict {
        let _ = writeln!(out, "{}", v.line);
    }
    if let Some(c) = &rec.collective {
        let figures = match (c.busbw_gbps, c.algbw_gbps, c.seconds) {
            (Some(b), Some(a), Some(t)) => format!(
                "busbw {}, algbw {}: {} in {} s",
                rate(b),
                rate(a),
                format_size(c.size_bytes),
                number(t)
            ),
            _ => "no figures (a flow failed)".into(),
        };
        let _ = writeln!(out, "collective   ring of {} ranks, {figures}", c.ranks);
        for r in &c.per_rank {
            let secs = |v: Option<f64>| v.map_or_else(|| "-".into(), number);
            let link = r.link_gbps.map_or_else(|| "failed".into(), rate);
            let _ = writeln!(
                out,
                "  rank {:>5} -> {:<5}  link {link:>12}  sending {:>8} s  waiting {:>8} s",
                r.rank,
                r.next,
                secs(r.send_seconds),
                secs(r.wait_seconds)
            );
        }
    }
    for s in &rec.steps {
        let slow: Vec<String> = s
            .flows
            .iter()
            .filter(|f| f.slow)
            .map(|f| {
                let g = f.gbps.map_or_else(|| "failed".into(), rate);
                format!("{}->{} {g}", f.from, f.to)
            })
            .collect();
        let slow = if slow.is_empty() {
            "none".into()
        } else {
            slow.join(", ")
        };
        let _ = writeln!(
            out,
            "step {}       {} ({} flows, {:.1} s): slow: {slow}",
            s.round + 1,
            s.kind.words(),
            s.flows.len(),
            s.seconds
        );
    }
    for line in rec.verdict.iter().flat_map(|v| &v.checks) {
        let _ = writeln!(out, "check        {line}");
    }
    out
}
