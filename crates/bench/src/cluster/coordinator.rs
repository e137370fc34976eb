//! Rank 0's part of a sweep: wait for every rank to join, run the schedule round by round
//! (every rank hears from it each round: serve, measure or rest, and answers), re-run the
//! suspects, and end the sweep on every rank with one exit status. The record is written
//! after every round, so a sweep that fails keeps every pair measured before.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::args::{differing_options, SweepSpec, SweepTest};
use super::launcher::Place;
use super::schedule::{self, Pair};
use super::summary;
use super::verdict::{self, alarming, judge, label, reruns};
use super::worker::SweepEnd;
use crate::control::{printable, Channel, Joining, Listener, Message, Work};
use crate::files::write_atomically;
use crate::plan::{Mode, PlanError};
use crate::report::{
    now_rfc3339, PairRecord, RankRecord, RunRecord, RunStatus, SweepRecord, ToolRecord,
    FULL_RECORDS_UP_TO, SWEEP_SCHEMA,
};

/// How often a sweep's record is rewritten while the sweep goes on.
const WRITE_EVERY: Duration = Duration::from_secs(30);

/// A rank that joined: its channel and where its measuring server listens.
struct Member {
    ch: Channel,
    joining: Joining,
    addr: IpAddr,
}

/// Coordinates the sweep on `listener`; returns how it ended (already told to every rank).
pub fn coordinate(spec: &SweepSpec, place: &Place, listener: &Listener) -> Result<SweepEnd> {
    raise_file_limit(place.size);
    let mut members = accept_joins(spec, place.size, listener)?;
    let mut rec = new_record(spec, place, &members)?;
    let rounds = planned_rounds(spec, &members)?;
    rec.schedule = rounds
        .iter()
        .map(|r| r.iter().map(|p| [p.b as u32, p.a as u32]).collect())
        .collect();
    println!("{}", summary::plan_line(spec, place, rounds.len()));
    let end = match sweep(spec, &mut members, &mut rec, &rounds) {
        Ok(()) => {
            rec.status = RunStatus::Complete;
            print!("{}", summary::render(&rec));
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
    for m in &mut members {
        end_sweep(&mut m.ch, end.exit, &end.reason);
    }
    Ok(end)
}

/// Slow NICs named in the line every rank prints; the rest are counted.
const NAMED_IN_END: usize = 3;

/// How a sweep that ran its rounds ends on every rank: the status, and a line that names the
/// NICs and says where the verdict is (the other ranks print only this line). A named NIC
/// or a failed test is a finding (3); nothing found is 0.
fn verdict_end(rec: &SweepRecord, json: Option<&Path>) -> SweepEnd {
    let failed = verdict::failed_tests(rec).len();
    let n = rec.named.len();
    if n == 0 && failed == 0 {
        return SweepEnd {
            exit: 0,
            reason: "no NIC named".into(),
        };
    }
    let labels: Vec<String> = rec
        .named
        .iter()
        .take(NAMED_IN_END)
        .map(|n| format!("{} ({})", n.label, n.kind))
        .collect();
    let mut what = Vec::new();
    if n > 0 {
        let more = match n.saturating_sub(NAMED_IN_END) {
            0 => String::new(),
            m => format!(" and {m} more"),
        };
        what.push(format!("{n} NIC(s) named: {}{more}", labels.join(", ")));
    }
    if failed > 0 {
        what.push(format!("{failed} test(s) failed"));
    }
    let what = what.join("; ");
    let exit = 3;
    let host = match rec.rank(0) {
        Some(r) if !r.host.is_empty() => format!(" (on {})", r.host),
        _ => String::new(),
    };
    let record = json
        .map(|p| format!(" and its record {}", p.display()))
        .unwrap_or_default();
    SweepEnd {
        exit,
        reason: format!("{what}; the verdict is in rank 0's output{host}{record}"),
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

/// Every rank's `Join`, within `--timeout`. A rank that cannot take part as started (other
/// options than rank 0's, a rank or size that does not fit the launch, a rank twice) makes
/// the sweep a usage error: rank 0 tells every rank, the one at fault with its own reason,
/// that the sweep ends with status 2, and keeps taking joins until every rank was heard (or
/// the time is up) so that none is left waiting.
fn accept_joins(spec: &SweepSpec, size: usize, listener: &Listener) -> Result<Vec<Member>> {
    let deadline = Instant::now() + spec.timeout;
    let mut joined: Vec<Option<Member>> = (0..size).map(|_| None).collect();
    let mut heard = vec![false; size];
    let mut refused: Option<String> = None;
    while heard.contains(&false) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(mut ch) = listener.accept_client(left) else {
            if let Some(why) = refused {
                return Err(PlanError(why).into());
            }
            return Err(not_joined(spec, &mut joined));
        };
        let Message::Join(joining) = ch.expect("Join")? else {
            bail!("protocol error: expected Join from {}", ch.peer());
        };
        let rank = joining.rank as usize;
        let fault = refusal(spec, size, &joined, &joining);
        if let Some(h) = heard.get_mut(rank) {
            *h = true;
        }
        match (fault, &refused) {
            (Some(why), _) => {
                end_sweep(&mut ch, 2, &why);
                if refused.is_none() {
                    for m in joined.iter_mut().flatten() {
                        end_sweep(&mut m.ch, 2, &why);
                    }
                    refused = Some(why);
                }
            }
            (None, Some(why)) => end_sweep(&mut ch, 2, why),
            (None, None) => {
                let addr = ch.peer().ip();
                joined[rank] = Some(Member {
                    ch,
                    joining: *joining,
                    addr,
                });
            }
        }
    }
    if let Some(why) = refused {
        return Err(PlanError(why).into());
    }
    let mut members: Vec<Member> = joined.into_iter().flatten().collect();
    reachable_addresses(&mut members);
    Ok(members)
}

/// Why `joining` cannot take part in this sweep as started, if it cannot.
fn refusal(
    spec: &SweepSpec,
    size: usize,
    joined: &[Option<Member>],
    joining: &Joining,
) -> Option<String> {
    let rank = joining.rank;
    let differ = differing_options(&spec.options, &joining.options, rank);
    let why = if !differ.is_empty() {
        format!(
            "rank {rank} was started with other sweep options than rank 0 ({}); give every \
             rank the same command line",
            differ.join("; ")
        )
    } else if joining.size as usize != size || rank as usize >= size {
        format!(
            "rank {rank} of {} joined a sweep of {size} ranks; start every rank under one \
             launch",
            joining.size
        )
    } else if joined.get(rank as usize).is_some_and(Option::is_some) {
        format!("rank {rank} joined twice; start one process per rank")
    } else {
        return None;
    };
    // The values are the rank's own words: shown as text, never as control sequences.
    Some(printable(&why))
}

/// The ranks that did not join in time, named to those that did (the sweep ends with 1).
fn not_joined(spec: &SweepSpec, joined: &mut [Option<Member>]) -> anyhow::Error {
    let missing: Vec<String> = (0..joined.len())
        .filter(|&r| joined[r].is_none())
        .map(|r| r.to_string())
        .collect();
    let reason = format!(
        "rank(s) {} did not join within {} s (--timeout)",
        missing.join(", "),
        spec.timeout.as_secs_f64()
    );
    for m in joined.iter_mut().flatten() {
        end_sweep(&mut m.ch, 1, &reason);
    }
    anyhow!("{reason}")
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
        .find(|m| !m.addr.is_loopback())
        .and_then(|m| m.ch.local())
        .map(|a| a.ip());
    if let Some(ip) = outside {
        for m in members.iter_mut().filter(|m| m.addr.is_loopback()) {
            m.addr = ip;
        }
    }
}

/// The schedule: over all ranks, or with `--per-rail` within each rail (the ranks of one
/// local rank), the rails' rounds side by side.
fn planned_rounds(spec: &SweepSpec, members: &[Member]) -> Result<Vec<Vec<Pair>>> {
    let rounds = if spec.per_rail {
        let rails: Vec<usize> = members
            .iter()
            .map(|m| m.joining.local_rank as usize)
            .collect();
        schedule::rail_aligned(&rails, |n| spec.rounds(n))
    } else {
        spec.rounds(members.len())
    };
    rounds.map_err(|e| PlanError(e.to_string()).into())
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
        ranks: members
            .iter()
            .map(|m| RankRecord {
                rank: m.joining.rank,
                host: m.joining.host.clone(),
                device: m.joining.device.clone(),
                fw_ver: m.joining.fw_ver.clone(),
                label: format!("{} of {}", m.joining.device, m.joining.host),
            })
            .collect(),
        schedule: Vec::new(),
        pairs: Vec::new(),
        fleet: Vec::new(),
        named: Vec::new(),
        status: RunStatus::Incomplete,
        error: None,
    })
}

/// The planned rounds, then the re-runs; the record is judged and written after each.
fn sweep(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    rounds: &[Vec<Pair>],
) -> Result<()> {
    let total = rounds.len();
    let all: Vec<usize> = (0..spec.tests.len()).collect();
    let mut written: Option<Instant> = None;
    for (r, round) in rounds.iter().enumerate() {
        let started = Instant::now();
        run_round(
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
            "round {}/{total}: {} pair(s) in {:.1} s",
            r + 1,
            round.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let mut next = total as u32;
    retry_failed(spec, members, rec, &mut next)?;
    let again: Vec<(usize, usize)> = reruns(rec)
        .into_iter()
        .map(|(s, c)| (s as usize, c as usize))
        .collect();
    if !again.is_empty() {
        println!(
            "re-running {} suspect rank(s) against known-good partners",
            again.len()
        );
        let extra = schedule::packed(members.len(), &again).map_err(|e| anyhow!("{e}"))?;
        for round in &extra {
            run_round(spec, members, rec, (next, Attempt::Rerun), round, &all)?;
            next += 1;
            judge(rec);
        }
    }
    Ok(())
}

/// Each test that failed in the planned rounds, once more (a transient failure is not a
/// verdict); one that fails again stays failed.
fn retry_failed(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    next: &mut u32,
) -> Result<()> {
    for (t, test) in spec.tests.iter().enumerate() {
        let name = test.kind.to_string();
        let failed: Vec<(usize, usize)> = rec
            .pairs
            .iter()
            .filter(|p| p.error.is_some() && p.test == name)
            .map(|p| (p.server as usize, p.client as usize))
            .collect();
        if failed.is_empty() {
            continue;
        }
        println!("retrying {} failed {name} test(s) once", failed.len());
        let rounds = schedule::packed(members.len(), &failed).map_err(|e| anyhow!("{e}"))?;
        for round in &rounds {
            run_round(spec, members, rec, (*next, Attempt::Retry), round, &[t])?;
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

/// One round: each of `tests` in turn on every pair at once; every rank answers each.
fn run_round(
    spec: &SweepSpec,
    members: &mut [Member],
    rec: &mut SweepRecord,
    (round, attempt): (u32, Attempt),
    pairs: &[Pair],
    tests: &[usize],
) -> Result<()> {
    for &t in tests {
        let test = &spec.tests[t];
        assign(members, rec, round, t as u32, pairs)?;
        let within = Duration::from_secs_f64(test.estimate_secs() * 2.0) + spec.timeout * 3;
        let mut answers: Vec<(Option<Box<RunRecord>>, Option<String>)> = Vec::new();
        for m in members.iter_mut() {
            let rank = m.joining.rank;
            let msg = m
                .ch
                .recv_within("its part of the round", within)
                .map_err(|e| anyhow!("rank {rank} ({}) left the sweep: {e:#}", label(rec, rank)))?;
            let Message::PairDone { record, error } = msg else {
                bail!(
                    "protocol error: rank {rank} answered {} to an assignment",
                    msg.name()
                );
            };
            answers.push((record, error));
        }
        note_firmware(rec, &answers);
        for p in pairs {
            let mut pair = pair_record(rec, test, round, p, &mut answers);
            pair.rerun = attempt == Attempt::Rerun;
            pair.retry = attempt == Attempt::Retry;
            rec.pairs.push(pair);
        }
    }
    Ok(())
}

/// Each rank's firmware, from the first record of its device.
fn note_firmware(rec: &mut SweepRecord, answers: &[(Option<Box<RunRecord>>, Option<String>)]) {
    for (rank, (record, _)) in rec.ranks.iter_mut().zip(answers) {
        if let (None, Some(r)) = (&rank.fw_ver, record) {
            rank.fw_ver = Some(r.device.fw_ver.clone()).filter(|f| !f.is_empty());
        }
    }
}

/// Tells every rank its part in test `test` of this round.
fn assign(
    members: &mut [Member],
    rec: &SweepRecord,
    round: u32,
    test: u32,
    pairs: &[Pair],
) -> Result<()> {
    let works: Vec<Work> = (0..members.len())
        .map(|r| match pairs.iter().find(|p| p.a == r || p.b == r) {
            Some(p) if p.a == r => Work::Serve { client: p.b as u32 },
            Some(p) => Work::Measure {
                server: p.a as u32,
                host: members[p.a].addr.to_string(),
                port: members[p.a].joining.port,
            },
            None => Work::Rest,
        })
        .collect();
    for (m, work) in members.iter_mut().zip(works) {
        let rank = m.joining.rank;
        m.ch.send(&Message::Assign { round, test, work })
            .map_err(|e| anyhow!("rank {rank} ({}) left the sweep: {e:#}", label(rec, rank)))?;
    }
    Ok(())
}

/// The pair's result from both ranks' answers.
fn pair_record(
    rec: &SweepRecord,
    test: &SweepTest,
    round: u32,
    p: &Pair,
    answers: &mut [(Option<Box<RunRecord>>, Option<String>)],
) -> PairRecord {
    let (client_record, client_error) = std::mem::take(&mut answers[p.b]);
    let (server_record, server_error) = std::mem::take(&mut answers[p.a]);
    let error = match (client_error, server_error) {
        (Some(e), _) => Some(format!("rank {} ({}): {e}", p.b, label(rec, p.b as u32))),
        (None, Some(e)) => Some(format!("rank {} ({}): {e}", p.a, label(rec, p.a as u32))),
        (None, None) => None,
    };
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

fn write_record(spec: &SweepSpec, rec: &SweepRecord) -> Result<()> {
    if let Some(path) = &spec.json {
        let bytes = serde_json::to_vec_pretty(rec)?;
        write_atomically(path, &bytes)?;
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

    /// Rank `rank` of `size` joining rank 0 at `port` with `spec`'s options; it hands back
    /// rank 0's next word.
    fn join(port: u16, rank: u32, size: u32, spec: &SweepSpec) -> thread::JoinHandle<Message> {
        let options = spec.options.clone();
        thread::spawn(move || {
            let t = Duration::from_secs(5);
            let mut ch = Channel::connect("127.0.0.1", port, t, None).unwrap();
            let joining = Joining {
                rank,
                size,
                local_rank: 0,
                options,
                host: "node".into(),
                device: format!("rxe{rank}"),
                fw_ver: None,
                port: 1,
            };
            ch.send(&Message::Join(Box::new(joining))).unwrap();
            ch.recv("the sweep's end").unwrap()
        })
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
}
