//! Regression tracking end to end on real soft-RoCE runs (in the guest of scripts/rxe-vm.sh):
//! two write-bw runs, `compare` on them (a verdict with its reason and the matching exit
//! code), `plot` to SVG and PNG, and scripts/two-node.sh in its local and ssh modes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{bin, client, rdma_ready, scratch, text, write_executable, LOOPBACK};
use serde_json::Value;

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One real write-bw run, server on rxe0 and client on rxe1 in one invocation.
fn run(json: &Path) {
    let mut args = vec!["write-bw"];
    args.extend(LOOPBACK);
    args.extend([
        "-s",
        "64K",
        "-n",
        "200",
        "-t",
        "32",
        "--timeout",
        "30",
        "--json",
        path(json),
    ]);
    let out = client(&args);
    assert!(out.status.success(), "write-bw failed:\n{}", text(&out));
}

#[test]
fn two_real_runs_compare_and_plot() {
    if !rdma_ready("two_real_runs_compare_and_plot") {
        return;
    }
    let dir = scratch("regression");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    run(&a);
    run(&b);

    // The verdict is whatever the emulated link gave, but it must be reasoned and the exit
    // code must follow it.
    let out = bin()
        .args(["compare", "--json", path(&a), path(&b)])
        .output()
        .unwrap();
    common::keep_json(&out.stdout, "compare.json");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("compare --json: {e}\n{}", text(&out)));
    let row = &v["comparisons"][0]["rows"][0];
    assert_eq!(row["size"], 65536, "{v}");
    let verdict = row["verdict"].as_str().unwrap();
    assert!(["same", "faster", "slower"].contains(&verdict), "{row}");
    // Single runs: the threshold alone decides, and the reason says so.
    assert_eq!(row["spread"]["kind"], "threshold_only", "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(reason.contains("no repetitions"), "{reason}");
    let expect = if verdict == "slower" { 3 } else { 0 };
    assert_eq!(out.status.code(), Some(expect), "{verdict}: {}", text(&out));
    assert_eq!(v["regressed"], verdict == "slower");

    // Same devices, same parameters: nothing to warn about; the terminal table names the size.
    let out = bin()
        .args(["compare", path(&a), path(&b)])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(expect), "{t}");
    assert!(!t.contains("WARNING"), "{t}");
    assert!(t.contains("64 KiB") && t.contains(verdict), "{t}");

    // With a threshold no emulated wobble reaches, the verdict is "same" and the exit 0.
    let out = bin()
        .args(["compare", "--threshold", "900", path(&a), path(&b)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Plots of the real records.
    let svg = dir.join("bw.svg");
    let png = dir.join("bw.png");
    for (file, kind) in [
        (&svg, "bw"),
        (&png, "bw"),
        (&dir.join("trend.svg"), "trend"),
    ] {
        let out = bin()
            .args(["plot", "--kind", kind, "-o", path(file), path(&a), path(&b)])
            .output()
            .unwrap();
        assert!(out.status.success(), "plot {kind}: {}", text(&out));
    }
    let s = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&s).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(
        s.contains("EMULATED"),
        "soft-RoCE plots say the figures are emulated"
    );
    let p = std::fs::read(&png).unwrap();
    assert!(p.len() > 1000 && p.starts_with(b"\x89PNG\r\n\x1a\n"));
    roxmltree::Document::parse(&std::fs::read_to_string(dir.join("trend.svg")).unwrap()).unwrap();
    std::fs::remove_dir_all(dir).ok();
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/two-node.sh")
}

fn two_node(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new("bash")
        .arg(script())
        .args(["--results", path(dir)])
        .args(args)
        .env("RDMABENCH_BIN", common::exe())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (out, start.elapsed())
}

/// The records stored under `dir`/`label`: (client, server).
fn stored(dir: &Path, label: &str) -> (Value, Value) {
    let mut client = None;
    let mut server = None;
    for e in std::fs::read_dir(dir.join(label)).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let v: Value = common::read_record(&p);
        if name.ends_with("-write-bw.server.json") {
            server = Some(v);
        } else if name.ends_with("-write-bw.json") {
            client = Some(v);
        } else {
            panic!("unexpected file {name}");
        }
    }
    (
        client.expect("client record"),
        server.expect("server record"),
    )
}

#[test]
fn two_node_script_runs_both_sides_and_collects_both_records() {
    if !rdma_ready("two_node_script_runs_both_sides_and_collects_both_records") {
        return;
    }
    let dir = scratch("two-node");

    // Local mode: the guest's two devices stand in for two hosts.
    let (out, _) = two_node(
        &dir,
        &[],
        &[
            "--label",
            "guest",
            "local:rxe0",
            "local:rxe1",
            "-x",
            "1",
            "-s",
            "4K",
            "-n",
            "100",
            "-p",
            "18611",
        ],
    );
    assert!(out.status.success(), "two-node.sh failed:\n{}", text(&out));
    let (c, s) = stored(&dir, "guest");
    assert_eq!(c["device"]["name"], "rxe1");
    assert_eq!(s["device"]["name"], "rxe0");
    assert_eq!(c["results"][0]["size"], 4096);
    assert_eq!(c["results"], s["results"]);

    // The ssh mode, with an "ssh" that runs the command here (the host is ignored), and the
    // server's address given.
    let fake = dir.join("fake-ssh");
    write_executable(&fake, "#!/bin/sh\nshift\nexec bash -c \"$1\"\n");
    let (out, _) = two_node(
        &dir,
        &[("RDMABENCH_SSH", path(&fake))],
        &[
            "--label",
            "over-ssh",
            "--server-dev",
            "rxe0",
            "--client-dev",
            "rxe1",
            "--server-addr",
            "10.251.0.1",
            "user@node-a",
            "node-b",
            "-x",
            "1",
            "-s",
            "4K",
            "-n",
            "100",
            "-p",
            "18612",
        ],
    );
    let t = text(&out);
    assert!(out.status.success(), "two-node.sh over ssh failed:\n{t}");
    assert!(t.contains("write-bw 10.251.0.1"), "{t}");
    let (c, s) = stored(&dir, "over-ssh");
    assert_eq!(
        (&c["device"]["name"], &s["device"]["name"]),
        (&"rxe1".into(), &"rxe0".into())
    );

    // A client that fails: the server is stopped, the script says so and exits 1 at once,
    // long before the server's --timeout (the server opens its device before it listens,
    // which takes seconds on a loaded emulated guest).
    let (out, took) = two_node(
        &dir,
        &[],
        &[
            "--label",
            "failed",
            "local:rxe0",
            "local:nosuchdev",
            "-x",
            "1",
            "-s",
            "4K",
            "-p",
            "18613",
            "--timeout",
            "90",
        ],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("the client on local:nosuchdev failed"), "{t}");
    assert!(t.contains("the server was stopped"), "{t}");
    assert!(
        !t.contains("two-node: pid"),
        "the script's own plumbing shows: {t}"
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(!dir.join("failed").exists());

    // Bad usage exits 2.
    let (out, _) = two_node(&dir, &[], &["local:rxe0", "local:rxe1", "--json", "x.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// Runs scripts/fw-regression.sh in quick mode between rxe0 and rxe1, storing under `dir`.
fn fw_regression(dir: &Path, args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fw-regression.sh");
    Command::new("bash")
        .arg(script)
        .args(["--quick", "--repeat", "2", "--results", path(dir)])
        .args(args)
        .args(["local:rxe0", "local:rxe1"])
        .env("RDMABENCH_BIN", common::exe())
        .output()
        .expect("run fw-regression.sh")
}

#[test]
fn fw_regression_saves_a_baseline_compares_and_exits_3_on_a_regression() {
    if !rdma_ready("fw_regression_saves_a_baseline_compares_and_exits_3_on_a_regression") {
        return;
    }
    let dir = scratch("fw-regression");
    let out = fw_regression(&dir, &["--save-baseline", "before"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for test in ["write-bw", "read-bw", "send-bw", "write-lat", "send-lat"] {
        assert!(
            dir.join("baselines/before")
                .join(format!("{test}.json"))
                .is_file(),
            "{test} baseline"
        );
    }

    // The same machine again, against a copy of that baseline whose write-bw is ten times
    // faster than anything this link can do: every test compared and reported, write-bw a
    // regression, exit 3. (One run checks both: the other four tests compare against the
    // real baseline, so a comparison of this machine's own records that failed would exit 1.)
    let fast = dir.join("baselines/fast");
    std::fs::create_dir_all(&fast).unwrap();
    for test in ["write-bw", "read-bw", "send-bw", "write-lat", "send-lat"] {
        let name = format!("{test}.json");
        std::fs::copy(dir.join("baselines/before").join(&name), fast.join(&name)).unwrap();
    }
    let base = fast.join("write-bw.json");
    let mut record: Value = common::read_record(&base);
    for r in record["results"].as_array_mut().unwrap() {
        let bw = r["bw_gbps"].as_f64().unwrap();
        r["bw_gbps"] = Value::from(bw * 10.0);
        for rep in r["repetitions"].as_array_mut().unwrap() {
            let bw = rep["bw_gbps"].as_f64().unwrap();
            rep["bw_gbps"] = Value::from(bw * 10.0);
        }
    }
    std::fs::write(&base, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    let out = fw_regression(&dir, &["--baseline", "fast"]);
    let report = text(&out);
    assert_eq!(out.status.code(), Some(3), "{report}");
    for test in ["write-bw", "read-bw", "send-bw", "write-lat", "send-lat"] {
        assert!(
            report.contains(&format!("## {test}")),
            "{test} missing from the report:\n{report}"
        );
    }
    assert!(
        report.contains("slower") && report.contains("REGRESSION"),
        "{report}"
    );
    std::fs::remove_dir_all(dir).ok();
}
