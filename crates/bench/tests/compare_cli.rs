//! `rdmabench compare` and `rdmabench plot` from the command line, on records built here:
//! exit codes (0 same, 3 regression, said on stderr, 1 unreadable record, 2 usage, a record
//! that is not there, or records that cannot be used together), the Markdown and JSON outputs, the incomparability warnings, and the plot
//! formats; and both commands on sweep records (`rdmabench.cluster/1`, built here): the
//! heat map, the pair-by-pair comparison, and the refusal to mix sweeps with result records.
//! No RDMA device needed. What `compare` prints is snapshot-tested
//! (`tests/snapshots/compare_cli__*.snap`), on the records built here and on the stored ones
//! under `results/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{bin, scratch, text, transcript, workspace_root};
use serde_json::{json, Value};

/// A write-bw record: per size, the repetitions' GB/s (the top level is their median).
fn record(fw: &str, started_at: &str, sizes: &[(u64, &[f64])]) -> Value {
    let results: Vec<Value> = sizes
        .iter()
        .map(|(size, reps)| {
            let mut sorted = reps.to_vec();
            sorted.sort_by(f64::total_cmp);
            let bw = sorted[sorted.len() / 2];
            let rep = |bw: f64| {
                json!({
                    "iterations": 5000,
                    "seconds": *size as f64 * 5000.0 / (bw * 1e9),
                    "bw_gbps": bw,
                    "msg_rate_mpps": bw * 1e9 / *size as f64 / 1e6,
                })
            };
            let mut r = json!({
                "size": size,
                "iterations": 5000,
                "seconds": *size as f64 * 5000.0 / (bw * 1e9),
                "bw_gbps": bw,
                "gbits": bw * 8.0,
                "msg_rate_mpps": bw * 1e9 / *size as f64 / 1e6,
                "pct_of_ceiling": bw / 48.5 * 100.0,
            });
            if reps.len() > 1 {
                r["repetitions"] = reps.iter().map(|&b| rep(b)).collect();
            }
            r
        })
        .collect();
    let repeat = sizes.first().map_or(1, |s| s.1.len());
    json!({
        "schema": "rdmabench.result/1",
        "tool": {"version": "0.1.0", "git": null},
        "started_at": started_at,
        "host": {"hostname": "node1", "kernel": "6.1.0-40-amd64"},
        "device": {
            "name": "mlx5_0", "fw_ver": fw, "vendor_id": 713, "part_id": 4129, "port": 1,
            "link_layer": "InfiniBand", "active_mtu": 4096,
            "active_speed": "400 Gb/sec (4X NDR)", "gid_index": 0, "gid": null
        },
        "pcie": {"nic": null, "gpu": null, "path_class": null},
        "params": {
            "test": "write-bw", "mem": "host", "connection": "RC", "qps": 1, "tx_depth": 128,
            "inline": 0, "post_list": 1, "cq_mod": 100, "iters": 5000, "duration": null,
            "bidirectional": false, "repeat": repeat
        },
        "ceilings": {
            "wire_gbps": 48.5, "pcie_gbps": 52.0, "staged_gbps": null, "limit": "wire",
            "limit_gbps": 48.5
        },
        "results": results,
    })
}

const BASE: [f64; 5] = [45.0, 45.3, 44.8, 45.1, 44.9];
const SAME: [f64; 5] = [45.2, 44.9, 45.0, 44.7, 45.3];
const DROP: [f64; 5] = [40.5, 40.2, 40.7, 40.4, 40.6];

fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p
}

fn compare(args: &[&Path], extra: &[&str]) -> std::process::Output {
    bin()
        .arg("compare")
        .args(args)
        .args(extra)
        .output()
        .unwrap()
}

struct Files {
    dir: PathBuf,
    base: PathBuf,
    same: PathBuf,
    drop: PathBuf,
}

fn files(name: &str) -> Files {
    let dir = scratch(name);
    let sizes = |v: &'static [f64]| -> Vec<(u64, &'static [f64])> { vec![(4096, v), (65536, v)] };
    Files {
        base: write(
            &dir,
            "base.json",
            &record("28.39.1002", "2026-11-01T10:00:00Z", &sizes(&BASE)),
        ),
        same: write(
            &dir,
            "same.json",
            &record("28.39.1002", "2026-11-02T10:00:00Z", &sizes(&SAME)),
        ),
        drop: write(
            &dir,
            "drop.json",
            &record("28.40.1000", "2026-11-03T10:00:00Z", &sizes(&DROP)),
        ),
        dir,
    }
}

#[test]
fn the_same_figures_exit_0() {
    let f = files("cmp-same");
    let out = compare(&[&f.base, &f.same], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("same") && t.contains("0 slower"), "{t}");
    assert!(t.contains("no regression"), "{t}");
    assert!(t.contains("4 KiB") && t.contains("64 KiB"), "{t}");
    assert!(!t.contains("WARNING"), "{t}");
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn a_ten_percent_drop_exits_3_and_shows_the_firmware() {
    let f = files("cmp-drop");
    // Exit 3, "slower", -10.0% and the firmware change shown as information (not a
    // warning): the snapshot `compare_regression_terminal`.
    insta::assert_snapshot!(
        "compare_regression_terminal",
        transcript(&f.dir, &["compare", "base.json", "drop.json"])
    );
    // A looser threshold (15%) lets it pass.
    let out = compare(&[&f.base, &f.drop], &["--threshold", "15"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The other way round it is faster, not a regression.
    let out = compare(&[&f.drop, &f.base], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("faster"), "{t}");
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn sizes_can_be_picked_and_single_runs_say_they_use_the_threshold_only() {
    let f = files("cmp-sizes");
    let out = compare(&[&f.base, &f.drop], &["-s", "64K"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(t.contains("64 KiB") && !t.contains(" 4 KiB "), "{t}");
    assert!(t.contains("1 slower"), "{t}");
    let out = compare(&[&f.base, &f.drop], &["-s", "3K"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("--size 3072"), "{t}");

    let one = |name: &str, bw: f64| {
        write(
            &f.dir,
            name,
            &record("28.39.1002", "2026-11-01T10:00:00Z", &[(65536, &[bw][..])]),
        )
    };
    let (a, b) = (one("one-a.json", 45.0), one("one-b.json", 44.0));
    let out = compare(&[&a, &b], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        t.contains("threshold alone") && t.contains("--repeat"),
        "{t}"
    );
    let c = one("one-c.json", 40.0);
    let out = compare(&[&a, &c], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn every_candidate_is_compared_to_the_baseline() {
    let f = files("cmp-many");
    let out = compare(&[&f.base, &f.same, &f.drop], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert_eq!(t.matches("Baseline : ").count(), 2, "{t}");
    assert!(t.contains("same.json") && t.contains("drop.json"), "{t}");
    assert!(t.contains("Overall: REGRESSION"), "{t}");
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn markdown_output_is_a_table() {
    let f = files("cmp-md");
    insta::assert_snapshot!(
        "compare_regression_markdown",
        transcript(&f.dir, &["compare", "base.json", "drop.json", "--markdown"])
    );
    insta::assert_snapshot!(
        "compare_regression_json",
        transcript(&f.dir, &["compare", "base.json", "drop.json", "--json"])
    );
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn json_output_carries_every_figure() {
    let f = files("cmp-json");
    let out = compare(&[&f.base, &f.drop], &["--json"]);
    assert_eq!(out.status.code(), Some(3));
    common::keep_json(&out.stdout, "compare.json");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "rdmabench.compare/1");
    assert_eq!(v["regressed"], true);
    assert_eq!(v["settings"]["threshold_pct"], 3.0);
    let c = &v["comparisons"][0];
    assert!(c["baseline"].as_str().unwrap().ends_with("base.json"));
    assert_eq!(c["slower"], 2);
    let row = &c["rows"][1];
    assert_eq!(row["size"], 65536);
    assert_eq!(row["metric"], "bw_gbps");
    assert_eq!(row["verdict"], "slower");
    assert_eq!(row["baseline_n"], 5);
    assert_eq!(row["baseline_median"], 45.0);
    assert_eq!(row["candidate_median"], 40.5);
    assert!((row["change_pct"].as_f64().unwrap() + 10.0).abs() < 1e-9);
    assert_eq!(row["spread"]["kind"], "mann_whitney");
    assert!(row["spread"]["p"].as_f64().unwrap() < 0.05);
    // Two sizes beyond the threshold: their p-values are adjusted across sizes.
    assert!(row["q"].as_f64().unwrap() < 0.05, "{row}");
    assert_eq!(row["baseline_values"].as_array().unwrap().len(), 5);
    assert_eq!(c["info"][0]["what"], "firmware (device.fw_ver)");
    assert_eq!(c["warnings"].as_array().unwrap().len(), 0);
    let out = compare(&[&f.base, &f.drop], &["--json", "--per-size"]);
    common::keep_json(&out.stdout, "compare.json");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["comparisons"][0]["rows"][1]["q"], Value::Null);
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn incomparable_records_are_warned_about_by_name() {
    let f = files("cmp-warn");
    let mut other: Value = serde_json::from_slice(&std::fs::read(&f.same).unwrap()).unwrap();
    other["device"]["active_mtu"] = json!(1024);
    other["params"]["qps"] = json!(4);
    other["params"]["mem"] = json!("cuda:0");
    let other = write(&f.dir, "other.json", &other);
    let out = compare(&[&f.base, &other], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("WARNING"), "{t}");
    assert!(t.contains("MTU (device.active_mtu): 4096 -> 1024"), "{t}");
    assert!(t.contains("QPs (params.qps): 1 -> 4"), "{t}");
    assert!(t.contains("Memory (params.mem): host -> cuda:0"), "{t}");
    let out = compare(&[&f.base, &other], &["--markdown"]);
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(
        t.contains("> **Warning**") && t.contains("`4096` → `1024`"),
        "{t}"
    );
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn a_missing_baseline_is_refused_listing_the_baselines_there_never_passed() {
    let f = files("cmp-missing");
    let saved = f.dir.join("baselines/fw-old");
    std::fs::create_dir_all(&saved).unwrap();
    std::fs::copy(&f.base, saved.join("write-bw.json")).unwrap();
    // fw_old for fw-old: exit 2, nothing on stdout, the saved baselines named.
    let typo = f.dir.join("baselines/fw_old/write-bw.json");
    let out = compare(&[&typo, &f.drop], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(out.stdout.is_empty(), "{t}");
    assert!(
        t.contains(&format!("the baseline '{}' does not exist", typo.display()))
            && t.contains(&format!(
                "'{}' holds fw-old/",
                f.dir.join("baselines").display()
            )),
        "{t}"
    );
    // A missing candidate and a folder for a record: exit 2 as well, naming the path.
    let missing = f.dir.join("missing.json");
    let out = compare(&[&f.base, &missing], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("the candidate") && t.contains("missing.json"),
        "{t}"
    );
    let out = compare(&[&saved, &f.drop], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("is a folder") && t.contains("holds write-bw.json"),
        "{t}"
    );
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn a_regression_says_so_in_one_line_on_stderr_the_report_on_stdout() {
    let f = files("cmp-stderr");
    let out = compare(&[&f.base, &f.drop], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rdmabench: compare: 2 sizes slower than the baseline (exit 3)\n"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("REGRESSION"));
    let out = compare(&[&f.base, &f.same, &f.drop], &["--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rdmabench: compare: 2 sizes slower than the baseline, in 1 of 2 candidates (exit 3)\n"
    );
    // Nothing regressed: nothing on stderr.
    let out = compare(&[&f.base, &f.same], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn unreadable_records_exit_1_naming_the_file_and_the_error() {
    let f = files("cmp-bad");

    let broken = f.dir.join("broken.json");
    std::fs::write(&broken, "{\"schema\": \"rdmabench.result/1\",").unwrap();
    let out = compare(&[&broken, &f.base], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("broken.json") && t.contains("line 1"), "{t}");
    // Nothing was printed on stdout before the error.
    assert!(out.stdout.is_empty());

    let wrong = f.dir.join("wrong.json");
    std::fs::write(&wrong, r#"{"schema": "rdmabench.result/1", "results": 5}"#).unwrap();
    let out = compare(&[&f.base, &wrong], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("wrong.json") && t.contains("expected a sequence at line 1"),
        "{t}"
    );
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn records_that_cannot_be_compared_are_refused_with_exit_2() {
    let f = files("cmp-refused");
    // No common size.
    let other = write(
        &f.dir,
        "other.json",
        &record("x", "2026-11-01T10:00:00Z", &[(2, &[0.01])]),
    );
    let out = compare(&[&f.base, &other], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("share no message size"), "{t}");

    // Different tests: refused naming both files and their tests, unless --mixed-tests.
    let mut lat = record(
        "x",
        "2026-11-02T10:00:00Z",
        &[(4096, &[45.0]), (65536, &[45.0])],
    );
    lat["params"]["test"] = json!("write-lat");
    let lat = write(&f.dir, "lat.json", &lat);
    let out = compare(&[&f.base, &f.same, &lat], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert_eq!(
        t.trim(),
        format!(
            "rdmabench: error: '{}' is write-bw (bandwidth) and '{}' is write-lat (latency): a \
             verdict between two different tests means nothing; give records of one test, or \
             add --mixed-tests to use them together anyway",
            f.base.display(),
            lat.display()
        )
    );
    // --mixed-tests compares two bandwidth tests by their bandwidth, with a warning...
    let mut read = record(
        "x",
        "2026-11-02T10:00:00Z",
        &[(4096, &[45.0]), (65536, &[45.0])],
    );
    read["params"]["test"] = json!("read-bw");
    let read = write(&f.dir, "read.json", &read);
    let out = compare(&[&f.base, &read], &["--mixed-tests"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("Test (params.test): write-bw -> read-bw"), "{t}");
    // ...but a bandwidth and a latency record share no figure: refused even then, rather
    // than the latency record's ping-pong bandwidth called a regression.
    let out = compare(&[&f.base, &lat], &["--mixed-tests"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "'{}' is write-bw (bandwidth) and '{}' is write-lat (latency): they share no figure \
             to compare, even with --mixed-tests",
            f.base.display(),
            lat.display()
        )),
        "{t}"
    );
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn plot_refuses_bandwidth_and_latency_records_together_unless_asked() {
    let f = files("plot-mixed");
    let mut lat = record("x", "2026-11-02T10:00:00Z", &[(4096, &[45.0])]);
    lat["params"]["test"] = json!("send-lat");
    let lat = write(&f.dir, "lat.json", &lat);
    let svg = f.dir.join("mixed.svg");
    let plot = |extra: &[&str]| {
        bin()
            .args(["plot", "-o"])
            .arg(&svg)
            .arg(&f.base)
            .arg(&lat)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = plot(&[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!(
            "'{}' is write-bw (bandwidth) and '{}' is send-lat (latency): one chart cannot show \
             bandwidth and latency on one axis",
            f.base.display(),
            lat.display()
        )) && t.contains("--mixed-tests"),
        "{t}"
    );
    assert!(!svg.exists());
    let out = plot(&["--mixed-tests"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(svg.exists());
    // Different bandwidth tests on one chart are what a legend is for: no flag needed.
    let mut read = record("x", "2026-11-02T10:00:00Z", &[(4096, &[30.0])]);
    read["params"]["test"] = json!("read-bw");
    let read = write(&f.dir, "read.json", &read);
    let out = bin()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg(&f.base)
        .arg(&read)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn bad_usage_exits_2() {
    let f = files("cmp-usage");
    for extra in [
        &["--threshold", "-3"][..],
        &["--threshold", "abc"],
        &["--alpha", "2"],
        &["--markdown", "--json"],
        &["--bogus"],
    ] {
        let out = compare(&[&f.base, &f.same], extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
    }
    let out = compare(&[&f.base], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = compare(&[&f.base, &f.same], &["--threshold", "-3"]);
    assert!(text(&out).contains("'-3'"), "{}", text(&out));
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn plot_writes_svg_and_png_and_refuses_other_extensions() {
    let f = files("plot-cli");
    let svg = f.dir.join("bw.svg");
    let out = bin()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg(&f.base)
        .arg(&f.drop)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let s = std::fs::read_to_string(&svg).unwrap();
    roxmltree::Document::parse(&s).unwrap();
    assert!(s.contains("bandwidth [GB/s]") && s.contains("fw 28.40.1000"));

    let png = f.dir.join("trend.png");
    let out = bin()
        .args(["plot", "--kind", "trend", "--order", "fw", "-s", "4K", "-o"])
        .arg(&png)
        .arg(&f.drop)
        .arg(&f.base)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000);

    let out = bin()
        .args(["plot", "-o", "chart.jpg"])
        .arg(&f.base)
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("'.jpg'"), "{t}");

    let out = bin()
        .args(["plot", "--kind", "lat", "-o"])
        .arg(f.dir.join("lat.svg"))
        .arg(&f.base)
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("no latency figures"), "{t}");

    let out = bin()
        .args(["plot", "-o"])
        .arg(f.dir.join("x.svg"))
        .arg(f.dir.join("missing.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    std::fs::remove_dir_all(f.dir).ok();
}

/// The stored soft-RoCE records docs/regression.md compares, at its five sizes.
const STORED: [&str; 12] = [
    "compare",
    "results/baselines/soft-roce-emulated/write-bw.json",
    "results/soft-roce-emulated/2026-11-30T040953Z-write-bw.json",
    "-s",
    "64",
    "-s",
    "4K",
    "-s",
    "64K",
    "-s",
    "1M",
    "-s",
];

#[test]
fn snapshot_compare_of_stored_records() {
    let root = workspace_root();
    let args = [&STORED[..], &["8M"]].concat();
    insta::assert_snapshot!("compare_stored_terminal", transcript(&root, &args));
    let md = [&args[..], &["--markdown"]].concat();
    insta::assert_snapshot!("compare_stored_markdown", transcript(&root, &md));
    let json = [&args[..], &["--json"]].concat();
    insta::assert_snapshot!("compare_stored_json", transcript(&root, &json));
    let lat = "results/soft-roce-emulated/2026-11-30T041448Z-write-lat.json";
    let args = ["compare", lat, lat, "-s", "2", "-s", "64K"];
    insta::assert_snapshot!("compare_stored_latency", transcript(&root, &args));
}

/// A sweep record (`rdmabench.cluster/1`) of write-bw between `ranks` (host, device), one
/// pair per (client, server, GB/s; `None` when it failed), the fleet's median 46 GB/s.
fn sweep(ranks: &[(&str, &str)], pairs: &[(u32, u32, Option<f64>)]) -> Value {
    let ranks: Vec<Value> = ranks
        .iter()
        .enumerate()
        .map(|(i, (host, device))| {
            json!({"rank": i, "host": host, "device": device, "fw_ver": "28.39.1002",
                   "label": format!("{device} of {host}")})
        })
        .collect();
    let pairs: Vec<Value> = pairs
        .iter()
        .enumerate()
        .map(|(round, &(client, server, value))| {
            let mut p = json!({
                "round": round, "client": client, "server": server, "test": "write-bw",
                "rerun": false, "value": value, "unit": "GB/s",
                "pct_of_median": value.map(|v| v / 46.0 * 100.0),
                "suspect": value.is_some_and(|v| v < 0.8 * 46.0),
            });
            if value.is_none() {
                p["error"] = json!("the peer closed the connection");
            }
            p
        })
        .collect();
    json!({
        "schema": "rdmabench.cluster/1",
        "tool": {"version": "0.1.0", "git": null},
        "started_at": "2026-12-01T08:00:00Z",
        "launcher": "Slurm",
        "pattern": "pairs",
        "tests": ["write-bw"],
        "min_pct": 80.0,
        "max_lat_factor": 1.5,
        "ranks": ranks,
        "schedule": [],
        "pairs": pairs,
        "fleet": [{"test": "write-bw", "unit": "GB/s", "pairs": 6, "median": 46.0,
                   "min": 20.0, "max": 46.0}],
        "named": [],
        "status": "complete",
    })
}

const FOUR: [(&str, &str); 4] = [
    ("node1", "mlx5_0"),
    ("node1", "mlx5_1"),
    ("node2", "mlx5_0"),
    ("node2", "mlx5_1"),
];

#[test]
fn plot_draws_a_sweep_as_a_heat_map_and_refuses_mixing_it_with_records() {
    let f = files("plot-sweep");
    let all: Vec<(u32, u32, Option<f64>)> = vec![
        (0, 1, Some(46.0)),
        (2, 3, Some(20.0)),
        (0, 2, Some(45.5)),
        (1, 3, None),
        (0, 3, Some(21.0)),
        (1, 2, Some(46.2)),
    ];
    let s = write(&f.dir, "sweep.json", &sweep(&FOUR, &all));
    let svg = f.dir.join("heat.svg");
    let out = bin()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg(&s)
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("heat map of write-bw over 4 ranks"), "{t}");
    let doc = std::fs::read_to_string(&svg).unwrap();
    roxmltree::Document::parse(&doc).unwrap();
    assert!(doc.contains("write-bw: fleet median 46.0 GB/s"), "{doc}");
    assert!(doc.contains("mlx5_1 of node2") && doc.contains("failed"));

    // A sweep with a result record: refused, naming both.
    let out = bin()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg(&f.base)
        .arg(&s)
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("'{}' is a sweep record", s.display()))
            && t.contains(&f.base.display().to_string()),
        "{t}"
    );
    // --test with a result record, or one the sweep did not run.
    let out = bin()
        .args(["plot", "--test", "write-bw", "-o"])
        .arg(&svg)
        .arg(&f.base)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = bin()
        .args(["plot", "--test", "read-bw", "-o"])
        .arg(&svg)
        .arg(&s)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // A malformed sweep record: exit 2, naming the file.
    let bad = f.dir.join("bad-sweep.json");
    std::fs::write(&bad, r#"{"schema": "rdmabench.cluster/1", "ranks": 4}"#).unwrap();
    let out = bin()
        .args(["plot", "-o"])
        .arg(&svg)
        .arg(&bad)
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad-sweep.json"), "{t}");
    std::fs::remove_dir_all(f.dir).ok();
}

/// Two sweeps of the four NICs: before, every pair near 46 GB/s; after a firmware roll-out
/// that broke mlx5_1 of node2, its pairs at about 21 GB/s. The second launch numbered the
/// ranks the other way round and did not measure the pair of node1's NICs; the first did
/// not measure mlx5_1 of node1 with mlx5_0 of node2.
fn sweeps(dir: &Path) -> (PathBuf, PathBuf) {
    let before = sweep(
        &FOUR,
        &[
            (0, 1, Some(46.0)),
            (2, 3, Some(45.8)),
            (0, 2, Some(45.5)),
            (1, 3, Some(46.1)),
            (0, 3, Some(45.9)),
        ],
    );
    let mut reversed = FOUR;
    reversed.reverse();
    // Rank k after is rank 3 - k before: mlx5_1 of node2 is rank 0 now.
    let mut after = sweep(
        &reversed,
        &[
            (1, 0, Some(21.0)),
            (3, 1, Some(45.6)),
            (2, 0, Some(20.5)),
            (3, 0, Some(20.8)),
            (2, 1, Some(46.3)),
        ],
    );
    for r in after["ranks"].as_array_mut().unwrap() {
        r["fw_ver"] = json!("28.40.1000");
    }
    (
        write(dir, "before.json", &before),
        write(dir, "after.json", &after),
    )
}

#[test]
fn two_sweeps_are_compared_pair_by_pair_and_the_slow_nic_named() {
    let f = files("cmp-sweeps");
    let (before, after) = sweeps(&f.dir);
    // Exit 3, the three pairs of mlx5_1 of node2 slower; one pair only in each sweep.
    insta::assert_snapshot!(
        "compare_sweeps_terminal",
        transcript(&f.dir, &["compare", "before.json", "after.json"])
    );
    let out = compare(&[&before, &after], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains("mlx5_1 of node2: slower in 3 of 3 write-bw pairs"),
        "{t}"
    );
    // The other way round, it is faster: no regression.
    let out = compare(&[&after, &before], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // --threshold is the bandwidth change that counts.
    let out = compare(&[&before, &after], &["--threshold", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    insta::assert_snapshot!(
        "compare_sweeps_markdown",
        transcript(
            &f.dir,
            &["compare", "before.json", "after.json", "--markdown"]
        )
    );
    let out = compare(&[&before, &after], &["--json"]);
    common::keep_json(&out.stdout, "compare.json");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "rdmabench.compare.cluster/1");
    assert_eq!(v["regressed"], true);
    assert_eq!(v["slower"], 3);
    assert_eq!(v["nics"][0]["nic"], "mlx5_1 of node2");
    assert_eq!(v["only_in_before"].as_array().unwrap().len(), 1);
    assert_eq!(v["only_in_after"].as_array().unwrap().len(), 1);
    assert_eq!(v["firmware"].as_array().unwrap().len(), 4);
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn a_sweep_with_a_result_record_or_a_bad_sweep_exits_2() {
    let f = files("cmp-sweep-mixed");
    let (before, after) = sweeps(&f.dir);
    let out = compare(&[&f.base, &after], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert_eq!(
        t.trim(),
        format!(
            "rdmabench: error: '{}' is a sweep record (rdmabench.cluster/1) and '{}' is not: \
             sweeps and result records cannot be used together; give sweep records only, or \
             result records only",
            after.display(),
            f.base.display()
        )
    );
    for extra in [&["-s", "64K"][..], &["--per-size"]] {
        let out = compare(&[&before, &after], extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
    }
    let out = compare(&[&before, &after, &after], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let bad = f.dir.join("bad.json");
    std::fs::write(&bad, r#"{"schema": "rdmabench.cluster/1", "pairs": {}}"#).unwrap();
    let out = compare(&[&before, &bad], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.json") && t.contains("not a valid"), "{t}");
    std::fs::remove_dir_all(f.dir).ok();
}

#[test]
fn a_congestion_sweep_is_refused_naming_its_pattern() {
    let incast = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../results/soft-roce-emulated/cluster/2026-12-03T040403Z-cluster-incast.json"
    ));
    let out = compare(&[incast, incast], &[]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("is a congestion sweep (--pattern incast): compare diffs the pairs"),
        "{text}"
    );
}

#[test]
fn names_from_the_records_reach_the_terminal_and_markdown_escaped() {
    let dir = scratch("cmp-hostile");
    let sizes: Vec<(u64, &[f64])> = vec![(4096, &BASE[..])];
    let mut base = record("28.39.1002", "2026-11-01T10:00:00Z", &sizes);
    let mut cand = record("28.39.1002", "2026-11-02T10:00:00Z", &sizes);
    base["device"]["name"] = json!("mlx5_0\u{1b}]0;owned\u{7}");
    cand["device"]["name"] = json!("mlx5_0\n## injected\u{1b}[2K");
    let (b, c) = (write(&dir, "b.json", &base), write(&dir, "c.json", &cand));
    for extra in [&[][..], &["--markdown"][..]] {
        let shown = text(&compare(&[&b, &c], extra));
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
        assert!(
            !shown.lines().any(|l| l.starts_with("## injected")),
            "{shown}"
        );
        assert!(shown.contains("mlx5_0\\n## injected\\u{1b}[2K"), "{shown}");
    }
    std::fs::remove_dir_all(dir).ok();
}
