use super::super::verdict::tests::{pair, sweep};
use super::super::verdict::{judge, reruns};
use super::*;

/// A deterministic factor for pair (a, b): log-uniform over `range` (2.5: the highest
/// 2.5 times the lowest), as emulated fleets' healthy pairs spread.
fn noise(a: u32, b: u32, seed: u64, range: f64) -> f64 {
    // splitmix64 of the seed and the pair.
    let mut z =
        (seed << 40 | u64::from(a) << 20 | u64::from(b)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    ((u - 0.5) * range.ln()).exp()
}

/// Every pair of `n` ranks at 15 GB/s times the noise, times `slow(a, b)`.
fn fleet_of(n: u32, seed: u64, range: f64, slow: impl Fn(u32, u32) -> f64) -> Vec<PairRecord> {
    let mut out = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            out.push(pair(a, b, 15.0 * noise(a, b, seed, range) * slow(a, b)));
        }
    }
    out
}

/// `n` ranks, the first half on leaf0, the rest on leaf1 (none with `leaves` false).
fn two_leaves(n: u32, pairs: Vec<PairRecord>, leaves: bool) -> SweepRecord {
    let mut rec = sweep(n, pairs);
    for r in rec.ranks.iter_mut().filter(|_| leaves) {
        r.leaf = Some(format!("leaf{}", u32::from(r.rank >= n / 2)));
    }
    rec
}

fn kinds(rec: &SweepRecord) -> Vec<(&str, &str, &str)> {
    rec.paths
        .iter()
        .map(|p| {
            (
                p.kind.as_str(),
                p.between[0].as_str(),
                p.between[1].as_str(),
            )
        })
        .collect()
}

/// Pairs across the halves of `n` ranks at a tenth.
fn uplink(n: u32) -> impl Fn(u32, u32) -> f64 {
    move |a, b| if (a < n / 2) != (b < n / 2) { 0.1 } else { 1.0 }
}

#[test]
fn a_slow_uplink_between_two_leaves_is_named_and_no_nic() {
    // Three NICs per leaf: each has 3 slow partners of 5, which alone would name it.
    let mut rec = two_leaves(6, fleet_of(6, 1, 1.3, uplink(6)), true);
    judge(&mut rec);
    assert_eq!(
        kinds(&rec),
        [(BETWEEN, "leaf0", "leaf1")],
        "{:?}",
        rec.paths
    );
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    let p = &rec.paths[0];
    assert_eq!(p.ranks, [vec![0, 1, 2], vec![3, 4, 5]]);
    assert!(
        p.why.starts_with("write-bw ") && p.why.contains("of the median in 9 of 9 pairs across, "),
        "{}",
        p.why
    );
    assert!(p.why.ends_with("% inside"), "{}", p.why);
    assert!(reruns(&rec).is_empty(), "{:?}", reruns(&rec));
    // The fleet's median and spread are the healthy pairs'.
    let f = &rec.fleet[0];
    assert!(f.median > 12.0 && f.pairs == 15, "{f:?}");
    assert_eq!(rec.pairs.iter().filter(|p| p.suspect).count(), 9);
    assert_eq!(headline(p), "between leaves leaf0 and leaf1");
}

#[test]
fn a_slow_uplink_shows_in_latency_too_as_one_path() {
    // write-bw a tenth across, write-lat five times the median across.
    let mut pairs = fleet_of(6, 4, 1.3, uplink(6));
    for p in fleet_of(6, 9, 1.3, |a, b| 1.0 / uplink(6)(a, b) / 2.0) {
        let mut lat = p;
        (lat.test, lat.unit) = ("write-lat".into(), "us".into());
        lat.value = lat.value.map(|v| v / 7.5);
        pairs.push(lat);
    }
    for leaves in [true, false] {
        let mut rec = two_leaves(6, pairs.clone(), leaves);
        rec.tests = vec!["write-bw".into(), "write-lat".into()];
        judge(&mut rec);
        assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
        assert!(rec.named.is_empty(), "{:?}", rec.named);
        let why = &rec.paths[0].why;
        assert!(
            why.contains("write-bw ")
                && why.contains("; write-lat ")
                && why.contains("x the median"),
            "{why}"
        );
    }
}

#[test]
fn without_a_topology_the_same_uplink_is_a_cut_inferred_from_the_matrix() {
    let mut rec = two_leaves(6, fleet_of(6, 1, 1.3, uplink(6)), false);
    judge(&mut rec);
    assert_eq!(
        kinds(&rec),
        [(CUT, "ranks 0-2", "ranks 3-5")],
        "{:?}",
        rec.paths
    );
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    assert!(
        rec.paths[0]
            .why
            .starts_with("no --topology: inferred from the matrix; write-bw "),
        "{}",
        rec.paths[0].why
    );
    assert!(reruns(&rec).is_empty());
    // Eight ranks, noisier: the same.
    let mut rec = two_leaves(8, fleet_of(8, 7, 2.0, uplink(8)), false);
    judge(&mut rec);
    assert_eq!(
        kinds(&rec),
        [(CUT, "ranks 0-3", "ranks 4-7")],
        "{:?}",
        rec.paths
    );
    assert!(rec.named.is_empty(), "{:?}", rec.named);
}

#[test]
fn one_slow_nic_is_named_slow_and_no_path_with_or_without_leaves() {
    for leaves in [true, false] {
        for slow in [0, 4] {
            let at = |a: u32, b: u32| if a == slow || b == slow { 0.1 } else { 1.0 };
            let mut rec = two_leaves(6, fleet_of(6, 3, 1.5, at), leaves);
            judge(&mut rec);
            assert!(rec.paths.is_empty(), "{leaves} {slow}: {:?}", rec.paths);
            let names: Vec<(u32, &str)> = rec
                .named
                .iter()
                .map(|n| (n.rank, n.kind.as_str()))
                .collect();
            assert_eq!(names, [(slow, "slow")], "{leaves} {slow}");
        }
    }
}

#[test]
fn a_slow_nic_behind_a_slow_uplink_is_named_too() {
    let both = |a: u32, b: u32| uplink(6)(a, b) * if a == 1 || b == 1 { 0.3 } else { 1.0 };
    let mut rec = two_leaves(6, fleet_of(6, 5, 1.2, both), true);
    judge(&mut rec);
    // Two partners beside the path are too few alone: its re-run against a known-good
    // partner confirms it.
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    let again = reruns(&rec);
    assert!(again.iter().any(|&(_, c)| c == 1), "{again:?}");
    // Twice: one re-run is one opinion.
    for server in [0, 2] {
        let mut confirm = pair(server, 1, 15.0 * 0.3);
        confirm.rerun = true;
        rec.pairs.push(confirm);
        judge(&mut rec);
    }
    assert_eq!(
        kinds(&rec),
        [(BETWEEN, "leaf0", "leaf1")],
        "{:?}",
        rec.paths
    );
    let names: Vec<(u32, &str)> = rec
        .named
        .iter()
        .map(|n| (n.rank, n.kind.as_str()))
        .collect();
    assert_eq!(names, [(1, "slow")]);
}

#[test]
fn a_healthy_noisy_fleet_has_no_path_and_no_nic_named() {
    // Healthy pairs 2-3x apart, at random (but the same every run).
    for seed in 0..12 {
        for n in [4, 6, 8, 12, 16] {
            for leaves in [true, false] {
                let range = [2.0, 2.5, 3.0][(seed % 3) as usize];
                let mut rec = two_leaves(n, fleet_of(n, seed, range, |_, _| 1.0), leaves);
                judge(&mut rec);
                let what = format!("seed {seed}, {n} ranks, leaves {leaves}");
                assert!(rec.paths.is_empty(), "{what}: {:?}", rec.paths);
                // Four ranks' six pairs are too few to measure the noise with: the
                // threshold alone may name one (the NICs' rules, not the paths').
                assert!(n == 4 || rec.named.is_empty(), "{what}: {:?}", rec.named);
            }
        }
    }
}

#[test]
fn one_node_slow_toward_the_other_leaf_only() {
    // Rank 1's pairs toward leaf1 (ranks 3-5) at a tenth; its own leaf's are fine, and so
    // are ranks 0 and 2 toward leaf1.
    let toward = |a: u32, b: u32| if a == 1 && b >= 3 { 0.1 } else { 1.0 };
    let mut rec = two_leaves(6, fleet_of(6, 2, 1.3, toward), true);
    judge(&mut rec);
    assert_eq!(
        kinds(&rec),
        [(TOWARD, "rxe1 of node", "leaf1")],
        "{:?}",
        rec.paths
    );
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    let p = &rec.paths[0];
    assert_eq!(p.ranks, [vec![1], vec![3, 4, 5]]);
    assert!(
        p.why.contains("in 3 of 3 pairs toward leaf1, ")
            && p.why.ends_with("% with its other partners"),
        "{}",
        p.why
    );
    assert_eq!(headline(p), "from rxe1 of node toward leaf leaf1");
    assert!(reruns(&rec).is_empty(), "{:?}", reruns(&rec));
}

#[test]
fn ranks_read_as_ranges() {
    assert_eq!(rank_ranges(&[2, 0, 1]), "ranks 0-2");
    assert_eq!(rank_ranges(&[3, 4, 5, 7, 9, 10]), "ranks 3-5,7,9-10");
    assert_eq!(rank_ranges(&[4]), "rank 4");
}

#[test]
fn two_clusters_need_a_gap_beyond_their_own_spread() {
    let ln = |v: &[f64]| v.iter().map(|x| x.ln()).collect::<Vec<_>>();
    let floor = (100.0f64 / 90.0).ln();
    // A cut: 10% across.
    let cut = ln(&[15.0, 14.0, 16.0, 15.5, 1.5, 1.4, 1.6, 1.45, 1.55]);
    assert_eq!(two_clusters(&cut, floor, CLUSTER_LEAST), Some(14.0f64.ln()));
    // Noise over 2.5x is no two clusters.
    let noisy = ln(&[9.0, 10.5, 12.0, 13.0, 15.0, 16.5, 18.0, 20.0, 22.5]);
    assert_eq!(two_clusters(&noisy, floor, CLUSTER_LEAST), None);
    assert_eq!(
        two_clusters(&ln(&[1.0, 10.0, 10.0]), floor, CLUSTER_LEAST),
        None
    );
}

#[test]
fn groups_are_the_joined_ranks_of_at_least_two() {
    let g = groups(&[(0, 1), (1, 2), (3, 4), (5, 5)]);
    assert_eq!(g, [vec![0, 1, 2], vec![3, 4]]);
}

#[test]
fn a_path_explains_every_pair_across_it() {
    let p = node(BETWEEN, ["a".into(), "b".into()], [vec![0, 1], vec![2]]);
    assert_eq!(
        explained(std::slice::from_ref(&p))
            .into_iter()
            .collect::<Vec<_>>(),
        [(0, 2), (1, 2)]
    );
    assert_eq!(headline(&p), "between leaves a and b");
}

/// The pairs of `rounds` among `all`.
fn scheduled(
    all: Vec<PairRecord>,
    rounds: &[Vec<crate::cluster::schedule::Pair>],
) -> Vec<PairRecord> {
    let keys: BTreeSet<(u32, u32)> = rounds
        .iter()
        .flatten()
        .map(|p| key(p.a as u32, p.b as u32))
        .collect();
    all.into_iter()
        .filter(|p| keys.contains(&key(p.client, p.server)))
        .collect()
}

#[test]
fn quick_over_ranks_placed_on_two_leaves_in_turn_cannot_tell_the_cut_and_its_next_rounds_do() {
    use crate::cluster::schedule::{quick, quick_more};
    // Ranks 0, 2, 4 on one leaf and 1, 3, 5 on the other; the uplink at 1% (the guest's).
    let across = |a: u32, b: u32| if a % 2 != b % 2 { 0.01 } else { 1.0 };
    for seed in 1..40 {
        let all = fleet_of(6, seed, 4.0, across);
        let first = quick(6).unwrap();
        let mut rec = sweep(6, scheduled(all.clone(), &first));
        judge(&mut rec);
        // Seven of quick's nine pairs cross: the slow crossing is the median.
        assert!(kinds(&rec).is_empty(), "seed {seed}: {:?}", rec.paths);
        let why = undecided_cut(&rec).unwrap_or_else(|| panic!("seed {seed}: decided"));
        assert_eq!(
            why,
            "write-bw: 7 of 9 pairs far below the rest, 2 of them between NICs that have good \
             pairs, too few inside groups to tell a cut"
        );
        let both: Vec<_> = first.into_iter().chain(quick_more(6)).collect();
        let mut rec = sweep(6, scheduled(all, &both));
        judge(&mut rec);
        assert_eq!(
            kinds(&rec),
            [(CUT, "ranks 0,2,4", "ranks 1,3,5")],
            "seed {seed}: {:?}",
            rec.named
        );
        assert!(rec.named.is_empty(), "seed {seed}: {:?}", rec.named);
        assert_eq!(undecided_cut(&rec), None);
    }
}

#[test]
fn a_slow_nic_a_healthy_fleet_and_a_cut_quick_shows_need_no_more_pairs() {
    use crate::cluster::schedule::quick;
    let rounds = quick(6).unwrap();
    let slow_nic = |a: u32, b: u32| if a == 4 || b == 4 { 0.05 } else { 1.0 };
    let aligned = uplink(6);
    let healthy = |_: u32, _: u32| 1.0;
    for seed in 1..40 {
        for (what, slow) in [
            ("slow NIC", &slow_nic as &dyn Fn(u32, u32) -> f64),
            ("healthy", &healthy),
            ("cut of 0-2 and 3-5", &aligned),
        ] {
            let mut rec = sweep(6, scheduled(fleet_of(6, seed, 4.0, slow), &rounds));
            judge(&mut rec);
            assert_eq!(undecided_cut(&rec), None, "{what}, seed {seed}");
        }
        // With leaves, the topology decides.
        let mut rec = two_leaves(6, fleet_of(6, seed, 2.5, uplink(6)), true);
        judge(&mut rec);
        assert_eq!(undecided_cut(&rec), None, "leaves, seed {seed}");
    }
}
