//! What is slow beyond one NIC: a path between two leaves (an uplink, the spine), one node's
//! path toward a leaf, or, without `--topology`, a cut the matrix itself shows. Pure
//! functions of the sweep record, called by `verdict::judge` before it names NICs: the pairs
//! a path explains count against no NIC, stay out of the fleet's median and bar (so that
//! healthy pairs define them) and are not re-run.
//!
//! Each test is judged on its own, against a level a broken path cannot drag: the median
//! (over ranks, as the fleet's) of the pairs inside leaves (inside groups, for a cut), and a
//! spread measured within *cells*, each one rank's pairs toward one leaf: a slow NIC, a slow
//! uplink or one NIC's slow path toward a leaf moves whole cells, so the scatter within them
//! is noise. A pair past the bar (the thresholds, or three spreads, as the fleet's) is *bad*.
//!
//! - **between leaves** (A, B): more than half of the measured pairs across are bad (at
//!   least 2, with at least two ranks of each leaf among them), and the pairs inside each
//!   leaf are mostly fine (leaving out a NIC slow with most of its own leaf: that one is a
//!   NIC's to answer for).
//! - **toward leaf** (NIC r of leaf A, leaf X): more than half of r's pairs toward X are bad
//!   (at least 2); most of its other pairs are fine (at least 2 of them) and their median
//!   stands above that of its pairs toward X by as much as the bar stands below the median
//!   (a slow NIC's pairs all sit low, wherever noise puts them around the bar); and most
//!   pairs of A's other ranks toward X are fine.
//! - **cut** (no rank has a leaf): the pairs' figures fall in two clusters far apart (Otsu's
//!   split; each cluster at least 3 figures, their medians at least three of their pooled
//!   spreads and the threshold apart, an empty gap of a spread between them); the pairs of
//!   the upper cluster join the ranks into groups (a rank left out joins the group its
//!   pairs are clearly best with), and two groups of at least two ranks each are cut apart
//!   when at least 80% of the pairs across (at least 2) are bad, by the bar or by being
//!   worse than every pair inside the two groups. A slow NIC isolates one rank, so it never
//!   makes a cut; noise makes no two clusters far apart.
//!
//! Once the fleet's figures are settled without the pairs the paths explain, a path stays
//! only where the pairs bear it out (the same shares, a pair across bad when it is a
//! suspect by the final bar or worse than every pair beside the path); its `why` is
//! written then. **Invariants:** one NIC's pairs alone never make a path (a slow NIC is
//! named, not its leaf); a path explains every pair across it and no other.
//!
//! Long because the three kinds share their level, their noise and their bearing out, which
//! are one concern; about 240 lines are tests.

use std::collections::{BTreeMap, BTreeSet};

use super::median::{bar, by_majority, fleet, label, spread, vs_median, SPREAD_PAIRS};
use crate::report::sweep::lower_is_better;
use crate::report::{FleetFigures, NamedPath, PairRecord, SweepRecord};
use model::stats::median;

/// Every pair across two leaves slow, the pairs inside each fine.
pub(crate) const BETWEEN: &str = "between leaves";
/// The same inferred from the matrix, without a topology.
pub(crate) const CUT: &str = "cut";
/// One node's pairs slow toward one leaf only.
pub(crate) const TOWARD: &str = "toward leaf";

/// A cut needs at least this share of the pairs across bad.
const CUT_SHARE: f64 = 0.8;

/// The fewest figures a cluster holds: two (say the two pairs inside a cut of 2 + 2 ranks)
/// are too few to tell from noise.
const CLUSTER_LEAST: usize = 3;

/// Two clusters of figures are far apart when their medians are at least this many of
/// their pooled spreads apart (and the empty gap between them is at least one spread wide).
const CLUSTER_GAP_SPREADS: f64 = 3.0;

/// A pair's key: its two ranks in increasing order.
fn key(a: u32, b: u32) -> (u32, u32) {
    (a.min(b), a.max(b))
}

/// One test's pair, judged: its ranks (in increasing order) and whether it is bad.
type Judged = (u32, u32, bool);

/// The pairs the paths explain: every pair across each, by its ranks in increasing order.
pub(crate) fn explained(paths: &[NamedPath]) -> BTreeSet<(u32, u32)> {
    let mut out = BTreeSet::new();
    for p in paths {
        for &a in &p.ranks[0] {
            for &b in p.ranks[1].iter().filter(|&&b| b != a) {
                out.insert(key(a, b));
            }
        }
    }
    out
}

/// What a person reads before a path's `why`: "between leaves leaf0 and leaf1", "cut between
/// ranks 0-2 and ranks 3-5", "from mlx5_0 of node3 toward leaf leaf1".
pub(crate) fn headline(p: &NamedPath) -> String {
    let [a, b] = &p.between;
    match p.kind.as_str() {
        BETWEEN => format!("between leaves {a} and {b}"),
        CUT => format!("cut between {a} and {b}"),
        TOWARD => format!("from {a} toward leaf {b}"),
        other => format!("{other} {a} and {b}"),
    }
}

/// "ranks 0-2,5": ranks in increasing order, runs joined.
pub(crate) fn rank_ranges(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for r in sorted {
        match runs.last_mut() {
            Some(run) if run.1 + 1 == r => run.1 = r,
            _ => runs.push((r, r)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let word = if ranks.len() == 1 { "rank" } else { "ranks" };
    format!("{word} {}", text.join(","))
}

/// The planned measurements of `test` with a figure, one per pair.
fn measured<'a>(rec: &'a SweepRecord, test: &str) -> Vec<&'a PairRecord> {
    rec.measurements(test)
        .into_values()
        .filter(|p| p.value.is_some() && !p.rerun)
        .collect()
}

/// The paths the pairs' figures show, `why` still empty: per test, between leaves and
/// toward a leaf where ranks have leaves, else cuts; one path for the tests that show it.
pub(super) fn find(rec: &SweepRecord) -> Vec<NamedPath> {
    let leaf_of: BTreeMap<u32, &str> = rec
        .ranks
        .iter()
        .filter_map(|r| r.leaf.as_deref().map(|l| (r.rank, l)))
        .collect();
    let mut out: Vec<NamedPath> = Vec::new();
    for test in &rec.tests {
        let pairs = measured(rec, test);
        let found = if leaf_of.is_empty() {
            cuts(rec, test, &pairs)
        } else {
            by_leaves(rec, test, &pairs, &leaf_of)
        };
        for path in found {
            if !out
                .iter()
                .any(|p| p.kind == path.kind && p.between == path.between)
            {
                out.push(path);
            }
        }
    }
    out
}

/// The bar of `test` for `pairs` whose ranks sit in classes (`class_of`: a rank's leaf or
/// group; `None` for a rank in none): the median of the pairs inside a class, which a
/// broken path cannot drag, and the spread of [`cell_spread`], which a gap between classes
/// does not widen; the spread of all pairs where cells hold too few.
fn level<K: Ord + Copy>(
    rec: &SweepRecord,
    test: &str,
    pairs: &[&PairRecord],
    class_of: impl Fn(u32) -> Option<K>,
) -> Option<FleetFigures> {
    let inside: Vec<&PairRecord> = pairs
        .iter()
        .filter(|p| class_of(p.client).is_some() && class_of(p.client) == class_of(p.server))
        .copied()
        .collect();
    let mut f = fleet(&inside, test)?;
    f.spread = cell_spread(pairs, class_of).or_else(|| spread(pairs, test, &BTreeSet::new()));
    f.suspect_bar = bar(&f, rec.min_pct, rec.max_lat_factor);
    Some(f)
}

/// How widely pairs stray as noise: within *cells*, each one rank's pairs toward one class
/// of partners. A slow NIC, a slow path between leaves or one NIC's slow path toward a leaf
/// moves whole cells, so their scatter within cells is noise alone. The differences of
/// consecutive pairs of a cell (in rank order, not by value), their median over all cells
/// divided by 0.6745 x sqrt 2: a standard deviation of the logarithm, as the fleet's
/// `spread`; `None` with fewer than [`SPREAD_PAIRS`] differences.
fn cell_spread<K: Ord + Copy>(
    pairs: &[&PairRecord],
    class_of: impl Fn(u32) -> Option<K>,
) -> Option<f64> {
    let mut cells: BTreeMap<(u32, K), Vec<f64>> = BTreeMap::new();
    for p in pairs {
        let Some(v) = p.value.filter(|v| *v > 0.0) else {
            continue;
        };
        for (me, other) in [(p.client, p.server), (p.server, p.client)] {
            if let (Some(_), Some(class)) = (class_of(me), class_of(other)) {
                cells.entry((me, class)).or_default().push(v.ln());
            }
        }
    }
    let differences: Vec<f64> = cells
        .values()
        .flat_map(|c| c.windows(2).map(|w| (w[1] - w[0]).abs()))
        .collect();
    if differences.len() < SPREAD_PAIRS {
        return None;
    }
    median(&differences).map(|d| d / (0.6745 * std::f64::consts::SQRT_2))
}

/// How widely values stray within their classes: 1.4826 times the median absolute
/// deviation of each value from its own class's median, robust to a few values far out (a
/// slow NIC's pairs within a class). The median value of a class of odd size, which is no
/// deviation at all, is left out, so that small classes do not make noise look smaller
/// than it is. `None` with fewer than [`SPREAD_PAIRS`] deviations.
pub(super) fn pooled_spread<'a>(classes: impl Iterator<Item = &'a Vec<f64>>) -> Option<f64> {
    let mut deviations = Vec::new();
    for class in classes.filter(|c| c.len() >= 2) {
        let mid = median(class)?;
        let mut own: Vec<f64> = class.iter().map(|v| (v - mid).abs()).collect();
        if class.len() % 2 == 1 {
            own.sort_by(f64::total_cmp);
            own.remove(0);
        }
        deviations.extend(own);
    }
    if deviations.len() < SPREAD_PAIRS {
        return None;
    }
    median(&deviations).map(|mad| 1.4826 * mad)
}

/// The spread of `test` once paths are named: the pairs no path explains and of no rank in
/// `slow`, and around their own median the pairs across each path (their scatter is noise
/// too, their level is not), as [`pooled_spread`] pools them; `None` with too few.
pub(super) fn spread_beside_paths(
    rec: &SweepRecord,
    test: &str,
    slow: &BTreeSet<u32>,
) -> Option<f64> {
    let sides: Vec<BTreeMap<u32, usize>> = rec.paths.iter().map(side_map).collect();
    let mut classes: Vec<Vec<f64>> = vec![Vec::new(); rec.paths.len() + 1];
    for p in measured(rec, test) {
        let (Some(v), (a, b)) = (p.value.filter(|v| *v > 0.0), key(p.client, p.server)) else {
            continue;
        };
        if slow.contains(&a) || slow.contains(&b) {
            continue;
        }
        let across = |side: &BTreeMap<u32, usize>| {
            let (sa, sb) = (side.get(&a), side.get(&b));
            sa.is_some() && sb.is_some() && sa != sb
        };
        // Class 0: the pairs no path explains; class i + 1: those across path i.
        let class = sides.iter().position(across).map_or(0, |i| i + 1);
        classes[class].push(v.ln());
    }
    pooled_spread(classes.iter())
}

/// Each pair with a figure judged against the bar of `f`.
fn judged(pairs: &[&PairRecord], f: &FleetFigures) -> Vec<Judged> {
    let with_figure: Vec<&PairRecord> = pairs
        .iter()
        .filter(|p| p.value.is_some())
        .copied()
        .collect();
    judged_all(&with_figure, f)
}

/// Every one of `pairs` judged against the bar of `f`, in order (one without a figure is
/// not bad).
fn judged_all(pairs: &[&PairRecord], f: &FleetFigures) -> Vec<Judged> {
    let lower = lower_is_better(&f.unit);
    pairs
        .iter()
        .map(|p| {
            let bad = p.value.is_some_and(|v| {
                if lower {
                    v > f.suspect_bar
                } else {
                    v < f.suspect_bar
                }
            });
            let (a, b) = key(p.client, p.server);
            (a, b, bad)
        })
        .collect()
}

fn node(kind: &str, between: [String; 2], ranks: [Vec<u32>; 2]) -> NamedPath {
    NamedPath {
        kind: kind.to_string(),
        between,
        ranks,
        why: String::new(),
    }
}

/// Paths between leaves, then toward a leaf on the pairs those leave unexplained.
fn by_leaves(
    rec: &SweepRecord,
    test: &str,
    pairs: &[&PairRecord],
    leaf_of: &BTreeMap<u32, &str>,
) -> Vec<NamedPath> {
    let Some(f) = level(rec, test, pairs, |r| leaf_of.get(&r).copied()) else {
        return Vec::new();
    };
    let all = judged(pairs, &f);
    let mut found = between_leaves(&all, leaf_of);
    let gone = explained(&found);
    let rest: Vec<Judged> = all
        .into_iter()
        .filter(|&(a, b, _)| !gone.contains(&(a, b)))
        .collect();
    let lower = lower_is_better(&f.unit);
    let score: BTreeMap<(u32, u32), f64> = pairs
        .iter()
        .filter_map(|p| {
            let v = p.value.filter(|v| *v > 0.0)?;
            Some((
                key(p.client, p.server),
                if lower { -v.ln() } else { v.ln() },
            ))
        })
        .collect();
    let margin = (f.median / f.suspect_bar).ln().abs();
    found.extend(toward_leaves(rec, &rest, leaf_of, &score, margin));
    found
}

/// The ranks on `leaf`.
fn ranks_on(leaf_of: &BTreeMap<u32, &str>, leaf: &str) -> Vec<u32> {
    leaf_of
        .iter()
        .filter(|(_, l)| **l == leaf)
        .map(|(&r, _)| r)
        .collect()
}

/// Whether the pairs across (each as (rank of one side, rank of the other, bad)) are bad
/// in at least `share` of them (more than half when `share` is 0.5), at least two, with at
/// least two ranks of each side among the bad ones: one NIC's pairs alone are no path.
fn bad_across(across: &[Judged], share: f64) -> bool {
    let bad: Vec<&Judged> = across.iter().filter(|t| t.2).collect();
    let sides: [BTreeSet<u32>; 2] = [
        bad.iter().map(|t| t.0).collect(),
        bad.iter().map(|t| t.1).collect(),
    ];
    let enough = if share <= 0.5 {
        2 * bad.len() > across.len()
    } else {
        bad.len() as f64 >= share * across.len() as f64
    };
    bad.len() >= 2 && enough && sides.iter().all(|s| s.len() >= 2)
}

/// Whether most pairs inside a leaf are fine, leaving out the NICs slow with most of it.
fn fine_inside(tests: Option<&Vec<Judged>>) -> bool {
    let Some(tests) = tests else {
        return false;
    };
    let slow = by_majority(tests);
    let rest: Vec<&Judged> = tests
        .iter()
        .filter(|t| !slow.contains(&t.0) && !slow.contains(&t.1))
        .collect();
    let fine = rest.iter().filter(|t| !t.2).count();
    !rest.is_empty() && 2 * fine > rest.len()
}

/// Pairs of leaves whose pairs across are mostly bad while inside each leaf they are fine.
fn between_leaves(all: &[Judged], leaf_of: &BTreeMap<u32, &str>) -> Vec<NamedPath> {
    let mut across: BTreeMap<(&str, &str), Vec<Judged>> = BTreeMap::new();
    let mut inside: BTreeMap<&str, Vec<Judged>> = BTreeMap::new();
    for &(a, b, bad) in all {
        let (Some(&la), Some(&lb)) = (leaf_of.get(&a), leaf_of.get(&b)) else {
            continue;
        };
        if la == lb {
            inside.entry(la).or_default().push((a, b, bad));
        } else if la < lb {
            across.entry((la, lb)).or_default().push((a, b, bad));
        } else {
            across.entry((lb, la)).or_default().push((b, a, bad));
        }
    }
    across
        .into_iter()
        .filter(|((la, lb), list)| {
            bad_across(list, 0.5) && fine_inside(inside.get(la)) && fine_inside(inside.get(lb))
        })
        .map(|((la, lb), _)| {
            node(
                BETWEEN,
                [la.to_string(), lb.to_string()],
                [ranks_on(leaf_of, la), ranks_on(leaf_of, lb)],
            )
        })
        .collect()
}

/// Pairs measured and bad.
type Tally = (usize, usize);

fn add(t: &mut Tally, bad: bool) {
    t.0 += 1;
    t.1 += usize::from(bad);
}

/// More than half bad, at least two.
fn mostly_bad((n, bad): Tally) -> bool {
    bad >= 2 && 2 * bad > n
}

/// At least `least` measured, more than half of them fine.
fn mostly_fine((n, bad): Tally, least: usize) -> bool {
    n >= least && 2 * (n - bad) > n
}

/// NICs whose pairs toward one other leaf are mostly bad, the rest of theirs fine and
/// standing as far above them as the bar stands below the median (`margin`, in the
/// logarithm: a slow NIC's pairs all sit low, however noise places them around the bar),
/// and their leaf's other NICs fine toward that leaf. `score` is each pair's logarithm,
/// higher better.
fn toward_leaves(
    rec: &SweepRecord,
    rest: &[Judged],
    leaf_of: &BTreeMap<u32, &str>,
    score: &BTreeMap<(u32, u32), f64>,
    margin: f64,
) -> Vec<NamedPath> {
    // Per rank, per its partners' leaf: the tally and the scores; per (leaf, partners' leaf).
    let mut per_rank: BTreeMap<u32, BTreeMap<&str, (Tally, Vec<f64>)>> = BTreeMap::new();
    let mut per_leaf: BTreeMap<(&str, &str), Tally> = BTreeMap::new();
    for &(a, b, bad) in rest {
        let (Some(&la), Some(&lb)) = (leaf_of.get(&a), leaf_of.get(&b)) else {
            continue;
        };
        let g = score.get(&(a, b)).copied().unwrap_or(0.0);
        for (me, mine, theirs) in [(a, la, lb), (b, lb, la)] {
            let entry = per_rank.entry(me).or_default().entry(theirs).or_default();
            add(&mut entry.0, bad);
            entry.1.push(g);
            add(per_leaf.entry((mine, theirs)).or_default(), bad);
        }
    }
    let mut out = Vec::new();
    for (&rank, toward) in &per_rank {
        let Some(&mine) = leaf_of.get(&rank) else {
            continue;
        };
        for (&leaf, (t, low)) in toward.iter().filter(|(l, _)| **l != mine) {
            let mut others: (Tally, Vec<f64>) = ((0, 0), Vec::new());
            for (_, (o, g)) in toward.iter().filter(|(l, _)| **l != leaf) {
                others.0 = (others.0 .0 + o.0, others.0 .1 + o.1);
                others.1.extend(g);
            }
            let apart = median(&others.1).zip(median(low)).map(|(hi, lo)| hi - lo);
            let whole = per_leaf.get(&(mine, leaf)).copied().unwrap_or_default();
            let neighbours = (whole.0 - t.0, whole.1 - t.1);
            if mostly_bad(*t)
                && mostly_fine(others.0, 2)
                && apart.is_some_and(|d| d >= margin)
                && mostly_fine(neighbours, 1)
            {
                out.push(node(
                    TOWARD,
                    [label(rec, rank), leaf.to_string()],
                    [vec![rank], ranks_on(leaf_of, leaf)],
                ));
            }
        }
    }
    out
}

/// A pair's (client, server, goodness).
type Scored = (u32, u32, f64);

/// Each pair of `pairs` with a figure as (client, server, goodness): the log of its figure,
/// higher is better for bandwidth and latency alike; and the least gap on that scale that
/// counts (the thresholds'). `None` without pairs.
fn scored(rec: &SweepRecord, pairs: &[&PairRecord]) -> Option<(Vec<Scored>, f64)> {
    let lower = lower_is_better(&pairs.first()?.unit);
    let goodness = |v: f64| if lower { -v.ln() } else { v.ln() };
    let scored = pairs
        .iter()
        .filter_map(|p| p.value.filter(|v| *v > 0.0).map(|v| (p, v)))
        .map(|(p, v)| (p.client, p.server, goodness(v)))
        .collect();
    let floor = if lower {
        rec.max_lat_factor.ln()
    } else {
        (100.0 / rec.min_pct).ln()
    };
    Some((scored, floor))
}

/// Cuts the matrix shows, without a topology.
fn cuts(rec: &SweepRecord, test: &str, pairs: &[&PairRecord]) -> Vec<NamedPath> {
    let Some((scored, floor)) = scored(rec, pairs) else {
        return Vec::new();
    };
    let values: Vec<f64> = scored.iter().map(|s| s.2).collect();
    let Some(threshold) = two_clusters(&values, floor, CLUSTER_LEAST) else {
        return Vec::new();
    };
    let good: Vec<(u32, u32)> = scored
        .iter()
        .filter(|s| s.2 >= threshold)
        .map(|s| (s.0, s.1))
        .collect();
    let mut groups = groups(&good);
    if groups.len() < 2 {
        return Vec::new();
    }
    attach_loose(&scored, &mut groups, floor);
    cut_groups(rec, test, pairs, &groups)
}

/// Why a sweep without a topology should measure more pairs before its verdict, or `None`
/// when its figures decide: a test's pairs split into two clusters far apart (as a cut's,
/// each cluster of at least [`UNDECIDED_LEAST`], the lower's best pair at most half the
/// upper's worst), the lower holding half the pairs or more (the slow crossing is the
/// fleet's median), at least as many of the lower pairs join two NICs that each have a pair
/// in the upper (a slow NIC has none: its pairs explain themselves), and no cut is named:
/// too few pairs fall inside the groups to tell one. So it is when most pairs cross the cut (ranks placed
/// across two leaves in turn), and the slow crossing is the fleet's median.
pub(crate) fn undecided_cut(rec: &SweepRecord) -> Option<String> {
    if !rec.paths.is_empty() || rec.ranks.iter().any(|r| r.leaf.is_some()) {
        return None;
    }
    rec.tests.iter().find_map(|test| {
        let pairs = measured(rec, test);
        let (scored, floor) = scored(rec, &pairs)?;
        let values: Vec<f64> = scored.iter().map(|s| s.2).collect();
        let threshold = two_clusters(&values, floor, UNDECIDED_LEAST)?;
        let low: Vec<&Scored> = scored.iter().filter(|s| s.2 < threshold).collect();
        let best_low = low.iter().map(|s| s.2).fold(f64::NEG_INFINITY, f64::max);
        if threshold - best_low < UNDECIDED_GAP {
            return None;
        }
        // A slow NIC's pairs are all low; a cut's ranks each have a good pair inside their
        // side (most of them, in a few rounds). The low pairs between such ranks are the cut's.
        let good: BTreeSet<u32> = scored
            .iter()
            .filter(|s| s.2 >= threshold)
            .flat_map(|s| [s.0, s.1])
            .collect();
        let between_good = low
            .iter()
            .filter(|s| good.contains(&s.0) && good.contains(&s.1))
            .count();
        // Half the pairs or more low: the fleet's median is itself a slow pair, and the
        // verdict against it would name nothing.
        let median_low = 2 * low.len() >= scored.len();
        (median_low && between_good >= UNDECIDED_LEAST).then(|| {
            format!(
                "{test}: {} of {} pairs far below the rest, {between_good} of them between NICs \
                 that have good pairs, too few inside groups to tell a cut",
                low.len(),
                scored.len()
            )
        })
    })
}

/// The fewest figures a cluster holds for [`undecided_cut`]: two pairs of different ranks
/// far below the rest are worth more pairs, not yet a cut.
const UNDECIDED_LEAST: usize = 2;

/// How far below the rest, on the goodness scale, [`undecided_cut`]'s lower cluster lies:
/// its best pair at most half the worst of the rest (an emulated fleet's healthy pairs
/// scatter too widely for a closer split of a few pairs to mean anything).
const UNDECIDED_GAP: f64 = std::f64::consts::LN_2;

/// Each rank in no group joins the group its pairs are clearly best with: their median (on
/// the goodness scale) above its median with every other group by at least `floor` (the
/// threshold). Noise can drop all of a healthy rank's pairs inside its side below the
/// clusters' split, and it must not stay outside the cut (its pairs across would name it);
/// a slow NIC is as slow toward every group, and stays out.
fn attach_loose(scored: &[(u32, u32, f64)], groups: &mut [Vec<u32>], floor: f64) {
    let mut ranks: BTreeSet<u32> = BTreeSet::new();
    for s in scored {
        ranks.insert(s.0);
        ranks.insert(s.1);
    }
    let placed: BTreeSet<u32> = groups.iter().flatten().copied().collect();
    let mut joins: Vec<(usize, u32)> = Vec::new();
    for r in ranks.difference(&placed) {
        let toward: Vec<f64> = groups
            .iter()
            .map(|g| {
                let with: Vec<f64> = scored
                    .iter()
                    .filter(|s| (s.0 == *r && g.contains(&s.1)) || (s.1 == *r && g.contains(&s.0)))
                    .map(|s| s.2)
                    .collect();
                median(&with).unwrap_or(f64::NEG_INFINITY)
            })
            .collect();
        let Some((best, &top)) = toward.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
            continue;
        };
        let clear = toward
            .iter()
            .enumerate()
            .all(|(i, &m)| i == best || top - m >= floor);
        if clear && top.is_finite() {
            joins.push((best, *r));
        }
    }
    for (g, r) in joins {
        groups[g].push(r);
        groups[g].sort_unstable();
    }
}

/// The groups whose pairs across are cut, judged against the pairs inside the groups.
fn cut_groups(
    rec: &SweepRecord,
    test: &str,
    pairs: &[&PairRecord],
    groups: &[Vec<u32>],
) -> Vec<NamedPath> {
    let group_of: BTreeMap<u32, usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(i, g)| g.iter().map(move |&r| (r, i)))
        .collect();
    let Some(f) = level(rec, test, pairs, |r| group_of.get(&r).copied()) else {
        return Vec::new();
    };
    // Each group's pairs inside it: a pair across worse than every one of them in its two
    // groups is bad, whatever noise beside the cut did to the bar.
    let lower = lower_is_better(&f.unit);
    let mut inside: BTreeMap<usize, Worst> = BTreeMap::new();
    for p in pairs {
        if let (Some(&ga), Some(&gb), Some(v)) =
            (group_of.get(&p.client), group_of.get(&p.server), p.value)
        {
            if ga == gb {
                inside.entry(ga).or_insert_with(|| Worst::new(lower)).add(v);
            }
        }
    }
    let mut across: BTreeMap<(usize, usize), Vec<Judged>> = BTreeMap::new();
    for (p, (a, b, bad)) in pairs.iter().zip(judged_all(pairs, &f)) {
        let (Some(&ga), Some(&gb)) = (group_of.get(&a), group_of.get(&b)) else {
            continue;
        };
        if ga == gb {
            continue;
        }
        let mut beside = Worst::new(lower);
        for g in [ga, gb] {
            if let Some(w) = inside.get(&g) {
                beside.join(w);
            }
        }
        let bad = bad || p.value.is_some_and(|v| beside.beaten_by(v));
        let ((i, j), t) = if ga < gb {
            ((ga, gb), (a, b, bad))
        } else {
            ((gb, ga), (b, a, bad))
        };
        across.entry((i, j)).or_default().push(t);
    }
    across
        .into_iter()
        .filter(|(_, list)| bad_across(list, CUT_SHARE))
        .map(|((i, j), _)| {
            let (gi, gj) = (groups[i].clone(), groups[j].clone());
            node(CUT, [rank_ranges(&gi), rank_ranges(&gj)], [gi, gj])
        })
        .collect()
}

/// A robust standard deviation: 1.4826 times the median absolute deviation.
fn robust_sd(values: &[f64]) -> f64 {
    let Some(mid) = median(values) else {
        return 0.0;
    };
    let deviations: Vec<f64> = values.iter().map(|v| (v - mid).abs()).collect();
    median(&deviations).map_or(0.0, |mad| 1.4826 * mad)
}

/// Where `values` split into two clusters far apart (Otsu's split, kept when each holds at
/// least `least`, their medians are at least `floor` and [`CLUSTER_GAP_SPREADS`]
/// of their pooled spreads apart, and the empty gap between them is at least one such
/// spread wide): the lowest value of the upper cluster; `None` when they do not.
fn two_clusters(values: &[f64], floor: f64, least: usize) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n < 4 {
        return None;
    }
    let total: f64 = v.iter().sum();
    let mut low_sum = 0.0;
    let mut best: Option<(usize, f64)> = None;
    for k in 1..n {
        low_sum += v[k - 1];
        let (w0, w1) = (k as f64, (n - k) as f64);
        let gap = (total - low_sum) / w1 - low_sum / w0;
        let score = w0 * w1 * gap * gap;
        if v[k] > v[k - 1] && best.is_none_or(|(_, s)| score > s) {
            best = Some((k, score));
        }
    }
    let (k, _) = best?;
    let (low, high) = v.split_at(k);
    if low.len() < least || high.len() < least {
        return None;
    }
    let gap = median(high)? - median(low)?;
    // Pooled over both clusters: a tight cluster of shaped pairs beside healthy ones that
    // emulation scatters 20x apart is still two clusters.
    let (n_low, n_high) = (low.len() as f64, high.len() as f64);
    let pooled = n_low * robust_sd(low).powi(2) + n_high * robust_sd(high).powi(2);
    let within = (pooled / (n_low + n_high)).sqrt();
    let clear = high[0] - low[low.len() - 1];
    let apart = gap >= floor && gap >= CLUSTER_GAP_SPREADS * within && clear >= within;
    apart.then_some(high[0])
}

/// The groups of at least two ranks that `edges` join, each in increasing order, by their
/// lowest rank.
fn groups(edges: &[(u32, u32)]) -> Vec<Vec<u32>> {
    let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
    // Union-find: each rank's root, the paths on the way shortened to it.
    fn root(parent: &mut BTreeMap<u32, u32>, r: u32) -> u32 {
        let mut top = r;
        while let Some(&p) = parent.get(&top).filter(|&&p| p != top) {
            top = p;
        }
        let mut at = r;
        while at != top {
            let next = parent.insert(at, top).unwrap_or(top);
            at = next;
        }
        top
    }
    for &(a, b) in edges {
        parent.entry(a).or_insert(a);
        parent.entry(b).or_insert(b);
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        if ra != rb {
            parent.insert(ra.max(rb), ra.min(rb));
        }
    }
    let ranks: Vec<u32> = parent.keys().copied().collect();
    let mut by_root: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for r in ranks {
        let top = root(&mut parent, r);
        by_root.entry(top).or_default().push(r);
    }
    by_root.into_values().filter(|g| g.len() >= 2).collect()
}

/// Each rank of a path's sides, by the side it is on (0 or 1).
fn side_map(p: &NamedPath) -> BTreeMap<u32, usize> {
    let mut out = BTreeMap::new();
    for (i, side) in p.ranks.iter().enumerate() {
        for &r in side {
            out.entry(r).or_insert(i);
        }
    }
    out
}

/// The pairs across a path in `test` and the pairs beside them (inside its two sides; for
/// a NIC toward a leaf, its other pairs).
fn sides<'a>(rec: &'a SweepRecord, p: &NamedPath, test: &str) -> [Vec<&'a PairRecord>; 2] {
    let side = side_map(p);
    let toward = p.kind == TOWARD;
    let mut out = [Vec::new(), Vec::new()];
    for pair in measured(rec, test) {
        let (a, b) = (side.get(&pair.client), side.get(&pair.server));
        let across = a.is_some() && b.is_some() && a != b;
        let beside = if toward {
            !across && (a == Some(&0) || b == Some(&0))
        } else {
            a.is_some() && a == b
        };
        if across {
            out[0].push(pair);
        } else if beside {
            out[1].push(pair);
        }
    }
    out
}

/// Whether the final suspects bear the path out in some test: the same shares as found it,
/// a pair across counting as bad when it is a suspect or worse than every pair beside the
/// path (noise beside a path can widen the fleet's bar past some pairs across, but a pair
/// below all the healthy ones is still the path's).
pub(super) fn borne_out(rec: &SweepRecord, p: &NamedPath) -> bool {
    let share = if p.kind == CUT { CUT_SHARE } else { 0.5 };
    let side = side_map(p);
    rec.tests.iter().any(|test| {
        let [across, beside] = sides(rec, p, test);
        let list: Vec<Judged> = worse_across(&across, &beside)
            .into_iter()
            .map(|(q, bad)| {
                let first = side.get(&q.client) == Some(&0);
                let (a, b) = if first {
                    (q.client, q.server)
                } else {
                    (q.server, q.client)
                };
                (a, b, bad)
            })
            .collect();
        if p.kind == TOWARD {
            let bad = list.iter().filter(|t| t.2).count();
            mostly_bad((list.len(), bad))
        } else {
            bad_across(&list, share)
        }
    })
}

/// The pairs across a path, each with whether it is bad: a suspect, or worse than every
/// pair `beside` the path.
fn worse_across<'a>(
    across: &[&'a PairRecord],
    beside: &[&PairRecord],
) -> Vec<(&'a PairRecord, bool)> {
    let below_all = below_every(beside);
    across
        .iter()
        .map(|&q| (q, q.suspect || q.value.is_some_and(&below_all)))
        .collect()
}

/// Whether a figure is worse than every one of `pairs` (at least two; never with fewer).
fn below_every(pairs: &[&PairRecord]) -> impl Fn(f64) -> bool {
    let lower = pairs.first().is_some_and(|p| lower_is_better(&p.unit));
    let mut worst = Worst::new(lower);
    pairs
        .iter()
        .filter_map(|p| p.value)
        .for_each(|v| worst.add(v));
    move |v| worst.beaten_by(v)
}

/// The worst of some figures (the lowest bandwidth, the highest latency) and how many.
#[derive(Debug, Clone, Copy)]
struct Worst {
    lower_is_better: bool,
    value: f64,
    count: usize,
}

impl Worst {
    fn new(lower_is_better: bool) -> Self {
        let value = if lower_is_better {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        Worst {
            lower_is_better,
            value,
            count: 0,
        }
    }

    fn add(&mut self, v: f64) {
        self.value = if self.lower_is_better {
            self.value.max(v)
        } else {
            self.value.min(v)
        };
        self.count += 1;
    }

    fn join(&mut self, other: &Worst) {
        if other.count > 0 {
            self.add(other.value);
            self.count += other.count - 1;
        }
    }

    /// Whether `v` is worse than all of them (at least two; never with fewer).
    fn beaten_by(&self, v: f64) -> bool {
        let worse = if self.lower_is_better {
            v > self.value
        } else {
            v < self.value
        };
        self.count >= 2 && worse
    }
}

/// Writes each path's `why`, from the pairs as the verdict marked them.
pub(super) fn describe(rec: &mut SweepRecord) {
    let whys: Vec<String> = rec.paths.iter().map(|p| why(rec, p)).collect();
    for (p, w) in rec.paths.iter_mut().zip(whys) {
        p.why = w;
    }
}

/// "write-bw 9% of the median in 9 of 9 pairs across, 96-104% inside", per test that shows
/// it; a cut says it was inferred.
fn why(rec: &SweepRecord, p: &NamedPath) -> String {
    let parts: Vec<String> = rec
        .tests
        .iter()
        .filter_map(|test| test_why(rec, p, test))
        .collect();
    let text = parts.join("; ");
    if p.kind == CUT {
        format!("no --topology: inferred from the matrix; {text}")
    } else {
        text
    }
}

fn test_why(rec: &SweepRecord, p: &NamedPath, test: &str) -> Option<String> {
    let [across, beside] = sides(rec, p, test);
    let pct = |q: &&PairRecord| q.pct_of_median;
    let slow: Vec<f64> = worse_across(&across, &beside)
        .iter()
        .filter(|(_, bad)| *bad)
        .filter_map(|(q, _)| q.pct_of_median)
        .collect();
    let typical = median(&slow)?;
    let (where_, inside) = if p.kind == TOWARD {
        (
            format!("toward {}", p.between[1]),
            "with its other partners",
        )
    } else {
        ("across".to_string(), "inside")
    };
    let mut text = format!(
        "{test} {} in {} of {} pairs {where_}",
        vs_median(typical),
        slow.len(),
        across.len()
    );
    let others: Vec<f64> = beside.iter().filter_map(pct).collect();
    let lo = others.iter().copied().reduce(f64::min);
    let hi = others.iter().copied().reduce(f64::max);
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let (lo, hi) = (lo.round(), hi.round());
        let span = if lo == hi {
            format!("{lo:.0}%")
        } else {
            format!("{lo:.0}-{hi:.0}%")
        };
        text.push_str(&format!(", {span} {inside}"));
    }
    Some(text)
}

#[cfg(test)]
mod tests;
