//! The verdict: what the split found, in one line a person reads first, and the exit status
//! (0 healthy, 3 a finding).

use super::checks::CAUSE;
use super::rate;
use super::record::{TriageRecord, VerdictRecord};
use super::split::Found;
use crate::cluster::locate::rank_ranges;
use model::stats::median;

/// The verdict of `rec` for `found`, with the node checks' lines.
pub(crate) fn verdict(rec: &TriageRecord, found: &Found, checks: Vec<String>) -> VerdictRecord {
    let (kind, ranks, what) = match found {
        Found::Healthy => ("healthy", Vec::new(), "no slow link".to_string()),
        Found::Everywhere => (
            "everywhere",
            Vec::new(),
            "every link of the ring is slow, evenly: not one rank, link or cut (the fabric's \
             settings, PFC/ECN, MTU, the port rates, or the expectation)"
                .to_string(),
        ),
        Found::Ranks(r) => ("rank", vec![r.clone()], rank_cause(rec, r, &checks)),
        Found::Link([a, b]) => (
            "link",
            vec![vec![*a, *b]],
            format!(
                "the path between {} and {}: slow together ({}), each fine with a known-good \
                 partner",
                who(rec, *a),
                who(rec, *b),
                slowest(rec, &[*a, *b])
            ),
        ),
        Found::OneOf(r) => (
            "one_of",
            vec![r.clone()],
            format!(
                "one of {} is slow ({}); no known-good rank was left to tell which",
                rank_ranges(r),
                slowest(rec, r)
            ),
        ),
        Found::Cut([a, b]) => ("cut", vec![a.clone(), b.clone()], cut(rec, a, b)),
        Found::Unexplained(why) => (
            "unexplained",
            Vec::new(),
            format!("no rank, link or cut explains it: {why} (load from outside the job?)"),
        ),
    };
    let healthy = matches!(found, Found::Healthy);
    let line = if healthy {
        format!("HEALTHY - {}; {what}", ring_figures(rec))
    } else {
        format!("{what}; {}", ring_figures(rec))
    };
    VerdictRecord {
        kind: kind.into(),
        ranks,
        line,
        checks,
        exit: if healthy { 0 } else { 3 },
    }
}

/// "rank 2 (rxe2 of node-b)".
fn who(rec: &TriageRecord, rank: u32) -> String {
    match rec.ranks.get(rank as usize) {
        Some(r) if !r.label.is_empty() => format!("rank {rank} ({})", r.label),
        _ => format!("rank {rank}"),
    }
}

/// The ring's figures against the reference: "the all-reduce runs at 5% of expected (busbw
/// 0.0006 GB/s, algbw 0.0004 GB/s; expected 0.0120 GB/s from ...)".
fn ring_figures(rec: &TriageRecord) -> String {
    let Some(c) = &rec.collective else {
        return "the ring was not measured".into();
    };
    let Some(busbw) = c.busbw_gbps else {
        return format!(
            "a flow of the ring of {} ranks failed, so it has no busbw",
            c.ranks
        );
    };
    let algbw = c.algbw_gbps.unwrap_or(0.0);
    let (reference, of) = match &rec.expected {
        Some(e) => (e.busbw_gbps, format!("expected ({})", e.from)),
        None => (ring_median(rec), "the ring's median link".to_string()),
    };
    format!(
        "the all-reduce of {} ranks runs at {:.0}% of {of}: busbw {}, algbw {}",
        c.ranks,
        100.0 * busbw / reference.max(f64::MIN_POSITIVE),
        rate(busbw),
        rate(algbw)
    )
}

/// The median rate of the ring's links.
fn ring_median(rec: &TriageRecord) -> f64 {
    let rates: Vec<f64> = rec
        .collective
        .iter()
        .flat_map(|c| c.per_rank.iter().filter_map(|r| r.link_gbps))
        .collect();
    median(&rates).unwrap_or(0.0)
}

/// The slowest flow of `ranks` in the last round, and the bar: "0.0006 GB/s, below 0.0060".
fn slowest(rec: &TriageRecord, ranks: &[u32]) -> String {
    let Some(step) = rec.steps.last() else {
        return "not measured".into();
    };
    let least = step
        .flows
        .iter()
        .filter(|f| f.slow && (ranks.contains(&f.from) || ranks.contains(&f.to)))
        .map(|f| f.gbps.unwrap_or(0.0))
        .fold(f64::INFINITY, f64::min);
    if least.is_finite() {
        format!("{}, below {}", rate(least), rate(step.bar_gbps))
    } else {
        format!("below {}", rate(step.bar_gbps))
    }
}

/// A named rank's cause: the first counter finding on its NIC, else its slow flows.
fn rank_cause(rec: &TriageRecord, ranks: &[u32], checks: &[String]) -> String {
    let names: Vec<String> = ranks.iter().map(|&r| who(rec, r)).collect();
    let cause = checks
        .iter()
        .find_map(|c| c.split_once(CAUSE).map(|(_, rest)| rest.to_string()));
    match cause {
        Some(c) => format!("{}: {c}", names.join(", ")),
        None => format!(
            "{}: slow with a known-good partner ({})",
            names.join(", "),
            slowest(rec, ranks)
        ),
    }
}

/// "cut between ranks 0-2 (leaf0) and ranks 3-5 (leaf1): 3 of 3 pairs across slow (0.0006
/// GB/s at most), each side fine".
fn cut(rec: &TriageRecord, a: &[u32], b: &[u32]) -> String {
    let side = |ranks: &[u32]| {
        let leaves: Vec<&str> = ranks
            .iter()
            .filter_map(|&r| rec.ranks.get(r as usize).and_then(|x| x.leaf.as_deref()))
            .collect();
        match leaves.first() {
            Some(l) if leaves.len() == ranks.len() && leaves.iter().all(|x| x == l) => {
                format!("{} (leaf {l})", rank_ranges(ranks))
            }
            _ => rank_ranges(ranks),
        }
    };
    let across = rec.steps.last().map(|s| &s.flows[..]).unwrap_or(&[]);
    let slow = across.iter().filter(|f| f.slow).count();
    format!(
        "cut between {} and {}: {slow} of {} flows across slow ({}), each side fine within",
        side(a),
        side(b),
        across.len(),
        slowest(rec, &[a, b].concat())
    )
}
