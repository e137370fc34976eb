//! Which ranks test against which, round by round. In a round no rank is in two pairs, so
//! no NIC carries two tests at once; the sweep's time is rounds × the time of one test.
//!
//! - `pairs`: a round-robin tournament (the circle method): every pair of ranks exactly once,
//!   in n - 1 rounds of n/2 pairs (n rounds, one rank resting in each, for odd n).
//! - `quick`: the first rounds of that tournament, enough for every rank to meet
//!   [`QUICK_PARTNERS`] distinct partners (3 rounds, 4 for odd n): a slow NIC is in a suspect
//!   pair with each of them, its partners each with one of theirs, whatever n is.
//! - `ring`: rank i with rank i + 1 (mod n), in two rounds (three for odd n).
//! - `one-to-all`: the root with every other rank, one pair per round.
//! - pairs from a file: packed greedily into rounds in the order given.

use std::collections::{HashMap, HashSet};

use thiserror::Error;

/// Two ranks that test against each other; `a` serves, `b` is the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pair {
    /// The rank that serves.
    pub a: usize,
    /// The rank that connects.
    pub b: usize,
}

/// Rounds of disjoint pairs.
pub(crate) type Rounds = Vec<Vec<Pair>>;

/// A schedule that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScheduleError {
    /// Fewer than two ranks.
    #[error("a sweep needs at least 2 ranks, not {0}")]
    TooFew(usize),
    /// A rank outside the world.
    #[error("rank {rank} is not in a world of {size} ranks (ranks 0 to {})", size - 1)]
    NoSuchRank {
        /// The rank named.
        rank: usize,
        /// The world's size.
        size: usize,
    },
    /// A rank paired with itself.
    #[error("rank {0} cannot test against itself")]
    SelfPair(usize),
    /// An incast with no senders, or more than the other ranks.
    #[error(
        "--fan-in {fan_in} needs {} ranks (a receiver and {fan_in} senders); this sweep has {size}",
        fan_in + 1
    )]
    FanIn {
        /// Senders asked for.
        fan_in: usize,
        /// The world's size.
        size: usize,
    },
    /// An incast into every rank with more senders per receiver than it takes.
    #[error(
        "--fan-in {fan_in} into every rank: at most {most} senders into each receiver (the \
         plan holds ranks x fan-in flows, in about fan-in + 1 rounds); --root R takes up to \
         the ranks less one into one receiver"
    )]
    FanInEveryRank {
        /// Senders asked for.
        fan_in: usize,
        /// The most it takes.
        most: usize,
    },
    /// A pattern for a smaller world given a larger one.
    #[error("{pattern} takes at most {most} ranks ({why}), not {size}")]
    TooMany {
        /// The pattern.
        pattern: &'static str,
        /// The world's size.
        size: usize,
        /// The most it takes.
        most: usize,
        /// What grows with the ranks.
        why: &'static str,
    },
}

fn check_size(n: usize) -> Result<(), ScheduleError> {
    if n < 2 {
        return Err(ScheduleError::TooFew(n));
    }
    Ok(())
}

/// The most ranks one `pairs` schedule takes (over all ranks, or one rail's with
/// `--per-rail`): its n - 1 rounds of n/2 pairs grow with the square of the ranks (at the
/// limit 2,047 rounds, hours of sweep, and 2 million pairs); `quick` screens any size in 3.
pub(crate) const PAIRS_UP_TO: usize = 2048;

/// Every pair once: the circle method (rank 0 fixed, the others rotate), for at most
/// [`PAIRS_UP_TO`] ranks.
pub(crate) fn round_robin(n: usize) -> Result<Rounds, ScheduleError> {
    check_size(n)?;
    if n > PAIRS_UP_TO {
        return Err(ScheduleError::TooMany {
            pattern: "pairs",
            size: n,
            most: PAIRS_UP_TO,
            why: "n - 1 rounds of n/2 pairs; --pattern quick screens any size in 3 rounds, \
                  --per-rail schedules each rail on its own",
        });
    }
    Ok(tournament_rounds(n, 0..n + n % 2 - 1))
}

/// Rounds `range` of the circle method over `n` ranks (n >= 2; the method has n - 1 rounds,
/// n for odd n, and a range past them is cut there): each round built on its own, in time
/// linear in n.
fn tournament_rounds(n: usize, range: std::ops::Range<usize>) -> Rounds {
    // With an odd count a phantom rank m - 1 = n joins; whoever meets it rests that round.
    let m = n + n % 2;
    (range.start.min(m - 1)..range.end.min(m - 1))
        .map(|r| {
            // Position 0 holds rank 0; position p > 0 holds rank 1 + (p - 1 + r) mod (m - 1).
            let at = |p: usize| if p == 0 { 0 } else { 1 + (p - 1 + r) % (m - 1) };
            (0..m / 2)
                .map(|i| (at(i), at(m - 1 - i)))
                .filter(|&(x, y)| x < n && y < n)
                .map(|(x, y)| Pair {
                    a: x.min(y),
                    b: x.max(y),
                })
                .collect()
        })
        .collect()
}

/// How many distinct partners `quick` gives every rank: enough for the verdict to name a slow
/// NIC by its majority alone (three of three partners suspect), and no more.
pub(crate) const QUICK_PARTNERS: usize = 3;

/// The first rounds of the tournament ([`round_robin`]'s) that give every rank
/// [`QUICK_PARTNERS`] partners: 3 for an even n; 4 for an odd n, where each round rests one
/// rank (a different one each round). A small n whose whole tournament is no longer gets the
/// whole tournament. Only those rounds are built: time and memory linear in n, at any size.
pub fn quick(n: usize) -> Result<Rounds, ScheduleError> {
    check_size(n)?;
    Ok(tournament_rounds(n, 0..quick_len(n)))
}

/// How many rounds [`quick`] plans for `n` ranks (before the tournament's end cuts them).
fn quick_len(n: usize) -> usize {
    QUICK_PARTNERS + n % 2
}

/// The tournament's rounds after [`quick`]'s, as many again: every rank's partners doubled
/// (fewer where the tournament ends first). A quick sweep without a topology whose figures
/// split in two without showing a cut runs them to decide it. Linear in n, at any size.
pub(crate) fn quick_more(n: usize) -> Rounds {
    tournament_rounds(n, quick_len(n)..2 * quick_len(n))
}

/// How many rounds [`quick_more`] has for `n` ranks, without building them.
pub(crate) fn quick_more_len(n: usize) -> usize {
    let full = n + n % 2 - 1;
    full.min(2 * quick_len(n)).saturating_sub(quick_len(n))
}

/// How often `quick` with `--topology` has every pair of leaves meet: three pairs of NICs
/// across each uplink, so that a slow path between two leaves is told from a slow NIC (one
/// NIC's pairs alone never make a path).
pub(crate) const QUICK_CROSSINGS: usize = 3;

/// The rounds to add to `planned` so that every pair of leaves meets `times` times in all
/// (a meeting: a pair of ranks, one on each leaf; `leaf_of` gives each rank's leaf, `None`
/// for a rank the topology does not place). Each leaf sends its least-used ranks first and
/// no two ranks meet twice; the meetings are packed into the first round where both ranks
/// are free, so they take about `times` x (leaves - 1) / (ranks per leaf) rounds. A pair of
/// leaves whose ranks have all met already meets no more.
pub(crate) fn across_leaves(
    leaf_of: &[Option<usize>],
    planned: &[Vec<Pair>],
    times: usize,
) -> Rounds {
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (rank, leaf) in leaf_of.iter().enumerate() {
        if let Some(l) = *leaf {
            if members.len() <= l {
                members.resize(l + 1, Vec::new());
            }
            members[l].push(rank);
        }
    }
    let leaves: Vec<usize> = (0..members.len())
        .filter(|&l| !members[l].is_empty())
        .collect();
    let mut met: std::collections::BTreeSet<(usize, usize)> = std::collections::BTreeSet::new();
    let mut used = vec![0usize; leaf_of.len()];
    // How many pairs of ranks have met between each two leaves.
    let mut between: std::collections::BTreeMap<(usize, usize), usize> = Default::default();
    for p in planned.iter().flatten() {
        met.insert((p.a.min(p.b), p.a.max(p.b)));
        if let (Some(Some(x)), Some(Some(y))) = (leaf_of.get(p.a), leaf_of.get(p.b)) {
            if x != y {
                *between.entry((*x.min(y), *x.max(y))).or_default() += 1;
                used[p.a] += 1;
                used[p.b] += 1;
            }
        }
    }
    // The planned rounds' crossings count toward each pass.
    let covered = between.clone();
    let mut rounds: Rounds = Vec::new();
    let mut busy: Vec<Vec<bool>> = Vec::new();
    // The leaves meet in tournament order, each pass once more, so that every pass spreads
    // over all leaves before the next.
    let order = match leaves.len() {
        0 | 1 => Vec::new(),
        l => tournament_rounds(l, 0..l + l % 2 - 1),
    };
    for pass in 0..times {
        for leaf_round in &order {
            for p in leaf_round {
                let (a, b) = (leaves[p.a], leaves[p.b]);
                if covered.get(&(a.min(b), a.max(b))).copied().unwrap_or(0) > pass {
                    continue;
                }
                // Every pair of their ranks has met: no third NIC pair to be had.
                let key = (a.min(b), a.max(b));
                let met_here = between.entry(key).or_insert(0);
                if *met_here >= members[a].len() * members[b].len() {
                    continue;
                }
                *met_here += 1;
                let sides = (members[a].as_slice(), members[b].as_slice());
                meet(
                    sides,
                    (&mut met, &mut used),
                    (&mut rounds, &mut busy),
                    leaf_of.len(),
                );
            }
        }
    }
    rounds
}

/// One meeting of two leaves (their ranks), in the first round with a pair of free ranks
/// that have not met, the least-used ranks first (the caller knows that such a pair is left).
fn meet(
    (xs, ys): (&[usize], &[usize]),
    (met, used): (
        &mut std::collections::BTreeSet<(usize, usize)>,
        &mut [usize],
    ),
    (rounds, busy): (&mut Rounds, &mut Vec<Vec<bool>>),
    n: usize,
) {
    let unmet = |x: usize, y: usize| !met.contains(&(x.min(y), x.max(y)));
    let by_use = |list: &[usize], used: &[usize]| {
        let mut l = list.to_vec();
        l.sort_by_key(|&r| (used[r], r));
        l
    };
    let (xs, ys) = (by_use(xs, used), by_use(ys, used));
    for k in 0.. {
        if k == rounds.len() {
            rounds.push(Vec::new());
            busy.push(vec![false; n]);
        }
        let free = |r: &&usize| !busy[k][**r];
        let found = xs.iter().filter(free).find_map(|&x| {
            ys.iter()
                .filter(free)
                .find(|&&y| unmet(x, y))
                .map(|&y| (x, y))
        });
        if let Some((x, y)) = found {
            rounds[k].push(Pair {
                a: x.min(y),
                b: x.max(y),
            });
            busy[k][x] = true;
            busy[k][y] = true;
            met.insert((x.min(y), x.max(y)));
            used[x] += 1;
            used[y] += 1;
            return;
        }
    }
}

/// Each rank with the next, the last with the first.
pub fn ring(n: usize) -> Result<Rounds, ScheduleError> {
    check_size(n)?;
    if n == 2 {
        return Ok(vec![vec![Pair { a: 0, b: 1 }]]);
    }
    let edge = |i: usize| Pair {
        a: i,
        b: (i + 1) % n,
    };
    let mut rounds = vec![
        (0..n - n % 2).step_by(2).map(edge).collect::<Vec<_>>(),
        (1..n - n % 2).step_by(2).map(edge).collect(),
    ];
    if n % 2 == 1 {
        rounds.push(vec![edge(n - 1)]);
    }
    Ok(rounds)
}

/// The root with every other rank, one at a time (the root's NIC is in every test).
pub(crate) fn one_to_all(n: usize, root: usize) -> Result<Rounds, ScheduleError> {
    check_size(n)?;
    if root >= n {
        return Err(ScheduleError::NoSuchRank {
            rank: root,
            size: n,
        });
    }
    Ok((0..n)
        .filter(|&r| r != root)
        .map(|r| vec![Pair { a: root, b: r }])
        .collect())
}

/// Pairs as given (e.g. from a file), each in the first round where neither rank is busy.
/// What is kept grows with the pairs, not with rounds x ranks: the busy (round, rank)s, and
/// per rank the first round it may be free in (a rank in every pair skips its full rounds).
pub(crate) fn packed(n: usize, pairs: &[(usize, usize)]) -> Result<Rounds, ScheduleError> {
    check_size(n)?;
    let mut rounds: Rounds = Vec::new();
    let mut busy: HashSet<(usize, usize)> = HashSet::new();
    let mut first_free: HashMap<usize, usize> = HashMap::new();
    for &(a, b) in pairs {
        for rank in [a, b] {
            if rank >= n {
                return Err(ScheduleError::NoSuchRank { rank, size: n });
            }
        }
        if a == b {
            return Err(ScheduleError::SelfPair(a));
        }
        let from = |r: usize| first_free.get(&r).copied().unwrap_or(0);
        let (from_a, from_b) = (from(a), from(b));
        let mut k = from_a.max(from_b);
        while busy.contains(&(k, a)) || busy.contains(&(k, b)) {
            k += 1;
        }
        if k == rounds.len() {
            rounds.push(Vec::new());
        }
        rounds[k].push(Pair { a, b });
        for (rank, mut f) in [(a, from_a), (b, from_b)] {
            busy.insert((k, rank));
            while busy.contains(&(f, rank)) {
                f += 1;
            }
            first_free.insert(rank, f);
        }
    }
    Ok(rounds)
}

/// Rail-aligned rounds (`--per-rail`): ranks meet only ranks of the same rail (local rank),
/// each rail scheduled by `build` over its own ranks, the rails' rounds run side by side.
pub(crate) fn rail_aligned(
    rails: &[usize],
    build: impl Fn(usize) -> Result<Rounds, ScheduleError>,
) -> Result<Rounds, ScheduleError> {
    let mut by_rail: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (rank, &rail) in rails.iter().enumerate() {
        by_rail.entry(rail).or_default().push(rank);
    }
    let mut merged: Rounds = Vec::new();
    for ranks in by_rail.values() {
        for (k, round) in build(ranks.len())?.into_iter().enumerate() {
            if merged.len() <= k {
                merged.push(Vec::new());
            }
            merged[k].extend(round.into_iter().map(|p| Pair {
                a: ranks[p.a],
                b: ranks[p.b],
            }));
        }
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rank's leaf: `per_leaf` consecutive ranks per leaf.
    fn leaves(n: usize, per_leaf: usize) -> Vec<Option<usize>> {
        (0..n).map(|r| Some(r / per_leaf)).collect()
    }

    /// How often each pair of leaves met over `rounds`, checking that no rank is in two
    /// pairs of a round and no two ranks meet twice.
    fn crossings(
        rounds: &[Vec<Pair>],
        leaf_of: &[Option<usize>],
    ) -> std::collections::BTreeMap<(usize, usize), usize> {
        let mut met = std::collections::BTreeSet::new();
        let mut out = std::collections::BTreeMap::new();
        for round in rounds {
            let mut seen = std::collections::BTreeSet::new();
            for p in round {
                assert!(
                    seen.insert(p.a) && seen.insert(p.b),
                    "a rank twice in a round"
                );
                assert!(met.insert((p.a.min(p.b), p.a.max(p.b))), "{p:?} met twice");
                if let (Some(x), Some(y)) = (leaf_of[p.a], leaf_of[p.b]) {
                    if x != y {
                        *out.entry((x.min(y), x.max(y))).or_default() += 1;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn quick_with_leaves_crosses_every_pair_of_leaves_three_times_in_a_few_rounds() {
        for (n, per_leaf, most) in [(1024, 32, 4), (96, 8, 6), (6, 3, 0)] {
            let leaf_of = leaves(n, per_leaf);
            let planned = quick(n).unwrap();
            let more = across_leaves(&leaf_of, &planned, QUICK_CROSSINGS);
            assert!(more.len() <= most, "{n} ranks: {} rounds more", more.len());
            let all: Vec<Vec<Pair>> = planned.into_iter().chain(more).collect();
            let met = crossings(&all, &leaf_of);
            let l = n / per_leaf;
            assert_eq!(
                met.len(),
                l * (l - 1) / 2,
                "{n} ranks: every pair of leaves"
            );
            assert!(met.values().all(|&c| c >= QUICK_CROSSINGS), "{n}: {met:?}");
        }
    }

    #[test]
    fn leaves_of_one_rank_meet_once_and_unplaced_ranks_take_no_part() {
        let leaf_of = [Some(0), Some(1), Some(2), None];
        let more = across_leaves(&leaf_of, &[], QUICK_CROSSINGS);
        let met = crossings(&more, &leaf_of);
        assert_eq!(met.len(), 3);
        assert!(met.values().all(|&c| c == 1), "{met:?}");
        assert!(more.iter().flatten().all(|p| p.a != 3 && p.b != 3));
        assert!(
            across_leaves(&[Some(0), Some(0)], &[], 3).is_empty(),
            "one leaf"
        );
    }

    /// No rank twice in a round; returns how often each unordered pair appears.
    fn check_rounds(n: usize, rounds: &Rounds) -> Vec<u8> {
        let mut seen = vec![0u8; n * n];
        let mut in_round = vec![usize::MAX; n];
        for (k, round) in rounds.iter().enumerate() {
            for p in round {
                assert!(p.a < n && p.b < n && p.a != p.b, "n={n} {p:?}");
                for r in [p.a, p.b] {
                    assert_ne!(in_round[r], k, "n={n}: rank {r} twice in round {k}");
                    in_round[r] = k;
                }
                let (x, y) = (p.a.min(p.b), p.a.max(p.b));
                seen[x * n + y] += 1;
            }
        }
        seen
    }

    /// The sizes checked: every one to 300, then around every power of two to 2048.
    fn sizes() -> Vec<usize> {
        let mut v: Vec<usize> = (2..=300).collect();
        for k in 9..=11 {
            v.extend(
                [(1 << k) - 1, 1 << k, (1 << k) + 1]
                    .into_iter()
                    .filter(|&s| s <= 2048),
            );
        }
        v.extend([1000, 1001]);
        v
    }

    #[test]
    fn round_robin_meets_every_pair_exactly_once_in_the_fewest_rounds() {
        for n in sizes() {
            let rounds = round_robin(n).unwrap();
            assert_eq!(rounds.len(), if n % 2 == 0 { n - 1 } else { n }, "n={n}");
            assert!(rounds.iter().all(|r| r.len() == n / 2), "n={n}");
            let seen = check_rounds(n, &rounds);
            for x in 0..n {
                for y in x + 1..n {
                    assert_eq!(seen[x * n + y], 1, "n={n}: pair {x}-{y}");
                }
            }
        }
    }

    #[test]
    fn quick_gives_every_rank_three_distinct_partners_in_at_most_four_rounds() {
        for n in sizes() {
            let rounds = quick(n).unwrap();
            let full = round_robin(n).unwrap().len();
            assert_eq!(rounds.len(), full.min(3 + n % 2), "n={n}");
            let seen = check_rounds(n, &rounds);
            for r in 0..n {
                let partners = (0..n)
                    .filter(|&o| o != r && seen[r.min(o) * n + r.max(o)] == 1)
                    .count();
                assert!(partners >= (n - 1).min(QUICK_PARTNERS), "n={n}: rank {r}");
            }
        }
    }

    #[test]
    fn quick_is_the_tournaments_first_rounds_built_alone_at_any_size() {
        for n in sizes() {
            let full = round_robin(n).unwrap();
            let first = quick(n).unwrap();
            assert_eq!(first[..], full[..first.len()], "n={n}");
        }
        // A million ranks: four rounds, each of half a million pairs, built without the
        // tournament's million rounds.
        let rounds = quick(1_000_001).unwrap();
        assert_eq!(rounds.len(), 4);
        assert!(rounds.iter().all(|r| r.len() == 500_000));
    }

    #[test]
    fn quick_more_is_the_tournaments_next_rounds_doubling_every_ranks_partners() {
        for n in sizes() {
            let full = round_robin(n).unwrap();
            let first = quick(n).unwrap().len();
            let more = quick_more(n);
            let end = full.len().min(2 * first);
            assert_eq!(more[..], full[first.min(end)..end], "n={n}");
            assert_eq!(quick_more_len(n), more.len(), "n={n}");
            // Every rank meets new partners only: the two together meet no pair twice.
            let both: Rounds = quick(n).unwrap().into_iter().chain(more).collect();
            assert!(check_rounds(n, &both).iter().all(|&m| m <= 1), "n={n}");
        }
        let rounds = quick_more(1_000_000);
        assert_eq!(rounds.len(), 3);
        assert!(rounds.iter().all(|r| r.len() == 500_000));
    }

    #[test]
    fn pairs_beyond_its_limit_is_refused_naming_quick_and_per_rail() {
        assert_eq!(round_robin(PAIRS_UP_TO).unwrap().len(), PAIRS_UP_TO - 1);
        let e = round_robin(PAIRS_UP_TO + 1).unwrap_err().to_string();
        assert!(
            e.contains("pairs takes at most 2048 ranks")
                && e.contains("quick")
                && e.contains("--per-rail")
                && e.contains("not 2049"),
            "{e}"
        );
        // With --per-rail the limit is each rail's.
        let rails: Vec<usize> = (0..2 * PAIRS_UP_TO).map(|r| r % 2).collect();
        assert_eq!(
            rail_aligned(&rails, round_robin).unwrap().len(),
            PAIRS_UP_TO - 1
        );
    }

    #[test]
    fn a_ring_links_each_rank_to_the_next_without_overlap() {
        for n in sizes() {
            let rounds = ring(n).unwrap();
            let seen = check_rounds(n, &rounds);
            let pairs: usize = rounds.iter().map(Vec::len).sum();
            assert_eq!(pairs, if n == 2 { 1 } else { n }, "n={n}");
            for i in 0..n {
                let (x, y) = (i.min((i + 1) % n), i.max((i + 1) % n));
                assert_eq!(seen[x * n + y], 1, "n={n}: edge {i}");
            }
            assert!(rounds.len() <= 3);
        }
    }

    #[test]
    fn one_to_all_and_packed_pairs_never_share_a_rank_in_a_round() {
        let r = one_to_all(5, 2).unwrap();
        assert_eq!(r.len(), 4);
        check_rounds(5, &r);
        let r = packed(4, &[(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]).unwrap();
        assert_eq!(
            r,
            vec![
                vec![Pair { a: 0, b: 1 }, Pair { a: 2, b: 3 }],
                vec![Pair { a: 1, b: 2 }, Pair { a: 3, b: 0 }],
                vec![Pair { a: 0, b: 2 }],
            ]
        );
        check_rounds(4, &r);
    }

    #[test]
    fn a_pairs_file_of_a_star_over_100000_ranks_packs_in_time_linear_in_its_pairs() {
        // Rank 0 with every other: one pair a round, each found without scanning the rounds.
        let star: Vec<(usize, usize)> = (1..100_000).map(|r| (0, r)).collect();
        let start = std::time::Instant::now();
        let rounds = packed(100_000, &star).unwrap();
        assert_eq!(rounds.len(), 99_999);
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        // First fit, in the order given.
        let r = packed(6, &[(0, 1), (0, 2), (3, 4), (1, 2), (5, 3)]).unwrap();
        let p = |a, b| Pair { a, b };
        assert_eq!(
            r,
            vec![
                vec![p(0, 1), p(3, 4)],
                vec![p(0, 2), p(5, 3)],
                vec![p(1, 2)]
            ]
        );
    }

    #[test]
    fn impossible_schedules_say_why() {
        assert_eq!(round_robin(1), Err(ScheduleError::TooFew(1)));
        assert!(one_to_all(4, 4)
            .unwrap_err()
            .to_string()
            .contains("rank 4 is not in a world of 4 ranks (ranks 0 to 3)"));
        assert_eq!(packed(4, &[(1, 1)]), Err(ScheduleError::SelfPair(1)));
    }

    #[test]
    fn rail_aligned_rounds_pair_rail_k_with_rail_k_only() {
        // 4 nodes of 8 rails, ranks node-major: rank = node * 8 + rail.
        let rails: Vec<usize> = (0..32).map(|r| r % 8).collect();
        let rounds = rail_aligned(&rails, round_robin).unwrap();
        assert_eq!(rounds.len(), 3, "the rails' 3 rounds run side by side");
        let seen = check_rounds(32, &rounds);
        assert_eq!(seen.iter().map(|&c| usize::from(c)).sum::<usize>(), 8 * 6);
        for p in rounds.iter().flatten() {
            assert_eq!(rails[p.a], rails[p.b], "{p:?} crosses rails");
        }
        // A rail with one rank has no one to meet.
        assert_eq!(
            rail_aligned(&[0, 1, 0], round_robin),
            Err(ScheduleError::TooFew(1))
        );
    }
}
