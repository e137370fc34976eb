//! Rank 0's part of a triage: wait for every rank, run the ring, then each round the split
//! asks for ([`Split`]), every flow of a round at once through the sweep's congestion round
//! ([`measure_together`]); then check the named ranks and end every rank with the verdict.
//! The record is written after every round.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::Result;

use super::checks::node_checks;
use super::figures::collective;
use super::record::{ExpectedRecord, FlowRecord, StepRecord, TriageRecord, TRIAGE_SCHEMA};
use super::split::{max_rounds, Found, Link, Next, Split, Step};
use super::verdict::verdict;
use super::TextExporter;
use crate::cluster::coordinator::{measure_together, new_record};
use crate::cluster::join::{accept_joins, end_sweep, raise_file_limit, Member};
use crate::cluster::launcher::Place;
use crate::cluster::schedule::Pair;
use crate::cluster::spec::SweepSpec;
use crate::cluster::worker::SweepEnd;
use crate::cluster::{fabric, preflight};
use crate::control::Listener;
use crate::files::write_atomically;
use crate::report::{now_rfc3339, Exporter, JsonExporter, RunStatus, SweepRecord, ToolRecord};

/// What rank 0 judges against: the expected link rate and where it came from.
pub(crate) type Expected = Option<ExpectedRecord>;

/// Coordinates the triage on `listener`; returns how it ended (told to every rank).
pub(crate) fn coordinate(
    spec: &SweepSpec,
    place: &Place,
    listener: &Listener,
    expected: &Expected,
) -> Result<SweepEnd> {
    raise_file_limit(place.size);
    let (mut members, last) = accept_joins(spec, place.size, listener)?;
    let joined = members.iter().filter(|m| m.ch.is_some()).count();
    // Progress to stderr: stdout is the report, its verdict the first line.
    eprintln!(
        "rdmabench triage: {joined} of {} ranks joined (the last after {:.1} s)",
        place.size,
        last.as_secs_f64()
    );
    let mut sweep = new_record(spec, place, &members)?;
    if let Some(f) = &spec.fabric {
        fabric::place_ranks(&mut sweep, f);
    }
    sweep.preflight = preflight::outliers(&sweep.ranks);
    let mut rec = new_triage(spec, place, &sweep, expected.clone());
    eprintln!("{}", plan_line(spec, &rec));
    let ran = run(spec, (&mut members, &mut sweep), &mut rec);
    // The ranks as they ended: one lost on the way says so.
    rec.ranks.clone_from(&sweep.ranks);
    let end = match ran {
        Ok(found) => {
            let checks = node_checks(&rec, &sweep, &found);
            rec.verdict = Some(verdict(&rec, &found, checks));
            rec.status = RunStatus::Complete;
            print!("{}", String::from_utf8_lossy(&TextExporter.render(&rec)?));
            let v = rec.verdict.as_ref().map(|v| (v.exit, v.line.clone()));
            let (exit, line) = v.unwrap_or((1, String::new()));
            SweepEnd {
                exit: exit as u8,
                reason: line,
            }
        }
        Err(e) => {
            rec.status = RunStatus::Failed;
            rec.error = Some(format!("{e:#}"));
            SweepEnd {
                exit: 1,
                reason: format!("{e:#}"),
            }
        }
    };
    write(spec.json.as_deref(), &rec)?;
    for ch in members.iter_mut().filter_map(|m| m.ch.as_mut()) {
        end_sweep(ch, end.exit, &end.reason);
    }
    Ok(end)
}

/// The record before the first round.
fn new_triage(
    spec: &SweepSpec,
    place: &Place,
    sweep: &SweepRecord,
    expected: Expected,
) -> TriageRecord {
    TriageRecord {
        schema: TRIAGE_SCHEMA.into(),
        tool: ToolRecord::current(),
        started_at: now_rfc3339(),
        launcher: place.launcher.name().into(),
        test: spec.tests[0].kind.to_string(),
        min_pct: spec.min_pct,
        expected,
        max_rounds: max_rounds(place.size) as u32,
        ranks: sweep.ranks.clone(),
        collective: None,
        steps: Vec::new(),
        verdict: None,
        status: RunStatus::Incomplete,
        error: None,
    }
}

/// The plan, stated before the first round: "rdmabench triage: 4 ranks under Open MPI
/// (mpirun): the ring, then at most 3 rounds of split (4 in all, about 16 s); write-bw (64
/// KiB, 2 s) at once on every flow; expected: ...".
pub(crate) fn plan_line(spec: &SweepSpec, rec: &TriageRecord) -> String {
    let t = &spec.tests[0];
    format!(
        "rdmabench triage: {} ranks under {}: the ring, then at most {} rounds of split ({} in \
         all, about {:.0} s); {} on every flow of a round at once; expected: {}",
        rec.ranks.len(),
        rec.launcher,
        rec.max_rounds - 1,
        rec.max_rounds,
        f64::from(rec.max_rounds) * t.estimate_secs(),
        t.describe(),
        super::expected_text(&rec.expected),
    )
}

/// The ring, then the split's rounds until it finds something.
fn run(
    spec: &SweepSpec,
    (members, sweep): (&mut [Member], &mut SweepRecord),
    rec: &mut TriageRecord,
) -> Result<Found> {
    let ranks: Vec<u32> = (0..members.len() as u32).collect();
    let leaf_of: BTreeMap<u32, String> = sweep
        .ranks
        .iter()
        .filter_map(|r| r.leaf.clone().map(|l| (r.rank, l)))
        .collect();
    let reference = rec.expected.as_ref().map(|e| e.busbw_gbps);
    let (mut split, mut step) = Split::start(ranks, reference, spec.min_pct, leaf_of);
    loop {
        let round = rec.steps.len() as u32;
        let started = Instant::now();
        let (links, flows) = run_step(spec, (members, sweep), round, &step)?;
        if round == 0 {
            // Without --expect, the ceilings are known once the ring's records are in.
            if rec.expected.is_none() {
                rec.expected = ceiling_expected(sweep, round);
            }
            let expected = rec.expected.as_ref().map(|e| e.busbw_gbps);
            split.expect(expected);
            rec.collective = Some(collective(&links, expected));
        }
        let next = split.next(&links);
        record_step(rec, (round, &step), (flows, &split), started);
        write(spec.json.as_deref(), rec)?;
        match next {
            Next::Run(s) => step = s,
            Next::Done(found) => return Ok(found),
        }
    }
}

/// The expected link rate from the ceilings of the ring's flows: the slowest, when every
/// flow's client ran on a NIC with a PCIe link (a software NIC's wire rate is no ceiling).
fn ceiling_expected(sweep: &SweepRecord, round: u32) -> Option<ExpectedRecord> {
    let flows: Vec<_> = sweep
        .groups
        .iter()
        .filter(|g| g.round == round)
        .flat_map(|g| &g.flows)
        .collect();
    let mut least = f64::INFINITY;
    for f in &flows {
        let c = &f.record.as_ref()?.ceilings;
        c.pcie_gbps?;
        least = least.min(c.limit_gbps?);
    }
    (!flows.is_empty() && least.is_finite()).then(|| ExpectedRecord {
        busbw_gbps: least,
        from: "ceilings (the slowest rank's)".into(),
    })
}

/// Runs one step's flows at once; returns its links and its flows as the record keeps them.
fn run_step(
    spec: &SweepSpec,
    (members, sweep): (&mut [Member], &mut SweepRecord),
    round: u32,
    step: &Step,
) -> Result<(Vec<Link>, Vec<FlowRecord>)> {
    let pairs: Vec<Pair> = step
        .flows()
        .into_iter()
        .map(|(from, to)| Pair {
            a: to as usize,
            b: from as usize,
        })
        .collect();
    let measured = measure_together(spec, members, sweep, (round, 0), &pairs)?;
    let by_pair: std::collections::HashMap<Pair, usize> = measured
        .iter()
        .enumerate()
        .map(|(i, m)| (m.pair, i))
        .collect();
    let mut links = Vec::with_capacity(pairs.len());
    let mut flows = Vec::with_capacity(pairs.len());
    for p in &pairs {
        let m = by_pair.get(p).map(|&i| &measured[i]);
        let gbps = m.and_then(|m| m.flow.value);
        let (from, to) = (p.b as u32, p.a as u32);
        links.push(Link { from, to, gbps });
        flows.push(FlowRecord {
            from,
            to,
            gbps,
            slow: false,
            error: match m {
                Some(m) => m.flow.error.clone(),
                None => Some("a rank of this flow was lost".into()),
            },
            from_counters: m
                .and_then(|m| climbed(&m.flow.client_counters, m.flow.record.as_deref())),
            to_counters: m.and_then(|m| climbed(&m.flow.server_counters, m.server.as_deref())),
        });
    }
    // The sweep record keeps the flows too (their run records: the ceilings, the NUMA facts).
    let (flows_kept, servers): (Vec<_>, Vec<_>) =
        measured.into_iter().map(|m| (m.flow, m.server)).unzip();
    let test = spec.tests[0].kind.to_string();
    let group = crate::cluster::congestion::group_record(round, &test, flows_kept, &servers);
    sweep.groups.push(group);
    Ok((links, flows))
}

/// A side's counters that climbed during a flow, when they were read: some climbed, or its
/// run record says its port's counters were read; `None` when neither shows it.
fn climbed(
    alarming: &BTreeMap<String, u64>,
    record: Option<&crate::report::RunRecord>,
) -> Option<BTreeMap<String, u64>> {
    let read = !alarming.is_empty() || record.is_some_and(|r| r.counters.is_some());
    read.then(|| alarming.clone())
}

/// Adds a round to the record, each flow judged by the split's bar, and prints its line.
fn record_step(
    rec: &mut TriageRecord,
    (round, step): (u32, &Step),
    (mut flows, split): (Vec<FlowRecord>, &Split),
    started: Instant,
) {
    for f in &mut flows {
        f.slow = split.slow(&Link {
            from: f.from,
            to: f.to,
            gbps: f.gbps,
        });
    }
    let slow = flows.iter().filter(|f| f.slow).count();
    eprintln!(
        "round {}: {} ({} flow(s) at once): {slow} slow (below {})",
        round + 1,
        step.kind.words(),
        flows.len(),
        super::rate(split.bar()),
    );
    rec.steps.push(StepRecord {
        round,
        kind: step.kind,
        groups: step.groups.clone(),
        flows,
        bar_gbps: split.bar(),
        seconds: started.elapsed().as_secs_f64(),
    });
}

/// The record to `--json`, when given.
fn write(json: Option<&Path>, rec: &TriageRecord) -> Result<()> {
    if let Some(path) = json {
        write_atomically(path, &JsonExporter.render(rec)?)?;
    }
    Ok(())
}
