//! `rdmabench health` on soft-RoCE (needs the guest): at its defaults it runs a loopback
//! write-bw on every NIC at once and finishes within its budget, OK; `--learn` writes each
//! NIC's least bandwidth from what it measured and `--expect` takes it back, OK; an
//! expectation no NIC meets is CRITICAL (BW_LOW, exit 2) with the metrics promtool accepts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, keep_json, promtool, rdma_ready, scratch, text};

#[test]
fn health_measures_every_nic_within_its_budget_and_learns_what_it_expects() {
    if !rdma_ready("health_measures_every_nic_within_its_budget_and_learns_what_it_expects") {
        return;
    }
    let dir = scratch("health");
    let (learned, json) = (dir.join("rxe.json"), dir.join("health.json"));
    let started = std::time::Instant::now();
    let out = bin()
        .args(["health", "--learn", learned.to_str().unwrap()])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let took = started.elapsed().as_secs_f64();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.starts_with("HEALTH OK - "), "{said}");
    let bytes = std::fs::read(&json).unwrap();
    keep_json(&bytes, "health.json");
    let report: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let runs = report["bandwidth"].as_array().unwrap();
    let nics: Vec<&str> = runs.iter().map(|r| r["nic"].as_str().unwrap()).collect();
    assert!(nics.contains(&"rxe0") && nics.contains(&"rxe1"), "{said}");
    for r in runs {
        assert!(r["gbits"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Learning took each NIC's least of the rounds that fitted the budget (three when they
    // do), and says how many.
    let note = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "bandwidth")
        .map(|c| c["note"].as_str().unwrap().to_string())
        .unwrap();
    assert!(note.contains("the least of "), "{note}");
    // Within the default budget of 30 s, counted by the check from its own start, and the
    // report says so per check. The wall clock here also holds the process's start and exit
    // (loading, reading the topology, writing the files), which under TCG on a loaded
    // 2-core host once took the whole to 30.1 s: allowed 3 s on top, no more.
    let seconds = report["seconds"].as_f64().unwrap();
    assert!(seconds < 30.0, "the check took {seconds:.1} s:\n{said}");
    assert!(
        took < 33.0,
        "took {took:.1} s with the process's start:\n{said}"
    );
    assert!(said.contains("of the 30 s budget"), "{said}");

    let file = std::fs::read_to_string(&learned).unwrap();
    keep_json(file.as_bytes(), "learned.json");
    let mut expect: serde_json::Value = serde_json::from_str(&file).unwrap();
    for nic in expect["nics"].as_array().unwrap() {
        assert!(nic["min_gbits"].as_f64().unwrap() > 0.0, "{file}");
    }
    // What it learned it takes back: each NIC's loopback run is judged against its learned
    // least (90% of the least of the rounds this node did). Soft-RoCE's rate follows the
    // host's load (in CI other lanes' guests ran beside it: 0.19 Gb/s learned, 0.10 measured
    // a minute later), so the verdict is not fixed; what must hold is that every expectation
    // came back as learned and the verdict follows the figures: OK when each run met its
    // least, BW_LOW (exit 2) naming exactly the NICs that fell below. A run that passes is
    // tried for, up to three times.
    let learned_min = |nic: &str| {
        expect["nics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == nic)
            .and_then(|n| n["min_gbits"].as_f64())
    };
    let judged = dir.join("judged.json");
    let mut passed = false;
    for _ in 0..3 {
        let out = bin()
            .args(["health", "--expect", learned.to_str().unwrap()])
            .args(["--json", judged.to_str().unwrap()])
            .output()
            .unwrap();
        let said = text(&out);
        eprintln!("{said}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&judged).unwrap()).unwrap();
        let mut low = Vec::new();
        for r in report["bandwidth"].as_array().unwrap() {
            let nic = r["nic"].as_str().unwrap();
            let min = r["min_gbits"].as_f64();
            assert_eq!(min, learned_min(nic), "{nic}'s expectation: {r}\n{file}");
            if r["gbits"].as_f64().unwrap() < min.unwrap() {
                low.push(nic.to_string());
            }
        }
        if low.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{said}");
            assert!(said.starts_with("HEALTH OK - "), "{said}");
            passed = true;
            break;
        }
        assert_eq!(out.status.code(), Some(2), "{said}");
        for nic in &low {
            assert!(
                said.lines()
                    .any(|l| l.contains("BW_LOW") && l.contains(nic.as_str())),
                "{nic} fell below its least and is not named:\n{said}"
            );
        }
    }
    if !passed {
        eprintln!("the learned expectations were judged right but never met (a loaded host)");
    }

    // A least bandwidth no soft-RoCE NIC reaches: CRITICAL, BW_LOW, exit 2.
    for nic in expect["nics"].as_array_mut().unwrap() {
        nic["min_gbits"] = serde_json::json!(10000.0);
    }
    let strict = dir.join("strict.json");
    std::fs::write(&strict, serde_json::to_string(&expect).unwrap()).unwrap();
    let prom = dir.join("health.prom");
    let out = bin()
        .args(["health", "--expect", strict.to_str().unwrap()])
        .args(["--prom", prom.to_str().unwrap()])
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.starts_with("HEALTH CRITICAL - rxe"), "{said}");
    assert!(said.contains("BW_LOW"), "{said}");
    assert_eq!(promtool(&prom), "");
    std::fs::remove_dir_all(dir).ok();
}
