//! The test matrix in the soft-RoCE guest: every test command across the veth pair with
//! --validate, UC and UD where the verb allows them, several QPs, a full sweep, duration
//! runs, bidirectional runs, latency statistics, and plans a device or verb cannot run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine as _;
use common::{pair, rdma_ready, text};

const TESTS: [&str; 8] = [
    "write-bw",
    "read-bw",
    "send-bw",
    "atomic-bw",
    "write-lat",
    "read-lat",
    "send-lat",
    "atomic-lat",
];

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[test]
fn every_test_runs_over_rc_and_moves_the_right_bytes() {
    if !rdma_ready("every_test_runs_over_rc_and_moves_the_right_bytes") {
        return;
    }
    for (i, test) in TESTS.iter().enumerate() {
        let run = pair(
            test,
            19300 + i as u16,
            &[],
            &["-n", "100", "-t", "16", "--validate"],
        );
        run.assert_ok();
        let r = &run.results()[0];
        assert!(
            num(&r["bw_gbps"]) > 0.0 && num(&r["msg_rate_mpps"]) > 0.0,
            "{test}: {r}"
        );
        assert_eq!(run.client_json["params"]["test"], *test);
        assert_eq!(
            run.client_json["results"], run.server_json["results"],
            "{test}: both sides report the same"
        );
        if test.ends_with("-lat") {
            assert!(r["lat_us"]["p50"].is_number(), "{test}: {r}");
        }
    }
}

#[test]
fn uc_carries_write_and_send_and_ud_carries_send() {
    if !rdma_ready("uc_carries_write_and_send_and_ud_carries_send") {
        return;
    }
    // Latency ping-pongs over UC/UD stop at the first lost packet (nothing retransmits), so
    // they run short; bandwidth runs count what arrived and tolerate loss.
    for (i, (test, conn, n)) in [
        ("write-bw", "UC", "100"),
        ("send-bw", "UC", "100"),
        ("write-lat", "UC", "30"),
        ("send-lat", "UC", "30"),
        ("send-bw", "UD", "100"),
        ("send-lat", "UD", "30"),
    ]
    .iter()
    .enumerate()
    {
        let run = pair(
            test,
            19320 + i as u16,
            &[],
            &["-c", conn, "-s", "512", "-n", n, "-t", "16", "--validate"],
        );
        run.assert_ok();
        assert_eq!(run.client_json["params"]["connection"], *conn, "{test}");
        assert!(
            run.results()[0]["iterations"].as_u64().unwrap() > 0,
            "{test} {conn}"
        );
    }
}

#[test]
fn four_qps_spread_the_work_over_one_cq() {
    if !rdma_ready("four_qps_spread_the_work_over_one_cq") {
        return;
    }
    for (i, test) in ["write-bw", "read-bw", "send-bw", "atomic-bw"]
        .iter()
        .enumerate()
    {
        let run = pair(
            test,
            19340 + i as u16,
            &[],
            &["-q", "4", "-n", "50", "-t", "16", "-s", "8", "--validate"],
        );
        run.assert_ok();
        assert_eq!(run.results()[0]["iterations"], 200, "{test}");
    }
}

#[test]
fn a_sweep_records_every_size_from_2_bytes_to_8_mib() {
    if !rdma_ready("a_sweep_records_every_size_from_2_bytes_to_8_mib") {
        return;
    }
    let dir = common::scratch("sweep-csv");
    let csv = dir.join("sweep.csv");
    let prom = dir.join("sweep.prom");
    let run = pair(
        "write-bw",
        19350,
        &[],
        &[
            "-a",
            "-n",
            "8",
            "-t",
            "4",
            "--validate",
            "--csv",
            csv.to_str().unwrap(),
            "--prom",
            prom.to_str().unwrap(),
        ],
    );
    run.assert_ok();
    let sizes: Vec<u64> = run
        .results()
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = (1..=23).map(|p| 1u64 << p).collect();
    assert_eq!(sizes, want);
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(
        csv_text.lines().count(),
        24,
        "a header and one row per size:\n{csv_text}"
    );
    assert_eq!(common::promtool(&prom), "", "the client's --prom file");
    let metrics = std::fs::read_to_string(&prom).unwrap();
    let sizes = metrics
        .lines()
        .filter(|l| l.starts_with("rdmabench_bandwidth_bytes_per_second{"))
        .count();
    assert_eq!(sizes, 23, "one bandwidth sample per size:\n{metrics}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_duration_run_measures_inside_its_margins() {
    if !rdma_ready("a_duration_run_measures_inside_its_margins") {
        return;
    }
    for (i, test) in ["write-bw", "send-bw", "write-lat"].iter().enumerate() {
        let run = pair(
            test,
            19360 + i as u16,
            &[],
            &["-D", "3", "-s", "4096", "-t", "16"],
        );
        run.assert_ok();
        let r = &run.results()[0];
        let secs = num(&r["seconds"]);
        assert!(
            secs > 1.5 && secs < 3.0,
            "{test}: measured {secs} s of a 3 s run: {r}"
        );
        assert!(r["iterations"].as_u64().unwrap() > 0, "{test}");
        assert_eq!(num(&run.client_json["params"]["duration"]), 3.0);
        assert!(
            text(&run.client).contains("warm-up and cool-down left out"),
            "{}",
            text(&run.client)
        );
    }
}

#[test]
fn bidirectional_runs_report_both_directions_and_the_sum() {
    if !rdma_ready("bidirectional_runs_report_both_directions_and_the_sum") {
        return;
    }
    for (i, test) in ["write-bw", "read-bw", "send-bw", "atomic-bw"]
        .iter()
        .enumerate()
    {
        // Atomics move 8 bytes; with -b each side's counter counts the other's operations.
        let size = if *test == "atomic-bw" { "8" } else { "4K" };
        let run = pair(
            test,
            19370 + i as u16,
            &[],
            &["-b", "-n", "200", "-t", "16", "-s", size, "--validate"],
        );
        run.assert_ok();
        let r = &run.results()[0];
        let d = &r["directions"];
        let (a, b) = (
            num(&d["client_to_server"]["bw_gbps"]),
            num(&d["server_to_client"]["bw_gbps"]),
        );
        assert!(a > 0.0 && b > 0.0, "{test}: {r}");
        assert!(
            (num(&r["bw_gbps"]) - (a + b)).abs() < 1e-9,
            "{test}: the sum: {r}"
        );
        assert!(
            text(&run.client).contains("server->client"),
            "{}",
            text(&run.client)
        );
    }
}

#[test]
fn bidirectional_duration_runs_end_on_both_sides_on_time() {
    if !rdma_ready("bidirectional_duration_runs_end_on_both_sides_on_time") {
        return;
    }
    // Each side's receives end when the other's sends do: neither waits for its timeout.
    for (i, test) in ["send-bw", "write-bw"].iter().enumerate() {
        let start = std::time::Instant::now();
        let run = pair(test, 19400 + i as u16, &[], &["-b", "-D", "4", "-s", "4K"]);
        let took = start.elapsed();
        run.assert_ok();
        // A side left waiting for the other would fail at the 30 s --timeout; set-up under
        // emulation on a busy machine takes a few seconds.
        assert!(
            took < std::time::Duration::from_secs(20),
            "{test} -b -D 4 took {took:?}"
        );
        let d = &run.results()[0]["directions"];
        for dir in ["client_to_server", "server_to_client"] {
            let secs = num(&d[dir]["seconds"]);
            // 4 s less a 0.4 s margin at each end: a window stretched to the other
            // direction's last receive would be longer.
            assert!((3.0..3.6).contains(&secs), "{test} {dir}: {secs} s: {d}");
        }
    }
}

#[test]
fn reads_and_atomics_keep_the_tx_depth_posted_beyond_the_outstanding_limit() {
    if !rdma_ready("reads_and_atomics_keep_the_tx_depth_posted_beyond_the_outstanding_limit") {
        return;
    }
    for (i, test) in ["read-bw", "atomic-bw"].iter().enumerate() {
        let size = if *test == "atomic-bw" { "8" } else { "64" };
        let run = pair(
            test,
            19402 + i as u16,
            &[],
            &[
                "-s",
                size,
                "-o",
                "16",
                "-t",
                "128",
                "-n",
                "2000",
                "--validate",
            ],
        );
        run.assert_ok();
        assert_eq!(run.client_json["params"]["outs"], 16, "{test}");
        assert_eq!(run.client_json["params"]["tx_depth"], 128, "{test}");
        let peak = num(&run.results()[0]["in_flight_max"]);
        assert!(
            peak >= 32.0,
            "{test}: at most {peak} in flight with -o 16 -t 128"
        );
        let shown = text(&run.client);
        assert_eq!(
            common::header_value(&shown, "Outstanding"),
            Some("16"),
            "{shown}"
        );
    }
    // More than the device allows is refused, naming its limit.
    let run = pair("read-bw", 19404, &[], &["-o", "255", "-n", "10"]);
    assert!(!run.client.status.success());
    assert!(
        text(&run.client).contains("--outs 255 exceeds rxe1's limit of"),
        "{}",
        text(&run.client)
    );
}

#[test]
fn the_header_the_record_and_the_csv_show_the_same_parameters() {
    if !rdma_ready("the_header_the_record_and_the_csv_show_the_same_parameters") {
        return;
    }
    let dir = common::scratch("agree");
    let csv_path = dir.join("client.csv");
    let csv = csv_path.to_str().unwrap();
    for (i, (test, extra)) in [
        ("write-bw", &["-l", "4", "-t", "64", "-I", "64"][..]),
        ("read-bw", &["-o", "8"][..]),
        ("send-bw", &["-r", "256", "-m", "512"][..]),
        ("atomic-bw", &["-A", "CMP_AND_SWAP"][..]),
        ("write-lat", &[][..]),
    ]
    .iter()
    .enumerate()
    {
        let mut args = vec!["-n", "100", "--validate", "--csv", csv];
        args.extend_from_slice(extra);
        let run = pair(test, 19410 + i as u16, &[], &args);
        run.assert_ok();
        let header = text(&run.client);
        let params = &run.client_json["params"];
        let mut rdr = csv::Reader::from_path(&csv_path).unwrap();
        let columns = rdr.headers().unwrap().clone();
        let row = rdr.records().next().unwrap().unwrap();
        for param in rdmabench::catalogue::PARAMS {
            let value = &params[param.key];
            let want = match value {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let col = columns.iter().position(|c| c == param.key).unwrap();
            match value.as_f64().filter(|_| value.is_f64()) {
                // JSON parsing may round a float's last digit: compare the numbers.
                Some(f) => {
                    let csv: f64 = row[col].parse().unwrap();
                    assert!((csv - f).abs() <= f.abs() * 1e-12, "{test}: {}", param.key);
                }
                None => assert_eq!(row[col], want, "{test}: CSV {} vs record", param.key),
            }
            let shown = common::header_value(&header, param.label);
            if param.in_header && !want.is_empty() {
                assert_eq!(
                    shown,
                    Some(want.as_str()),
                    "{test}: {}:\n{header}",
                    param.label
                );
            } else if param.in_header {
                assert_eq!(
                    shown, None,
                    "{test}: {} does not apply:\n{header}",
                    param.label
                );
            }
        }
        // The header is the record's: rendered again from the record the client wrote, it
        // is what the client printed.
        let record: rdmabench::report::RunRecord =
            serde_json::from_value(run.client_json.clone()).unwrap();
        let rendered = rdmabench::output::header::render(&record, false);
        assert!(
            header.contains(&rendered),
            "{test}: printed:\n{header}\nfrom the record:\n{rendered}"
        );
        // What ran, not what was typed: the path MTU is the smaller of the ports' and -m.
        let mtu = if *test == "send-bw" { 512 } else { 1024 };
        assert_eq!(params["path_mtu"], mtu, "{test}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn latency_percentiles_are_ordered_and_the_histogram_decodes() {
    if !rdma_ready("latency_percentiles_are_ordered_and_the_histogram_decodes") {
        return;
    }
    let run = pair("write-lat", 19380, &[], &["-n", "500"]);
    run.assert_ok();
    let r = &run.results()[0];
    let l = &r["lat_us"];
    let (min, p50, p99, max) = (
        num(&l["min"]),
        num(&l["p50"]),
        num(&l["p99"]),
        num(&l["max"]),
    );
    assert!(min <= p50 && p50 <= p99 && p99 <= max, "{l}");
    assert_eq!(run.client_json["params"]["latency"], "one_way");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(r["hdr"].as_str().unwrap())
        .unwrap();
    let hist: hdrhistogram::Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .unwrap();
    assert_eq!(hist.len(), 500);
    assert!((hist.value_at_quantile(0.5) as f64 / 1000.0 - p50).abs() < 0.01);
    let read = pair("read-lat", 19381, &[], &["-n", "100"]);
    read.assert_ok();
    assert_eq!(read.client_json["params"]["latency"], "round_trip");
    assert!(text(&read.client).contains("round trip"));
}

#[test]
fn repetitions_are_kept_and_folded_into_medians() {
    if !rdma_ready("repetitions_are_kept_and_folded_into_medians") {
        return;
    }
    let run = pair(
        "write-bw",
        19385,
        &[],
        &["--repeat", "3", "-n", "100", "-t", "16", "-s", "4K"],
    );
    run.assert_ok();
    let reps = run.results()[0]["repetitions"].as_array().unwrap();
    assert_eq!(reps.len(), 3);
    let mut bws: Vec<f64> = reps.iter().map(|r| num(&r["bw_gbps"])).collect();
    bws.sort_by(f64::total_cmp);
    assert!((num(&run.results()[0]["bw_gbps"]) - bws[1]).abs() < 1e-12);
    assert_eq!(run.client_json["params"]["repeat"], 3);
}

#[test]
fn plans_the_device_cannot_run_are_refused_naming_the_limit() {
    if !rdma_ready("plans_the_device_cannot_run_are_refused_naming_the_limit") {
        return;
    }
    // A value no device allows: refused by the plan's rules, before any device opens.
    let out = common::client(&["write-bw", common::SERVER_ADDR, "-I", "100000", "-s", "64"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--inline-size 100000"),
        "{}",
        text(&out)
    );
    // Limits of the device (rxe: inline up to a few hundred bytes, path MTU 1024) are usage
    // errors too (exit 2) on both sides, naming the value and what would be valid.
    for (test, port, args, needles) in [
        (
            "write-bw",
            19391,
            &["-I", "4096", "-s", "64"][..],
            &["--inline-size 4096 exceeds", "give -I "][..],
        ),
        (
            "send-bw",
            19392,
            &["-c", "UD", "-s", "4096"][..],
            &[
                "-s 4096 exceeds the path MTU of 1024 bytes",
                "give -s 1024 or less",
            ][..],
        ),
    ] {
        let run = pair(test, port, &[], args);
        assert_eq!(run.client.status.code(), Some(2), "{}", text(&run.client));
        assert!(!run.server_ok, "{}", run.server_text);
        for needle in needles {
            assert!(
                text(&run.client).contains(needle),
                "{needle}: {}",
                text(&run.client)
            );
            assert!(
                run.server_text.contains(needle),
                "{needle}: {}",
                run.server_text
            );
        }
    }
    // In one invocation, too.
    let mut args = vec!["send-bw", "-c", "UD", "-s", "4096", "--timeout", "20"];
    args.extend(common::LOOPBACK);
    let out = common::client(&args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("path MTU of 1024"), "{}", text(&out));
}

#[test]
fn a_limit_that_is_missed_exits_3_with_the_reason() {
    if !rdma_ready("a_limit_that_is_missed_exits_3_with_the_reason") {
        return;
    }
    let run = pair(
        "write-bw",
        19395,
        &[],
        &["-n", "50", "-t", "16", "--limit-bw", "1000"],
    );
    assert_eq!(run.client.status.code(), Some(3), "{}", text(&run.client));
    assert!(
        text(&run.client).contains("below --limit-bw 1000"),
        "{}",
        text(&run.client)
    );
    assert!(
        run.server_ok,
        "the server's run passed: {}",
        run.server_text
    );
    let run = pair(
        "send-lat",
        19396,
        &[],
        &["-n", "50", "--limit-lat-p99", "0.001"],
    );
    assert_eq!(run.client.status.code(), Some(3), "{}", text(&run.client));
}

#[test]
fn inline_payloads_arrive_intact() {
    if !rdma_ready("inline_payloads_arrive_intact") {
        return;
    }
    for (test, port) in [("write-bw", 19397), ("send-bw", 19398)] {
        let run = pair(
            test,
            port,
            &[],
            &["-I", "64", "-s", "64", "-n", "500", "--validate"],
        );
        run.assert_ok();
        assert_eq!(run.client_json["params"]["inline"], 64, "{test}");
    }
}
