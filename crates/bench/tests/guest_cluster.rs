//! `rdmabench cluster` in the soft-RoCE guest with four nodes (`RXE_VM_NODES=4`: rxeK on
//! vethK, 10.251.0.K+1, every vethK's peer on one bridge): Open MPI's `mpirun` starts four
//! ranks, one per device, and the sweep at its default options (write-bw 64 KiB for 1 s and
//! write-lat) measures all six pairs in three rounds and names the NIC whose link is held to
//! 20 Mbit/s, at about the shaped rate; a rank killed mid-sweep ends every other rank within
//! the timeout, and rank 0's record keeps the pairs measured before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, scratch, text};

const NODES: usize = 4;

/// True when rxe0..rxe3 exist; panics when the guest must have them.
fn four_nodes(test: &str) -> bool {
    let out = bin()
        .arg("devices")
        .output()
        .expect("run rdmabench devices");
    let listed = String::from_utf8_lossy(&out.stdout);
    if (0..NODES).all(|k| listed.contains(&format!("rxe{k}"))) {
        return true;
    }
    if std::env::var("RDMABENCH_REQUIRE_RDMA").as_deref() == Ok("1") {
        panic!("{test}: needs rxe0..rxe3: run it in a guest with RXE_VM_NODES=4");
    }
    eprintln!("skipped {test}: needs rxe0..rxe3 (scripts/rxe-vm.sh with RXE_VM_NODES=4)");
    false
}

/// What the throttle lets through, bytes per second: 20 Mbit/s.
const SHAPED: f64 = 20e6 / 8.0;

/// Node 2's link held to 20 Mbit/s each way by tbf, with a queue deep enough that frames
/// wait instead of being dropped (a slow lossless link), removed when dropped.
struct Throttle;

impl Throttle {
    fn node2() -> Throttle {
        for dev in ["veth2", "vp2"] {
            let tbf = "tbf rate 20mbit burst 32kbit limit 16mb";
            let ok = Command::new("tc")
                .args(["qdisc", "add", "dev", dev, "root"])
                .args(tbf.split(' '))
                .status()
                .expect("run tc");
            assert!(ok.success(), "tc qdisc add on {dev} failed");
        }
        Throttle
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        for dev in ["veth2", "vp2"] {
            let _ = Command::new("tc")
                .args(["qdisc", "del", "dev", dev, "root"])
                .status();
        }
    }
}

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

/// A short sweep for the killed-rank test: single-packet WRITEs, four in flight.
const SHORT: [&str; 10] = [
    "--tests",
    "write-bw",
    "-s",
    "1024",
    "-t",
    "4",
    "-D",
    "2",
    "--timeout",
    "20",
];

/// `mpirun` with one application context per node, each on its own device.
fn mpirun(args: &[String]) -> Output {
    let exe = env!("CARGO_BIN_EXE_rdmabench");
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .arg("--oversubscribe");
    for k in 0..NODES {
        if k > 0 {
            cmd.arg(":");
        }
        cmd.args(["-np", "1", exe, "cluster", "-d", &format!("rxe{k}")]);
        cmd.args(args);
    }
    cmd.output().expect("run mpirun (openmpi-bin)")
}

fn load(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no sweep record at {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn an_mpirun_sweep_measures_every_pair_and_names_the_throttled_nic() {
    if !four_nodes("an_mpirun_sweep_measures_every_pair_and_names_the_throttled_nic") {
        return;
    }
    let dir = scratch("cluster");
    let json = dir.join("sweep.json");
    let _throttle = Throttle::node2();
    let out = mpirun(&sweep_args(json.to_str().unwrap(), 19400, &[]));
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

/// Starts rank `rank` of four as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR/PORT).
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

fn planned_pairs(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["pairs"].as_array().map(Vec::len))
        .unwrap_or(0)
}

#[test]
fn a_rank_killed_mid_sweep_ends_every_rank_and_the_record_keeps_what_was_measured() {
    if !four_nodes("a_rank_killed_mid_sweep_ends_every_rank_and_the_record_keeps_what_was_measured")
    {
        return;
    }
    let dir = scratch("cluster-killed");
    let json = dir.join("sweep.json");
    let args = sweep_args(json.to_str().unwrap(), 19410, &SHORT);
    // Rank 0 first, with its record's path; the others in any order.
    let mut ranks: Vec<Child> = (0..NODES).map(|r| rank(r, &args)).collect();
    let start = Instant::now();
    while planned_pairs(&json) < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "round 1 never ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ranks[3].kill().unwrap();
    let killed = Instant::now();
    let _ = ranks[3].wait();
    for (r, child) in ranks.into_iter().enumerate().take(3) {
        let out = child.wait_with_output().unwrap();
        let printed = text(&out);
        assert_eq!(out.status.code(), Some(1), "rank {r} fails:\n{printed}");
        if r == 0 {
            assert!(
                printed.contains("rank 3"),
                "rank 0 names the dead rank:\n{printed}"
            );
        }
    }
    assert!(
        killed.elapsed() < Duration::from_secs(20 + 15),
        "every rank ended within the timeout: {:?}",
        killed.elapsed()
    );
    let rec = load(&json);
    assert_eq!(rec["status"], "failed");
    assert!(
        rec["error"].as_str().unwrap().contains("rank 3"),
        "{}",
        rec["error"]
    );
    assert!(
        rec["pairs"].as_array().unwrap().len() >= 2,
        "round 1's pairs are kept"
    );
}
