//! Runs that end badly in the soft-RoCE guest: a peer killed in the middle of a sweep, a link
//! that goes down, a device deleted while in use. What was measured before a failure must be
//! in both records, with how the run ended, and no side may wait past its timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{bin, client_args, rdma_ready, scratch, server_args, sh, Server};

fn load(path: &std::path::Path) -> serde_json::Value {
    common::read_record(path)
}

/// Lines of a result table: they start with the size.
fn is_row(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .is_some_and(|w| w.parse::<u64>().is_ok())
}

#[test]
fn a_sweep_whose_server_dies_at_the_tenth_size_keeps_the_nine_before() {
    if !rdma_ready("a_sweep_whose_server_dies_at_the_tenth_size_keeps_the_nine_before") {
        return;
    }
    let dir = scratch("sweep-killed");
    let (sj, cj) = (dir.join("server.json"), dir.join("client.json"));
    let server = Server::start(&server_args(
        "write-bw",
        19301,
        20,
        &["--json", sj.to_str().unwrap()],
    ));
    let mut client = bin()
        .args(client_args(
            "write-bw",
            19301,
            5,
            &["-a", "-n", "3000", "--json", cj.to_str().unwrap()],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(client.stdout.take().unwrap());
    let mut rows = 0;
    let mut seen = String::new();
    let mut server = server;
    for line in stdout.lines().map_while(Result::ok) {
        seen.push_str(&line);
        seen.push('\n');
        if is_row(&line) {
            rows += 1;
            if rows == 9 {
                // The client is starting its tenth size.
                server.child.kill().unwrap();
                break;
            }
        }
    }
    assert_eq!(rows, 9, "the client printed:\n{seen}");
    let start = Instant::now();
    let status = client.wait().unwrap();
    let took = start.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        !status.success(),
        "the client passed without its server:\n{seen}{err}"
    );
    assert!(
        took < Duration::from_secs(20),
        "the client took {took:?} to notice"
    );
    assert!(
        err.contains("size 1024 bytes"),
        "the error names the size: {err}"
    );

    let c = load(&cj);
    assert_eq!(c["status"], "failed", "{c:#}");
    let sizes: Vec<u64> = c["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, (1..=9).map(|k| 1u64 << k).collect::<Vec<_>>());
    assert!(
        c["error"].as_str().unwrap().contains("size 1024 bytes"),
        "{c:#}"
    );

    // The killed server had no word to say: its record is incomplete and holds the sizes it
    // had written (it writes the ninth just after reporting it, so that one may be missing).
    let s = load(&sj);
    assert_eq!(s["status"], "incomplete", "{s:#}");
    let n = s["results"].as_array().unwrap().len();
    assert!(n == 8 || n == 9, "the server recorded {n} sizes: {s:#}");
    std::fs::remove_dir_all(dir).ok();
}

/// Waits until rxe1's port is ACTIVE again with its IPv4 GID (after a fault test put it back).
fn wait_rxe1_active() {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let state = std::fs::read_to_string("/sys/class/infiniband/rxe1/ports/1/state");
        let gid = std::fs::read_to_string("/sys/class/infiniband/rxe1/ports/1/gids/1");
        if state.is_ok_and(|s| s.contains("ACTIVE")) && gid.is_ok_and(|g| g.contains("0afb")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("rxe1 did not come back ACTIVE with its IPv4 GID within 20 s");
}

/// A write-bw sweep between rxe0 and rxe1 whose link `fault` breaks once the client has
/// printed three sizes; `repair` puts it back. Returns each side's exit success, output, the
/// time each took after the fault, and their records.
struct Broken {
    client_ok: bool,
    client_err: String,
    client_took: Duration,
    server_ok: bool,
    server_text: String,
    server_took: Duration,
    client_json: serde_json::Value,
    server_json: serde_json::Value,
}

fn break_a_sweep(name: &str, port: u16, fault: &str, repair: &str) -> Broken {
    let dir = scratch(name);
    let (sj, cj) = (dir.join("server.json"), dir.join("client.json"));
    let server = Server::start(&server_args(
        "write-bw",
        port,
        5,
        &["--json", sj.to_str().unwrap()],
    ));
    let mut client = bin()
        .args(client_args(
            "write-bw",
            port,
            5,
            &["-a", "-n", "2000", "--json", cj.to_str().unwrap()],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The client's output is read to the end (a closed pipe would end it by itself).
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = BufReader::new(client.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut rows = 0;
    let mut seen = String::new();
    while rows < 3 {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = client.kill();
            let mut err = String::new();
            std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut err).ok();
            panic!("the client never measured three sizes:\n{seen}\n{err}");
        };
        rows += usize::from(is_row(&line));
        seen.push_str(&line);
        seen.push('\n');
    }
    // The fault may block (removing a device waits for its users), so it runs aside.
    let fault = fault.to_string();
    let breaker = std::thread::spawn(move || sh(&fault));
    let start = Instant::now();
    let status = client.wait().unwrap();
    let client_took = start.elapsed();
    let mut client_err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut client_err).unwrap();
    let (server_ok, server_text, server_took) = server.finish(Duration::from_secs(60));
    breaker.join().unwrap();
    sh(repair);
    wait_rxe1_active();
    let out = Broken {
        client_ok: status.success(),
        client_err,
        client_took,
        server_ok,
        server_text,
        server_took: client_took.max(server_took),
        client_json: load(&cj),
        server_json: load(&sj),
    };
    std::fs::remove_dir_all(dir).ok();
    out
}

/// Both sides failed within their timeout (5 s, plus the retries and the heartbeat's grace)
/// with an error, and both records hold the sizes measured before the fault.
fn assert_failed_cleanly(b: &Broken) {
    let all = format!(
        "client:\n{}\nserver:\n{}\nclient record: {:#}\nserver record: {:#}",
        b.client_err, b.server_text, b.client_json, b.server_json
    );
    assert!(!b.client_ok && !b.server_ok, "both sides must fail:\n{all}");
    assert!(
        b.client_took < Duration::from_secs(15),
        "client took {:?}:\n{all}",
        b.client_took
    );
    assert!(
        b.server_took < Duration::from_secs(20),
        "server took {:?}:\n{all}",
        b.server_took
    );
    assert!(b.client_err.contains("rdmabench: error:"), "{all}");
    assert!(b.server_text.contains("error"), "{all}");
    for j in [&b.client_json, &b.server_json] {
        assert_eq!(j["status"], "failed", "{all}");
        assert!(j["error"].as_str().is_some_and(|e| !e.is_empty()), "{all}");
        assert!(j["results"].as_array().unwrap().len() >= 2, "{all}");
    }
}

#[test]
fn a_link_that_goes_down_mid_sweep_ends_both_sides_within_the_timeout() {
    if !rdma_ready("a_link_that_goes_down_mid_sweep_ends_both_sides_within_the_timeout") {
        return;
    }
    let b = break_a_sweep(
        "link-down",
        19311,
        "ip link set veth1 down",
        "ip link set veth1 up && ip route replace 10.251.0.1 dev veth1 table 100",
    );
    eprintln!(
        "link down: client: {}\nserver: {}",
        b.client_err.trim(),
        b.server_text.trim()
    );
    assert_failed_cleanly(&b);
}

/// soft-RoCE cannot take a device away from a process that uses it (rxe has no way to
/// disassociate user contexts): `rdma link delete` waits until the run has closed the device,
/// and the device moves bytes until then. So the run must end as planned, complete, and the
/// deletion must go through as soon as the run lets go of the device (nothing held after).
#[test]
fn a_device_deleted_during_a_run_is_released_when_the_run_ends() {
    if !rdma_ready("a_device_deleted_during_a_run_is_released_when_the_run_ends") {
        return;
    }
    let dir = scratch("rxe-deleted");
    let cj = dir.join("client.json");
    let server = Server::start(&server_args("write-bw", 19321, 10, &[]));
    let mut client = bin()
        .args(client_args(
            "write-bw",
            19321,
            10,
            &["-s", "64K", "-D", "4", "--json", cj.to_str().unwrap()],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(client.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("#bytes") {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the client never measured:\n{seen}"
        );
        seen.push_str(&line);
    }
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let deleted = std::thread::spawn(|| {
        sh("rdma link delete rxe1");
        Instant::now()
    });
    let status = client.wait().unwrap();
    let client_end = Instant::now();
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(30));
    let deleted_at = deleted.join().unwrap();
    sh("rdma link add rxe1 type rxe netdev veth1");
    wait_rxe1_active();
    assert!(
        status.success() && server_ok,
        "the run failed:\n{seen}\nserver:\n{server_text}"
    );
    assert!(
        deleted_at >= client_end - Duration::from_millis(500),
        "deleted while in use"
    );
    assert!(
        deleted_at - client_end < Duration::from_secs(10),
        "the device was held after the run"
    );
    assert_eq!(load(&cj)["status"], "complete");
    std::fs::remove_dir_all(dir).ok();
}
