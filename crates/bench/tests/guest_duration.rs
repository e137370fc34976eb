//! `-D` windows at default options (needs the soft-RoCE guest): every size of an `-a -D`
//! sweep gets a rate, and a link held to 20 Mbit/s by `tc tbf` gives write-bw and read-bw
//! figures near what the shaper lets through, where one completion per 64 messages of 64 KiB
//! used to leave the window without a rate. `-D 10 --interval 1` across a link slowed to
//! 20 Mbit/s for 3 of its 10 seconds shows the dip in its table, record and plot. Also a
//! client started before its server: a scripted launch that races the two sides waits for
//! the server instead of failing.

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
    // docs/validation.md, "What the guest cannot show".
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

/// `tc tbf` on both veths at `rate`, the queue as deep as [`SLOW_LINK`]'s, so that a change
/// of rate delays frames instead of dropping them.
fn set_rate(verb: &str, rate: &str) {
    for dev in VETHS {
        sh(&format!(
            "tc qdisc {verb} dev {dev} root tbf rate {rate} burst 1mbit limit 16mb"
        ));
    }
}

#[test]
fn a_link_slowed_for_3_of_10_seconds_shows_its_dip_interval_by_interval() {
    if !rdma_ready("a_link_slowed_for_3_of_10_seconds_shows_its_dip_interval_by_interval") {
        return;
    }
    use std::io::{BufRead, BufReader};
    use std::time::Duration;
    let dir = scratch("interval-dip");
    let (sj, cj) = (dir.join("server.json"), dir.join("client.json"));
    // The shaper is there from the start at a rate the guest never reaches, so that slowing
    // it down and back changes its rate and keeps its queue (deleting it would drop frames).
    set_rate("replace", "10gbit");
    let _shaper = NetChange::new(
        &[],
        VETHS
            .iter()
            .map(|d| format!("tc qdisc del dev {d} root"))
            .collect(),
    );
    let server = Server::start(&server_args(
        "write-bw",
        19713,
        30,
        &["--json", sj.to_str().unwrap()],
    ));
    let more = [
        "-D",
        "10",
        "--interval",
        "1",
        "--json",
        cj.to_str().unwrap(),
    ];
    let mut child = bin()
        .args(client_args("write-bw", 19713, 30, &more))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("#bytes") {
                // The size starts now: its window opens after 1 s and lasts 8 s. Slow the
                // link from about 3 s to 6 s of it.
                std::thread::sleep(Duration::from_secs(3));
                set_rate("change", "20mbit");
                std::thread::sleep(Duration::from_secs(3));
                set_rate("change", "10gbit");
            }
            lines.push(line);
        }
        lines
    });
    let out = child.wait_with_output().unwrap();
    let table = reader.join().unwrap().join("\n");
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(60));
    let printed = format!("{table}\n{}", text(&out));
    eprintln!("the client's table:\n{table}");
    assert!(
        out.status.success() && server_ok,
        "{printed}\nserver:\n{server_text}"
    );

    let record = load_record(&cj);
    let r = &record["results"][0];
    let i = &r["intervals"];
    let list = i["list"].as_array().unwrap();
    let bws: Vec<f64> = list
        .iter()
        .map(|x| x["bw_gbps"].as_f64().unwrap() * 1e3)
        .collect();
    let said = format!("{printed}\nintervals in MB/s: {bws:.3?}");
    assert!(
        (6..=10).contains(&list.len()),
        "about 8 intervals of 1 s: {said}"
    );
    let ops: u64 = list.iter().map(|x| x["iterations"].as_u64().unwrap()).sum();
    assert_eq!(Some(ops), r["iterations"].as_u64(), "{said}");
    // At least one whole interval inside the 3 s at 20 Mbit/s; unshaped, rxe in the guest
    // moves several times that.
    let worst = i["worst"]["bw_gbps"].as_f64().unwrap() * 1e9;
    assert!(
        worst < 1.2 * SHAPED,
        "the dip reached the shaped rate: {said}"
    );
    // Against the best interval, not the median: on a loaded host the slow stretch (and
    // the queue it leaves) has covered half the window, the median with it (56%).
    let best = bws.iter().copied().fold(0.0, f64::max);
    assert!(
        best > 3.0 * worst / 1e6,
        "a dip against the best interval: {said}"
    );
    assert!(i["worst_pct_of_median"].as_f64().unwrap() < 100.0, "{said}");
    assert!(i["cov"].as_f64().unwrap() > 0.2, "{said}");
    let start = i["worst"]["start_s"].as_f64().unwrap();
    assert!(
        (0.5..7.5).contains(&start),
        "the dip inside the window: {said}"
    );
    // The table: a row per interval under the size's, and the worst named.
    assert!(
        table.contains("worst interval") && table.contains("% of the intervals' median"),
        "{said}"
    );
    assert!(
        table
            .lines()
            .filter(|l| l.trim_start().contains("-") && l.contains(" s "))
            .count()
            >= 6,
        "{said}"
    );
    // The server reports (and recorded) the same intervals it checked.
    assert_eq!(
        load_record(&sj)["results"][0]["intervals"],
        *i,
        "{server_text}"
    );

    // The plot: a timeline, by default for a record with intervals.
    let png = dir.join("dip.png");
    let plot = bin()
        .args(["plot", cj.to_str().unwrap(), "-o", png.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        plot.status.success() && text(&plot).contains("timeline chart"),
        "{}",
        text(&plot)
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
    std::fs::remove_dir_all(dir).ok();
}
