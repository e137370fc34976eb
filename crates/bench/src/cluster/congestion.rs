//! The congestion patterns: which runs go on at once, how they group, and each group's
//! figures. Unlike `schedule.rs`'s rounds of disjoint pairs, a congestion round loads NICs
//! with several runs together (`together.rs` starts their measured windows at once):
//!
//! - `incast`: `--fan-in` K senders write into one receiver. With `--root` that receiver
//!   alone; without, every rank in turn, its K senders the ranks after it, groups of
//!   disjoint ranks packed into rounds (about K + 1 rounds whatever n is);
//! - `bisection`: rank i of the first half writes into rank i + n/2, all at once, in one
//!   round (ranks in launch order: a launcher numbers them node by node);
//! - `all-to-all`: every rank writes into every other at once, one round, for a small
//!   group (at most [`ALL_TO_ALL_UP_TO`] ranks: n(n-1) runs).
//!
//! A group (an incast's receiver and its senders; a bisection; an all-to-all) is reported by
//! its flows, their total against the sum of the receivers' ceilings, Jain's fairness index
//! of the flows, and the receivers' congestion counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::median::label;
use super::pattern::Pattern;
use super::schedule::{Pair, Rounds, ScheduleError};
use crate::doctor::congestion::{classify, Kind};
use crate::report::{GroupRecord, PairRecord, RunRecord, SweepRecord};
use crate::text::printable;
use crate::units::four_digits as number;

/// The most ranks an all-to-all takes: each rank runs 2(n - 1) runs at once.
pub(crate) const ALL_TO_ALL_UP_TO: usize = 16;

/// The most senders into each receiver of an incast into every rank: its plan holds n x K
/// flows in about K + 1 rounds, each round a row of the ranks, so that a K that grows with
/// n (K = n - 1: n(n - 1) flows, n rounds) would make it the square of the ranks. An incast
/// into one receiver (`--root`) holds K flows and takes up to the ranks less one.
pub(crate) const FAN_IN_UP_TO: usize = 64;

/// Incast: each receiver with `fan_in` senders (the ranks after it, wrapping), one receiver
/// (`root`) or every rank in turn, groups of disjoint ranks packed into rounds.
pub(crate) fn incast(
    n: usize,
    fan_in: usize,
    root: Option<usize>,
) -> Result<Rounds, ScheduleError> {
    at_least_two(n)?;
    if fan_in == 0 || fan_in >= n {
        return Err(ScheduleError::FanIn { fan_in, size: n });
    }
    if root.is_none() && fan_in > FAN_IN_UP_TO {
        return Err(ScheduleError::FanInEveryRank {
            fan_in,
            most: FAN_IN_UP_TO,
        });
    }
    let group = |r: usize| -> Vec<Pair> {
        (1..=fan_in)
            .map(|i| Pair {
                a: r,
                b: (r + i) % n,
            })
            .collect()
    };
    if let Some(root) = root {
        if root >= n {
            return Err(ScheduleError::NoSuchRank {
                rank: root,
                size: n,
            });
        }
        return Ok(vec![group(root)]);
    }
    let mut rounds: Rounds = Vec::new();
    let mut busy: Vec<Vec<bool>> = Vec::new();
    for r in 0..n {
        let flows = group(r);
        let ranks: Vec<usize> = std::iter::once(r)
            .chain(flows.iter().map(|p| p.b))
            .collect();
        let at = busy
            .iter()
            .position(|b| ranks.iter().all(|&x| !b[x]))
            .unwrap_or_else(|| {
                busy.push(vec![false; n]);
                rounds.push(Vec::new());
                busy.len() - 1
            });
        for &x in &ranks {
            busy[at][x] = true;
        }
        rounds[at].extend(flows);
    }
    Ok(rounds)
}

/// Bisection: rank i of the first half writes into rank i + n/2 (an odd n's last rank
/// rests), all in one round.
pub(crate) fn bisection(n: usize) -> Result<Rounds, ScheduleError> {
    at_least_two(n)?;
    let half = n / 2;
    Ok(vec![(0..half)
        .map(|i| Pair { a: half + i, b: i })
        .collect()])
}

/// All-to-all: every rank writes into every other, all in one round.
pub(crate) fn all_to_all(n: usize) -> Result<Rounds, ScheduleError> {
    at_least_two(n)?;
    if n > ALL_TO_ALL_UP_TO {
        return Err(ScheduleError::TooMany {
            pattern: "all-to-all",
            size: n,
            most: ALL_TO_ALL_UP_TO,
            why: "each runs 2(n-1) runs at once",
        });
    }
    let flows = (0..n)
        .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| Pair { a, b }))
        .collect();
    Ok(vec![flows])
}

fn at_least_two(n: usize) -> Result<(), ScheduleError> {
    if n < 2 {
        return Err(ScheduleError::TooFew(n));
    }
    Ok(())
}

/// The groups of one round's flows: an incast's per receiver, the others' all together.
pub(crate) fn groups(pattern: Pattern, flows: &[Pair]) -> Vec<Vec<Pair>> {
    if pattern != Pattern::Incast {
        return vec![flows.to_vec()];
    }
    let mut by_receiver: BTreeMap<usize, Vec<Pair>> = BTreeMap::new();
    for p in flows {
        by_receiver.entry(p.a).or_default().push(*p);
    }
    by_receiver.into_values().collect()
}

/// One group's record from its flows (the sender's figures) and each flow's served record
/// (the receiver's ceilings and counters), in the same order.
pub(crate) fn group_record(
    round: u32,
    test: &str,
    flows: Vec<PairRecord>,
    served: &[Option<Box<RunRecord>>],
) -> GroupRecord {
    let mut receivers: Vec<u32> = flows.iter().map(|p| p.server).collect();
    receivers.sort_unstable();
    receivers.dedup();
    let values: Vec<f64> = flows.iter().filter_map(|p| p.value).collect();
    let total = (!values.is_empty()).then(|| values.iter().sum::<f64>());
    let ceiling = receivers
        .iter()
        .map(|&r| receiver_ceiling(r, &flows, served))
        .sum::<Option<f64>>();
    let counters = receivers
        .iter()
        .map(|&r| (r, receiver_counters(r, &flows, served)))
        .collect();
    GroupRecord {
        round,
        test: test.to_string(),
        receivers,
        total_gbps: total,
        ceiling_gbps: ceiling,
        pct_of_ceiling: total
            .zip(ceiling)
            .filter(|&(_, c)| c > 0.0)
            .map(|(t, c)| t / c * 100.0),
        fairness: jain(&values),
        receiver_counters: counters,
        flows,
    }
}

/// Jain's fairness index of `values`: (sum x)^2 / (n sum x^2).
fn jain(values: &[f64]) -> Option<f64> {
    let squares: f64 = values.iter().map(|v| v * v).sum();
    (squares > 0.0).then(|| values.iter().sum::<f64>().powi(2) / (values.len() as f64 * squares))
}

/// A receiver's ceiling (GB/s), from the records of the runs it served.
fn receiver_ceiling(
    rank: u32,
    flows: &[PairRecord],
    served: &[Option<Box<RunRecord>>],
) -> Option<f64> {
    flows
        .iter()
        .zip(served)
        .filter(|(p, _)| p.server == rank)
        .filter_map(|(_, r)| r.as_ref()?.ceilings.limit_gbps)
        .reduce(f64::max)
}

/// A receiver's error, loss and congestion counters over its served runs (which overlap:
/// each counter's largest change), zeros included.
fn receiver_counters(
    rank: u32,
    flows: &[PairRecord],
    served: &[Option<Box<RunRecord>>],
) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let records = flows
        .iter()
        .zip(served)
        .filter(|(p, _)| p.server == rank)
        .filter_map(|(_, r)| r.as_ref()?.counters.as_ref());
    for counters in records {
        for (name, &delta) in counters.iter().filter(|(n, _)| classify(n).is_some()) {
            // A rank's words: shown and recorded as text, never as control sequences.
            let e = out.entry(printable(name)).or_default();
            *e = (*e).max(delta);
        }
    }
    out
}

/// Flows listed one by one up to this many; beyond, the slowest.
const FLOWS_SHOWN: usize = 8;

/// What rank 0 prints of a congestion sweep's groups.
pub fn render(rec: &SweepRecord) -> String {
    let mut out = String::new();
    for g in &rec.groups {
        let (unit, k) = crate::units::display_unit("GB/s", g.total_gbps);
        let receivers: Vec<String> = g
            .receivers
            .iter()
            .map(|&r| format!("rank {r} ({})", label(rec, r)))
            .collect();
        let into = match receivers.as_slice() {
            [one] => one.clone(),
            _ => format!("{} receivers", receivers.len()),
        };
        let _ = writeln!(
            out,
            "{} into {into}, {}, round {}: {} flow(s) at once",
            rec.pattern,
            g.test,
            g.round + 1,
            g.flows.len()
        );
        flow_lines(&mut out, rec, g, (&unit, k));
        let _ = writeln!(out, "  {}", total_line(g, (&unit, k)));
        for (&r, counters) in &g.receiver_counters {
            let _ = writeln!(out, "  {}", counters_line(&label(rec, r), counters));
        }
    }
    out
}

fn flow_lines(out: &mut String, rec: &SweepRecord, g: &GroupRecord, (unit, k): (&str, f64)) {
    let mut shown: Vec<&PairRecord> = g.flows.iter().collect();
    if shown.len() > FLOWS_SHOWN {
        shown.sort_by(|a, b| a.value.unwrap_or(-1.0).total_cmp(&b.value.unwrap_or(-1.0)));
        shown.truncate(FLOWS_SHOWN);
        let _ = writeln!(out, "  the {FLOWS_SHOWN} slowest flows:");
    }
    for p in shown {
        let from = format!(
            "rank {} ({}) -> rank {}",
            p.client,
            label(rec, p.client),
            p.server
        );
        let figure = match (p.value, &p.error) {
            (Some(v), _) => {
                let share = g
                    .total_gbps
                    .filter(|&t| t > 0.0)
                    .map(|t| format!("  {:>3.0} % of the total", v / t * 100.0))
                    .unwrap_or_default();
                format!("{} {unit}{share}", number(v * k))
            }
            (None, Some(e)) => format!("failed: {e}"),
            (None, None) => "not measured".to_string(),
        };
        let _ = writeln!(out, "  {from:40}  {figure}");
    }
}

fn total_line(g: &GroupRecord, (unit, k): (&str, f64)) -> String {
    let Some(total) = g.total_gbps else {
        return "total: no flow measured".to_string();
    };
    let whose = if g.receivers.len() == 1 {
        "the receiver's ceiling"
    } else {
        "the receivers' ceilings summed"
    };
    let ceiling = match (g.pct_of_ceiling, g.ceiling_gbps) {
        (Some(pct), Some(c)) => format!(", {pct:.0} % of {whose} {} {unit}", number(c * k)),
        _ => format!(" ({whose} unknown)"),
    };
    let fairness = g
        .fairness
        .map(|f| format!("; fairness {f:.2} (Jain's index, 1 = equal shares)"))
        .unwrap_or_default();
    format!("total {} {unit}{ceiling}{fairness}", number(total * k))
}

/// A receiver's counters in a line: its congestion counters (zeros too), then whatever else
/// climbed.
fn counters_line(who: &str, counters: &BTreeMap<String, u64>) -> String {
    if counters.is_empty() {
        return format!("counters of {who}: none readable");
    }
    let short = |n: &str| n.rsplit('/').next().unwrap_or(n).to_string();
    let congestion: Vec<String> = counters
        .iter()
        .filter(|(n, _)| classify(n) == Some(Kind::Congestion))
        .map(|(n, v)| format!("{} {v}", short(n)))
        .collect();
    let climbed: Vec<String> = counters
        .iter()
        .filter(|(n, &v)| v > 0 && classify(n) != Some(Kind::Congestion))
        .map(|(n, v)| format!("{} +{v}", short(n)))
        .collect();
    let first = if congestion.is_empty() {
        "no congestion counters (ECN, CNP, pause) on this NIC".to_string()
    } else {
        congestion.join(", ")
    };
    let rest = if climbed.is_empty() {
        "no error or loss counter climbed".to_string()
    } else {
        climbed.join(", ")
    };
    format!("counters of {who}: {first}; {rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incast_gives_every_receiver_its_senders_in_about_fan_in_plus_one_rounds() {
        let rounds = incast(4, 3, Some(0)).unwrap();
        assert_eq!(
            rounds,
            [vec![
                Pair { a: 0, b: 1 },
                Pair { a: 0, b: 2 },
                Pair { a: 0, b: 3 }
            ]]
        );
        for (n, k) in [(4, 3), (10, 3), (1024, 3), (7, 2), (9, 8)] {
            let rounds = incast(n, k, None).unwrap();
            let mut received = vec![0; n];
            for round in &rounds {
                // A rank is in one group of a round: one receiver, or one sender.
                let mut seen = vec![0; n];
                for g in groups(Pattern::Incast, round) {
                    assert_eq!(g.len(), k);
                    received[g[0].a] += 1;
                    seen[g[0].a] += 1;
                    for p in &g {
                        seen[p.b] += 1;
                    }
                }
                assert!(seen.iter().all(|&s| s <= 1), "n {n} k {k}");
            }
            assert!(received.iter().all(|&r| r == 1), "n {n} k {k}");
            assert!(rounds.len() <= 2 * (k + 1), "n {n} k {k}: {}", rounds.len());
        }
        assert_eq!(incast(1024, 3, None).unwrap().len(), 4);
        assert!(incast(4, 4, None).is_err());
        assert!(incast(4, 3, Some(4)).is_err());
    }

    /// A rank's record whose NIC names its counters with escape sequences and a newline: what
    /// a hostile rank sends rank 0.
    fn hostile_served() -> RunRecord {
        let fixture = include_str!("../../tests/fixtures/records/write-bw.json");
        let mut rec: RunRecord = serde_json::from_str(fixture).unwrap();
        rec.counters = Some(BTreeMap::from([
            ("hw_counters/np_cnp_sent\x1b]0;owned\x07".to_string(), 3),
            ("counters/symbol_error\n\x1b[2Kincast OK".to_string(), 2),
        ]));
        rec
    }

    #[test]
    fn a_ranks_counter_names_reach_rank_0s_terminal_and_the_record_escaped() {
        let mut rec = crate::report::sweep::sample_sweep();
        rec.pattern = "incast".into();
        let served = [Some(Box::new(hostile_served()))];
        let flow = crate::report::sweep::sample_pair(0, 1, 0, "write-bw", "GB/s", Some(1.0), 1.0);
        rec.groups = vec![group_record(0, "write-bw", vec![flow], &served)];
        let text = render(&rec);
        assert!(!text.contains('\x1b'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("incast OK")), "{text}");
        assert!(
            text.contains("np_cnp_sent\\u{1b}]0;owned\\u{7} 3"),
            "{text}"
        );
        // The counters that climbed in a pair's test, as the verdict names a NIC by them.
        let climbed =
            super::super::verdict::alarming(served[0].as_ref().unwrap().counters.as_ref());
        assert_eq!(
            climbed.keys().collect::<Vec<_>>(),
            [
                "counters/symbol_error\\n\\u{1b}[2Kincast OK",
                "hw_counters/np_cnp_sent\\u{1b}]0;owned\\u{7}"
            ]
        );
    }

    #[test]
    fn bisection_and_all_to_all_run_in_one_round() {
        assert_eq!(
            bisection(5).unwrap(),
            [vec![Pair { a: 2, b: 0 }, Pair { a: 3, b: 1 }]]
        );
        let all = all_to_all(4).unwrap();
        assert_eq!((all.len(), all[0].len()), (1, 12));
        let e = all_to_all(17).unwrap_err().to_string();
        assert_eq!(
            e,
            "all-to-all takes at most 16 ranks (each runs 2(n-1) runs at once), not 17"
        );
    }

    #[test]
    fn fairness_is_one_for_equal_shares_and_one_over_k_for_one_taking_all() {
        assert!((jain(&[3.0, 3.0, 3.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((jain(&[9.0, 0.0, 0.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
    }
}
