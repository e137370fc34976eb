//! `rdmabench cluster` in the soft-RoCE guest with four nodes (`RXE_VM_NODES=4`: rxeK on
//! vethK, 10.251.0.K+1, every vethK's peer on one bridge): Open MPI's `mpirun` starts four
//! ranks, one per device, and the sweep at its default options (write-bw 64 KiB for 1 s and
//! write-lat) measures all six pairs in three rounds and names the NIC whose link is held to
//! 20 Mbit/s, at about the shaped rate. Ranks started as torchrun starts them (no launcher
//! to end the others): a rank killed in round 2 is named unreachable and the others finish
//! the sweep; strangers on rank 0's port (garbage, a second rank 1) leave the sweep
//! unaffected, and a node whose MTU is smaller than the others' is named before measuring.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, named_nics, scratch, text, NetChange};

const NODES: usize = 4;

/// True when rxe0..rxe3 exist; panics when the guest must have them.
fn four_nodes(test: &str) -> bool {
    common::has_nodes(NODES, test)
}

/// What the throttle lets through, bytes per second: 20 Mbit/s.
const SHAPED: f64 = 20e6 / 8.0;

/// The options every rank shares (so every rank resolves the same sweep): the GID, rank 0's
/// address and its record, then `more`; nothing else, so the sweep runs at its defaults.
fn sweep_args(json: &str, port: u16, more: &[&str]) -> Vec<String> {
    ["-x", "1", "--json", json, "--coordinator"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("127.0.0.1:{port}")])
        .chain(more.iter().map(|s| s.to_string()))
        .collect()
}

/// The killed-rank test's timeout: how long a dead rank's partner waits for it (the default
/// 60 s would only make the test longer).
const TIMEOUT: [&str; 2] = ["--timeout", "20"];

/// `mpirun` with one application context per node, each on its own device.
fn mpirun(args: &[String]) -> Output {
    let devices: Vec<String> = (0..NODES).map(|k| format!("rxe{k}")).collect();
    common::mpirun_ranks("cluster", &devices, args)
}

fn load(path: &std::path::Path) -> serde_json::Value {
    common::read_record(path)
}

#[test]
fn an_mpirun_sweep_measures_every_pair_and_names_the_throttled_nic() {
    if !four_nodes("an_mpirun_sweep_measures_every_pair_and_names_the_throttled_nic") {
        return;
    }
    let dir = scratch("cluster");
    let json = dir.join("sweep.json");
    // Node 2's link, both ends.
    let _throttle = NetChange::slow_link(&["veth2", "vp2"]);
    let prom = dir.join("sweep.prom");
    let metrics = ["--prom", prom.to_str().unwrap()];
    let out = mpirun(&sweep_args(json.to_str().unwrap(), 19400, &metrics));
    let printed = text(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a NIC named slow exits 3:\n{printed}"
    );
    assert!(printed.contains("4 ranks under Open MPI"), "{printed}");
    assert!(printed.contains("round 3/3"), "{printed}");

    let rec = load(&json);
    assert_eq!(rec["schema"], "rdmabench.cluster/1");
    assert_eq!(rec["status"], "complete");
    assert_eq!(rec["schedule"].as_array().unwrap().len(), 3, "3 rounds");
    let planned: Vec<_> = rec["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["rerun"] == false)
        .collect();
    assert_eq!(planned.len(), 12, "6 pairs x 2 tests: {planned:?}");
    assert!(
        planned
            .iter()
            .all(|p| p["value"].as_f64().is_some_and(|v| v > 0.0)),
        "every test measured, none failed:\n{printed}"
    );
    for p in planned.iter().filter(|p| p["test"] == "write-bw") {
        let through_2 = p["client"] == 2 || p["server"] == 2;
        let rate = p["value"].as_f64().unwrap() * 1e9;
        if through_2 {
            assert!(
                rate > 0.5 * SHAPED && rate < 1.02 * SHAPED,
                "node 2's pair at about the shaped rate: {p}"
            );
        }
    }
    let slow: Vec<_> = rec["named"].as_array().unwrap().iter().collect();
    assert_eq!(
        slow.len(),
        1,
        "only the throttled NIC is named: {slow:?}\n{printed}"
    );
    assert_eq!(slow[0]["kind"], "slow");
    assert_eq!(slow[0]["rank"], 2);
    assert!(slow[0]["label"].as_str().unwrap().starts_with("rxe2 of "));
    assert!(
        printed.contains("rxe2 of") && printed.contains("slow"),
        "{printed}"
    );

    // Rank 0's metrics: valid, and the throttled NIC named there too.
    assert_eq!(common::promtool(&prom), "", "the sweep's --prom file");
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rdmabench_sweep_nic_named{")
                && l.contains("device=\"rxe2\"")
                && l.ends_with("kind=\"slow\"} 1")),
        "{metrics}"
    );

    // The records side reads what the sweep wrote.
    let png = dir.join("heat.png");
    let plot = bin()
        .args(["plot", json.to_str().unwrap(), "-o", png.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(plot.status.success(), "plot: {}", text(&plot));
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    let same = bin()
        .args(["compare", json.to_str().unwrap(), json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        same.status.success(),
        "a sweep against itself: {}",
        text(&same)
    );
}

/// Starts rank `rank` of four as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR/PORT), so
/// that no launcher ends the others when one rank dies.
fn rank(rank: usize, args: &[String]) -> Child {
    bin()
        .args(["cluster", "-d", &format!("rxe{rank}")])
        .args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", NODES.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `n` connections to `port` on this machine are established (read from
/// /proc/net/tcp and tcp6, where a client's row has the port as its remote one).
fn wait_for_connections(port: u16, n: usize, limit: Duration) {
    let start = Instant::now();
    let remote = format!(":{port:04X}");
    loop {
        let established = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|t| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
            .filter(|row| {
                let cols: Vec<&str> = row.split_whitespace().collect();
                cols.len() > 3 && cols[2].ends_with(&remote) && cols[3] == "01"
            })
            .count();
        if established >= n {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{established} of {n} connections to port {port} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn recorded_pairs(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["pairs"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// The pairs of `rec` as (client, server, test, value).
fn pairs(rec: &serde_json::Value) -> Vec<(u64, u64, String, Option<f64>)> {
    rec["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let rank = |k: &str| p[k].as_u64().unwrap();
            let test = p["test"].as_str().unwrap().to_string();
            (rank("client"), rank("server"), test, p["value"].as_f64())
        })
        .collect()
}

#[test]
fn a_rank_killed_in_round_2_is_named_unreachable_and_the_others_finish_the_sweep() {
    if !four_nodes("a_rank_killed_in_round_2_is_named_unreachable_and_the_others_finish_the_sweep")
    {
        return;
    }
    let dir = scratch("cluster-killed");
    let json = dir.join("sweep.json");
    let args = sweep_args(json.to_str().unwrap(), 19410, &TIMEOUT);
    let mut ranks: Vec<Child> = (0..NODES).map(|r| rank(r, &args)).collect();
    let start = Instant::now();
    // Round 1's record (2 pairs x 2 tests) is written as round 2 starts.
    while recorded_pairs(&json) < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "round 1 never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ranks[3].kill().unwrap();
    let _ = ranks[3].wait();
    let mut rank0 = String::new();
    for (r, child) in ranks.into_iter().enumerate().take(3) {
        let out = child.wait_with_output().unwrap();
        let printed = text(&out);
        assert_eq!(
            out.status.code(),
            Some(3),
            "rank {r} finishes: a finding:\n{printed}"
        );
        if r == 0 {
            rank0 = printed;
        }
    }
    assert!(
        rank0.contains("rank 3 (rxe3 of ") && rank0.contains("unreachable since round 2"),
        "rank 0 names the dead rank:\n{rank0}"
    );
    let rec = load(&json);
    assert_eq!(rec["status"], "complete", "{rank0}");
    assert_eq!(rec["ranks"][3]["unreachable"]["round"], 1, "{rank0}");
    let named: Vec<_> = rec["named"].as_array().unwrap().iter().collect();
    assert!(
        named
            .iter()
            .any(|n| n["rank"] == 3 && n["kind"] == "unreachable"),
        "{named:?}"
    );
    let all = pairs(&rec);
    for (c, s, test, value) in &all {
        if *c == 3 || *s == 3 {
            assert!(
                value.is_some(),
                "rank 3's round-1 {test} was measured: {all:?}"
            );
        }
    }
    assert_eq!(
        all.iter().filter(|(c, s, ..)| *c == 3 || *s == 3).count(),
        2,
        "rank 3's later pairs not measured: {all:?}"
    );
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        for test in ["write-bw", "write-lat"] {
            assert!(
                all.iter().any(|(c, s, t, v)| {
                    t == test && v.is_some() && ((*c, *s) == (a, b) || (*c, *s) == (b, a))
                }),
                "{test} {a}-{b} measured: {all:?}\n{rank0}"
            );
        }
    }
}

#[test]
fn strangers_do_not_disturb_a_sweep_and_the_mtu_outlier_is_named_before_it() {
    use std::io::Write as _;
    if !four_nodes("strangers_do_not_disturb_a_sweep_and_the_mtu_outlier_is_named_before_it") {
        return;
    }
    // Every veth but node 3's (and its bridge port).
    let devs: Vec<String> = (0..3)
        .flat_map(|k| [format!("veth{k}"), format!("vp{k}")])
        .collect();
    let _mtu = NetChange::mtu(&devs, 9000);
    let dir = scratch("cluster-strangers");
    let json = dir.join("sweep.json");
    let args = sweep_args(json.to_str().unwrap(), 19420, &[]);
    let mut ranks: Vec<Child> = (0..3).map(|r| rank(r, &args)).collect();
    // Ranks 1 and 2 have connected (rank 0 takes joins in the order they connected, so the
    // strangers below come after them however slow the machine is; a fixed sleep was not
    // enough under load).
    wait_for_connections(19420, 2, Duration::from_secs(120));
    // While rank 0 waits for rank 3: garbage on its port, and a second rank 1.
    let mut garbage = std::net::TcpStream::connect(("127.0.0.1", 19420)).unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let second = rank(1, &args).wait_with_output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", text(&second));
    assert!(
        text(&second).contains("rank 1 has joined already"),
        "{}",
        text(&second)
    );
    ranks.push(rank(3, &args));
    let mut rank0 = String::new();
    for (r, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let printed = text(&out);
        assert!(
            matches!(out.status.code(), Some(0 | 3)),
            "rank {r} finishes the sweep:\n{printed}"
        );
        if r == 0 {
            rank0 = printed;
        }
    }
    assert!(
        rank0.contains("no token"),
        "rank 0 says it runs without a token:\n{rank0}"
    );
    assert!(
        rank0.contains("dropped a connection from 127.0.0.1"),
        "{rank0}"
    );
    let rec = load(&json);
    assert_eq!(rec["status"], "complete", "{rank0}");
    let all = pairs(&rec);
    assert!(
        all.iter().filter(|p| p.3.is_some()).count() >= 12,
        "every pair measured: {all:?}"
    );
    // The preflight, before the first round, names node 3's MTU.
    let preflight = rank0.find("active MTU 1024 where 3 of 4 have 4096");
    let first_round = rank0.find("round 1/3");
    assert!(
        preflight.is_some() && preflight < first_round,
        "the outlier is named before measuring:\n{rank0}"
    );
    let outliers = rec["preflight"].as_array().unwrap();
    assert!(
        outliers
            .iter()
            .any(|o| o["rank"] == 3 && o["fact"] == "active_mtu" && o["value"] == "1024"),
        "{outliers:?}"
    );
}

#[test]
fn rank_0_killed_ends_every_other_rank_at_once_naming_rank_0() {
    if !four_nodes("rank_0_killed_ends_every_other_rank_at_once_naming_rank_0") {
        return;
    }
    let dir = scratch("cluster-rank0");
    let json = dir.join("sweep.json");
    let args = sweep_args(json.to_str().unwrap(), 19440, &[]);
    let mut ranks: Vec<Child> = (0..NODES).map(|r| rank(r, &args)).collect();
    let start = Instant::now();
    while recorded_pairs(&json) < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "round 1 never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ranks[0].kill().unwrap();
    let killed = Instant::now();
    let _ = ranks[0].wait();
    for (r, child) in ranks.into_iter().enumerate().skip(1) {
        let out = child.wait_with_output().unwrap();
        let printed = text(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "rank {r}: the sweep cannot go on:\n{printed}"
        );
        assert!(
            printed.contains("rank 0"),
            "rank {r} names rank 0:\n{printed}"
        );
    }
    // A rank measuring against rank 0 ends its run within the default --timeout (60 s).
    assert!(
        killed.elapsed() < Duration::from_secs(75),
        "{:?}",
        killed.elapsed()
    );
}

/// The sweep's figure of each measured pair of one test, by (client, server).
fn figures(rec: &serde_json::Value) -> Vec<((u64, u64), f64)> {
    rec["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let key = (p["client"].as_u64()?, p["server"].as_u64()?);
            Some((key, p["value"].as_f64()?))
        })
        .collect()
}

/// A sweep of a healthy guest fleet: exit 0, or exit 3 naming NICs for their counters alone.
/// Under a loaded host rxe retransmits, and the sweep rightly names a NIC whose retry counters
/// climbed (seen in CI on 2026-12-07: completer_retry_err +1, duplicate_request +47 in 3 of a
/// rank's 5 tests); its figures still stand. Any other finding fails.
fn passed_or_counters_only(out: &std::process::Output, record: &std::path::Path) {
    let named = named_nics(&load(record));
    let counters_only = !named.is_empty() && named.iter().all(|(_, kind)| kind == "counters");
    assert!(
        out.status.code() == Some(0) || (out.status.code() == Some(3) && counters_only),
        "{:?} {named:?}: {}",
        out.status.code(),
        text(out)
    );
}

/// Three senders write into rank 0 at once (`--pattern incast --fan-in 3 --root 0`, at the
/// congestion patterns' defaults: write-bw 64 KiB for 1 s): each sender's share, the total
/// against rank 0's ceiling and rank 0's counters are printed, recorded and drawn. The same
/// three flows one at a time first (`one-to-all`): had the incast's windows not overlapped,
/// its total would be about their sum; the guest's two CPUs carry less than three flows'
/// worth, so together they share it (measured: 50.8 MB/s together, 86.9 MB/s in all one at
/// a time, each flow 25-36 MB/s alone).
#[test]
fn an_incast_of_three_shares_the_receiver_and_totals_against_its_ceiling() {
    if !four_nodes("an_incast_of_three_shares_the_receiver_and_totals_against_its_ceiling") {
        return;
    }
    let dir = scratch("incast");
    let alone = dir.join("alone.json");
    let one = ["--pattern", "one-to-all", "--tests", "write-bw"];
    let out = mpirun(&sweep_args(alone.to_str().unwrap(), 19404, &one));
    passed_or_counters_only(&out, &alone);
    let lone: f64 = figures(&load(&alone)).iter().map(|(_, v)| v).sum();

    let json = dir.join("incast.json");
    let incast = ["--pattern", "incast", "--fan-in", "3", "--root", "0"];
    let out = mpirun(&sweep_args(json.to_str().unwrap(), 19405, &incast));
    let printed = text(&out);
    passed_or_counters_only(&out, &json);
    assert!(printed.contains("pattern incast: 1 rounds"), "{printed}");
    assert!(
        printed.contains("incast into rank 0 (rxe0 of ") && printed.contains("3 flow(s) at once"),
        "{printed}"
    );
    assert!(printed.contains("counters of rxe0 of "), "{printed}");
    let rec = load(&json);
    assert_eq!(rec["pattern"], "incast");
    let groups = rec["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{printed}");
    let g = &groups[0];
    assert_eq!(g["receivers"], serde_json::json!([0]));
    let flows = g["flows"].as_array().unwrap();
    let senders: Vec<u64> = flows
        .iter()
        .map(|f| f["client"].as_u64().unwrap())
        .collect();
    assert_eq!(senders, [1, 2, 3], "{printed}");
    let shares: Vec<f64> = flows.iter().map(|f| f["value"].as_f64().unwrap()).collect();
    let total = g["total_gbps"].as_f64().unwrap();
    assert!((total - shares.iter().sum::<f64>()).abs() < 1e-9);
    assert!(
        total < 0.8 * lone,
        "the three windows overlapped: together {total} GB/s, one at a time {lone} GB/s in \
         all\n{printed}"
    );
    assert!(g["fairness"].as_f64().unwrap() > 0.5, "{g}");
    let counters = g["receiver_counters"]["0"].as_object().unwrap();
    assert!(!counters.is_empty(), "rxe0's counters: {g}");
    match g["ceiling_gbps"].as_f64() {
        Some(c) => {
            let pct = g["pct_of_ceiling"].as_f64().unwrap();
            assert!((pct - total / c * 100.0).abs() < 1e-6);
            assert!(printed.contains("of the receiver's ceiling"), "{printed}");
        }
        None => assert!(
            printed.contains("(the receiver's ceiling unknown)"),
            "{printed}"
        ),
    }

    let png = dir.join("incast.png");
    let plot = bin()
        .args(["plot", json.to_str().unwrap(), "-o", png.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(plot.status.success(), "plot: {}", text(&plot));
    assert!(
        text(&plot).contains("incast of write-bw: 1 group(s)"),
        "{}",
        text(&plot)
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
}

/// `rdmabench triage` over the four nodes at its defaults: healthy, it measures the ring in
/// one round and exits 0 with busbw; with node 2's link held to 5 Mbit/s, it exits 3 naming
/// rank 2 alone after the ring, the halves and the known-good partners.
#[test]
fn triage_reports_busbw_on_a_healthy_ring_and_names_a_throttled_node_alone() {
    if !four_nodes("triage_reports_busbw_on_a_healthy_ring_and_names_a_throttled_node_alone") {
        return;
    }
    let dir = scratch("triage");
    let json = dir.join("healthy.json");
    let out = common::mpirun_triage(NODES, &json, 19470, &[]);
    let said = text(&out);
    eprintln!("{said}");
    assert!(out.status.success(), "{said}");
    let rec = load(&json);
    assert_eq!(rec["verdict"]["kind"], "healthy", "{said}");
    assert_eq!(rec["steps"].as_array().unwrap().len(), 1, "{said}");
    let busbw = rec["collective"]["busbw_gbps"].as_f64().unwrap();
    assert!(busbw > 0.0, "{said}");
    let verdict = said
        .lines()
        .find(|l| l.starts_with("HEALTHY - "))
        .unwrap_or_else(|| panic!("no verdict line:\n{said}"));
    assert!(
        verdict.contains("the all-reduce of 4 ranks runs at"),
        "{said}"
    );
    assert!(
        said.contains("at most 3 rounds of split (4 in all"),
        "{said}"
    );
    let per_rank = rec["collective"]["per_rank"].as_array().unwrap();
    assert_eq!(per_rank.len(), 4, "{said}");

    let _throttle = NetChange::slower_link(&["veth2", "vp2"]);
    let json = dir.join("throttled.json");
    let out = common::mpirun_triage(NODES, &json, 19471, &[]);
    let said = text(&out);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(3), "{said}");
    let rec = load(&json);
    assert_eq!(rec["verdict"]["kind"], "rank", "{said}");
    assert_eq!(rec["verdict"]["ranks"], serde_json::json!([[2]]), "{said}");
    let kinds = common::step_kinds(&rec);
    assert_eq!(kinds, ["ring", "halves", "partners"], "{said}");
    let line = rec["verdict"]["line"].as_str().unwrap();
    assert!(line.starts_with("rank 2 (rxe2 of "), "{line}");
    // The node checks on it: its NIC's counters, its facts, where its flows measured.
    let checks = rec["verdict"]["checks"].to_string();
    assert!(checks.contains("NUMA: its NIC"), "{said}");
    assert!(said.contains(line), "{said}");
    std::fs::remove_dir_all(dir).ok();
}
