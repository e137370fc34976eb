//! Several rails in one invocation, on soft-RoCE (in the guest of scripts/rxe-vm.sh): a server
//! on `-d rxe0,rxe1` and a client on `-d rxe1,rxe0`, so that each rail crosses the veth pair;
//! each rail's rows and all rails together show, and the records hold every rail and the sum.
//! Every message fits one packet (the guest's path MTU is 1024): the guest's soft-RoCE answers
//! a retransmitted multi-packet WRITE with "remote invalid request" now and then on a loaded
//! host (see guest_soak.rs), and two rails at once load it more. Two tests (each asks the
//! guest for its devices first, which takes seconds under emulation): the runs, the failures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{bin, client, rdma_ready, scratch, text, Server, SERVER_ADDR};
use serde_json::Value;

/// A two-rail run of `test` on `port` with the client's `extra` arguments: the client's
/// output and both records.
fn two_rails(test: &str, port: u16, extra: &[&str]) -> (String, Value, Value) {
    let dir = scratch(&format!("rails-{test}-{port}"));
    let (sj, cj) = (dir.join("server.json"), dir.join("client.json"));
    let p = port.to_string();
    let common = ["-x", "1", "-p", &p, "--timeout", "20"];
    let mut sargs = vec![test, "-d", "rxe0,rxe1", "--json", sj.to_str().unwrap()];
    sargs.extend_from_slice(&common);
    let server = Server::start(&sargs);
    let mut cargs = vec![test, SERVER_ADDR, "-d", "rxe1,rxe0"];
    cargs.extend_from_slice(&common);
    cargs.extend_from_slice(&["--json", cj.to_str().unwrap()]);
    cargs.extend_from_slice(extra);
    let out = client(&cargs);
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(60));
    let out_text = text(&out);
    assert!(
        out.status.success() && server_ok,
        "client:\n{out_text}\nserver:\n{server_text}"
    );
    let load = |p: &std::path::Path| -> Value { common::read_record(p) };
    (out_text, load(&cj), load(&sj))
}

/// The rails' device names in a record.
fn rail_devices(record: &Value) -> Vec<String> {
    record["rails"]
        .as_array()
        .expect("rails in the record")
        .iter()
        .map(|r| r["device"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Every label starts a row of the table.
fn assert_rows(out: &str, labels: &[&str]) {
    for label in labels {
        assert!(
            out.lines().any(|l| l.starts_with(label)),
            "no row '{label}' in:\n{out}"
        );
    }
}

fn two_bandwidth_rails_show_each_rail_and_their_sum() {
    let (out, client_rec, server_rec) = two_rails("write-bw", 19800, &["-s", "1K", "-n", "300"]);
    for line in [" rail 0 of 2: rxe1", " rail 1 of 2: rxe0", " rail  #bytes"] {
        assert!(out.contains(line), "no '{line}' in:\n{out}");
    }
    assert_rows(&out, &[" 0     1024 ", " 1     1024 ", " all   1024 "]);
    assert_eq!(rail_devices(&client_rec), ["rxe1", "rxe0"]);
    assert_eq!(rail_devices(&server_rec), ["rxe0", "rxe1"]);
    for rec in [&client_rec, &server_rec] {
        assert_eq!(rec["status"], "complete", "{rec}");
        let rails = rec["rails"].as_array().unwrap();
        let each: Vec<f64> = rails
            .iter()
            .map(|r| r["results"][0]["bw_gbps"].as_f64().unwrap())
            .collect();
        assert!(each.iter().all(|&b| b > 0.0), "{each:?}");
        let all = rec["results"][0]["bw_gbps"].as_f64().unwrap();
        assert!(
            (all - each.iter().sum::<f64>()).abs() < 1e-9,
            "{all} vs {each:?}"
        );
        assert_eq!(rails[0]["results"][0]["iterations"], 300);
        assert_eq!(rec["results"][0]["iterations"], 600);
    }
}

fn two_latency_rails_each_ping_pong_and_the_worst_is_on_top() {
    let (out, rec, _) = two_rails("write-lat", 19810, &["-s", "64", "-n", "50"]);
    assert_rows(&out, &[" 0     64 ", " 1     64 ", " worst 64 "]);
    let p99 = |r: &Value| r["results"][0]["lat_us"]["p99"].as_f64().unwrap();
    let rails = rec["rails"].as_array().unwrap();
    assert_eq!(rails.len(), 2);
    let worst = rails.iter().map(p99).fold(0.0, f64::max);
    assert_eq!(p99(&rec), worst);
    assert!(rails.iter().all(|r| r["results"][0]["iterations"] == 50));
}

fn differing_rail_counts_and_bad_lists_are_usage_errors() {
    refused_on_both_sides(
        &["write-bw", "-d", "rxe0,rxe1", "-x", "1", "-p", "19820"],
        &[
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1",
            "-x",
            "1",
            "-p",
            "19820",
            "-n",
            "10",
        ],
        "the client runs 1 rail(s) (rxe1), this server 2 (rxe0,rxe1)",
    );
    let out = client(&["write-bw", SERVER_ADDR, "-d", "rxe1,mlx5_9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("no RDMA device named mlx5_9; this host has rxe0, rxe1"),
        "{}",
        text(&out)
    );
    let out = client(&["write-bw", SERVER_ADDR, "-d", "rxe0,rxe0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("device rxe0 is given twice"),
        "{}",
        text(&out)
    );
}

/// Each rail's buffers (a 32 MiB slot for 16 MiB messages) fit the server's --max-mem of 48
/// MiB; the two rails' together do not: refused on both sides, before allocating.
fn two_rails_over_max_mem_together_are_refused_on_both_sides() {
    refused_on_both_sides(
        &[
            "write-bw",
            "-d",
            "rxe0,rxe1",
            "-x",
            "1",
            "-p",
            "19840",
            "--max-mem",
            "48M",
        ],
        &[
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1,rxe0",
            "-x",
            "1",
            "-p",
            "19840",
            "-s",
            "16M",
            "-n",
            "10",
        ],
        "of host memory on its 2 rails together, above this server's --max-mem 48 MiB",
    );
}

/// A server with `server` and a client with `client`: the run is refused, the client exits
/// 2, the server fails, and both say `said`.
fn refused_on_both_sides(server: &[&str], client_args: &[&str], said: &str) {
    let server = Server::start(server);
    let out = client(client_args);
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(30));
    let client_text = text(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{client_text}\nserver:\n{server_text}"
    );
    assert!(!server_ok, "{server_text}");
    for who in [&client_text, &server_text] {
        assert!(who.contains(said), "{who}");
    }
}

fn a_dead_server_ends_every_rail_within_the_timeout_keeping_the_record() {
    let dir = scratch("rails-dead");
    let cj = dir.join("client.json");
    let mut server = Server::start(&["write-bw", "-d", "rxe0,rxe1", "-x", "1", "-p", "19830"]);
    let client = bin()
        .args([
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1,rxe0",
            "-x",
            "1",
            "-p",
            "19830",
        ])
        .args(["-s", "1K", "-D", "20", "--timeout", "5", "--json"])
        .arg(&cj)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The record is written once the rails measure: then the server dies.
    let start = Instant::now();
    while !cj.exists() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    server.child.kill().unwrap();
    let killed = Instant::now();
    let out = client.wait_with_output().unwrap();
    let took = killed.elapsed();
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(took < Duration::from_secs(12), "{took:?}: {said}");
    assert!(said.contains("rail "), "{said}");
    let rec: Value = common::read_record(&cj);
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rail_devices(&rec), ["rxe1", "rxe0"]);
}

#[test]
fn two_rails_of_bandwidth_and_of_latency_show_each_rail_and_all() {
    if !rdma_ready("two_rails_of_bandwidth_and_of_latency_show_each_rail_and_all") {
        return;
    }
    two_bandwidth_rails_show_each_rail_and_their_sum();
    two_latency_rails_each_ping_pong_and_the_worst_is_on_top();
}

#[test]
fn bad_rail_lists_and_counts_are_refused_and_a_dead_peer_ends_every_rail() {
    if !rdma_ready("bad_rail_lists_and_counts_are_refused_and_a_dead_peer_ends_every_rail") {
        return;
    }
    differing_rail_counts_and_bad_lists_are_usage_errors();
    two_rails_over_max_mem_together_are_refused_on_both_sides();
    a_dead_server_ends_every_rail_within_the_timeout_keeping_the_record();
}
