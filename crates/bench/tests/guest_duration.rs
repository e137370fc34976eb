//! `-D` windows at default options (needs the soft-RoCE guest): every size of an `-a -D`
//! sweep gets a rate, and a link held to 20 Mbit/s by `tc tbf` gives write-bw and read-bw
//! figures near what the shaper lets through, where one completion per 64 messages of 64 KiB
//! used to leave the window without a rate. Also a client started before its server: a
//! scripted launch that races the two sides waits for the server instead of failing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// The soft-RoCE link's veths (both directions of the pair rxe0 and rxe1 sit on).
const VETHS: [&str; 2] = ["veth0", "veth1"];

/// What `tc tbf` lets through, in bytes per second: 20 Mbit/s.
const SHAPED: f64 = 20e6 / 8.0;

#[test]
fn every_size_of_an_all_sizes_duration_sweep_gets_a_rate() {
    if !rdma_ready("every_size_of_an_all_sizes_duration_sweep_gets_a_rate") {
        return;
    }
    let dir = scratch("all-d");
    let json = dir.join("run.json");
    let mut args = vec!["write-bw"];
    args.extend(LOOPBACK);
    // Not the default 128 in flight: on the guest's kernel of 2026-12-02 (Debian's
    // 6.1.0-57), 128 outstanding 8 MiB writes on rxe never complete or end in 'remote access
    // error', with this binary and the one before it alike; 64 (512 MiB in flight) run.
    // README, "What the guest cannot show".
    args.extend([
        "-a",
        "-D",
        "0.5",
        "-t",
        "64",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = bin().args(&args).output().unwrap();
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    let record = load_record(&json);
    let results = record["results"].as_array().unwrap();
    let sizes: Vec<u64> = results
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    let all: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, all, "every size from 2 B to 8 MiB:\n{printed}");
    for r in results {
        let window = &r["window"];
        assert!(r["bw_gbps"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(window["completions"].as_u64().unwrap() >= 2, "{r:#}");
    }
    let big = results.last().unwrap();
    assert!(
        big["in_flight_max"].as_u64().unwrap() <= 64,
        "8 MiB: in flight {big:#}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The payload rate a `-D 2` run at default options measured across the shaped link.
fn shaped_rate(test: &str, port: u16) -> f64 {
    let run = pair(test, port, &[], &["-D", "2"]);
    run.assert_ok();
    let r = &run.results()[0];
    let bytes_per_sec = r["bw_gbps"].as_f64().unwrap() * 1e9;
    eprintln!(
        "{test} across 20 Mbit/s: {:.3} MB/s, window {}",
        bytes_per_sec / 1e6,
        r["window"]
    );
    assert_eq!(r["size"].as_u64(), Some(65536), "the default size");
    bytes_per_sec
}

#[test]
fn a_link_held_to_20_mbits_reports_the_shaped_rate() {
    if !rdma_ready("a_link_held_to_20_mbits_reports_the_shaped_rate") {
        return;
    }
    let _shaped = NetChange::slow_link(&VETHS);
    for (test, port) in [("write-bw", 19710), ("read-bw", 19711)] {
        let rate = shaped_rate(test, port);
        // RoCEv2 over a 1024-byte path MTU carries about 94% payload per frame.
        assert!(
            rate > 0.6 * SHAPED && rate < 1.02 * SHAPED,
            "{test}: {:.3} MB/s, shaped to {:.3} MB/s of frames",
            rate / 1e6,
            SHAPED / 1e6
        );
    }
}

#[test]
fn a_client_started_before_its_server_waits_for_it() {
    if !rdma_ready("a_client_started_before_its_server_waits_for_it") {
        return;
    }
    use std::io::{BufRead, BufReader};
    use std::time::Duration;
    let mut early = bin()
        .args(client_args("write-bw", 19712, 30, &["-n", "200"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The server starts once the client says it waits (opening the device takes seconds
    // in the emulated guest, so a fixed head start would not be a race).
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = early.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            lines.push(line);
        }
        lines
    });
    let waited = rx.iter().any(|l| l.contains("waiting for the server at"));
    assert!(waited, "the client never said it waits");
    std::thread::sleep(Duration::from_secs(1));
    let server = Server::start(&server_args("write-bw", 19712, 30, &[]));
    let out = early.wait_with_output().unwrap();
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(60));
    let said = reader.join().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        said.join("\n")
    );
    assert!(
        out.status.success() && server_ok,
        "{printed}\n{server_text}"
    );
    assert_eq!(
        said.iter()
            .filter(|l| l.contains("waiting for the server at"))
            .count(),
        1,
        "said once that it waits:\n{printed}"
    );
}
