use super::*;
use crate::report::sweep::sample_pair;
use crate::report::{RankRecord, RunStatus, ToolRecord, SWEEP_SCHEMA};

pub(crate) fn sweep(n: u32, pairs: Vec<PairRecord>) -> SweepRecord {
    SweepRecord {
        schema: SWEEP_SCHEMA.to_string(),
        tool: ToolRecord::current(),
        started_at: "2026-12-01T00:00:00Z".into(),
        launcher: "Open MPI (mpirun)".into(),
        pattern: "pairs".into(),
        tests: vec!["write-bw".into()],
        min_pct: 90.0,
        max_lat_factor: 2.0,
        ranks: (0..n)
            .map(|r| RankRecord::new(r, "node", &format!("rxe{r}"), None))
            .collect(),
        schedule: Vec::new(),
        round_secs: Vec::new(),
        pairs,
        groups: Vec::new(),
        fleet: Vec::new(),
        named: Vec::new(),
        paths: Vec::new(),
        preflight: Vec::new(),
        status: RunStatus::Complete,
        error: None,
    }
}

/// The named NICs as (rank, kind).
fn names(rec: &SweepRecord) -> Vec<(u32, &str)> {
    rec.named
        .iter()
        .map(|n| (n.rank, n.kind.as_str()))
        .collect()
}

pub(crate) fn pair(server: u32, client: u32, gbps: f64) -> PairRecord {
    let mut p = sample_pair(0, client, server, "write-bw", "GB/s", Some(gbps), gbps);
    (p.pct_of_median, p.suspect) = (None, false);
    p
}

/// A sweep measured in the six-node guest, the uplink between ranks 0-2 and 3-5 held to
/// 20 Mbit/s, with no topology: the pairs inside each side spread 40x (5 to 213 MB/s, two
/// of them slow in one round), the pairs across sit at 0.76-2.4 MB/s, and the suspects'
/// re-runs against known-good partners at about 34 MB/s. The cut is named, and no NIC:
/// the shaped pairs' tight scatter must not stand for the noise of the healthy ones.
#[test]
fn a_cut_through_a_noisy_fleet_names_no_nic() {
    let planned = [
        (0, 5, 0.76),
        (1, 4, 0.78),
        (2, 3, 0.76),
        (0, 1, 204.55),
        (2, 5, 2.35),
        (3, 4, 213.15),
        (0, 2, 5.35),
        (1, 3, 0.76),
        (4, 5, 5.44),
        (0, 3, 0.76),
        (2, 4, 0.78),
        (1, 5, 0.77),
        (0, 4, 2.38),
        (3, 5, 159.91),
        (1, 2, 116.76),
    ];
    let mut pairs = in_mbs(&planned);
    for (server, client, mbs) in [(1, 0, 34.58), (3, 4, 33.89), (1, 2, 34.08), (3, 5, 35.26)] {
        pairs.push(rerun(server, client, mbs / 1000.0));
    }
    let mut rec = sweep(6, pairs);
    judge(&mut rec);
    assert_eq!(names(&rec), [], "{:?}", rec.named);
    assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
    assert_eq!(rec.paths[0].kind, "cut");
    assert_eq!(rec.paths[0].ranks, [vec![0, 1, 2], vec![3, 4, 5]]);
}

/// The same cut as the guest showed it another time: the pairs inside each side at
/// 79-199 MB/s (a pair that runs alone in its round gets both emulated CPUs), rank 3's two
/// at the low end, and two re-runs, two pairs at once, at 54 MB/s. Rank 3's two slow
/// partners of two are noise, not a finding, and so are the re-runs.
#[test]
fn few_pairs_beside_a_cut_are_judged_by_their_own_noise() {
    let planned = [
        (0, 1, 199.3),
        (0, 2, 150.2),
        (1, 2, 139.2),
        (3, 4, 79.4),
        (3, 5, 80.1),
        (4, 5, 190.6),
        (0, 3, 0.77),
        (0, 4, 0.78),
        (0, 5, 0.79),
        (1, 3, 0.76),
        (1, 4, 0.78),
        (1, 5, 0.77),
        (2, 3, 0.76),
        (2, 4, 0.78),
        (2, 5, 2.35),
    ];
    let mut pairs = in_mbs(&planned);
    for (server, client) in [(0, 1), (0, 2)] {
        pairs.push(rerun(server, client, 0.054));
    }
    let mut rec = sweep(6, pairs);
    judge(&mut rec);
    assert_eq!(names(&rec), [], "{:?}", rec.named);
    assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
    assert_eq!(rec.paths[0].kind, "cut");
}

/// The cut as `scripts/test.sh`'s guest measured it once more: two pairs inside the sides
/// that shared a round ran at 8 MB/s, the two that ran beside pairs across at 47 and 127,
/// so ranks 1 and 3 had two slow partners of two. Too few to name them by themselves:
/// each is re-run, alone, against a known-good partner, and that clears them.
#[test]
fn two_slow_partners_of_two_beside_a_cut_need_a_rerun_to_name_a_nic() {
    let planned = [
        (0, 5, 0.79),
        (1, 4, 0.79),
        (2, 3, 0.78),
        (0, 1, 7.99),
        (2, 5, 1.02),
        (3, 4, 8.02),
        (0, 2, 46.66),
        (1, 3, 2.41),
        (4, 5, 127.15),
        (0, 3, 0.78),
        (2, 4, 0.78),
        (1, 5, 0.78),
        (0, 4, 1.0),
        (3, 5, 8.73),
        (1, 2, 8.48),
    ];
    let pairs = in_mbs(&planned);
    let mut rec = sweep(6, pairs);
    judge(&mut rec);
    assert_eq!(names(&rec), [], "{:?}", rec.named);
    assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
    let mut again = reruns(&rec);
    again.sort_unstable();
    let clients: Vec<u32> = again.iter().map(|&(_, c)| c).collect();
    assert!(clients.contains(&1) && clients.contains(&3), "{again:?}");
    for (server, client) in again {
        rec.pairs.push(rerun(server, client, 0.05));
    }
    judge(&mut rec);
    assert_eq!(names(&rec), [], "{:?}", rec.named);
}

/// The cut as the guest measured it under a loaded host: the two pairs inside the sides
/// that shared a round with a pair across ran at 6 and 6.5 MB/s, the others at 57-155
/// MB/s, so the healthy pairs' spread is wide and their bar falls below some pairs
/// across (0.77-2.4 MB/s). Those are still below every pair inside: the cut stands, and
/// the median stays the healthy pairs' (a dropped cut would leave the slow pairs as the
/// fleet's level, and nothing named at all). The same with lower noise beside the cut,
/// with rank 2's two pairs inside both low (it must join its side, not be named), and
/// with the healthy pairs 17x apart.
#[test]
fn a_cut_stands_when_noise_beside_it_lowers_the_bar() {
    let cases = [
        (6.1, 111.36),
        (4.0, 111.36),
        (3.0, 111.36),
        (6.1, 6.3),
        (12.0, 9.0),
    ];
    for (low, one_two) in cases {
        let planned = [
            (0, 5, 0.77),
            (1, 4, 0.77),
            (2, 3, 0.79),
            (0, 1, 155.49),
            (2, 5, 2.32),
            (3, 4, 70.96),
            (0, 2, low),
            (1, 3, 0.88),
            (4, 5, low + 0.4),
            (0, 3, 0.77),
            (2, 4, 0.77),
            (1, 5, 0.79),
            (0, 4, 2.38),
            (3, 5, 57.16),
            (1, 2, one_two),
        ];
        let mut rec = sweep(6, in_mbs(&planned));
        judge(&mut rec);
        assert_eq!(rec.paths.len(), 1, "{low}: {:?}", rec.paths);
        assert_eq!(rec.paths[0].ranks, [vec![0, 1, 2], vec![3, 4, 5]]);
        assert!(rec.fleet[0].median > 0.05, "{low}: {:?}", rec.fleet);
        assert_eq!(names(&rec), [], "{low}: {:?}", rec.named);
    }
}

/// The cut as `scripts/test.sh` measured it once the `-D` windows spanned their length:
/// the pairs inside at 18 MB/s, or 7.8 where they shared a round with a pair across; the
/// noise within cells set the bar at 7% of the median, below two pairs across (0.96 and
/// 1.03 MB/s), so 7 of 9 were bad by the bar alone and the cut went unnamed (exit 0).
/// Every pair across is below every pair inside: the cut is named, and no NIC.
#[test]
fn pairs_across_below_every_pair_inside_make_the_cut() {
    let planned = [
        (0, 5, 0.959),
        (1, 4, 0.768),
        (2, 3, 0.788),
        (0, 1, 18.39),
        (2, 5, 2.366),
        (3, 4, 18.56),
        (0, 2, 18.12),
        (1, 3, 2.387),
        (4, 5, 17.94),
        (0, 3, 0.747),
        (2, 4, 0.780),
        (1, 5, 0.777),
        (0, 4, 1.034),
        (3, 5, 7.821),
        (1, 2, 7.790),
    ];
    let mut rec = sweep(6, in_mbs(&planned));
    judge(&mut rec);
    assert_eq!(rec.paths.len(), 1, "{:?}", rec.paths);
    assert_eq!(rec.paths[0].ranks, [vec![0, 1, 2], vec![3, 4, 5]]);
    assert!(
        rec.paths[0].why.contains("in 9 of 9 pairs across"),
        "{}",
        rec.paths[0].why
    );
    assert_eq!(names(&rec), [], "{:?}", rec.named);
}

/// Pairs measured in the guest, as (server, client, MB/s).
fn in_mbs(planned: &[(u32, u32, f64)]) -> Vec<PairRecord> {
    planned
        .iter()
        .map(|&(server, client, mbs)| pair(server, client, mbs / 1000.0))
        .collect()
}

/// A re-run of `client` against `server`.
fn rerun(server: u32, client: u32, gbps: f64) -> PairRecord {
    let mut p = pair(server, client, gbps);
    p.rerun = true;
    p
}

/// Every pair of `n` ranks, rank `slow`'s at a tenth of the others' bandwidth.
fn all_pairs(n: u32, slow: Option<u32>) -> Vec<PairRecord> {
    let mut out = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            let v = if slow == Some(a) || slow == Some(b) {
                1.5
            } else {
                15.0
            };
            out.push(pair(a, b, v));
        }
    }
    out
}

#[test]
fn the_rank_in_every_slow_pair_is_named_and_its_partners_are_not() {
    let mut rec = sweep(4, all_pairs(4, Some(2)));
    judge(&mut rec);
    assert_eq!(rec.pairs.iter().filter(|p| p.suspect).count(), 3);
    let slow: Vec<_> = rec.named.iter().filter(|n| n.kind == "slow").collect();
    assert_eq!(slow.len(), 1, "{:?}", rec.named);
    assert_eq!(slow[0].rank, 2);
    assert_eq!(slow[0].label, "rxe2 of node");
    assert!(slow[0].why.contains("in 3 of 3 pairs"), "{}", slow[0].why);
    assert!(
        reruns(&rec).is_empty(),
        "the slow rank explains every suspect"
    );
    let f = &rec.fleet[0];
    assert_eq!((f.pairs, f.min, f.max), (6, 1.5, 15.0));
}

/// Five nodes' quick sweep in the guest (2026-12-07, 8 pairs, MB/s): rank 2 throttled
/// (0.6 MB/s with each partner), and two of rank 4's other pairs noisy (77% and 81% of the
/// median, suspects). Rank 2 is named; rank 4, with two partners left once rank 2 explains
/// its pair with it, is not named on them alone but re-run against a known-good rank.
#[test]
fn a_rank_whose_only_slow_partner_is_the_slow_nic_is_not_named_on_two_noisy_pairs() {
    let planned = [
        (2, 3, 0.5673),
        (2, 4, 0.5915),
        (0, 2, 0.5918),
        (1, 4, 20.37),
        (3, 4, 21.44),
        (0, 1, 35.76),
        (0, 3, 30.1),
        (1, 3, 29.5),
    ];
    let mut rec = sweep(5, in_mbs(&planned));
    judge(&mut rec);
    let suspects: Vec<(u32, u32)> = rec
        .pairs
        .iter()
        .filter(|p| p.suspect)
        .map(|p| (p.server, p.client))
        .collect();
    assert!(
        suspects.contains(&(1, 4)) && suspects.contains(&(3, 4)),
        "the noisy pairs are suspects: {suspects:?}"
    );
    assert_eq!(names(&rec), [(2, "slow")], "{:?}", rec.named);
    let again = reruns(&rec);
    assert!(
        again
            .iter()
            .any(|&(server, client)| client == 4 && ![2, 4].contains(&server)),
        "rank 4 re-run against a known-good rank: {again:?}"
    );
}

/// Pairs between ranks 0, 1 and 3 spread by `spread` (1.0: none); rank 2's pairs are
/// `slow` (a figure), or failed (`None`) with `error`.
fn four_with(spread: f64, slow: Option<f64>, error: &str) -> Vec<PairRecord> {
    let healthy = [
        ((0, 1), 10.0),
        ((0, 3), 10.0 / spread),
        ((1, 3), 10.0 * spread),
    ];
    let mut out: Vec<PairRecord> = healthy.iter().map(|&((a, b), v)| pair(a, b, v)).collect();
    for other in [0, 1, 3] {
        let mut p = pair(2, other, slow.unwrap_or(0.0));
        p.value = slow;
        p.error = slow.is_none().then(|| error.to_string());
        out.push(p);
    }
    out
}

#[test]
fn the_partners_of_a_slow_nic_are_not_named_for_its_pairs_or_their_own_noise() {
    // Healthy pairs 4.0, 10 and 25 (2.5x apart, as under emulation), rank 2's at 1.1.
    let mut rec = sweep(4, four_with(2.5, Some(1.1), ""));
    judge(&mut rec);
    let names = names(&rec);
    assert_eq!(names, [(2, "slow")], "{:?}", rec.named);
}

#[test]
fn a_noisy_fleet_names_only_its_slow_nic() {
    // Eight ranks whose healthy pairs spread over 2.5x; rank 5's pairs at a sixth.
    let noise = [0.6, 1.0, 1.5, 0.8, 1.2, 0.7, 1.4];
    let mut pairs = Vec::new();
    for a in 0..8u32 {
        for b in a + 1..8 {
            let v = 15.0 * noise[((a * 3 + b * 5) % 7) as usize];
            pairs.push(pair(a, b, if a == 5 || b == 5 { 2.5 } else { v }));
        }
    }
    let mut rec = sweep(8, pairs);
    judge(&mut rec);
    let names = names(&rec);
    assert_eq!(names, [(5, "slow")], "{:?}", rec.named);
    assert!(
        reruns(&rec).is_empty(),
        "noise is no suspect: {:?}",
        reruns(&rec)
    );
    let f = &rec.fleet[0];
    assert!(
        f.spread.is_some() && f.suspect_bar < 0.9 * f.median,
        "{f:?}"
    );
}

#[test]
fn the_nic_in_every_failed_test_is_named_failing_and_no_healthy_one() {
    let error = "size 65536 bytes: work request 1 on QP 17 completed with status \
                 'Transport Retry Counter Exceeded' (12)";
    let mut rec = sweep(4, four_with(1.05, None, error));
    judge(&mut rec);
    assert_eq!(rec.named.len(), 1, "{:?}", rec.named);
    let n = &rec.named[0];
    assert_eq!((n.rank, n.kind.as_str()), (2, "failing"));
    assert_eq!(n.why, "failed in 3 of its 3 tests (retry exceeded)");
    assert_eq!(failed_tests(&rec).len(), 3);
}

#[test]
fn a_test_saved_by_its_retry_is_no_failure() {
    let mut pairs = all_pairs(4, None);
    let mut failed = pair(0, 1, 0.0);
    (failed.value, failed.error) = (None, Some("no answer within 30 s".into()));
    pairs.insert(0, failed);
    pairs[1].retry = true;
    let mut rec = sweep(4, pairs);
    judge(&mut rec);
    assert!(
        failed_tests(&rec).is_empty() && rec.named.is_empty(),
        "{:?}",
        rec.named
    );
}

#[test]
fn two_failing_nics_are_named_and_their_partners_are_not() {
    let mut pairs = all_pairs(4, None);
    for p in &mut pairs {
        if [2, 3].contains(&p.server) || [2, 3].contains(&p.client) {
            (p.value, p.error) = (
                None,
                Some("the measured window ... cannot compute a rate".into()),
            );
        }
    }
    let mut rec = sweep(4, pairs);
    judge(&mut rec);
    let names = names(&rec);
    assert_eq!(names, [(2, "failing"), (3, "failing")]);
    assert!(
        rec.named[0].why.ends_with("(no rate)"),
        "{}",
        rec.named[0].why
    );
}

#[test]
fn errors_fall_into_classes() {
    assert_eq!(
        error_class("status 'Transport Retry Counter Exceeded' (12)"),
        "retry exceeded"
    );
    assert_eq!(
        error_class("no completion for 30.0 s with 5 operations done"),
        "timeout"
    );
    assert_eq!(
        error_class("no operation completed between the warm-up's end"),
        "no rate"
    );
    assert_eq!(error_class("remote invalid request"), "error");
}

#[test]
fn a_healthy_fleet_names_nobody() {
    let mut rec = sweep(8, all_pairs(8, None));
    judge(&mut rec);
    assert!(rec.named.is_empty() && rec.pairs.iter().all(|p| !p.suspect));
}

/// Six ranks, judged, where only the pair 0-1 is slow (a cable, or one of the two NICs).
fn lone_slow_pair() -> SweepRecord {
    let mut pairs = all_pairs(6, None);
    if let Some(p) = pairs.iter_mut().find(|p| (p.server, p.client) == (0, 1)) {
        p.value = Some(3.0);
    }
    let mut rec = sweep(6, pairs);
    judge(&mut rec);
    rec
}

#[test]
fn a_lone_suspect_pair_is_rerun_against_good_partners_and_the_culprit_named() {
    let mut rec = lone_slow_pair();
    assert!(rec.named.is_empty(), "one pair cannot name a NIC");
    let again = reruns(&rec);
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|&(good, _)| good >= 2), "{again:?}");
    // Rank 1 is slow against a good partner too; rank 0 is not.
    for &(good, rank) in &again {
        rec.pairs
            .push(rerun(good, rank, if rank == 1 { 3.0 } else { 15.0 }));
    }
    judge(&mut rec);
    // One re-run is one opinion: rank 1 is re-run once more, against another partner.
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    let second = second_opinions(&rec);
    assert_eq!(second.len(), 1, "{second:?}");
    let (good, rank) = second[0];
    assert_eq!(rank, 1);
    assert!(!again.contains(&(good, 1)) && good >= 2, "{second:?}");
    rec.pairs.push(rerun(good, 1, 3.0));
    judge(&mut rec);
    assert_eq!(rec.named.len(), 1, "{:?}", rec.named);
    assert_eq!(rec.named[0].rank, 1);
    assert!(
        rec.named[0].why.contains("against known-good rank(s) "),
        "{}",
        rec.named[0].why
    );
    assert!(second_opinions(&rec).is_empty());
}

/// A re-run is emulated noise as often as a planned pair: one that a second re-run
/// contradicts names nobody.
#[test]
fn a_rerun_the_second_opinion_contradicts_names_nobody() {
    let mut rec = lone_slow_pair();
    for (good, rank) in reruns(&rec) {
        rec.pairs
            .push(rerun(good, rank, if rank == 1 { 6.0 } else { 15.0 }));
    }
    judge(&mut rec);
    for (good, rank) in second_opinions(&rec) {
        rec.pairs.push(rerun(good, rank, 14.0));
    }
    judge(&mut rec);
    assert!(rec.named.is_empty(), "{:?}", rec.named);
    assert!(second_opinions(&rec).is_empty());
}

#[test]
fn latency_suspects_are_the_slow_ones() {
    let mut pairs = all_pairs(4, Some(3));
    for p in &mut pairs {
        p.test = "write-lat".into();
        p.unit = "us".into();
        // 1.5 "GB/s" pairs become 30 us, the others 3 us.
        p.value = p.value.map(|v| 45.0 / v);
        // The client's record, whose ceilings hold the link's bandwidth ceiling.
        p.record = Some(Box::new(crate::report::samples::write_lat().record));
    }
    let mut rec = sweep(4, pairs);
    rec.tests = vec!["write-lat".into()];
    judge(&mut rec);
    assert_eq!(rec.named.len(), 1);
    assert_eq!(rec.named[0].rank, 3);
    assert_eq!(rec.named[0].why, "write-lat 10x the median in 3 of 3 pairs");
    assert_eq!(
        rec.fleet[0].ceiling_gbps, None,
        "a bandwidth ceiling is no bound of a latency"
    );
}

#[test]
fn far_from_the_median_is_a_multiple_and_near_it_a_percentage() {
    assert_eq!(vs_median(14.2), "14% of the median");
    assert_eq!(vs_median(100.0), "100% of the median");
    assert_eq!(vs_median(200.0), "200% of the median");
    assert_eq!(vs_median(250.0), "2.5x the median");
    assert_eq!(vs_median(37_952.0), "380x the median");
    assert_eq!(vs_median(0.47), "0.5% of the median");
}

#[test]
fn counters_that_climb_in_most_of_a_ranks_tests_name_it() {
    let mut pairs = all_pairs(4, None);
    for p in &mut pairs {
        if p.server == 0 {
            let mut c = BTreeMap::new();
            c.insert("hw_counters/np_cnp_sent".to_string(), 40);
            c.insert("counters/port_xmit_data".to_string(), 1 << 20);
            p.server_counters = alarming(Some(&c));
        }
    }
    let mut rec = sweep(4, pairs);
    judge(&mut rec);
    assert_eq!(rec.named.len(), 1, "{:?}", rec.named);
    assert_eq!(
        (rec.named[0].rank, rec.named[0].kind.as_str()),
        (0, "counters")
    );
    assert!(
        rec.named[0].why.contains("np_cnp_sent +120"),
        "{}",
        rec.named[0].why
    );
    assert!(!rec.named[0].why.contains("port_xmit_data"));
    // Counters climbing on every NIC single none out.
    for p in &mut rec.pairs {
        p.client_counters = p.server_counters.clone();
        p.server_counters
            .insert("hw_counters/duplicate_request".into(), 3);
        p.client_counters
            .insert("hw_counters/completer_retry_err".into(), 1);
    }
    judge(&mut rec);
    assert!(rec.named.is_empty(), "{:?}", rec.named);
}
