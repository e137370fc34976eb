//! Rank 0's part of a sweep: wait for every rank to join, run the schedule round by round
//! (every rank hears from it each round: serve, measure or rest, and answers), re-run the
//! suspects, and end the sweep on every rank with one exit status. The record is written
//! after every round, so a sweep that fails keeps every pair measured before.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::launcher::Place;
use super::median::label;
use super::schedule::{self, Pair};
use super::spec::{differing_options, Pattern, SweepSpec, SweepTest};
use super::summary;
use super::verdict::{self, alarming, judge, reruns};
use super::worker::SweepEnd;
use super::{congestion, fabric, locate, preflight};
use crate::control::{
    dropped_line, printable, Channel, FlowDone, FlowFrom, FlowTo, Joining, Listener, Message, Work,
    HELLO_DEADLINE,
};
use crate::files::write_atomically;
use crate::plan::{Mode, PlanError};
use crate::report::{
    now_rfc3339, PairRecord, RankRecord, RunRecord, RunStatus, SweepRecord, ToolRecord,
    Unreachable, FULL_RECORDS_UP_TO, SWEEP_SCHEMA,
};

/// How often a sweep's record is rewritten while the sweep goes on.
const WRITE_EVERY: Duration = Duration::from_secs(30);

/// A rank of the launch as rank 0 knows it.
struct Member {
    /// Its channel while rank 0 can reach it; `None` once it is unreachable (it never
    /// joined, died, or stopped answering: the record says since when and why).
    ch: Option<Channel>,
    /// What it said when it joined (for a rank that never joined, its rank alone).
    joining: Joining,
    /// Where its measuring server listens, and where it connects from.
    addr: IpAddr,
}

/// Coordinates the sweep on `listener`; returns how it ended (already told to every rank).
pub fn coordinate(spec: &SweepSpec, place: &Place, listener: &Listener) -> Result<SweepEnd> {
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
    rec.schedule = rounds
        .iter()
        .map(|r| r.iter().map(|p| [p.b as u32, p.a as u32]).collect())
        .collect();
    println!("{}", summary::plan_line(spec, place, rounds.len()));
    rec.preflight = preflight::outliers(&rec.ranks);
    for line in preflight::lines(&rec.preflight, &rec.ranks) {
        println!("preflight: {line}");
    }
    let end = match sweep(spec, &mut members, &mut rec, &rounds) {
        Ok(()) => {
            rec.status = RunStatus::Complete;
            print!("{}", summary::render(&rec));
            println!("{}", summary::timing(&rec, spec, rounds.len()));
            verdict_end(&rec, spec.json.as_deref())
        }
        Err(e) => {
            rec.status = RunStatus::Failed;
            rec.error = Some(format!("{e:#}"));
            print!("{}", summary::render(&rec));
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

/// Rank 0 holds a connection per rank: lift the soft limit on open files to the hard one
/// when the default (often 1024) would not do.
fn raise_file_limit(ranks: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0
            && lim.rlim_cur < (ranks as libc::rlim_t) * 2 + 64
        {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                eprintln!(
                    "rdmabench: cannot raise the open-files limit for {ranks} ranks; raise \
                     `ulimit -n` if rank 0 runs out of file descriptors"
                );
            }
        }
    }
}

/// Every rank's `Join`, within `--timeout`; a rank that did not join by then is left out
/// (unreachable since the first round) and the sweep goes on with the others, unless fewer
/// than two joined. A rank started with other options than rank 0's makes the sweep a usage
/// error: rank 0 tells every rank that the sweep ends with status 2, and keeps taking joins
/// until every rank was heard (or the time is up) so that none is left waiting. A connection
/// that does not join properly (a stranger, garbage, a rank already taken or outside the
/// launch) is refused and dropped alone.
/// Returns the ranks and how long after the start the last one joined.
fn accept_joins(
    spec: &SweepSpec,
    size: usize,
    listener: &Listener,
) -> Result<(Vec<Member>, Duration)> {
    let start = Instant::now();
    let deadline = start + spec.timeout;
    let mut last = Duration::ZERO;
    let mut joined: Vec<Option<Member>> = (0..size).map(|_| None).collect();
    let mut refused: Option<String> = None;
    while joined.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(mut ch) = listener.accept_client(left) else {
            break;
        };
        let Some(joining) = join_message(&mut ch) else {
            continue;
        };
        let rank = joining.rank as usize;
        match admission(spec, size, &joined, &joining) {
            Admission::Refuse(why) => {
                eprintln!("rdmabench: refused a Join from {}: {why}", ch.peer());
                end_sweep(&mut ch, 2, &why);
            }
            Admission::EndSweep(why) => {
                end_sweep(&mut ch, 2, &why);
                if refused.is_none() {
                    for ch in joined.iter_mut().flatten().filter_map(|m| m.ch.as_mut()) {
                        end_sweep(ch, 2, &why);
                    }
                    refused = Some(why);
                }
                joined[rank] = Some(member(None, *joining, ch.peer().ip()));
            }
            Admission::Take => {
                if let Some(why) = &refused {
                    end_sweep(&mut ch, 2, why);
                }
                let addr = ch.peer().ip();
                joined[rank] = Some(member(Some(ch), *joining, addr));
                last = start.elapsed();
            }
        }
    }
    if let Some(why) = refused {
        return Err(PlanError(why).into());
    }
    let mut members = absent_ranks(spec, joined)?;
    reachable_addresses(&mut members);
    Ok((members, last))
}

fn member(ch: Option<Channel>, joining: Joining, addr: IpAddr) -> Member {
    Member { ch, joining, addr }
}

/// The `Join` a new connection must send at once; anything else drops it, with a line.
fn join_message(ch: &mut Channel) -> Option<Box<Joining>> {
    let why = match ch.recv_within("its Join", HELLO_DEADLINE) {
        Ok(Message::Join(joining)) => return Some(joining),
        Ok(other) => format!("it sent {} where a rank sends its Join", other.name()),
        Err(e) => format!("{e:#}"),
    };
    eprintln!("{}", dropped_line(ch.peer(), &why));
    None
}

/// What rank 0 does with a `Join`.
enum Admission {
    /// A rank of this launch, joining for the first time.
    Take,
    /// Not a rank of this launch (or one already taken): refused, alone.
    Refuse(String),
    /// A rank of this launch that cannot take part as started: the sweep ends with 2.
    EndSweep(String),
}

/// Whether `joining` takes part in this sweep. The values are the peer's own words: shown as
/// text, never as control sequences.
fn admission(
    spec: &SweepSpec,
    size: usize,
    joined: &[Option<Member>],
    joining: &Joining,
) -> Admission {
    let rank = joining.rank;
    if joining.size as usize != size || rank as usize >= size {
        return Admission::Refuse(format!(
            "rank {rank} of {} is not a rank of this sweep of {size} ranks; start every rank \
             under one launch",
            joining.size
        ));
    }
    if joined.get(rank as usize).is_some_and(Option::is_some) {
        return Admission::Refuse(format!(
            "rank {rank} has joined already; start one process per rank"
        ));
    }
    let differ = differing_options(&spec.options, &joining.options, rank);
    if differ.is_empty() {
        return Admission::Take;
    }
    Admission::EndSweep(printable(&format!(
        "rank {rank} was started with other sweep options than rank 0 ({}); give every rank \
         the same command line",
        differ.join("; ")
    )))
}

/// The launch's ranks, those that did not join among them (unreachable since the first
/// round); fewer than two that joined is the end of the sweep (status 1).
fn absent_ranks(spec: &SweepSpec, joined: Vec<Option<Member>>) -> Result<Vec<Member>> {
    let missing: Vec<String> = (0..joined.len())
        .filter(|&r| joined[r].is_none())
        .map(|r| r.to_string())
        .collect();
    let mut members: Vec<Member> = Vec::with_capacity(joined.len());
    let per_node = joined
        .iter()
        .flatten()
        .map(|m| m.joining.local_rank + 1)
        .max()
        .unwrap_or(1);
    for (r, slot) in joined.into_iter().enumerate() {
        members.push(slot.unwrap_or_else(|| never_joined(r as u32, per_node)));
    }
    if missing.is_empty() {
        return Ok(members);
    }
    let reason = format!(
        "rank(s) {} did not join within {} s (--timeout)",
        missing.join(", "),
        spec.timeout.as_secs_f64()
    );
    let reachable = members.iter().filter(|m| m.ch.is_some()).count();
    if reachable < 2 || members[0].ch.is_none() {
        for ch in members.iter_mut().filter_map(|m| m.ch.as_mut()) {
            end_sweep(ch, 1, &reason);
        }
        bail!("{reason}");
    }
    println!(
        "rdmabench cluster: {reason}: left out as unreachable; the sweep goes on with \
         {reachable} ranks"
    );
    Ok(members)
}

/// A rank that never joined: its rank alone (with `--per-rail`, the rail its rank would
/// have on nodes of `per_node` ranks).
fn never_joined(rank: u32, per_node: u32) -> Member {
    let joining = Joining {
        rank,
        size: 0,
        local_rank: rank % per_node,
        options: Vec::new(),
        host: String::new(),
        device: String::new(),
        fw_ver: None,
        port: 0,
        facts: Default::default(),
    };
    member(None, joining, IpAddr::from([0, 0, 0, 0]))
}

/// Tells one rank the sweep is over; a rank gone already needs no word.
fn end_sweep(ch: &mut Channel, exit: u8, reason: &str) {
    let _ = ch.send(&Message::SweepEnd {
        exit,
        reason: reason.to_string(),
    });
}

/// A rank on rank 0's host may have joined over loopback: the others reach it at the
/// address they reached rank 0 at.
fn reachable_addresses(members: &mut [Member]) {
    let outside = members
        .iter()
        .find(|m| m.ch.is_some() && !m.addr.is_loopback())
        .and_then(|m| m.ch.as_ref().and_then(Channel::local))
        .map(|a| a.ip());
    if let Some(ip) = outside {
        for m in members.iter_mut().filter(|m| m.addr.is_loopback()) {
            m.addr = ip;
        }
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
        .map_err(|e| PlanError(e.to_string()))?;
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

fn new_record(spec: &SweepSpec, place: &Place, members: &[Member]) -> Result<SweepRecord> {
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

/// The planned rounds, then the re-runs; the record is judged and written after each.
fn sweep(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    rounds: &[Vec<Pair>],
) -> Result<()> {
    if spec.pattern.is_congestion() {
        return sweep_together(spec, members, rec, rounds);
    }
    let total = rounds.len();
    let all: Vec<usize> = (0..spec.tests.len()).collect();
    let mut written: Option<Instant> = None;
    for (r, round) in rounds.iter().enumerate() {
        let started = Instant::now();
        let ran = run_round(
            spec,
            members,
            rec,
            (r as u32, Attempt::Planned),
            round,
            &all,
        )?;
        judge(rec);
        // A large sweep's record is large: rewritten at most every WRITE_EVERY (and always
        // at the end, also when the sweep fails).
        if written.is_none_or(|w| w.elapsed() >= WRITE_EVERY) {
            write_record(spec, rec)?;
            written = Some(Instant::now());
        }
        println!(
            "{}",
            round_line((r, total), (ran, round.len()), "pair(s)", started)
        );
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
    )
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
/// once. Ranks that serve say `AtStart` once their runs are set up; rank 0 then says
/// `Start` to all of them, so the measured windows begin together. Returns how many flows
/// were measured (a flow with a rank lost is not).
fn run_together_round(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, t): (u32, usize),
    flows: &[Pair],
) -> Result<usize> {
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
    let measured: Vec<Pair> = live
        .into_iter()
        .filter(|p| reachable(members, p.a) && reachable(members, p.b))
        .collect();
    let name = test.kind.to_string();
    for group in congestion::groups(spec.pattern, &measured) {
        let mut flows = Vec::with_capacity(group.len());
        let mut records = Vec::with_capacity(group.len());
        for p in &group {
            let client = take_flow(&mut answers[p.b], p.a, false);
            let server = take_flow(&mut answers[p.a], p.b, true);
            records.push(server.0.clone());
            flows.push(pair_record(rec, test, round, p, (client, server)));
        }
        rec.groups
            .push(congestion::group_record(round, &name, flows, &records));
    }
    Ok(measured.len())
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
        let bytes = serde_json::to_vec_pretty(rec)?;
        write_atomically(path, &bytes)?;
    }
    if let Some(path) = &spec.prom {
        write_atomically(path, crate::report::render_sweep(rec).as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::verdict::tests::{pair, sweep};
    use super::*;
    use crate::control::Greeting;
    use clap::Parser;
    use std::thread;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: super::super::args::ClusterArgs,
    }

    fn spec(args: &[&str]) -> SweepSpec {
        let mut argv = vec!["cluster", "--timeout", "3"];
        argv.extend_from_slice(args);
        Wrap::try_parse_from(argv).unwrap().args.resolve().unwrap()
    }

    /// Rank `rank` of `size` joined to rank 0 at `port` with `spec`'s options.
    fn joined(port: u16, rank: u32, size: u32, spec: &SweepSpec) -> Channel {
        let t = Duration::from_secs(5);
        let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
        let joining = Joining {
            rank,
            size,
            local_rank: 0,
            options: spec.options.clone(),
            host: "node".into(),
            device: format!("rxe{rank}"),
            fw_ver: None,
            port: 1,
            facts: Default::default(),
        };
        ch.send(&Message::Join(Box::new(joining))).unwrap();
        ch
    }

    #[test]
    fn each_hosts_runs_of_a_round_get_slots_clients_first_then_servers_in_reverse() {
        // Five ranks: 0-3 on node a, 4 on node b. The round (0,1), (2,3), 4 resting: the
        // clients 1 and 3 take slots 0 and 1, the servers 2 and 0 slots 2 and 3.
        let on = |rank: u32, host: &str| {
            let joining = Joining {
                rank,
                size: 5,
                local_rank: rank,
                options: vec![],
                host: host.into(),
                device: format!("rxe{rank}"),
                fw_ver: None,
                port: 1,
                facts: Default::default(),
            };
            member(None, joining, "127.0.0.1".parse().unwrap())
        };
        let members: Vec<Member> = (0..4).map(|r| on(r, "a")).chain([on(4, "b")]).collect();
        let round = [Pair { a: 0, b: 1 }, Pair { a: 2, b: 3 }];
        assert_eq!(cpu_slots(&members, &round), [3, 0, 2, 1, 0]);
        // Across hosts each host numbers its own: (0,4) has both first on theirs.
        let round = [Pair { a: 0, b: 4 }, Pair { a: 1, b: 2 }];
        assert_eq!(cpu_slots(&members, &round)[..3], [2, 1, 0]);
        assert_eq!(cpu_slots(&members, &round)[4], 0);
        let works = pair_works(&members, &[Pair { a: 0, b: 1 }]);
        assert!(
            matches!(works[0], Work::Serve { cpu_slot: 1, .. }),
            "{works:?}"
        );
        assert!(
            matches!(works[1], Work::Measure { cpu_slot: 0, .. }),
            "{works:?}"
        );
    }

    /// Rank `rank` of `size` joining rank 0 at `port` with `spec`'s options; it hands back
    /// rank 0's next word.
    fn join(port: u16, rank: u32, size: u32, spec: &SweepSpec) -> thread::JoinHandle<Message> {
        let spec = spec.clone();
        thread::spawn(move || {
            let mut ch = joined(port, rank, size, &spec);
            ch.recv("the sweep's end").unwrap()
        })
    }

    /// How a fake rank leaves the sweep.
    #[derive(Clone, Copy)]
    enum Leaves {
        /// Never: it answers every assignment (each test failed, as with no device).
        Never,
        /// It closes its connection when assigned a test of this round.
        Dies(u32),
        /// It stops answering from this round on (a hung process).
        Hangs(u32),
    }

    /// A rank that joins and answers every assignment until it leaves; hands back how the
    /// sweep ended for it, if it heard.
    fn fake_rank(
        port: u16,
        rank: u32,
        size: u32,
        spec: &SweepSpec,
        leaves: Leaves,
    ) -> thread::JoinHandle<Option<(u8, String)>> {
        let spec = spec.clone();
        thread::spawn(move || {
            let mut ch = joined(port, rank, size, &spec);
            loop {
                match ch
                    .recv_within("the next step", Duration::from_secs(60))
                    .ok()?
                {
                    Message::Assign {
                        round,
                        work: Work::Together { serve, measure },
                        ..
                    } => {
                        if matches!(leaves, Leaves::Dies(r) if round >= r) {
                            return None;
                        }
                        together(&mut ch, rank, &serve, &measure)?;
                    }
                    Message::Assign { round, .. } => match leaves {
                        Leaves::Dies(r) if round >= r => return None,
                        Leaves::Hangs(r) if round >= r => {
                            // Reads on, answers nothing, until rank 0 lets it go.
                            let _ = ch.recv_within("nothing", Duration::from_secs(60));
                            return None;
                        }
                        _ => {
                            let error = Some("no device here".to_string());
                            ch.send(&Message::PairDone {
                                record: None,
                                error,
                            })
                            .ok()?;
                        }
                    },
                    Message::SweepEnd { exit, reason } => return Some((exit, reason)),
                    _ => return None,
                }
            }
        })
    }

    /// A fake rank's part in a congestion round: each sender measures 1 + rank/10 GB/s; a
    /// receiver says AtStart, waits for Start, and serves with a 12.5 GB/s ceiling and ECN
    /// marks.
    fn together(ch: &mut Channel, rank: u32, serve: &[FlowFrom], measure: &[FlowTo]) -> Option<()> {
        if !serve.is_empty() {
            ch.send(&Message::AtStart).ok()?;
            match ch.recv_within("Start", Duration::from_secs(60)).ok()? {
                Message::Start => {}
                _ => return None,
            }
        }
        let served = serve.iter().map(|f| {
            let mut r = crate::compare::tests::record("write-bw", &[(65536, 1.0)]);
            r.ceilings.limit_gbps = Some(12.5);
            r.counters = Some(
                [
                    ("hw_counters/np_ecn_marked_roce_packets".to_string(), 40),
                    ("hw_counters/rdma_sends".to_string(), 5),
                ]
                .into(),
            );
            (f.client, r)
        });
        let gbps = 1.0 + f64::from(rank) / 10.0;
        let measured = measure.iter().map(|f| {
            let r = crate::compare::tests::record("write-bw", &[(65536, gbps)]);
            (f.server, r)
        });
        let flows = served
            .chain(measured)
            .map(|(peer, r)| FlowDone {
                peer,
                record: Some(Box::new(r)),
                error: None,
            })
            .collect();
        ch.send(&Message::FlowsDone { flows }).ok()
    }

    #[test]
    fn an_incast_round_starts_its_flows_together_and_totals_them_against_the_ceiling() {
        let mut spec = spec_to("incast", "3");
        spec.pattern = super::super::spec::Pattern::Incast;
        (spec.fan_in, spec.root) = (Some(3), Some(0));
        let (end, rec) = sweep_of_four(&spec, [Leaves::Never; 4]);
        assert_eq!(end.exit, 0, "{}", end.reason);
        assert!(
            rec.pairs.is_empty(),
            "a congestion sweep's flows are in its groups"
        );
        let [g] = rec.groups.as_slice() else {
            panic!("one group: {:?}", rec.groups)
        };
        assert_eq!(g.receivers, [0]);
        let senders: Vec<(u32, u32, Option<f64>)> = g
            .flows
            .iter()
            .map(|p| (p.client, p.server, p.value))
            .collect();
        assert_eq!(
            senders,
            [(1, 0, Some(1.1)), (2, 0, Some(1.2)), (3, 0, Some(1.3))]
        );
        assert!((g.total_gbps.unwrap() - 3.6).abs() < 1e-9);
        assert_eq!(g.ceiling_gbps, Some(12.5));
        assert!((g.pct_of_ceiling.unwrap() - 28.8).abs() < 1e-9);
        assert!(g.fairness.unwrap() > 0.99);
        let counters = &g.receiver_counters[&0];
        assert_eq!(
            counters.get("hw_counters/np_ecn_marked_roce_packets"),
            Some(&40)
        );
        assert!(
            !counters.contains_key("hw_counters/rdma_sends"),
            "traffic left out"
        );
        let text = summary::render(&rec);
        assert!(
            text.contains(
                "incast into rank 0 (rxe0 of node), write-bw, round 1: 3 flow(s) at once"
            ),
            "{text}"
        );
        assert!(
            text.contains("total 3.600 GB/s, 29 % of the receiver's ceiling 12.50 GB/s"),
            "{text}"
        );
        assert!(text.contains("np_ecn_marked_roce_packets 40"), "{text}");
    }

    #[test]
    fn a_sender_that_dies_in_an_incast_is_left_out_and_the_others_are_totalled() {
        let mut spec = spec_to("incast-dies", "3");
        spec.pattern = super::super::spec::Pattern::Incast;
        (spec.fan_in, spec.root) = (Some(3), Some(1));
        let leaves = [Leaves::Never, Leaves::Never, Leaves::Never, Leaves::Dies(0)];
        let (end, rec) = sweep_of_four(&spec, leaves);
        assert_eq!(end.exit, 3, "{}", end.reason);
        assert!(rec.ranks[3].unreachable.is_some());
        let [g] = rec.groups.as_slice() else {
            panic!("one group: {:?}", rec.groups)
        };
        let senders: Vec<u32> = g.flows.iter().map(|p| p.client).collect();
        assert_eq!(senders, [2, 0]);
        assert!((g.total_gbps.unwrap() - 2.2).abs() < 1e-9);
    }

    /// A sweep of four fake ranks; rank 0 coordinates it as the binary does.
    fn sweep_of_four(spec: &SweepSpec, leaves: [Leaves; 4]) -> (SweepEnd, SweepRecord) {
        let listener =
            Listener::bind("127.0.0.1", 0, Greeting::coordinator(None, spec.timeout)).unwrap();
        let port = listener.port().unwrap();
        let ranks: Vec<_> = (0..4)
            .filter(|&r| !matches!(leaves[r as usize], Leaves::Dies(0)))
            .map(|r| fake_rank(port, r, 4, spec, leaves[r as usize]))
            .collect();
        let place = Place {
            launcher: super::super::launcher::Launcher::Torchrun,
            rank: 0,
            size: 4,
            local_rank: 0,
        };
        let end = coordinate(spec, &place, &listener).unwrap();
        for r in ranks {
            if let Some((exit, _)) = r.join().unwrap() {
                assert_eq!(exit, end.exit, "every rank that stayed ends alike");
            }
        }
        let path = spec.json.as_ref().unwrap();
        let rec: SweepRecord = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        (end, rec)
    }

    fn spec_to(name: &str, timeout: &str) -> SweepSpec {
        let dir = std::env::temp_dir().join(format!("rdmabench-coord-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join(format!("{name}.json"));
        let argv = [
            "cluster",
            "--tests",
            "write-bw",
            "-D",
            "1",
            "--timeout",
            timeout,
        ];
        let mut s = Wrap::try_parse_from(argv).unwrap().args.resolve().unwrap();
        s.json = Some(json);
        s
    }

    #[test]
    fn a_rank_that_dies_in_round_2_is_left_out_and_the_others_finish_the_sweep() {
        let spec = spec_to("dies", "3");
        let leaves = [Leaves::Never, Leaves::Never, Leaves::Never, Leaves::Dies(1)];
        let (end, rec) = sweep_of_four(&spec, leaves);
        assert_eq!(end.exit, 3, "{}", end.reason);
        assert_eq!(rec.status, RunStatus::Complete);
        let lost = rec.ranks[3]
            .unreachable
            .as_ref()
            .expect("rank 3 unreachable");
        assert_eq!(lost.round, 1, "{lost:?}");
        assert!(lost.why.contains("closed the connection"), "{}", lost.why);
        assert!(
            rec.named
                .iter()
                .any(|n| n.rank == 3 && n.kind == "unreachable" && n.why.contains("round 2")),
            "{:?}",
            rec.named
        );
        // Rank 3's pair of round 1 was measured; from round 2 on none of its pairs.
        let with_3: Vec<u32> = rec
            .pairs
            .iter()
            .filter(|p| p.client == 3 || p.server == 3)
            .map(|p| p.round)
            .collect();
        assert_eq!(with_3, [0], "{with_3:?}");
        // Every pair of the others was measured in the planned rounds.
        for a in 0..3u32 {
            for b in a + 1..3 {
                assert!(
                    rec.pairs.iter().any(|p| !p.retry
                        && ((p.client, p.server) == (a, b) || (p.client, p.server) == (b, a))),
                    "pair {a}-{b} measured"
                );
            }
        }
    }

    #[test]
    fn a_rank_that_never_joins_or_hangs_is_left_out_and_the_sweep_goes_on() {
        let spec = spec_to("absent", "1");
        let leaves = [
            Leaves::Never,
            Leaves::Hangs(2),
            Leaves::Never,
            Leaves::Dies(0),
        ];
        let start = Instant::now();
        let (end, rec) = sweep_of_four(&spec, leaves);
        assert_eq!(end.exit, 3, "{}", end.reason);
        assert_eq!(rec.status, RunStatus::Complete);
        let absent = rec.ranks[3]
            .unreachable
            .as_ref()
            .expect("rank 3 unreachable");
        assert_eq!(
            (absent.round, absent.why.as_str()),
            (0, "never joined within 1 s (--timeout)")
        );
        assert_eq!(rec.ranks[3].label, "rank 3");
        let hung = rec.ranks[1]
            .unreachable
            .as_ref()
            .expect("rank 1 unreachable");
        assert_eq!(hung.round, 2, "{hung:?}");
        assert!(hung.why.contains("timed out"), "{}", hung.why);
        assert!(rec.pairs.iter().all(|p| p.client != 3 && p.server != 3));
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn strangers_and_a_taken_rank_are_refused_alone() {
        use std::io::Write as _;
        let ours = spec(&[]);
        let greeting = Greeting::coordinator(None, ours.timeout);
        let listener = Listener::bind("127.0.0.1", 0, greeting).unwrap();
        let port = listener.port().unwrap();
        // Garbage instead of a hello; a peer that greets, then sends no Join.
        let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        raw.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let t = Duration::from_secs(5);
        let silent = thread::spawn(move || {
            let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
            ch.send(&Message::Heartbeat).unwrap();
            ch.recv("anything").is_err()
        });
        let spec = ours.clone();
        let joins = thread::spawn(move || accept_joins(&spec, 3, &listener));
        // In this order: rank 1, rank 1 again, a rank of another launch, ranks 0 and 2.
        let pause = || thread::sleep(Duration::from_millis(300));
        let first = join(port, 1, 3, &ours);
        pause();
        let second = join(port, 1, 3, &ours);
        let outside = join(port, 7, 9, &ours);
        pause();
        let ranks = [join(port, 0, 3, &ours), join(port, 2, 3, &ours)];
        let (members, _) = joins.join().unwrap().unwrap();
        assert!(members.iter().all(|m| m.ch.is_some()));
        for (refused, why) in [
            (
                second,
                "rank 1 has joined already; start one process per rank",
            ),
            (
                outside,
                "rank 7 of 9 is not a rank of this sweep of 3 ranks; start every rank under \
                 one launch",
            ),
        ] {
            match refused.join().unwrap() {
                Message::SweepEnd { exit, reason } => assert_eq!((exit, reason.as_str()), (2, why)),
                other => panic!("expected SweepEnd, got {}", other.name()),
            }
        }
        assert!(silent.join().unwrap(), "the peer without a Join is dropped");
        drop(members);
        drop((first, ranks, raw));
    }

    #[test]
    fn a_rank_with_other_options_ends_the_sweep_with_2_everywhere_naming_the_option() {
        let ours = spec(&["-s", "4096"]);
        let greeting = Greeting::coordinator(None, ours.timeout);
        let listener = Listener::bind("127.0.0.1", 0, greeting).unwrap();
        let port = listener.port().unwrap();
        let ranks = [
            join(port, 0, 3, &ours),
            join(port, 1, 3, &ours),
            join(port, 2, 3, &spec(&["-s", "8192"])),
        ];
        let err = accept_joins(&ours, 3, &listener).err().unwrap();
        let why = "rank 2 was started with other sweep options than rank 0 (write-bw size: \
                   rank 0 4 KiB, rank 2 8 KiB; write-lat size: rank 0 4 KiB, rank 2 8 KiB); \
                   give every rank the same command line";
        assert!(err.is::<PlanError>(), "exit 2: {err}");
        assert_eq!(err.to_string(), why);
        // Every rank, the one at fault and those that joined before or after it.
        for rank in ranks {
            match rank.join().unwrap() {
                Message::SweepEnd { exit, reason } => assert_eq!((exit, reason.as_str()), (2, why)),
                other => panic!("expected SweepEnd, got {}", other.name()),
            }
        }
    }

    #[test]
    fn the_other_ranks_are_told_where_the_verdict_is() {
        let mut pairs = Vec::new();
        for a in 0..4u32 {
            for b in a + 1..4 {
                pairs.push(pair(a, b, if a == 2 || b == 2 { 1.5 } else { 15.0 }));
            }
        }
        let mut rec = sweep(4, pairs);
        judge(&mut rec);
        let end = verdict_end(&rec, Some(Path::new("sweep.json")));
        assert_eq!(end.exit, 3);
        assert_eq!(
            end.reason,
            "1 NIC(s) named: rxe2 of node (slow); the verdict is in rank 0's output (on node) \
             and its record sweep.json"
        );
        let end = verdict_end(&rec, None);
        assert!(
            end.reason
                .ends_with("the verdict is in rank 0's output (on node)"),
            "{}",
            end.reason
        );
    }

    #[test]
    fn failed_tests_are_a_finding_not_the_end_of_the_sweep() {
        let mut pairs = Vec::new();
        for a in 0..4u32 {
            for b in a + 1..4 {
                let mut p = pair(a, b, 15.0);
                if a == 3 || b == 3 {
                    (p.value, p.error) = (None, Some("no completion for 30.0 s".into()));
                }
                pairs.push(p);
            }
        }
        let mut rec = sweep(4, pairs);
        judge(&mut rec);
        let end = verdict_end(&rec, None);
        assert_eq!(end.exit, 3, "{}", end.reason);
        assert!(
            end.reason
                .starts_with("1 NIC(s) named: rxe3 of node (failing); 3 test(s) failed;"),
            "{}",
            end.reason
        );
        let mut healthy = sweep(4, Vec::new());
        judge(&mut healthy);
        assert_eq!(verdict_end(&healthy, None).exit, 0);
    }

    #[test]
    fn quick_over_leaves_adds_the_rounds_that_cross_every_pair_of_leaves_three_times() {
        let quick = spec(&[]);
        let members: Vec<Member> = (0..8).map(|r| never_joined(r, 1)).collect();
        let mut rec = sweep(8, Vec::new());
        assert_eq!(planned_rounds(&quick, &members, &rec).unwrap().len(), 3);
        // Four leaves of two ranks: the tournament's first rounds miss some pairs of leaves.
        for r in rec.ranks.iter_mut() {
            r.leaf = Some(format!("leaf{}", r.rank / 2));
        }
        let rounds = planned_rounds(&quick, &members, &rec).unwrap();
        assert!(rounds.len() > 3, "{rounds:?}");
        let mut crossed: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for p in rounds.iter().flatten() {
            let (x, y) = (p.a as u32 / 2, p.b as u32 / 2);
            if x != y {
                *crossed.entry((x.min(y), x.max(y))).or_default() += 1;
            }
        }
        assert_eq!(crossed.len(), 6, "{crossed:?}");
        assert!(crossed.values().all(|&c| c >= 3), "{crossed:?}");
        let pairs = spec(&["--pattern", "pairs"]);
        assert_eq!(planned_rounds(&pairs, &members, &rec).unwrap().len(), 7);
    }

    /// `--dry-run` plans with the schedule rank 0 runs: 64 nodes of 8 rails, ranks joined
    /// with their local ranks, against the dry run's rails (one rank a node per device).
    #[test]
    fn the_dry_runs_rounds_are_the_sweeps() {
        let rails = "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7";
        for pattern in ["pairs", "quick", "ring", "one-to-all"] {
            let spec = spec(&["--per-rail", "-d", rails, "--pattern", pattern]);
            let members: Vec<Member> = (0..512).map(|r| never_joined(r, 8)).collect();
            let run = planned_rounds(&spec, &members, &sweep(512, Vec::new())).unwrap();
            let local_ranks = super::super::dry_run_local_ranks(512, Some(8));
            let planned = crate::cluster::spec::for_sweep(&spec, &local_ranks).unwrap();
            assert_eq!(planned, run, "{pattern}");
            assert!(
                run.iter().flatten().all(|p| p.a % 8 == p.b % 8),
                "{pattern}"
            );
        }
        let pairs = spec(&["--per-rail", "-d", rails, "--pattern", "pairs"]);
        assert_eq!(
            crate::cluster::spec::for_sweep(&pairs, &vec![0; 512])
                .unwrap()
                .len(),
            511,
            "one rail of 512 ranks"
        );
    }

    /// A rank's error is a peer's text: it reaches the record and the screen printable.
    #[test]
    fn a_ranks_error_is_recorded_printable() {
        let rec = sweep(2, Vec::new());
        let test = &spec(&[]).tests[0];
        let answers: (Answer, Answer) = ((None, Some("\u{1b}[2Jgone".into())), (None, None));
        let p = pair_record(&rec, test, 0, &Pair { a: 0, b: 1 }, answers);
        assert_eq!(
            p.error.as_deref(),
            Some("rank 1 (rxe1 of node): \\u{1b}[2Jgone")
        );
    }
}
