use super::*;

/// Runs the split over `n` ranks whose flows measure `rate(from, to)` (GB/s, None: failed):
/// what it found and the rounds it ran, the ring included.
fn triage(
    n: u32,
    expected: Option<f64>,
    leaf_of: BTreeMap<u32, String>,
    rate: impl Fn(u32, u32) -> Option<f64>,
) -> (Found, Vec<Step>) {
    triage_by_round(n, (expected, leaf_of), |_, from, to| rate(from, to))
}

/// [`triage`] with rates that depend on the round's kind too.
fn triage_by_round(
    n: u32,
    (expected, leaf_of): (Option<f64>, BTreeMap<u32, String>),
    rate: impl Fn(StepKind, u32, u32) -> Option<f64>,
) -> (Found, Vec<Step>) {
    let (mut split, mut step) = Split::start((0..n).collect(), expected, 50.0, leaf_of);
    let mut steps = Vec::new();
    loop {
        let links: Vec<Link> = step
            .flows()
            .into_iter()
            .map(|(from, to)| Link {
                from,
                to,
                gbps: rate(step.kind, from, to),
            })
            .collect();
        steps.push(step.clone());
        assert!(steps.len() <= max_rounds(n as usize), "{steps:?}");
        match split.next(&links) {
            Next::Run(next) => step = next,
            Next::Done(found) => return (found, steps),
        }
    }
}

/// A healthy link at 12 GB/s with a fixed scatter of +-10% per flow.
fn healthy(from: u32, to: u32) -> f64 {
    12.0 * (1.0 + 0.1 * (((from * 7 + to * 13) % 11) as f64 / 5.0 - 1.0))
}

fn kinds(steps: &[Step]) -> Vec<StepKind> {
    steps.iter().map(|s| s.kind).collect()
}

#[test]
fn a_ring_writes_into_the_next_rank_and_a_pair_both_ways() {
    let ring = Step {
        kind: StepKind::Ring,
        groups: vec![vec![0, 1, 2]],
    };
    assert_eq!(ring.flows(), [(0, 1), (1, 2), (2, 0)]);
    let pairs = Step {
        kind: StepKind::Across,
        groups: vec![vec![0, 3], vec![1, 4]],
    };
    assert_eq!(pairs.flows(), [(0, 3), (3, 0), (1, 4), (4, 1)]);
    let halves = Step {
        kind: StepKind::Halves,
        groups: vec![vec![0, 1], vec![2, 3]],
    };
    assert_eq!(halves.flows(), [(0, 1), (1, 0), (2, 3), (3, 2)]);
}

#[test]
fn a_healthy_ring_is_done_in_one_round() {
    for n in [2, 4, 6, 64] {
        let (found, steps) = triage(n, None, BTreeMap::new(), |a, b| Some(healthy(a, b)));
        assert_eq!(found, Found::Healthy, "n={n}");
        assert_eq!(steps.len(), 1);
    }
}

#[test]
fn one_slow_node_is_named_alone_in_a_few_rounds() {
    for n in [4u32, 5, 6, 7, 16, 100, 1024] {
        for slow in [0, 1, n / 2, n - 1] {
            // Only what the node sends is slow: its receive side is fine.
            let rate = |a: u32, b: u32| Some(healthy(a, b) * if a == slow { 0.05 } else { 1.0 });
            let (found, steps) = triage(n, None, BTreeMap::new(), rate);
            assert_eq!(
                found,
                Found::Ranks(vec![slow]),
                "n={n} slow={slow}: {steps:?}"
            );
            assert_eq!(steps.last().unwrap().kind, StepKind::Partners);
        }
    }
    // Four ranks: the ring, the halves, the partners.
    let rate = |a: u32, b: u32| Some(healthy(a, b) * if b == 2 { 0.05 } else { 1.0 });
    let (found, steps) = triage(4, None, BTreeMap::new(), rate);
    assert_eq!(found, Found::Ranks(vec![2]));
    assert_eq!(
        kinds(&steps),
        [StepKind::Ring, StepKind::Halves, StepKind::Partners]
    );
    assert_eq!(steps[2].groups, [vec![2, 0], vec![3, 1]]);
}

#[test]
fn a_slow_uplink_between_the_halves_is_a_cut_in_three_rounds() {
    let across = |a: u32, b: u32| (a < 3) != (b < 3);
    let rate = |a: u32, b: u32| Some(healthy(a, b) * if across(a, b) { 0.01 } else { 1.0 });
    let (found, steps) = triage(6, None, BTreeMap::new(), rate);
    assert_eq!(found, Found::Cut([vec![0, 1, 2], vec![3, 4, 5]]));
    assert_eq!(
        kinds(&steps),
        [StepKind::Ring, StepKind::Halves, StepKind::Across]
    );
}

#[test]
fn with_leaves_the_halves_follow_them() {
    // Leaves of 2 and 4 ranks: the first split is at the leaf boundary, not the middle.
    let leaf_of: BTreeMap<u32, String> = (0..6)
        .map(|r| (r, if r < 2 { "a" } else { "b" }.to_string()))
        .collect();
    let across = |a: u32, b: u32| (a < 2) != (b < 2);
    let rate = |a: u32, b: u32| Some(healthy(a, b) * if across(a, b) { 0.01 } else { 1.0 });
    let (found, _) = triage(6, None, leaf_of, rate);
    assert_eq!(found, Found::Cut([vec![0, 1], vec![2, 3, 4, 5]]));
}

#[test]
fn against_an_expectation_an_even_ring_is_slow_everywhere_and_a_met_one_healthy() {
    let rate = |a: u32, b: u32| Some(healthy(a, b) * 0.3);
    let (found, steps) = triage(8, Some(12.0), BTreeMap::new(), rate);
    assert_eq!((found, steps.len()), (Found::Everywhere, 1));
    let (found, _) = triage(8, Some(12.0), BTreeMap::new(), |a, b| Some(healthy(a, b)));
    assert_eq!(found, Found::Healthy);
    // Without one, the same even ring is the fabric's own rate.
    let (found, _) = triage(8, None, BTreeMap::new(), rate);
    assert_eq!(found, Found::Healthy);
}

#[test]
fn a_slow_path_between_two_ranks_is_their_link_and_a_failed_flow_counts_as_slow() {
    let rate = |a: u32, b: u32| {
        let pair = [a.min(b), a.max(b)];
        Some(healthy(a, b) * if pair == [2, 3] { 0.05 } else { 1.0 })
    };
    let (found, _) = triage(6, None, BTreeMap::new(), rate);
    assert_eq!(found, Found::Link([2, 3]));
    let failing = |a: u32, b: u32| (a != 5).then(|| healthy(a, b));
    let (found, _) = triage(8, None, BTreeMap::new(), failing);
    assert_eq!(found, Found::Ranks(vec![5]));
}

#[test]
fn two_ranks_alone_cannot_tell_which() {
    let rate = |a: u32, b: u32| Some(healthy(a, b) * if a == 1 { 0.05 } else { 1.0 });
    let (found, steps) = triage(2, None, BTreeMap::new(), rate);
    assert_eq!((found, steps.len()), (Found::Link([0, 1]), 1));
}

#[test]
fn the_rounds_grow_with_the_logarithm_of_the_ranks() {
    assert_eq!(max_rounds(2), 3);
    assert_eq!(max_rounds(4), 4);
    assert_eq!(max_rounds(6), 4);
    assert_eq!(max_rounds(1024), 12);
    assert_eq!(max_rounds(100_000), 19);
}

#[test]
fn a_hundred_thousand_ranks_with_one_slow_node_split_in_time_linear_in_them() {
    let n = 100_000u32;
    let started = std::time::Instant::now();
    let rate = |a: u32, b: u32| Some(healthy(a, b) * if a == 77_777 { 0.05 } else { 1.0 });
    let (found, steps) = triage(n, None, BTreeMap::new(), rate);
    let took = started.elapsed().as_secs_f64();
    assert_eq!(found, Found::Ranks(vec![77_777]));
    assert!(steps.len() <= max_rounds(n as usize), "{}", steps.len());
    // Every round's flows built and judged: about a second in a debug build.
    assert!(took < 20.0, "{took} s");
}

#[test]
fn halves_slowed_evenly_by_the_whole_fabric_go_on_to_the_pairs_across() {
    // The emulated guest once ran the halves' round at a twentieth of the ring's rate on
    // every link: both halves "slow", evenly. The split must not blame either.
    let across = |a: u32, b: u32| (a < 3) != (b < 3);
    let (found, steps) = triage_by_round(6, (None, BTreeMap::new()), |kind, a, b| {
        let slowdown = if kind == StepKind::Ring { 1.0 } else { 0.05 };
        let uplink = if across(a, b) { 0.01 } else { 1.0 };
        Some(healthy(a, b) * slowdown * uplink)
    });
    let kinds = kinds(&steps);
    assert_eq!(found, Found::Cut([vec![0, 1, 2], vec![3, 4, 5]]));
    assert_eq!(kinds, [StepKind::Ring, StepKind::Halves, StepKind::Across]);
}
