//! Runs that end badly in the soft-RoCE guest: a peer killed in the middle of a sweep. What
//! was measured before the failure must be in the records, with how the run ended.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{bin, rdma_ready, scratch, Server, SERVER_ADDR};

fn load(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no record at {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
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
    let server = Server::start(&[
        "write-bw",
        "-d",
        "rxe0",
        "-x",
        "1",
        "-p",
        "19301",
        "--timeout",
        "20",
        "--json",
        sj.to_str().unwrap(),
    ]);
    let mut client = bin()
        .args([
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1",
            "-x",
            "1",
            "-p",
            "19301",
        ])
        .args([
            "--timeout",
            "5",
            "-a",
            "-n",
            "3000",
            "--json",
            cj.to_str().unwrap(),
        ])
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
