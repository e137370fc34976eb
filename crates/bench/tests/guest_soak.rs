//! A `--persistent` server under a long series of runs in the soft-RoCE guest: mixed
//! parameters, clients killed in the middle, strangers that connect and say nothing. Its
//! open file descriptors, registered memory regions and resident memory must stay flat.
//!
//! `RDMABENCH_SOAK_RUNS` sets the number of runs (default 120: the footprint is taken at run
//! 50 and must not grow over the 70 after, with seven strangers and two killed clients among
//! them; a leak of one descriptor or region per run shows after one run).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{bin, client_args, rdma_ready, server_args, Server, SERVER_ADDR};
use rdmabench::cli::Cli;
use rdmabench::run::run_client;

const PORT: u16 = 19500;

/// What the server holds: open descriptors, registered MRs, resident KiB.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Footprint {
    fds: usize,
    mrs: usize,
    rss_kib: u64,
}

fn footprint(pid: u32) -> Footprint {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let out = std::process::Command::new("rdma")
        .args(["resource", "show", "mr"])
        .output()
        .unwrap();
    let mine = format!("pid {pid} ");
    let mrs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&mine))
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    Footprint { fds, mrs, rss_kib }
}

/// Run `i`'s parameters: sizes, QPs, -b and --validate in turn. Every message fits one
/// packet (the guest's path MTU is 1024): Debian 12's soft-RoCE (kernel 6.1) answers a
/// retransmitted multi-packet WRITE with "remote invalid request" now and then on a loaded
/// host, which would fail a run for the emulator's sake, not the server's.
fn args(i: usize) -> Vec<String> {
    let size = ["64", "512", "1K"][i % 3];
    let qps = ["1", "2"][i % 2];
    let mut a = client_args("write-bw", PORT, 10, &["-s", size, "-q", qps, "-n", "20"]);
    if i % 3 == 2 {
        a.push("-b".into());
    }
    if i % 4 == 3 {
        a.push("--validate".into());
    }
    a
}

/// Runs client `i` in this process (no process start per run: a hundred and more fit in CI's budget).
fn run_in_process(i: usize) -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(std::iter::once("rdmabench".to_string()).chain(args(i)))?;
    let (kind, test_args) = cli.command.test().expect("a test command");
    let plan = test_args.plan.resolve(kind)?;
    let mut opts = test_args.run_options(kind)?;
    opts.quiet = true;
    opts.progress = false;
    run_client(&opts, &plan, SERVER_ADDR, PORT)?;
    Ok(())
}

/// A client killed a moment after it started (at set-up or while measuring).
fn kill_a_client(i: usize) {
    let mut c = bin()
        .args(args(i))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200 + 100 * (i as u64 % 5)));
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn a_persistent_server_stays_flat_over_a_hundred_runs() {
    if !rdma_ready("a_persistent_server_stays_flat_over_a_hundred_runs") {
        return;
    }
    let runs: usize = std::env::var("RDMABENCH_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let mut server = Server::start(&server_args("write-bw", PORT, 3, &["--persistent"]));
    let pid = server.child.id();
    let start = Instant::now();
    let mut before = None;
    let (mut passed, mut killed, mut strangers) = (0, 0, 0);
    for i in 0..runs {
        if i == 50 {
            // After two killed clients and five strangers: whatever the server opens once
            // for good (it held one more descriptor after the first of those) is in the
            // baseline, and a leak per run, client or stranger would still show 70 runs on.
            before = Some(footprint(pid));
        }
        if i % 10 == 5 {
            // A stranger that connects and says nothing, held open during the next run.
            let silent = TcpStream::connect((SERVER_ADDR, 19500)).unwrap();
            strangers += 1;
            let run = run_in_process(i);
            assert!(run.is_ok(), "run {i} beside a silent stranger: {run:?}");
            drop(silent);
            passed += 1;
        } else if i % 25 == 24 {
            kill_a_client(i);
            killed += 1;
        } else {
            let run = run_in_process(i);
            assert!(run.is_ok(), "run {i}: {run:?}");
            passed += 1;
        }
        assert!(
            server.child.try_wait().unwrap().is_none(),
            "the server exited at run {i}"
        );
    }
    // A client killed last, or a stranger still being greeted, is released within the
    // server's deadlines: what counts is where the footprint settles.
    let before = before.unwrap();
    let settle = Instant::now();
    let mut after = footprint(pid);
    while (after.fds > before.fds || after.mrs > before.mrs)
        && settle.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(500));
        after = footprint(pid);
    }
    eprintln!(
        "soak: {runs} runs ({passed} passed, {killed} clients killed, {strangers} strangers) in {:.0} s; \
         server before {before:?}, after {after:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(after.fds <= before.fds, "open descriptors grew");
    // (The baseline may still hold the MRs of the client killed just before it.)
    assert!(after.mrs <= before.mrs, "registered MRs grew");
    assert!(
        after.rss_kib <= before.rss_kib + 4096,
        "resident memory grew by {} KiB",
        after.rss_kib - before.rss_kib
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}
