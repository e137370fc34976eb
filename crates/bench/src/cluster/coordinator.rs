//! Rank 0's part of a sweep: wait for every rank to join, run the schedule round by round
//! (every rank hears from it each round: serve, measure or rest, and answers), re-run the
//! suspects, and end the sweep on every rank with one exit status. The record is written
//! after every round, so a sweep that fails keeps every pair measured before.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::join::{accept_joins, end_sweep, raise_file_limit, Member};
use super::launcher::Place;
use super::median::label;
use super::schedule::{self, Pair};
use super::spec::{Pattern, SweepSpec, SweepTest};
use super::summary::{self, SummaryExporter};
use super::verdict::{self, alarming, judge, reruns};
use super::worker::SweepEnd;
use super::{congestion, fabric, locate, preflight};
use crate::control::{printable, FlowDone, FlowFrom, FlowTo, Listener, Message, Work};
use crate::files::write_atomically;
use crate::plan::{Mode, PlanError};
use crate::report::{
    now_rfc3339, Exporter, JsonExporter, PairRecord, PromExporter, RankRecord, RunRecord,
    RunStatus, SweepRecord, ToolRecord, Unreachable, FULL_RECORDS_UP_TO, SWEEP_SCHEMA,
};

/// How often a sweep's record is rewritten while the sweep goes on.
const WRITE_EVERY: Duration = Duration::from_secs(30);

/// Coordinates the sweep on `listener`; returns how it ended (already told to every rank).
pub(crate) fn coordinate(spec: &SweepSpec, place: &Place, listener: &Listener) -> Result<SweepEnd> {
    raise_file_limit(place.size);
    let (mut members, last) = accept_joins(spec, place.size, listener)?;
    let joined = members.iter().filter(|m| m.ch.is_some()).count();
    println!(
        "rdmabench cluster: {joined} of {} ranks joined (the last after {:.1} s)",
        place.size,
        last.as_secs_f64()
    );
    let mut rec = new_record(spec, place, &members)?;
    if let Some(f) = &spec.fabric {
        let missing = fabric::place_ranks(&mut rec, f);
        if !missing.is_empty() {
            println!(
                "topology: {} rank(s) not in --topology, judged without a leaf: {}",
                missing.len(),
                missing.join(", ")
            );
        }
    }
    let rounds = planned_rounds(spec, &members, &rec)?;
    rec.schedule = schedule_record(&rounds);
    println!("{}", summary::plan_line(spec, place, rounds.len()));
    rec.preflight = preflight::outliers(&rec.ranks);
    for line in preflight::lines(&rec.preflight, &rec.ranks) {
        println!("preflight: {line}");
    }
    let end = match sweep(spec, &mut members, &mut rec, &rounds) {
        Ok(planned) => {
            rec.status = RunStatus::Complete;
            print_summary(&rec)?;
            println!("{}", summary::timing(&rec, spec, planned));
            verdict_end(&rec, spec.json.as_deref())
        }
        Err(e) => {
            rec.status = RunStatus::Failed;
            rec.error = Some(format!("{e:#}"));
            print_summary(&rec)?;
            SweepEnd {
                exit: 1,
                reason: format!("{e:#}"),
            }
        }
    };
    write_record(spec, &rec)?;
    for ch in members.iter_mut().filter_map(|m| m.ch.as_mut()) {
        end_sweep(ch, end.exit, &end.reason);
    }
    Ok(end)
}

/// Slow NICs named in the line every rank prints; the rest are counted.
const NAMED_IN_END: usize = 3;

/// How a sweep that ran its rounds ends on every rank: the status, and a line that names the
/// NICs and paths and says where the verdict is (the other ranks print only this line). A
/// named NIC (slow, failing, counters, unreachable), a named path or a failed test is a
/// finding (3); nothing found is 0.
fn verdict_end(rec: &SweepRecord, json: Option<&Path>) -> SweepEnd {
    let failed = verdict::failed_tests(rec).len();
    let mut what = Vec::new();
    if !rec.named.is_empty() {
        let labels = rec
            .named
            .iter()
            .map(|n| format!("{} ({})", n.label, n.kind));
        what.push(format!(
            "{} NIC(s) named: {}",
            rec.named.len(),
            first_few(labels)
        ));
    }
    if !rec.paths.is_empty() {
        let sides = rec.paths.iter().map(locate::headline);
        what.push(format!(
            "{} path(s) named: {}",
            rec.paths.len(),
            first_few(sides)
        ));
    }
    if failed > 0 {
        what.push(format!("{failed} test(s) failed"));
    }
    let flows = rec.groups.iter().flat_map(|g| &g.flows);
    match flows.filter(|p| p.error.is_some()).count() {
        0 => {}
        n => what.push(format!("{n} flow(s) failed")),
    }
    if what.is_empty() {
        return SweepEnd {
            exit: 0,
            reason: "no NIC named".into(),
        };
    }
    let host = match rec.rank(0) {
        Some(r) if !r.host.is_empty() => format!(" (on {})", r.host),
        _ => String::new(),
    };
    let record = json
        .map(|p| format!(" and its record {}", p.display()))
        .unwrap_or_default();
    SweepEnd {
        exit: 3,
        reason: format!(
            "{}; the verdict is in rank 0's output{host}{record}",
            what.join("; ")
        ),
    }
}

/// The first [`NAMED_IN_END`] of `items`, the rest counted.
fn first_few(items: impl ExactSizeIterator<Item = String>) -> String {
    let n = items.len();
    let shown: Vec<String> = items.take(NAMED_IN_END).collect();
    match n.saturating_sub(NAMED_IN_END) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// The schedule: over all ranks, or with `--per-rail` within each rail (the ranks of one
/// local rank), the rails' rounds side by side. `quick` over ranks that `--topology` placed
/// on leaves (`rec`'s) adds the rounds that cross every pair of leaves
/// [`schedule::QUICK_CROSSINGS`] times, so that every uplink is measured.
fn planned_rounds(
    spec: &SweepSpec,
    members: &[Member],
    rec: &SweepRecord,
) -> Result<Vec<Vec<Pair>>> {
    let local_ranks: Vec<usize> = members
        .iter()
        .map(|m| m.joining.local_rank as usize)
        .collect();
    let mut rounds = crate::cluster::spec::for_sweep(spec, &local_ranks)
        .map_err(|e| PlanError::Value(e.to_string()))?;
    if spec.pattern == Pattern::Quick && !spec.per_rail {
        let leaf_of = leaf_numbers(rec);
        let more = schedule::across_leaves(&leaf_of, &rounds, schedule::QUICK_CROSSINGS);
        if !more.is_empty() {
            println!(
                "topology: {} round(s) more so that every pair of leaves meets {} times",
                more.len(),
                schedule::QUICK_CROSSINGS
            );
        }
        rounds.extend(more);
    }
    Ok(rounds)
}

/// Each rank's leaf as a number (leaves in order of first appearance); `None` for a rank
/// without one.
fn leaf_numbers(rec: &SweepRecord) -> Vec<Option<usize>> {
    let mut names: Vec<&str> = Vec::new();
    rec.ranks
        .iter()
        .map(|r| {
            let leaf = r.leaf.as_deref()?;
            Some(match names.iter().position(|n| *n == leaf) {
                Some(i) => i,
                None => {
                    names.push(leaf);
                    names.len() - 1
                }
            })
        })
        .collect()
}

pub(super) fn new_record(
    spec: &SweepSpec,
    place: &Place,
    members: &[Member],
) -> Result<SweepRecord> {
    Ok(SweepRecord {
        schema: SWEEP_SCHEMA.to_string(),
        tool: ToolRecord::current(),
        started_at: now_rfc3339(),
        launcher: place.launcher.name().to_string(),
        pattern: spec.pattern.name().to_string(),
        tests: spec.test_names(),
        min_pct: spec.min_pct,
        max_lat_factor: spec.max_lat_factor,
        ranks: members.iter().map(|m| rank_record(spec, m)).collect(),
        schedule: Vec::new(),
        round_secs: Vec::new(),
        pairs: Vec::new(),
        groups: Vec::new(),
        fleet: Vec::new(),
        named: Vec::new(),
        paths: Vec::new(),
        preflight: Vec::new(),
        status: RunStatus::Incomplete,
        error: None,
    })
}

/// A rank as it joined; one that never joined is known by its rank alone.
fn rank_record(spec: &SweepSpec, m: &Member) -> RankRecord {
    let j = &m.joining;
    if m.ch.is_none() {
        let mut r = RankRecord::new(j.rank, "", "", None);
        r.label = format!("rank {}", j.rank);
        r.unreachable = Some(Unreachable {
            round: 0,
            why: format!(
                "never joined within {} s (--timeout)",
                spec.timeout.as_secs_f64()
            ),
        });
        return r;
    }
    // The peer's own words: shown as text, never as control sequences.
    let mut r = RankRecord::new(
        j.rank,
        &printable(&j.host),
        &printable(&j.device),
        j.fw_ver.as_deref().map(printable),
    );
    r.facts = j
        .facts
        .iter()
        .map(|(k, v)| (printable(k), printable(v)))
        .collect();
    r
}

/// The rounds as the record keeps them: each pair as `[client rank, server rank]`.
fn schedule_record(rounds: &[Vec<Pair>]) -> Vec<Vec<[u32; 2]>> {
    rounds
        .iter()
        .map(|r| r.iter().map(|p| [p.b as u32, p.a as u32]).collect())
        .collect()
}

/// The planned rounds (and those a cut needs to be decided), then the re-runs; the record
/// is judged and written after each. Returns how many planned rounds ran.
fn sweep(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    rounds: &[Vec<Pair>],
) -> Result<usize> {
    if spec.pattern.is_congestion() {
        sweep_together(spec, members, rec, rounds)?;
        return Ok(rounds.len());
    }
    run_planned(spec, members, rec, (rounds, 0, rounds.len()))?;
    let mut total = rounds.len();
    if let Some(why) = (summary::decide_cut_rounds(spec, members.len()) > 0)
        .then(|| locate::undecided_cut(rec))
        .flatten()
    {
        let more = schedule::quick_more(members.len());
        println!(
            "{why}: {} round(s) more, every rank meeting new partners, to decide it",
            more.len()
        );
        rec.schedule.extend(schedule_record(&more));
        run_planned(spec, members, rec, (&more, total, total + more.len()))?;
        total += more.len();
    }
    let mut next = total as u32;
    retry_failed(spec, members, rec, &mut next)?;
    let first = reruns(rec);
    rerun(spec, members, rec, &mut next, &first, "suspect rank(s)")?;
    let second = verdict::second_opinions(rec);
    rerun(
        spec,
        members,
        rec,
        &mut next,
        &second,
        "rank(s) a re-run found slow",
    )?;
    Ok(total)
}

/// Runs `rounds` as planned rounds numbered from `first`, of `total` planned in all, each
/// test on every pair; the record is judged after each and written at most every
/// [`WRITE_EVERY`] (a large sweep's record is large; it is always written at the end, also
/// when the sweep fails).
fn run_planned(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (rounds, first, total): (&[Vec<Pair>], usize, usize),
) -> Result<()> {
    let all: Vec<usize> = (0..spec.tests.len()).collect();
    let mut written: Option<Instant> = None;
    for (k, round) in rounds.iter().enumerate() {
        let (r, started) = (first + k, Instant::now());
        let attempt = (r as u32, Attempt::Planned);
        let ran = run_round(spec, members, rec, attempt, round, &all)?;
        judge(rec);
        if written.is_none_or(|w| w.elapsed() >= WRITE_EVERY) {
            write_record(spec, rec)?;
            written = Some(Instant::now());
        }
        println!(
            "{}",
            round_line((r, total), (ran, round.len()), "pair(s)", started)
        );
    }
    Ok(())
}

/// A congestion pattern's rounds: each test with every flow of the round at once, their
/// windows started together; a group's figures are its record (no re-runs: the load is
/// the point).
fn sweep_together(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    rounds: &[Vec<Pair>],
) -> Result<()> {
    for (r, round) in rounds.iter().enumerate() {
        let started = Instant::now();
        let mut ran = round.len();
        for t in 0..spec.tests.len() {
            ran = ran.min(run_together_round(
                spec,
                members,
                rec,
                (r as u32, t),
                round,
            )?);
        }
        rec.round_secs.push(started.elapsed().as_secs_f64());
        // No pairs to judge: the verdict names the ranks lost.
        judge(rec);
        write_record(spec, rec)?;
        let what = "flow(s) at once";
        println!(
            "{}",
            round_line((r, rounds.len()), (ran, round.len()), what, started)
        );
    }
    Ok(())
}

/// What rank 0 prints when planned round `r` of `total` is over: `ran` of its `planned`
/// pairs or flows (`what`) measured, since `started`.
fn round_line(
    (r, total): (usize, usize),
    (ran, planned): (usize, usize),
    what: &str,
    started: Instant,
) -> String {
    let skipped = match planned - ran {
        0 => String::new(),
        n => format!(" ({n} not measured: a rank unreachable)"),
    };
    format!(
        "round {}/{total}: {ran} {what} in {:.1} s{skipped}",
        r + 1,
        started.elapsed().as_secs_f64()
    )
}

/// A rank's answer in a congestion round: the runs it served, the runs it measured.
type Flows = (Vec<FlowDone>, Vec<FlowDone>);

/// Test `t` of one congestion round: every flow (server = receiver, client = sender) at
/// once ([`measure_together`]), grouped by the pattern. Returns how many flows were measured
/// (a flow with a rank lost is not).
fn run_together_round(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, t): (u32, usize),
    flows: &[Pair],
) -> Result<usize> {
    let test = &spec.tests[t];
    let measured = measure_together(spec, members, rec, (round, t), flows)?;
    let pairs: Vec<Pair> = measured.iter().map(|m| m.pair).collect();
    let mut by_pair: std::collections::HashMap<Pair, Together> =
        measured.into_iter().map(|m| (m.pair, m)).collect();
    let name = test.kind.to_string();
    for group in congestion::groups(spec.pattern, &pairs) {
        let mut flows = Vec::with_capacity(group.len());
        let mut records = Vec::with_capacity(group.len());
        for m in group.iter().filter_map(|p| by_pair.remove(p)) {
            records.push(m.server);
            flows.push(m.flow);
        }
        rec.groups
            .push(congestion::group_record(round, &name, flows, &records));
    }
    Ok(pairs.len())
}

/// One flow of a round run together: its pair (server = receiver, client = sender), its
/// record as a pair's, and the server's run record.
pub(super) struct Together {
    pub pair: Pair,
    pub flow: PairRecord,
    pub server: Option<Box<RunRecord>>,
}

/// Test `t` on every flow of `flows` at once. Ranks that serve say `AtStart` once their runs
/// are set up; rank 0 then says `Start` to all of them, so the measured windows begin
/// together. Returns the flows whose two ranks are still reachable, measured or failed.
pub(super) fn measure_together(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, t): (u32, usize),
    flows: &[Pair],
) -> Result<Vec<Together>> {
    let test = &spec.tests[t];
    let live: Vec<Pair> = flows
        .iter()
        .filter(|p| reachable(members, p.a) && reachable(members, p.b))
        .copied()
        .collect();
    let works = together_works(members, &live);
    let served: Vec<usize> = works
        .iter()
        .map(|w| match w {
            Work::Together { serve, .. } => serve.len(),
            _ => 0,
        })
        .collect();
    send_works(members, rec, (round, t as u32), works)?;
    let mut answers: Vec<Option<Flows>> = (0..members.len()).map(|_| None).collect();
    let ready = gather_starts(members, rec, round, &served, &mut answers, spec.timeout * 2)?;
    for r in ready {
        if let Some(ch) = members[r].ch.as_mut() {
            if let Err(e) = ch.send(&Message::Start) {
                lose(&mut members[r], rec, round, &format!("{e:#}"))?;
            }
        }
    }
    let within = Duration::from_secs_f64(test.estimate_secs() * 2.0) + spec.timeout * 3;
    collect_flows(members, rec, round, (&served, &mut answers), within)?;
    let mut out = Vec::new();
    for p in live
        .into_iter()
        .filter(|p| reachable(members, p.a) && reachable(members, p.b))
    {
        let client = take_flow(&mut answers[p.b], p.a, false);
        let server = take_flow(&mut answers[p.a], p.b, true);
        let server_record = server.0.clone();
        let flow = pair_record(rec, test, round, &p, (client, server));
        out.push(Together {
            pair: p,
            flow,
            server: server_record,
        });
    }
    Ok(out)
}

/// Each rank's part in a congestion round: the flows it serves and measures, or rest.
fn together_works(members: &[Member], flows: &[Pair]) -> Vec<Work> {
    let mut serve: Vec<Vec<FlowFrom>> = vec![Vec::new(); members.len()];
    let mut measure: Vec<Vec<FlowTo>> = vec![Vec::new(); members.len()];
    for p in flows {
        serve[p.a].push(FlowFrom {
            client: p.b as u32,
            from: members[p.b].addr.to_string(),
        });
        measure[p.b].push(FlowTo {
            server: p.a as u32,
            host: members[p.a].addr.to_string(),
            port: members[p.a].joining.port,
        });
    }
    serve
        .into_iter()
        .zip(measure)
        .map(|(serve, measure)| {
            if serve.is_empty() && measure.is_empty() {
                Work::Rest
            } else {
                Work::Together { serve, measure }
            }
        })
        .collect()
}

/// Phase one of a congestion round: from each rank that serves, `AtStart` (its runs set
/// up) or already its `FlowsDone` (they ended before), all within `within`; a rank that
/// says neither is lost. Returns the ranks to tell `Start`.
fn gather_starts(
    members: &mut [Member],
    rec: &mut SweepRecord,
    round: u32,
    served: &[usize],
    answers: &mut [Option<Flows>],
    within: Duration,
) -> Result<Vec<usize>> {
    let mut ready = Vec::new();
    let serving: Vec<bool> = served.iter().map(|&n| n > 0).collect();
    let heard = |r: usize, msg: Message| match msg {
        Message::AtStart => {
            ready.push(r);
            Ok(())
        }
        Message::FlowsDone { flows } => {
            answers[r] = Some(split_flows(flows, served[r]));
            Ok(())
        }
        other => Err(format!("it answered {} where its runs start", other.name())),
    };
    hear_each(
        members,
        (rec, round),
        (&serving, "its runs' start"),
        within,
        heard,
    )?;
    Ok(ready)
}

/// Phase two: every reachable rank's answer not had yet (`FlowsDone`, or a resting rank's
/// `PairDone`), all within `within`; a rank that gives none is lost.
fn collect_flows(
    members: &mut [Member],
    rec: &mut SweepRecord,
    round: u32,
    (served, answers): (&[usize], &mut [Option<Flows>]),
    within: Duration,
) -> Result<()> {
    let waiting: Vec<bool> = answers.iter().map(Option::is_none).collect();
    let heard = |r: usize, msg: Message| match msg {
        Message::FlowsDone { flows } => {
            answers[r] = Some(split_flows(flows, served[r]));
            Ok(())
        }
        Message::PairDone { .. } => Ok(()),
        other => Err(format!(
            "it answered {} to a congestion round",
            other.name()
        )),
    };
    let what = (waiting.as_slice(), "its part of the round");
    hear_each(members, (rec, round), what, within, heard)
}

/// A rank's `FlowsDone`: the first `served` entries are the runs it served.
fn split_flows(mut flows: Vec<FlowDone>, served: usize) -> Flows {
    let measured = flows.split_off(served.min(flows.len()));
    (flows, measured)
}

/// The answer a rank gave for its run with `peer` (served or measured): its record or its
/// error; a run it did not answer for is an error.
fn take_flow(answer: &mut Option<Flows>, peer: usize, served: bool) -> Answer {
    let list = answer.as_mut().map(|(s, m)| if served { s } else { m });
    match list.and_then(|l| {
        l.iter()
            .position(|f| f.peer as usize == peer)
            .map(|i| l.swap_remove(i))
    }) {
        Some(f) => (f.record, f.error),
        None => (
            None,
            Some(format!("no answer for its run with rank {peer}")),
        ),
    }
}

/// Re-runs of up to this many pairs run one pair at a time; more are packed into rounds.
const ALONE_UP_TO: usize = 4;

/// Each of `pairs` (server, client), every test. A few run alone: a second opinion then runs
/// with no other pair on the fabric (or, emulated, on the CPUs). More (a large fleet's noise)
/// are packed into rounds of disjoint pairs, so that the re-runs take a round or two whatever
/// n is. Pairs with a rank lost are left out.
fn rerun(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    next: &mut u32,
    pairs: &[(u32, u32)],
    who: &str,
) -> Result<()> {
    let again: Vec<(usize, usize)> = pairs
        .iter()
        .map(|&(s, c)| (s as usize, c as usize))
        .filter(|&(s, c)| reachable(members, s) && reachable(members, c))
        .collect();
    if again.is_empty() {
        return Ok(());
    }
    let rounds = if again.len() <= ALONE_UP_TO {
        again.iter().map(|&(a, b)| vec![Pair { a, b }]).collect()
    } else {
        schedule::packed(members.len(), &again).map_err(|e| anyhow!("{e}"))?
    };
    println!(
        "re-running {} {who} against known-good partners ({} round(s))",
        again.len(),
        rounds.len()
    );
    let all: Vec<usize> = (0..spec.tests.len()).collect();
    for round in rounds {
        run_round(spec, members, rec, (*next, Attempt::Rerun), &round, &all)?;
        *next += 1;
        judge(rec);
    }
    Ok(())
}

/// Whether rank 0 still reaches rank `rank`.
fn reachable(members: &[Member], rank: usize) -> bool {
    members.get(rank).is_some_and(|m| m.ch.is_some())
}

/// Each test that failed in the planned rounds, once more (a transient failure is not a
/// verdict); one that fails again stays failed. The pairs that failed the same tests are
/// packed into rounds that run those tests, so the retries take about as many rounds as the
/// most failed pairs of one rank, whatever n is. A pair with a rank lost since is not tried
/// again.
fn retry_failed(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    next: &mut u32,
) -> Result<()> {
    let mut failed: BTreeMap<(usize, usize), BTreeSet<usize>> = BTreeMap::new();
    for p in rec.pairs.iter().filter(|p| p.error.is_some()) {
        let (s, c) = (p.server as usize, p.client as usize);
        let test = spec.tests.iter().position(|t| t.kind.to_string() == p.test);
        if let (Some(t), true) = (test, reachable(members, s) && reachable(members, c)) {
            failed.entry((s, c)).or_default().insert(t);
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    let tests: usize = failed.values().map(BTreeSet::len).sum();
    println!(
        "retrying {tests} failed test(s) of {} pair(s) once",
        failed.len()
    );
    // Pairs that failed the same tests retry together; most fail all of them.
    let mut by_tests: BTreeMap<Vec<usize>, Vec<(usize, usize)>> = BTreeMap::new();
    for (pair, tests) in failed {
        by_tests
            .entry(tests.into_iter().collect())
            .or_default()
            .push(pair);
    }
    for (tests, pairs) in &by_tests {
        let rounds = schedule::packed(members.len(), pairs).map_err(|e| anyhow!("{e}"))?;
        for round in &rounds {
            run_round(spec, members, rec, (*next, Attempt::Retry), round, tests)?;
            *next += 1;
        }
    }
    judge(rec);
    Ok(())
}

/// Why a round runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// A round of the schedule.
    Planned,
    /// A second attempt of tests that failed.
    Retry,
    /// Suspects against known-good partners.
    Rerun,
}

/// A rank's answer to one assignment: the client's record or the server's, or its error.
type Answer = (Option<Box<RunRecord>>, Option<String>);

/// One round: each of `tests` in turn on every pair of reachable ranks at once; every
/// reachable rank answers each. A rank that does not answer (it died, hung, or broke the
/// protocol) is lost: unreachable from this round on, its pair of this round not measured.
/// Returns how many of `pairs` were measured.
fn run_round(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, attempt): (u32, Attempt),
    pairs: &[Pair],
    tests: &[usize],
) -> Result<usize> {
    let started = Instant::now();
    let mut ran = pairs.len();
    for &t in tests {
        let test = &spec.tests[t];
        let live: Vec<Pair> = pairs
            .iter()
            .filter(|p| reachable(members, p.a) && reachable(members, p.b))
            .copied()
            .collect();
        assign(members, rec, round, t as u32, &live)?;
        let within = Duration::from_secs_f64(test.estimate_secs() * 2.0) + spec.timeout * 3;
        let mut answers = collect_answers(members, rec, round, within)?;
        note_firmware(rec, &answers);
        let measured: Vec<&Pair> = live
            .iter()
            .filter(|p| reachable(members, p.a) && reachable(members, p.b))
            .collect();
        ran = ran.min(measured.len());
        for p in measured {
            let client = std::mem::take(&mut answers[p.b]);
            let server = std::mem::take(&mut answers[p.a]);
            let mut pair = pair_record(rec, test, round, p, (client, server));
            pair.rerun = attempt == Attempt::Rerun;
            pair.retry = attempt == Attempt::Retry;
            rec.pairs.push(pair);
        }
    }
    rec.round_secs.push(started.elapsed().as_secs_f64());
    Ok(ran)
}

/// How long an answer is waited for once the round's deadline passed.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Every reachable rank's answer, all within `within` of now; a rank that gives none is
/// lost. Losing rank 0 (this process's own rank), or all but one rank, ends the sweep.
fn collect_answers(
    members: &mut [Member],
    rec: &mut SweepRecord,
    round: u32,
    within: Duration,
) -> Result<Vec<Answer>> {
    let mut answers: Vec<Answer> = (0..members.len()).map(|_| (None, None)).collect();
    let every = vec![true; members.len()];
    let heard = |r: usize, msg: Message| match msg {
        Message::PairDone { record, error } => {
            answers[r] = (record, error);
            Ok(())
        }
        other => Err(format!("it answered {} to an assignment", other.name())),
    };
    hear_each(
        members,
        (rec, round),
        (&every, "its part of the round"),
        within,
        heard,
    )?;
    Ok(answers)
}

/// One message from each reachable rank `asked` names, all within `within` of now (they
/// worked at once: one deadline for all, and an answer already sent is read even after it,
/// when an earlier rank took the time); `heard` takes each, or says why it is not the one
/// expected. A rank that sends none or the wrong one is lost; losing rank 0 (this process's
/// own rank), or all but one rank, ends the sweep.
fn hear_each(
    members: &mut [Member],
    (rec, round): (&mut SweepRecord, u32),
    (asked, what): (&[bool], &str),
    within: Duration,
    mut heard: impl FnMut(usize, Message) -> Result<(), String>,
) -> Result<()> {
    let deadline = Instant::now() + within;
    for (r, m) in members.iter_mut().enumerate() {
        let Some(ch) = m.ch.as_mut().filter(|_| asked[r]) else {
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let why = match ch.recv_within(what, left.max(ANSWER_GRACE)) {
            Ok(msg) => match heard(r, msg) {
                Ok(()) => continue,
                Err(why) => why,
            },
            Err(e) => format!("{e:#}"),
        };
        lose(m, rec, round, &why)?;
    }
    enough_left(members)
}

/// Rank 0 no longer reaches `m`: its channel is closed, and the record says since when and
/// why. Rank 0 itself lost is the end of the sweep.
fn lose(m: &mut Member, rec: &mut SweepRecord, round: u32, why: &str) -> Result<()> {
    m.ch = None;
    let rank = m.joining.rank;
    let shown = label(rec, rank);
    if rank == 0 {
        bail!("rank 0 ({shown}), this rank, left the sweep: {why}");
    }
    println!(
        "rank {rank} ({shown}) is unreachable since round {}: {why}; the sweep goes on \
         without it",
        round + 1
    );
    if let Some(r) = rec.ranks.iter_mut().find(|r| r.rank == rank) {
        r.unreachable = Some(Unreachable {
            round,
            why: why.to_string(),
        });
    }
    Ok(())
}

/// A sweep needs two ranks that rank 0 reaches.
fn enough_left(members: &[Member]) -> Result<()> {
    let left = members.iter().filter(|m| m.ch.is_some()).count();
    if left < 2 {
        bail!("only {left} rank(s) left that rank 0 reaches: the sweep cannot go on");
    }
    Ok(())
}

/// Each rank's firmware, from the first record of its device.
fn note_firmware(rec: &mut SweepRecord, answers: &[Answer]) {
    for (rank, (record, _)) in rec.ranks.iter_mut().zip(answers) {
        if let (None, Some(r)) = (&rank.fw_ver, record) {
            rank.fw_ver = Some(r.device.fw_ver.clone()).filter(|f| !f.is_empty());
        }
    }
}

/// Tells every reachable rank its part in test `test` of this round; one the word does
/// not reach is lost.
fn assign(
    members: &mut [Member],
    rec: &mut SweepRecord,
    round: u32,
    test: u32,
    pairs: &[Pair],
) -> Result<()> {
    let works = pair_works(members, pairs);
    send_works(members, rec, (round, test), works)
}

/// Each rank's part in a round of disjoint `pairs`.
fn pair_works(members: &[Member], pairs: &[Pair]) -> Vec<Work> {
    let slots = cpu_slots(members, pairs);
    (0..members.len())
        .map(|r| match pairs.iter().find(|p| p.a == r || p.b == r) {
            Some(p) if p.a == r => Work::Serve {
                client: p.b as u32,
                from: members[p.b].addr.to_string(),
                cpu_slot: slots[r],
            },
            Some(p) => Work::Measure {
                server: p.a as u32,
                host: members[p.a].addr.to_string(),
                port: members[p.a].joining.port,
                cpu_slot: slots[r],
            },
            None => Work::Rest,
        })
        .collect()
}

/// Each rank's CPU slot in a round of disjoint `pairs`: on each host, the clients' runs in
/// pair order, then the servers' in reverse pair order, so that on a host of two CPUs two
/// pairs' clients differ and each pair's two sides differ (a ping-pong's sides must run at
/// once), and on a host of as many CPUs as runs every run has its own.
fn cpu_slots(members: &[Member], pairs: &[Pair]) -> Vec<u32> {
    let mut slots = vec![0; members.len()];
    let mut next: BTreeMap<&str, u32> = BTreeMap::new();
    let sides = pairs
        .iter()
        .map(|p| p.b)
        .chain(pairs.iter().rev().map(|p| p.a));
    for r in sides {
        let n = next.entry(members[r].joining.host.as_str()).or_default();
        slots[r] = *n;
        *n += 1;
    }
    slots
}

/// Sends each reachable rank its work in test `test` of round `round`; one the word does not
/// reach is lost.
fn send_works(
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, test): (u32, u32),
    works: Vec<Work>,
) -> Result<()> {
    for (m, work) in members.iter_mut().zip(works) {
        let Some(ch) = m.ch.as_mut() else {
            continue;
        };
        if let Err(e) = ch.send(&Message::Assign { round, test, work }) {
            lose(m, rec, round, &format!("{e:#}"))?;
        }
    }
    enough_left(members)
}

/// The pair's result from both ranks' answers (the client's, the server's).
fn pair_record(
    rec: &SweepRecord,
    test: &SweepTest,
    round: u32,
    p: &Pair,
    (client, server): (Answer, Answer),
) -> PairRecord {
    let (client_record, client_error) = client;
    let (server_record, server_error) = server;
    // A rank's error is its text: printable before it reaches the record and the screen.
    let error = match (client_error, server_error) {
        (Some(e), _) => Some((p.b, e)),
        (None, Some(e)) => Some((p.a, e)),
        (None, None) => None,
    }
    .map(|(r, e)| format!("rank {r} ({}): {}", label(rec, r as u32), printable(&e)));
    let first = client_record.as_ref().and_then(|r| r.results.first());
    let value = first.and_then(|r| match test.unit() {
        "us" => r.lat_us.map(|l| l.p50),
        _ => Some(r.bw_gbps),
    });
    PairRecord {
        round,
        client: p.b as u32,
        server: p.a as u32,
        test: test.kind.to_string(),
        rerun: false,
        retry: false,
        value: if error.is_some() { None } else { value },
        unit: test.unit().to_string(),
        pct_of_median: None,
        // A bandwidth ceiling says nothing of a latency.
        pct_of_ceiling: first
            .and_then(|r| r.pct_of_ceiling)
            .filter(|_| test.kind.mode == Mode::Bw),
        suspect: false,
        error,
        client_counters: alarming(client_record.as_ref().and_then(|r| r.counters.as_ref())),
        server_counters: alarming(server_record.as_ref().and_then(|r| r.counters.as_ref())),
        record: client_record.filter(|_| rec.ranks.len() <= FULL_RECORDS_UP_TO),
    }
}

/// The sweep record to `--json`, its metrics to `--prom`.
fn write_record(spec: &SweepSpec, rec: &SweepRecord) -> Result<()> {
    if let Some(path) = &spec.json {
        write_atomically(path, &JsonExporter.render(rec)?)?;
    }
    if let Some(path) = &spec.prom {
        write_atomically(path, &PromExporter.render(rec)?)?;
    }
    Ok(())
}

/// The sweep's summary on stdout.
fn print_summary(rec: &SweepRecord) -> Result<()> {
    let bytes = SummaryExporter.render(rec)?;
    print!("{}", String::from_utf8_lossy(&bytes));
    Ok(())
}

#[cfg(test)]
mod tests;
