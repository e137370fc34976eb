//! Split until it shows: the rounds `triage` runs after the whole ring, decided one at a time
//! from the links the last round measured. Pure: rank 0's driver runs each [`Step`] and hands
//! back what its links measured.
//!
//! 1. **The ring** (every rank writing into the next, all at once). A link is *slow* below
//!    `min_pct` of the reference: the expected rate when one is known, else the ring's median
//!    link (its waits lopsided); a failed link is slow. No slow link: healthy. Every link
//!    slow and within `min_pct` of each other: the fabric as a whole (nothing to split).
//! 2. **Halves**: the suspect group's two halves (at a leaf boundary when `--topology` places
//!    the ranks), each a ring of its own, at once. The slow half is split again, the other's
//!    ranks become known-good; both slow, the clearly slower is split (its worst link below
//!    `min_pct` of the other's), and both evenly slow count as neither.
//! 3. Neither half (clearly) slow: **across**, the slow links of the ring before that cross the
//!    halves, then rank i of one half with rank i of the other, both ways, at once. At least
//!    80% of those pairs slow (2 or more): a **cut** between the halves. Some slow: their
//!    ranks are the suspects.
//! 4. A group of three or fewer: **partners**, each suspect (a rank of the group on one of
//!    its slow links) with a known-good rank, both ways, at once: the suspects slow with a good partner are named; none of a suspect pair is:
//!    the link between the two.
//!
//! So it takes at most 2 + the halvings from n to 3 rounds after the ring ([`max_rounds`]):
//! 4 for 4 or 6 ranks, 12 for 1,024, 19 for 100,000.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use model::stats::median;

/// What a round measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepKind {
    /// The whole ring: the collective in isolation.
    Ring,
    /// The suspect group's two halves, each a ring, at once.
    Halves,
    /// Pairs across the halves (the slow links that cross them first), both ways, at once.
    Across,
    /// Each suspect with a known-good partner, both ways, at once.
    Partners,
}

impl StepKind {
    /// How a person reads it.
    pub(crate) fn words(self) -> &'static str {
        match self {
            StepKind::Ring => "the ring",
            StepKind::Halves => "halves",
            StepKind::Across => "pairs across the halves",
            StepKind::Partners => "suspects with known-good partners",
        }
    }
}

/// One round: its kind and its groups (rings for `Ring` and `Halves`, pairs otherwise).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub kind: StepKind,
    pub groups: Vec<Vec<u32>>,
}

impl Step {
    /// Every flow of the round, as (sender, receiver): around each ring (both ways for a
    /// ring of two), both ways for each pair.
    pub(crate) fn flows(&self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for g in &self.groups {
            match (self.kind, g.len()) {
                (_, 0 | 1) => {}
                (_, 2) => out.extend([(g[0], g[1]), (g[1], g[0])]),
                (StepKind::Ring | StepKind::Halves, k) => {
                    out.extend((0..k).map(|i| (g[i], g[(i + 1) % k])));
                }
                _ => {}
            }
        }
        out
    }
}

/// One measured flow: `from` wrote into `to` at `gbps` GB/s; `None` when it failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Link {
    pub from: u32,
    pub to: u32,
    pub gbps: Option<f64>,
}

/// What the split found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Found {
    /// No slow link in the ring.
    Healthy,
    /// Every link of the ring below what is expected, evenly: nothing to split.
    Everywhere,
    /// These ranks are slow with known-good partners.
    Ranks(Vec<u32>),
    /// Each of the two is fine with others, slow together: the path between them.
    Link([u32; 2]),
    /// One of these is slow; no rank outside them was left to tell which.
    OneOf(Vec<u32>),
    /// Every path between the two sides is slow, each side fine within.
    Cut([Vec<u32>; 2]),
    /// The ring was slow but no split showed it (why).
    Unexplained(String),
}

/// What to do after a round.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    Run(Step),
    Done(Found),
}

/// At least this share of the pairs across two halves slow (and 2 of them) is a cut.
const CUT_SHARE: f64 = 0.8;

/// The split's state between rounds.
#[derive(Debug)]
pub(crate) struct Split {
    /// The expected link rate (GB/s), when known.
    expected: Option<f64>,
    /// A link below this percentage of the reference is slow.
    min_pct: f64,
    /// Below this a link is slow; set by the ring.
    bar: f64,
    /// Each rank's leaf, when `--topology` placed it.
    leaf_of: BTreeMap<u32, String>,
    /// The halves of the last `Halves` round.
    halves: [Vec<u32>; 2],
    /// The pairs of the last `Across` round.
    across: Vec<[u32; 2]>,
    /// Ranks measured fine.
    good: BTreeSet<u32>,
    /// The ranks, in order.
    all: Vec<u32>,
    /// The last round run.
    last: StepKind,
    /// The suspects of the last `Partners` round.
    suspects: Vec<u32>,
    /// The slow links of the ring that made the current group a suspect.
    slow_links: Vec<(u32, u32)>,
}

impl Split {
    /// The first round over `ranks`: the ring.
    pub(crate) fn start(
        ranks: Vec<u32>,
        expected: Option<f64>,
        min_pct: f64,
        leaf_of: BTreeMap<u32, String>,
    ) -> (Split, Step) {
        let step = Step {
            kind: StepKind::Ring,
            groups: vec![ranks.clone()],
        };
        let split = Split {
            expected,
            min_pct,
            bar: 0.0,
            leaf_of,
            halves: [Vec::new(), Vec::new()],
            across: Vec::new(),
            good: BTreeSet::new(),
            all: ranks,
            last: StepKind::Ring,
            suspects: Vec::new(),
            slow_links: Vec::new(),
        };
        (split, step)
    }

    /// Sets the expected link rate (GB/s) before the ring is judged: a ceiling is known only
    /// from the ring's own records.
    pub(crate) fn expect(&mut self, expected: Option<f64>) {
        self.expected = expected;
    }

    /// Below this a link is slow (GB/s), once the ring has run.
    pub(crate) fn bar(&self) -> f64 {
        self.bar
    }

    /// Whether `link` is slow.
    pub(crate) fn slow(&self, link: &Link) -> bool {
        link.gbps.is_none_or(|g| g < self.bar)
    }

    /// The next round, or what was found, from what the last round's links measured.
    pub(crate) fn next(&mut self, links: &[Link]) -> Next {
        let next = match self.last {
            StepKind::Ring => self.after_ring(links),
            StepKind::Halves => self.after_halves(links),
            StepKind::Across => self.after_across(links),
            StepKind::Partners => self.after_partners(links),
        };
        if let Next::Run(step) = &next {
            self.last = step.kind;
        }
        next
    }

    fn after_ring(&mut self, links: &[Link]) -> Next {
        let rates: Vec<f64> = links.iter().filter_map(|l| l.gbps).collect();
        let mid = median(&rates).unwrap_or(0.0);
        self.bar = self.expected.unwrap_or(mid) * self.min_pct / 100.0;
        if !links.iter().any(|l| self.slow(l)) {
            return Next::Done(Found::Healthy);
        }
        let worst = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let even = rates.len() == links.len() && worst >= mid * self.min_pct / 100.0;
        if self.expected.is_some() && even {
            return Next::Done(Found::Everywhere);
        }
        self.slow_links = self.slow_of(links, &self.all);
        self.split(self.all.clone())
    }

    /// The slow links of `links` inside `group`.
    fn slow_of(&self, links: &[Link], group: &[u32]) -> Vec<(u32, u32)> {
        let group: BTreeSet<u32> = group.iter().copied().collect();
        links
            .iter()
            .filter(|l| group.contains(&l.from) && group.contains(&l.to) && self.slow(l))
            .map(|l| (l.from, l.to))
            .collect()
    }

    /// Halves of `group`, or its partners round when it is three ranks or fewer.
    fn split(&mut self, group: Vec<u32>) -> Next {
        if group.len() <= 3 {
            // The ends of its slow links: a rank of the group on none of them is not a suspect.
            let slow_ends: BTreeSet<u32> =
                self.slow_links.iter().flat_map(|&(x, y)| [x, y]).collect();
            let mut ends: Vec<u32> = group
                .iter()
                .copied()
                .filter(|r| slow_ends.contains(r))
                .collect();
            if ends.is_empty() {
                ends = group;
            }
            return self.partners(ends);
        }
        let halves = halve(&group, &self.leaf_of);
        self.halves = halves.clone();
        Next::Run(Step {
            kind: StepKind::Halves,
            groups: halves.to_vec(),
        })
    }

    fn after_halves(&mut self, links: &[Link]) -> Next {
        let [a, b] = self.halves.clone();
        let worst = |side: &[u32]| {
            let side: BTreeSet<u32> = side.iter().copied().collect();
            let inside = links
                .iter()
                .filter(|l| side.contains(&l.from) && side.contains(&l.to));
            let slow = inside.clone().any(|l| self.slow(l));
            let least = inside
                .map(|l| l.gbps.unwrap_or(0.0))
                .fold(f64::INFINITY, f64::min);
            (slow, least)
        };
        let ((slow_a, least_a), (slow_b, least_b)) = (worst(&a), worst(&b));
        // Both slow, and evenly (neither's worst link below min_pct of the other's): the
        // loss is no more in one half than in the other, so it is between them, or in the
        // whole fabric: the pairs across tell which.
        let even = least_a.min(least_b) >= least_a.max(least_b) * self.min_pct / 100.0;
        let neither = (!slow_a && !slow_b) || (slow_a && slow_b && even);
        if neither {
            self.across = self.across_pairs();
            return Next::Run(Step {
                kind: StepKind::Across,
                groups: self.across.iter().map(|p| p.to_vec()).collect(),
            });
        }
        let slower = match (slow_a, slow_b) {
            (true, false) => {
                self.good.extend(&b);
                a
            }
            (false, true) => {
                self.good.extend(&a);
                b
            }
            _ if least_a <= least_b => a,
            _ => b,
        };
        self.slow_links = self.slow_of(links, &slower);
        self.split(slower)
    }

    /// The pairs across the halves, each rank in one: first the slow links of the ring
    /// before that cross them (a slow path between two ranks is measured again), then rank
    /// by rank of each half.
    fn across_pairs(&self) -> Vec<[u32; 2]> {
        let [a, b] = &self.halves;
        let (a_set, b_set): (BTreeSet<u32>, BTreeSet<u32>) =
            (a.iter().copied().collect(), b.iter().copied().collect());
        let mut used: BTreeSet<u32> = BTreeSet::new();
        let mut pairs = Vec::new();
        for &(x, y) in &self.slow_links {
            let crosses = (a_set.contains(&x) && b_set.contains(&y))
                || (b_set.contains(&x) && a_set.contains(&y));
            if crosses && !used.contains(&x) && !used.contains(&y) {
                used.extend([x, y]);
                pairs.push([x.min(y), x.max(y)]);
            }
        }
        let free = |side: &[u32]| -> Vec<u32> {
            side.iter().copied().filter(|r| !used.contains(r)).collect()
        };
        let (fa, fb) = (free(a), free(b));
        pairs.extend(fa.iter().zip(&fb).map(|(&x, &y)| [x, y]));
        pairs
    }

    fn after_across(&mut self, links: &[Link]) -> Next {
        let [a, b] = self.halves.clone();
        let pairs = std::mem::take(&mut self.across);
        // Each flow's pair, by its two ranks in order: slow when either way is.
        let mut slow_pairs: BTreeSet<(u32, u32)> = BTreeSet::new();
        for l in links.iter().filter(|l| self.slow(l)) {
            slow_pairs.insert((l.from.min(l.to), l.from.max(l.to)));
        }
        let slow: Vec<[u32; 2]> = pairs
            .iter()
            .filter(|p| slow_pairs.contains(&(p[0].min(p[1]), p[0].max(p[1]))))
            .copied()
            .collect();
        if slow.len() >= 2 && slow.len() as f64 >= CUT_SHARE * pairs.len() as f64 {
            return Next::Done(Found::Cut([a, b]));
        }
        if slow.is_empty() {
            return Next::Done(Found::Unexplained(
                "the ring was slow, but neither of its halves, nor the pairs across them".into(),
            ));
        }
        let slow_set: BTreeSet<[u32; 2]> = slow.iter().copied().collect();
        for p in pairs.iter().filter(|p| !slow_set.contains(*p)) {
            self.good.extend(p);
        }
        let suspects = slow.iter().flatten().copied().collect();
        self.partners(suspects)
    }

    /// Each suspect with a distinct known-good partner (else any rank outside them).
    fn partners(&mut self, suspects: Vec<u32>) -> Next {
        let suspect: BTreeSet<u32> = suspects.iter().copied().collect();
        let mut pool: Vec<u32> = self
            .good
            .iter()
            .copied()
            .filter(|r| !suspect.contains(r))
            .collect();
        let others = self
            .all
            .iter()
            .copied()
            .filter(|r| !suspect.contains(r) && !self.good.contains(r));
        pool.extend(others);
        if pool.len() < suspects.len() {
            return Next::Done(match <[u32; 2]>::try_from(suspects.as_slice()) {
                Ok(pair) if pool.is_empty() => Found::Link(pair),
                _ => Found::OneOf(suspects),
            });
        }
        let groups = suspects
            .iter()
            .zip(&pool)
            .map(|(&s, &g)| vec![s, g])
            .collect();
        self.suspects = suspects;
        Next::Run(Step {
            kind: StepKind::Partners,
            groups,
        })
    }

    fn after_partners(&mut self, links: &[Link]) -> Next {
        let slow_ends: BTreeSet<u32> = links
            .iter()
            .filter(|l| self.slow(l))
            .flat_map(|l| [l.from, l.to])
            .collect();
        let named: Vec<u32> = self
            .suspects
            .iter()
            .copied()
            .filter(|s| slow_ends.contains(s))
            .collect();
        Next::Done(match (named.is_empty(), self.suspects.as_slice()) {
            (false, _) => Found::Ranks(named),
            (true, &[x, y]) => Found::Link([x, y]),
            (true, _) => {
                Found::Unexplained("the suspects were fine with known-good partners".into())
            }
        })
    }
}

/// `group`'s two halves: at the leaf boundary nearest the middle when its ranks sit on
/// leaves (ranks of one leaf together), else at the middle.
fn halve(group: &[u32], leaf_of: &BTreeMap<u32, String>) -> [Vec<u32>; 2] {
    let mut order = group.to_vec();
    order.sort_by_key(|r| (leaf_of.get(r).cloned(), *r));
    let mid = order.len() / 2;
    let boundaries =
        (1..order.len()).filter(|&i| leaf_of.get(&order[i - 1]) != leaf_of.get(&order[i]));
    let at = boundaries
        .filter(|&i| i >= 2 && order.len() - i >= 2)
        .min_by_key(|&i| i.abs_diff(mid))
        .unwrap_or(mid);
    let b = order.split_off(at);
    [order, b]
}

/// The most rounds a triage of `n` ranks takes: the ring, the halvings down to three ranks
/// or fewer, then across and partners.
pub(crate) fn max_rounds(n: usize) -> usize {
    let mut halvings = 0;
    let mut g = n;
    while g > 3 {
        g = g.div_ceil(2);
        halvings += 1;
    }
    1 + halvings + 2
}

#[cfg(test)]
mod tests;
