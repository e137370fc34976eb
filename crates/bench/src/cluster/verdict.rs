//! The sweep's verdict, a pure function of its record: each pair against the fleet's median
//! (a suspect below `min_pct` of it for bandwidth, above `max_lat_factor` times it for
//! latency; said as [`vs_median`] says it), then the NICs named.
//!
//! The bar a suspect crosses is the threshold, or further out when the fleet's healthy pairs
//! themselves spread wider (three times their spread, a robust standard deviation of the
//! logarithm over the pairs of no NIC named slow): under emulation healthy pairs differ by
//! 2-3x, and a healthy NIC must not be named for it.
//!
//! First, `locate.rs` names the paths beyond one NIC that the pairs show (between two
//! leaves, one node toward a leaf, or a cut inferred without a topology). The pairs a path
//! explains stay out of the median, the spread and the NICs' tallies, and are not re-run:
//! in a fleet of two leaves with a slow uplink every NIC has most of its partners across
//! it, and none of them is to blame.
//!
//! A pair is between two NICs, so a suspect pair alone does not say which one is slow. Ranks
//! are named one at a time, worst first: a rank most of whose partners (at least two) are in
//! a suspect pair with it is named slow, and its pairs no longer count against the others
//! (so the partners of one slow NIC are not named for it). A suspect pair that no named rank
//! explains is re-run, each of its ranks against a known-good partner (a rank in no
//! unexplained suspect pair), and a rank that is still a suspect there is named. Failed tests
//! are findings too, named the same way: a rank in a failed test with most of its partners
//! (at least two, tests a retry did not save) is named failing, with the errors' class. A
//! rank whose error or congestion counters climbed in most of its pairs (at least two), and
//! in more of them than the fleet's typical rank, is named for its counters.

use std::collections::{BTreeMap, BTreeSet};

use super::locate;
use super::median::{
    badness, bar, by_majority, fleet, label, partners_in, spread, vs_median, Partners,
};
use crate::doctor::congestion::classify;
use crate::report::sweep::lower_is_better;
use crate::report::{FleetFigures, NamedNic, PairRecord, SweepRecord};
use crate::text::printable;
use model::stats::median;

/// Fills every pair's place against the median, the fleet's figures, the paths beyond one
/// NIC (`locate.rs`) and the named NICs, in that order: the fleet's figures and suspects
/// leave out the pairs a path explains, and the NICs are named on the pairs left.
pub fn judge(rec: &mut SweepRecord) {
    rec.paths = locate::find(rec);
    settle(rec);
    // A path the final suspects do not bear out is dropped, and its pairs count again.
    let found = std::mem::take(&mut rec.paths);
    let before = found.len();
    rec.paths = found
        .into_iter()
        .filter(|p| locate::borne_out(rec, p))
        .collect();
    if rec.paths.len() != before {
        settle(rec);
    }
    locate::describe(rec);
    let mut named = name_slow(rec);
    named.extend(name_failing(rec));
    named.extend(name_counters(rec));
    named.extend(name_unreachable(rec));
    rec.named = named;
    super::preflight::annotate(rec);
}

/// The fleet's figures and each pair's place against them, over the pairs no path in
/// `rec.paths` explains: first by the thresholds alone, to find the pairs of no slow NIC;
/// then with the bar their spread sets.
fn settle(rec: &mut SweepRecord) {
    let explained = locate::explained(&rec.paths);
    rec.fleet = fleet_figures(rec, &explained);
    mark_suspects(rec);
    let slow = slow_by_majority(&rec.pairs, &explained);
    let kept = unexplained(&rec.pairs, &explained);
    // The pairs no path explains tell the noise: those of the NICs not (provisionally)
    // slow, or where they are too few, all of them (the median absolute deviation stands a
    // few slow pairs; a provisional slow NIC among few pairs may be noise itself); only
    // where even they are too few, the pairs across the paths add their scatter (around
    // their own level). Not before: a shaped path's pairs sit closer together than a
    // fleet's healthy ones, and would hide their noise.
    let none: BTreeSet<u32> = BTreeSet::new();
    let spreads: Vec<Option<f64>> = rec
        .fleet
        .iter()
        .map(|f| {
            spread(&kept, &f.test, &slow)
                .or_else(|| {
                    let few = !rec.paths.is_empty();
                    few.then(|| spread(&kept, &f.test, &none)).flatten()
                })
                .or_else(|| {
                    (!rec.paths.is_empty())
                        .then(|| locate::spread_beside_paths(rec, &f.test, &slow))
                        .flatten()
                })
        })
        .collect();
    for (f, s) in rec.fleet.iter_mut().zip(spreads) {
        f.spread = s;
        f.suspect_bar = bar(f, rec.min_pct, rec.max_lat_factor);
    }
    mark_suspects(rec);
}

/// The pairs no path explains.
fn unexplained<'a>(
    pairs: &'a [PairRecord],
    explained: &BTreeSet<(u32, u32)>,
) -> Vec<&'a PairRecord> {
    pairs
        .iter()
        .filter(|p| !explained.contains(&pair_key(p)))
        .collect()
}

/// A pair's two ranks in increasing order.
fn pair_key(p: &PairRecord) -> (u32, u32) {
    (p.client.min(p.server), p.client.max(p.server))
}

/// Per test, the fleet's figures: the count, smallest, largest and ceiling over every
/// planned pair, the median over those no path explains; the bar from the thresholds alone.
fn fleet_figures(rec: &SweepRecord, explained: &BTreeSet<(u32, u32)>) -> Vec<FleetFigures> {
    let all: Vec<&PairRecord> = rec.pairs.iter().collect();
    let kept = unexplained(&rec.pairs, explained);
    rec.tests
        .iter()
        .filter_map(|t| {
            let mut f = fleet(&all, t)?;
            if let Some(healthy) = fleet(&kept, t) {
                f.median = healthy.median;
            }
            f.suspect_bar = bar(&f, rec.min_pct, rec.max_lat_factor);
            Some(f)
        })
        .collect()
}

/// Each measured pair's percentage of its test's median and whether it crosses the bar.
fn mark_suspects(rec: &mut SweepRecord) {
    for p in &mut rec.pairs {
        let Some(f) = rec.fleet.iter().find(|f| f.test == p.test) else {
            continue;
        };
        p.pct_of_median = p.value.map(|v| 100.0 * v / f.median);
        p.suspect = match (p.value, lower_is_better(&p.unit)) {
            (Some(v), true) => v > f.suspect_bar,
            (Some(v), false) => v < f.suspect_bar,
            (None, _) => false,
        };
    }
}

/// The planned pairs that measured a figure and that no path explains, and whether each is
/// a suspect.
fn measured(pairs: &[PairRecord], explained: &BTreeSet<(u32, u32)>) -> Vec<(u32, u32, bool)> {
    pairs
        .iter()
        .filter(|p| !p.rerun && p.value.is_some() && !explained.contains(&pair_key(p)))
        .map(|p| (p.client, p.server, p.suspect))
        .collect()
}

/// Per rank: the partners of its planned pairs no path explains, and those of them in a
/// suspect pair.
fn partners(pairs: &[PairRecord], explained: &BTreeSet<(u32, u32)>) -> Partners {
    partners_in(&measured(pairs, explained), &BTreeSet::new())
}

/// Ranks named slow by their planned pairs that no path explains.
fn slow_by_majority(pairs: &[PairRecord], explained: &BTreeSet<(u32, u32)>) -> BTreeSet<u32> {
    by_majority(&measured(pairs, explained))
}

/// The re-runs the verdict needs, as (server, client): each rank of a suspect pair that no
/// slow rank and no path explains, against a known-good partner not across a path from it;
/// empty when nothing is unexplained or no rank is known to be good.
pub(crate) fn reruns(rec: &SweepRecord) -> Vec<(u32, u32)> {
    let standing = Standing::of(rec);
    let Standing {
        explained, slow, ..
    } = &standing;
    let mut doubtful: BTreeSet<u32> = judged(rec, &standing)
        .iter()
        .filter(|j| j.thin())
        .map(|j| j.rank)
        .collect();
    for p in rec.pairs.iter().filter(|p| p.suspect && !p.rerun) {
        let unexplained = !explained.contains(&pair_key(p));
        if unexplained && !slow.contains(&p.client) && !slow.contains(&p.server) {
            doubtful.insert(p.client);
            doubtful.insert(p.server);
        }
    }
    against_good(&standing, &doubtful, &BTreeSet::new())
}

/// What the planned pairs say of each rank once the paths are settled: the pairs the paths
/// explain, the ranks slow by their majority, and each rank's partners (and the suspect
/// ones) among the pairs left.
struct Standing {
    explained: BTreeSet<(u32, u32)>,
    slow: BTreeSet<u32>,
    partners: Partners,
}

impl Standing {
    fn of(rec: &SweepRecord) -> Standing {
        let explained = locate::explained(&rec.paths);
        Standing {
            slow: slow_by_majority(&rec.pairs, &explained),
            partners: partners(&rec.pairs, &explained),
            explained,
        }
    }
}

/// The second opinions the verdict needs, as (server, client): each rank a re-run found a
/// suspect but only once, against another known-good partner where there is one. One
/// emulated re-run has measured 40% of the median beside a healthy fleet: a NIC is named on
/// re-runs only when [`CONFIRMING_RERUNS`] of them agree.
pub(crate) fn second_opinions(rec: &SweepRecord) -> Vec<(u32, u32)> {
    let standing = Standing::of(rec);
    let mut once: BTreeSet<u32> = BTreeSet::new();
    let mut used: BTreeSet<(u32, u32)> = BTreeSet::new();
    for test in &rec.tests {
        for (rank, runs) in reruns_by_rank(rec, test, &standing.explained) {
            if runs.len() < CONFIRMING_RERUNS && runs.iter().all(|p| p.suspect) {
                once.insert(rank);
                used.extend(runs.iter().map(|p| (p.server, rank)));
            }
        }
    }
    against_good(&standing, &once, &used)
}

/// Each of `ranks` against a known-good partner not across a path from it (spread over the
/// good ranks; one not in `used` where there is one), as (server, client).
fn against_good(
    standing: &Standing,
    ranks: &BTreeSet<u32>,
    used: &BTreeSet<(u32, u32)>,
) -> Vec<(u32, u32)> {
    let Standing {
        explained,
        slow,
        partners,
    } = standing;
    // Good: not slow, and in no suspect pair that a slow rank does not explain.
    let good: Vec<u32> = partners
        .iter()
        .filter(|(r, (_, bad))| !slow.contains(r) && bad.is_subset(slow))
        .map(|(&r, _)| r)
        .collect();
    let mut out = Vec::new();
    for (i, &rank) in ranks.iter().enumerate() {
        let fits = |&&g: &&u32| g != rank && !explained.contains(&(g.min(rank), g.max(rank)));
        let choices: Vec<&u32> = good.iter().filter(fits).collect();
        let fresh: Vec<&u32> = choices
            .iter()
            .copied()
            .filter(|&&g| !used.contains(&(g, rank)))
            .collect();
        let from = if fresh.is_empty() { &choices } else { &fresh };
        if let Some(&&partner) = from.get(i % from.len().max(1)) {
            out.push((partner, rank));
        }
    }
    out
}

/// How many re-runs against known-good partners must all find a rank a suspect to name it.
const CONFIRMING_RERUNS: usize = 2;

/// Per client rank, its re-runs of `test` that no path explains.
fn reruns_by_rank<'a>(
    rec: &'a SweepRecord,
    test: &str,
    explained: &BTreeSet<(u32, u32)>,
) -> BTreeMap<u32, Vec<&'a PairRecord>> {
    let mut out: BTreeMap<u32, Vec<&PairRecord>> = BTreeMap::new();
    for p in rec.pairs.iter().filter(|p| p.rerun && p.test == test) {
        if p.value.is_some() && !explained.contains(&pair_key(p)) {
            out.entry(p.client).or_default().push(p);
        }
    }
    out
}

fn name_slow(rec: &SweepRecord) -> Vec<NamedNic> {
    let standing = Standing::of(rec);
    let mut out = Vec::new();
    // A thin rank is named only when its re-run confirms it (below).
    for j in judged(rec, &standing).iter().filter(|j| !j.thin()) {
        let worst = worst_pct(rec, j.rank, false);
        out.push(named(
            rec,
            j.rank,
            "slow",
            format!("{worst} in {} of {} pairs", j.bad, j.partners),
        ));
    }
    // A suspect again against known-good partners (not across a path), every time of at
    // least CONFIRMING_RERUNS.
    for test in &rec.tests {
        for (rank, runs) in reruns_by_rank(rec, test, &standing.explained) {
            let confirmed = runs.len() >= CONFIRMING_RERUNS && runs.iter().all(|p| p.suspect);
            if confirmed && !out.iter().any(|n| n.rank == rank && n.kind == "slow") {
                let worst = worst_pct(rec, rank, true);
                let against: BTreeSet<String> = runs.iter().map(|p| p.server.to_string()).collect();
                let against: Vec<String> = against.into_iter().collect();
                let why = format!(
                    "{worst}, also against known-good rank(s) {}",
                    against.join(", ")
                );
                out.push(named(rec, rank, "slow", why));
            }
        }
    }
    out
}

/// The fewest partners (pairs no path explains) whose majority names a NIC slow by itself;
/// with fewer (beside a path, say), a re-run against a known-good partner must confirm it.
const SURE_PARTNERS: usize = 3;

/// A slow-by-majority rank judged by its partners other than the slow ranks before it.
struct Judged {
    rank: u32,
    /// Its partners (in planned pairs no path explains) left.
    partners: usize,
    /// Those of them in a suspect pair.
    bad: usize,
}

impl Judged {
    /// Too few partners for its majority alone to name it: two are too few to tell a slow NIC
    /// from two noisy pairs, so a re-run against a known-good partner must confirm it.
    fn thin(&self) -> bool {
        self.partners < SURE_PARTNERS
    }
}

/// The ranks slow by majority, the plainest first (the median badness of its suspect planned
/// pairs), each judged by its partners other than the slow ranks before it, whose pairs explain
/// theirs with it: a rank whose one slow pair is with a slower NIC has that many fewer partners
/// to judge it by (at five nodes, a NIC with two noisy pairs beside its pair with the throttled
/// one was named "slow in 3 of 3 pairs"). One pass over the pairs and each slow rank's partners:
/// linear in the pairs.
fn judged(rec: &SweepRecord, standing: &Standing) -> Vec<Judged> {
    let mut badness_of: BTreeMap<u32, Vec<f64>> =
        standing.slow.iter().map(|&r| (r, Vec::new())).collect();
    let unexplained = |p: &&PairRecord| !standing.explained.contains(&pair_key(p));
    for p in rec
        .pairs
        .iter()
        .filter(|p| !p.rerun && p.suspect)
        .filter(unexplained)
    {
        for rank in [p.client, p.server] {
            if let Some(b) = badness_of.get_mut(&rank) {
                b.push(badness(p));
            }
        }
    }
    let mut order: Vec<(f64, u32)> = badness_of
        .into_iter()
        .map(|(rank, b)| (median(&b).unwrap_or(0.0), rank))
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut before = BTreeSet::new();
    let mut out = Vec::new();
    for (_, rank) in order {
        let left = |set: &BTreeSet<u32>| set.iter().filter(|o| !before.contains(*o)).count();
        let (partners, bad) = standing
            .partners
            .get(&rank)
            .map_or((0, 0), |(all, bad)| (left(all), left(bad)));
        out.push(Judged {
            rank,
            partners,
            bad,
        });
        before.insert(rank);
    }
    out
}

/// The ranks rank 0 lost (never joined, died, stopped answering), each with since when and
/// what rank 0 saw.
fn name_unreachable(rec: &SweepRecord) -> Vec<NamedNic> {
    rec.ranks
        .iter()
        .filter_map(|r| {
            let lost = r.unreachable.as_ref()?;
            let why = format!("since round {}: {}", lost.round + 1, lost.why);
            Some(named(rec, r.rank, "unreachable", why))
        })
        .collect()
}

/// The planned tests that failed and never passed (a retry that passed saves a test), each
/// as its last failed attempt.
pub(crate) fn failed_tests(rec: &SweepRecord) -> Vec<&PairRecord> {
    failed_by_test(rec).into_values().collect()
}

/// A planned test: its server, client and test.
type TestKey<'a> = (u32, u32, &'a str);

fn test_key(p: &PairRecord) -> TestKey<'_> {
    (p.server, p.client, p.test.as_str())
}

/// [`failed_tests`] by test.
fn failed_by_test(rec: &SweepRecord) -> BTreeMap<TestKey<'_>, &PairRecord> {
    let passed: BTreeSet<TestKey> = rec
        .pairs
        .iter()
        .filter(|p| p.error.is_none())
        .map(test_key)
        .collect();
    rec.pairs
        .iter()
        .filter(|p| p.error.is_some() && !p.rerun && !passed.contains(&test_key(p)))
        .map(|p| (test_key(p), p))
        .collect()
}

/// What kind of failure an error is, for the verdict: "retry exceeded" (the NIC gave up
/// resending: a link that loses packets or a peer that stopped answering), "timeout" (the
/// control channel or a loop waited in vain), "no rate" (nothing completed in the measured
/// window), else "error".
pub(crate) fn error_class(error: &str) -> &'static str {
    let e = error.to_ascii_lowercase();
    if e.contains("retry exceeded") || e.contains("retry counter exceeded") {
        "retry exceeded"
    } else if e.contains("cannot compute a rate") || e.contains("no operation completed") {
        "no rate"
    } else if [
        "timed out",
        "timeout",
        "no completion for",
        "no answer",
        "within",
    ]
    .iter()
    .any(|w| e.contains(w))
    {
        "timeout"
    } else {
        "error"
    }
}

/// Ranks in a failed test with most of their partners (at least two), worst first, as
/// slow ones are named: a failure is a finding, and the NIC in every failure is its cause.
fn name_failing(rec: &SweepRecord) -> Vec<NamedNic> {
    let by_test = failed_by_test(rec);
    if by_test.is_empty() {
        return Vec::new();
    }
    let tests: Vec<(u32, u32, bool)> = rec
        .pairs
        .iter()
        .filter(|p| !p.rerun && !p.retry)
        .map(|p| (p.client, p.server, by_test.contains_key(&test_key(p))))
        .collect();
    let failed: Vec<&PairRecord> = by_test.into_values().collect();
    by_majority(&tests)
        .into_iter()
        .map(|rank| {
            let of_rank = |p: &&PairRecord| p.client == rank || p.server == rank;
            let mine: Vec<&PairRecord> = failed.iter().copied().filter(of_rank).collect();
            let all = tests.iter().filter(|t| t.0 == rank || t.1 == rank).count();
            let classes: BTreeSet<&str> = mine
                .iter()
                .map(|p| error_class(p.error.as_deref().unwrap_or("")))
                .collect();
            let classes: Vec<&str> = classes.into_iter().collect();
            let why = format!(
                "failed in {} of its {all} tests ({})",
                mine.len(),
                classes.join(", ")
            );
            named(rec, rank, "failing", why)
        })
        .collect()
}

/// "write-bw 14% of the median" for a rank's worst suspect pair.
fn worst_pct(rec: &SweepRecord, rank: u32, rerun: bool) -> String {
    rec.pairs
        .iter()
        .filter(|p| p.suspect && p.rerun == rerun && (p.client == rank || p.server == rank))
        .filter(|p| p.pct_of_median.is_some())
        .max_by(|a, b| badness(a).total_cmp(&badness(b)))
        .map(|p| format!("{} {}", p.test, vs_median(p.pct_of_median.unwrap_or(0.0))))
        .unwrap_or_else(|| "suspect".to_string())
}

fn named(rec: &SweepRecord, rank: u32, kind: &str, why: String) -> NamedNic {
    NamedNic {
        rank,
        label: label(rec, rank),
        kind: kind.to_string(),
        why,
    }
}

/// The counters that climbed on each side of one pair's test, by rank.
fn climbing(p: &PairRecord) -> [(u32, &BTreeMap<String, u64>); 2] {
    [
        (p.client, &p.client_counters),
        (p.server, &p.server_counters),
    ]
}

/// The deltas of a run's counters that say something went wrong (errors, loss, congestion),
/// without the traffic totals.
pub(crate) fn alarming(counters: Option<&BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    counters
        .into_iter()
        .flatten()
        .filter(|(name, &delta)| delta > 0 && classify(name).is_some())
        .map(|(n, &d)| (printable(n), d)) // a rank's words: never control sequences
        .collect()
}

fn name_counters(rec: &SweepRecord) -> Vec<NamedNic> {
    // Per rank: pairs measured, pairs with climbing counters, and the sums.
    let mut per_rank: BTreeMap<u32, (u32, u32, BTreeMap<String, u64>)> = BTreeMap::new();
    for p in rec.pairs.iter().filter(|p| p.value.is_some()) {
        for (rank, climbed) in climbing(p) {
            let entry = per_rank.entry(rank).or_default();
            entry.0 += 1;
            if !climbed.is_empty() {
                entry.1 += 1;
            }
            for (name, delta) in climbed {
                *entry.2.entry(name.clone()).or_default() += delta;
            }
        }
    }
    // Where counters climb on every NIC (retransmissions under emulation, a fabric-wide
    // congestion event), no NIC stands out: the fleet's share is the bar to clear.
    let share = |tests: u32, climbed: u32| f64::from(climbed) / f64::from(tests.max(1));
    let shares: Vec<f64> = per_rank.values().map(|&(t, c, _)| share(t, c)).collect();
    let typical = median(&shares).unwrap_or(0.0);
    per_rank
        .into_iter()
        .filter(|(_, (tests, climbed, _))| {
            *climbed >= 2 && 2 * climbed > *tests && share(*tests, *climbed) > typical
        })
        .map(|(rank, (tests, climbed, sums))| {
            let list: Vec<String> = sums.iter().map(|(n, d)| format!("{n} +{d}")).collect();
            named(
                rec,
                rank,
                "counters",
                format!(
                    "climbing in {climbed} of its {tests} tests: {}",
                    list.join(", ")
                ),
            )
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
