//! The fleet's figures a verdict stands on: each test's median over ranks, the healthy
//! pairs' spread and the suspect bar they set, ranks named by the majority of their
//! partners, and how a figure is said against the median.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use crate::report::sweep::lower_is_better;
use crate::report::{FleetFigures, PairRecord, SweepRecord};
use model::stats::median;

/// A healthy pair may stray this many of the fleet's spreads from its median.
const NOISE_SPREADS: f64 = 3.0;

/// The fewest pairs of healthy NICs whose spread says how noisy the fleet is.
pub(super) const SPREAD_PAIRS: usize = 5;

/// The value a pair of test `f` must cross to be a suspect: below `min_pct` of the median
/// (bandwidth) or above `max_lat_factor` times it (latency), or further out where the healthy
/// pairs spread wider.
pub(super) fn bar(f: &FleetFigures, min_pct: f64, max_lat_factor: f64) -> f64 {
    let noise = f.spread.map_or(1.0, |s| (NOISE_SPREADS * s).exp());
    if lower_is_better(&f.unit) {
        f.median * max_lat_factor.max(noise)
    } else {
        f.median * (min_pct / 100.0).min(1.0 / noise)
    }
}

/// The spread of test `test`'s planned pairs between ranks not in `slow`: 1.4826 times the
/// median absolute deviation of the logarithm of their values (a robust standard deviation
/// of the ratio between pairs); `None` with fewer than [`SPREAD_PAIRS`] such pairs, too few
/// to tell noise from a slow NIC (the threshold alone decides then).
pub(super) fn spread(pairs: &[&PairRecord], test: &str, slow: &BTreeSet<u32>) -> Option<f64> {
    let logs: Vec<f64> = pairs
        .iter()
        .filter(|p| p.test == test && !p.rerun)
        .filter(|p| !slow.contains(&p.client) && !slow.contains(&p.server))
        .filter_map(|p| p.value.filter(|v| *v > 0.0).map(f64::ln))
        .collect();
    if logs.len() < SPREAD_PAIRS {
        return None;
    }
    let mid = median(&logs)?;
    let deviations: Vec<f64> = logs.iter().map(|l| (l - mid).abs()).collect();
    median(&deviations).map(|mad| 1.4826 * mad)
}

/// The fleet's figures of one test over its planned pairs (not re-runs). The median is the
/// median over ranks of each rank's median pair: a slow rank is in n - 1 of the n(n-1)/2
/// pairs (half of them for 4 ranks), which would drag a median over pairs toward it, but it
/// is one rank among n.
pub(super) fn fleet(pairs: &[&PairRecord], test: &str) -> Option<FleetFigures> {
    let of_test = || pairs.iter().filter(|p| p.test == test && !p.rerun);
    let values: Vec<f64> = of_test().filter_map(|p| p.value).collect();
    let mut per_rank: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for p in of_test() {
        if let Some(v) = p.value {
            per_rank.entry(p.client).or_default().push(v);
            per_rank.entry(p.server).or_default().push(v);
        }
    }
    let rank_medians: Vec<f64> = per_rank.values().filter_map(|v| median(v)).collect();
    let median = median(&rank_medians)?;
    let unit = of_test().next().map(|p| p.unit.clone()).unwrap_or_default();
    // A bandwidth ceiling bounds bandwidth only: a latency test has none (its bound would be
    // a floor, which the ceilings model does not give).
    let ceiling_gbps = of_test()
        .filter(|_| !lower_is_better(&unit))
        .filter_map(|p| p.record.as_ref().and_then(|r| r.ceilings.limit_gbps))
        .min_by(f64::total_cmp);
    Some(FleetFigures {
        test: test.to_string(),
        unit,
        pairs: values.len() as u32,
        median,
        min: values.iter().copied().fold(f64::INFINITY, f64::min),
        max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ceiling_gbps,
        spread: None,
        suspect_bar: median,
    })
}

/// Per rank, over `tests` (the two ranks of a test, and whether it went bad): its partners,
/// and those of them in a bad test with it. Tests with a rank in `leave_out` do not count.
pub(super) type Partners = BTreeMap<u32, (BTreeSet<u32>, BTreeSet<u32>)>;

pub(super) fn partners_in(tests: &[(u32, u32, bool)], leave_out: &BTreeSet<u32>) -> Partners {
    let mut out = Partners::new();
    for &(a, b, bad) in tests {
        if leave_out.contains(&a) || leave_out.contains(&b) {
            continue;
        }
        for (me, other) in [(a, b), (b, a)] {
            let entry = out.entry(me).or_default();
            entry.0.insert(other);
            if bad {
                entry.1.insert(other);
            }
        }
    }
    out
}

/// Ranks named one at a time, worst first: a rank most of whose partners (at least two) are
/// in a bad test with it, counting only tests between ranks not named yet. Each naming takes
/// the named rank out of its partners' tallies and re-queues them, so the whole is linear in
/// the tests (times a logarithm), however many ranks are named.
pub(super) fn by_majority(tests: &[(u32, u32, bool)]) -> BTreeSet<u32> {
    let mut tally = partners_in(tests, &BTreeSet::new());
    let mut queue: BinaryHeap<BadShare> = tally
        .iter()
        .filter_map(|(&rank, sets)| BadShare::of(rank, sets))
        .collect();
    let mut named = BTreeSet::new();
    while let Some(worst) = queue.pop() {
        let current = tally
            .get(&worst.rank)
            .and_then(|s| BadShare::of(worst.rank, s));
        if named.contains(&worst.rank) || current != Some(worst) {
            continue; // named already, or its tally changed since it was queued
        }
        named.insert(worst.rank);
        // A named rank's own tally is not read again: its partners move out of it.
        let partners = tally
            .get_mut(&worst.rank)
            .map(|(all, _)| std::mem::take(all));
        for other in partners.into_iter().flatten() {
            let Some(sets) = tally.get_mut(&other) else {
                continue;
            };
            sets.0.remove(&worst.rank);
            sets.1.remove(&worst.rank);
            if !named.contains(&other) {
                queue.extend(BadShare::of(other, sets));
            }
        }
    }
    named
}

/// A rank's share of bad partners, by which a majority names it: the largest share
/// of bad partners first, then the most, then the lowest rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BadShare {
    rank: u32,
    bad: usize,
    all: usize,
}

impl BadShare {
    /// Its share, where most of its partners (at least two) are bad.
    fn of(rank: u32, (all, bad): &(BTreeSet<u32>, BTreeSet<u32>)) -> Option<BadShare> {
        let (bad, all) = (bad.len(), all.len());
        (bad >= 2 && 2 * bad > all).then_some(BadShare { rank, bad, all })
    }
}

impl Ord for BadShare {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.bad * other.all)
            .cmp(&(other.bad * self.all))
            .then(self.bad.cmp(&other.bad))
            .then(other.rank.cmp(&self.rank))
    }
}

impl PartialOrd for BadShare {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// How far a pair is from the fleet's median on the bad side (higher is worse): low
/// bandwidth, high latency.
pub(crate) fn badness(p: &PairRecord) -> f64 {
    let pct = p.pct_of_median.unwrap_or(100.0);
    if lower_is_better(&p.unit) {
        pct
    } else {
        -pct
    }
}

/// A figure against the fleet's median (`pct` percent of it), one rule for bandwidth and
/// latency: up to twice the median as a percentage ("14% of the median"), beyond that as a
/// multiple ("380x the median", not "37952%").
pub(crate) fn vs_median(pct: f64) -> String {
    let times = pct / 100.0;
    if pct < 0.95 {
        // Never "0%" of a figure that is there.
        format!("{pct:.1}% of the median")
    } else if times <= 2.0 {
        format!("{pct:.0}% of the median")
    } else if times < 10.0 {
        format!("{times:.1}x the median")
    } else {
        format!("{times:.0}x the median")
    }
}

/// The rank's label, or "rank N" for a rank the record does not list: at its index, where
/// rank 0 lists every rank (a search per flow made an incast's summary the square of the ranks).
pub(crate) fn label(rec: &SweepRecord, rank: u32) -> String {
    let at = rec.ranks.get(rank as usize).filter(|r| r.rank == rank);
    at.or_else(|| rec.ranks.iter().find(|r| r.rank == rank))
        .map_or_else(|| format!("rank {rank}"), |r| r.label.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The naming as it was first written: every rank's tally made again after each naming
    /// (quadratic in the named ranks), kept as the reference the queue must agree with.
    /// Ranks named one at a time, worst first: a rank most of whose partners (at least two) are
    /// in a bad test with it, counting only tests between ranks not named yet.
    fn by_majority_rescanning(tests: &[(u32, u32, bool)]) -> BTreeSet<u32> {
        let mut named = BTreeSet::new();
        loop {
            let worst = partners_in(tests, &named)
                .into_iter()
                .filter(|(_, (all, bad))| bad.len() >= 2 && 2 * bad.len() > all.len())
                .max_by(|(ra, (all_a, bad_a)), (rb, (all_b, bad_b))| {
                    // The largest share of bad partners, then the most, then the lowest rank.
                    (bad_a.len() * all_b.len())
                        .cmp(&(bad_b.len() * all_a.len()))
                        .then(bad_a.len().cmp(&bad_b.len()))
                        .then(rb.cmp(ra))
                });
            match worst {
                Some((rank, _)) => named.insert(rank),
                None => return named,
            };
        }
    }

    proptest! {
        #[test]
        fn the_queue_names_what_rescanning_names(
            tests in proptest::collection::vec((0u32..12, 0u32..12, proptest::bool::weighted(0.4)), 0..80)
        ) {
            let tests: Vec<(u32, u32, bool)> = tests.into_iter().filter(|(a, b, _)| a != b).collect();
            prop_assert_eq!(by_majority(&tests), by_majority_rescanning(&tests));
        }
    }

    #[test]
    fn naming_ten_thousand_slow_ranks_stays_linear() {
        // Every rank in a ring of 40,000 whose index is a multiple of 4 is slow: its two
        // pairs are bad, and so are its neighbours' pairs with it (one of two: not named).
        let n = 40_000u32;
        let tests: Vec<(u32, u32, bool)> = (0..n)
            .flat_map(|r| [(r, (r + 1) % n), (r, (r + 2) % n)])
            .map(|(a, b)| (a, b, a % 4 == 0 || b % 4 == 0))
            .collect();
        let started = std::time::Instant::now();
        let named = by_majority(&tests);
        assert_eq!(named.len(), 10_000);
        assert!(named.iter().all(|r| r % 4 == 0));
        // The rescanning naming rebuilt every tally after each naming: 14 s for a tenth of
        // this (4,000 ranks, 1,000 named; debug build), a hundred times that here. The
        // queue touches each test a few times.
        assert!(
            started.elapsed().as_secs_f64() < 5.0,
            "{:?}",
            started.elapsed()
        );
    }
}
