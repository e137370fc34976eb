//! write-bw end to end: a server on rxe0 and a client on rxe1 across the guest's veth pair,
//! checking the payload, the plan negotiation and the failure paths a user would hit; and
//! read-bw of 4 MiB at default options, whose READs rxe serves slowly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{
    bin, client, load_record, pair_once_more_on_rxe_bug, rdma_ready, scratch, text, Server,
    LOOPBACK, SERVER_ADDR,
};

/// Runs one validated write-bw between rxe0 and rxe1 and checks both records; `-u` is given
/// to the client only, as `qp_timeout` says.
fn validated_run(port: u16, size: &str, qps: &str, qp_timeout: Option<&str>) {
    let mut args = vec!["-s", size, "-q", qps, "-n", "64", "-t", "16", "--validate"];
    if let Some(u) = qp_timeout {
        args.extend(["-u", u]);
    }
    let run = pair_once_more_on_rxe_bug("write-bw", port, &[], &args);
    run.assert_ok();
    let (client_rec, server_rec, server_text) =
        (&run.client_json, &run.server_json, &run.server_text);
    let expect_size = verbs_size(size);
    let qps: u64 = qps.parse().unwrap();
    for (who, rec, dev) in [
        ("client", client_rec, "rxe1"),
        ("server", server_rec, "rxe0"),
    ] {
        assert_eq!(rec["schema"], "rdmabench.result/1", "{who}");
        assert_eq!(rec["device"]["name"], dev, "{who}");
        assert_eq!(rec["params"]["qps"], qps, "{who}");
        // The server adopts the client's -u; without one, rxe (a software device) gets 18.
        let want: u64 = qp_timeout.map_or(18, |u| u.parse().unwrap());
        assert_eq!(rec["params"]["qp_timeout"], want, "{who}");
        let row = &rec["results"][0];
        assert_eq!(row["size"], expect_size, "{who}");
        assert_eq!(row["iterations"], 64 * qps, "{who}");
        assert!(row["bw_gbps"].as_f64().unwrap() > 0.0, "{who}: {row}");
    }
    // Both sides print the same numbers: the server reports what the client measured.
    assert_eq!(client_rec["results"], server_rec["results"]);
    assert!(
        server_text.contains(&expect_size.to_string()),
        "server table:\n{server_text}"
    );
}

fn verbs_size(s: &str) -> u64 {
    match s {
        "2" => 2,
        "4K" => 4096,
        "64K" => 65536,
        "1M" => 1 << 20,
        other => other.parse().unwrap(),
    }
}

#[test]
fn one_qp_moves_the_right_bytes_at_every_size() {
    if !rdma_ready("one_qp_moves_the_right_bytes_at_every_size") {
        return;
    }
    for (i, size) in ["2", "4K", "64K", "1M"].iter().enumerate() {
        let qp_timeout = (*size == "2").then_some("16");
        validated_run(19100 + i as u16, size, "1", qp_timeout);
    }
}

#[test]
fn four_qps_move_the_right_bytes_at_every_size() {
    if !rdma_ready("four_qps_move_the_right_bytes_at_every_size") {
        return;
    }
    for (i, size) in ["2", "4K", "64K", "1M"].iter().enumerate() {
        validated_run(19110 + i as u16, size, "4", None);
    }
}

#[test]
fn a_differing_plan_is_refused_on_both_sides_naming_both_values() {
    if !rdma_ready("a_differing_plan_is_refused_on_both_sides_naming_both_values") {
        return;
    }
    let server = Server::start(&[
        "write-bw",
        "-d",
        "rxe0",
        "-p",
        "19120",
        "-s",
        "4096",
        "--timeout",
        "20",
    ]);
    let out = client(&[
        "write-bw",
        SERVER_ADDR,
        "-d",
        "rxe1",
        "-p",
        "19120",
        "-s",
        "64K",
        "--timeout",
        "20",
    ]);
    let (server_ok, server_text, _) = server.finish(Duration::from_secs(30));
    let client_text = text(&out);
    // A plan the server refuses is a usage error on both sides.
    assert_eq!(out.status.code(), Some(2), "{client_text}");
    assert!(!server_ok);
    for t in [&client_text, &server_text] {
        assert!(
            t.contains("plan mismatch")
                && t.contains("server 4 KiB")
                && t.contains("client 64 KiB"),
            "{t}"
        );
    }
}

#[test]
fn a_client_killed_mid_run_fails_the_server_within_its_timeout() {
    if !rdma_ready("a_client_killed_mid_run_fails_the_server_within_its_timeout") {
        return;
    }
    let server = Server::start(&["write-bw", "-d", "rxe0", "-p", "19130", "--timeout", "5"]);
    common::kill_client_mid_run(
        "write-bw",
        19130,
        &["-s", "64K", "-n", "100000000", "--timeout", "5"],
    );
    let (ok, server_text, took) = server.finish(Duration::from_secs(15));
    assert!(
        !ok,
        "the server passed after its client died:\n{server_text}"
    );
    assert!(
        took <= Duration::from_secs(6),
        "the server took {took:?} to notice"
    );
    assert!(
        server_text.contains("closed the connection") || server_text.contains("timed out"),
        "{server_text}"
    );
}

#[test]
fn a_silent_server_port_fails_the_client_within_its_timeout() {
    if !rdma_ready("a_silent_server_port_fails_the_client_within_its_timeout") {
        return;
    }
    use std::io::{BufRead, BufReader};
    let start = Instant::now();
    let mut child = bin()
        .args([
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1",
            "-p",
            "19140",
            "--timeout",
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The timeout counts from when the client starts waiting for the server (it says so),
    // not from its start: opening a device takes seconds in an emulated guest on a busy host
    // (8.7 s once, with two guests on two CPUs).
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let mut waiting_since = None;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("waiting for the server at") {
                waiting_since.get_or_insert_with(Instant::now);
            }
            lines.push(line);
        }
        (waiting_since, lines)
    });
    let out = child.wait_with_output().unwrap();
    let ended = Instant::now();
    let (waiting_since, lines) = reader.join().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        lines.join("\n")
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    let waited = ended - waiting_since.unwrap_or_else(|| panic!("never said it waits: {said}"));
    // Its 3 s and the exit, far below the default 30 s it would otherwise wait.
    assert!(
        waited < Duration::from_secs(5),
        "waited {waited:?}:\n{said}"
    );
    assert!(start.elapsed() < Duration::from_secs(30), "{said}");
    assert!(
        said.contains("cannot connect") || said.contains("no answer"),
        "{said}"
    );
}

#[test]
fn loopback_runs_server_and_client_in_one_invocation() {
    if !rdma_ready("loopback_runs_server_and_client_in_one_invocation") {
        return;
    }
    let out = client(&[
        "write-bw",
        "--loopback",
        "-d",
        "rxe0",
        "--peer-dev",
        "rxe1",
        "-s",
        "4K",
        "-n",
        "100",
        "--validate",
        "--report-gbits",
        "--timeout",
        "20",
    ]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("BW average[Gb/s]") && t.contains("RDMA_Write BW Test (client)"),
        "{t}"
    );
}

#[test]
fn a_persistent_server_serves_run_after_run() {
    if !rdma_ready("a_persistent_server_serves_run_after_run") {
        return;
    }
    let mut server = Server::start(&[
        "write-bw",
        "-d",
        "rxe0",
        "-p",
        "19150",
        "--persistent",
        "--timeout",
        "3",
    ]);
    for n in ["50", "80"] {
        let out = client(&[
            "write-bw",
            SERVER_ADDR,
            "-d",
            "rxe1",
            "-p",
            "19150",
            "-s",
            "4K",
            "-n",
            n,
            "--timeout",
            "10",
        ]);
        assert!(out.status.success(), "{}", text(&out));
    }
    // Longer than its --timeout without a client: still serving.
    std::thread::sleep(Duration::from_secs(4));
    let out = client(&[
        "write-bw",
        SERVER_ADDR,
        "-d",
        "rxe1",
        "-p",
        "19150",
        "-s",
        "4K",
        "-n",
        "10",
        "--timeout",
        "10",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the persistent server exited"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

/// rxe sends a READ's whole response at once: a 4 MiB READ (4,096 packets) loses its tail
/// in the requester's host queue (1,000 packets) and waits for the QP's retransmission timer,
/// four times or so. At default options `-n` asked for one completion per 64 READs and saw
/// none within --timeout (exit 1, "no completion for 30.0 s"), and `-D 1`, at the 1.07 s QP
/// timeout it then had, outlasted the server's wait. Now both start slow and find how many
/// READs to keep in flight and how often to ask for a completion, at perftest's QP timeout.
#[test]
fn read_bw_of_4_mib_completes_at_default_options() {
    if !rdma_ready("read_bw_of_4_mib_completes_at_default_options") {
        return;
    }
    let dir = scratch("read-4m");
    for (name, run) in [("n", ["-n", "10"]), ("d", ["-D", "1"])] {
        let json = dir.join(format!("{name}.json"));
        let mut args = vec!["read-bw", "-s", "4M"];
        args.extend(LOOPBACK);
        args.extend(run);
        args.extend(["--json", json.to_str().unwrap()]);
        let out = bin().args(&args).output().unwrap();
        let printed = text(&out);
        assert!(out.status.success(), "{args:?}:\n{printed}");
        let record = load_record(&json);
        let r = &record["results"][0];
        eprintln!("read-bw -s 4M {}: {r}", run.join(" "));
        let ops = r["iterations"].as_u64().unwrap();
        let (gbps, secs) = (
            r["bw_gbps"].as_f64().unwrap(),
            r["seconds"].as_f64().unwrap(),
        );
        assert!(ops >= 10, "{r:#}");
        // The figure is the operations' bytes over the window, nothing more.
        let bytes = (ops * (4 << 20)) as f64;
        assert!((gbps * 1e9 * secs / bytes - 1.0).abs() < 0.01, "{r:#}");
        // What it held in flight: what it found, far below the 128 of -t.
        assert!(r["in_flight_max"].as_u64().unwrap() <= 32, "{r:#}");
        assert_eq!(record["params"]["qp_timeout"], 14, "perftest's, for READs");
    }
    std::fs::remove_dir_all(dir).ok();
}
