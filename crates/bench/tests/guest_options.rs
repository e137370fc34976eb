//! The options RoCE and cluster users reach for, run for real between rxe0 and rxe1 and, where
//! they change what goes on the wire, checked there: `--tclass` in the IP header of every
//! RoCE v2 packet each way; `--sl` (which soft-RoCE does not put on the wire) run and recorded;
//! `--use-hugepages` with huge pages reserved in the guest, and refused clearly without;
//! `--rate-limit` holding a run to its pace; `--odp` refused on rxe, which has no on-demand
//! paging; `-R` connecting every test through the RDMA CM; `--srq` feeding several QPs'
//! SENDs from one shared receive queue; `--threads` adding up its threads' rates;
//! `--retry_count` on both ways of connecting, refused for UD; `--pkey_index` within the
//! port's P_Key table, refused past it; `--mr_per_qp` carrying every verb's payload through
//! each QP's own region, checked byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use common::{header_value, pair, rdma_ready, text, Pair};

/// One test at a time: a capture on the veth sees every test's packets, and the huge page
/// pool is the guest's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Both sides' records say `params.key` is `want`.
fn both_record(run: &Pair, key: &str, want: impl Into<serde_json::Value>) {
    let want = want.into();
    for side in [&run.client_json, &run.server_json] {
        assert_eq!(
            side["params"][key],
            want,
            "params.{key}: {}",
            text(&run.client)
        );
    }
}

/// What a loopback client of `args` says when the command line or the device refuses it
/// (exit 2), with a timeout that bounds it.
fn refused(args: &[&str]) -> String {
    let mut args = args.to_vec();
    args.extend(["--timeout", "20"]);
    args.extend(common::LOOPBACK);
    let out = common::client(&args);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    said
}

/// The client's header shows `want` on its `label` line.
fn header_says(run: &Pair, label: &str, want: &str) {
    let header = text(&run.client);
    assert_eq!(header_value(&header, label), Some(want), "{header}");
}

/// The IP TOS bytes of the RoCE v2 packets (UDP 4791) that crossed the veth pair while `run`
/// ran, by source address: tcpdump on veth1, which carries both directions.
fn tos_on_the_wire(run: impl FnOnce()) -> Vec<(String, u8)> {
    let mut dump = Command::new("tcpdump")
        .args([
            "-i",
            "veth1",
            "-n",
            "-v",
            "-l",
            "-c",
            "200",
            "udp port 4791",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (scripts/setup.sh installs it)");
    // tcpdump says "listening on veth1" on stderr once it captures.
    std::thread::sleep(std::time::Duration::from_secs(2));
    run();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let _ = dump.kill();
    let out = dump.wait_with_output().unwrap();
    let lines = String::from_utf8_lossy(&out.stdout).to_string();
    // "IP (tos 0x6a,ECT(0), ttl 64, ...)\n    10.251.0.2.49152 > 10.251.0.1.4791: UDP, ..."
    let mut packets = Vec::new();
    let mut tos = None;
    for line in lines.lines() {
        if let Some(rest) = line.split("(tos 0x").nth(1) {
            let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            tos = u8::from_str_radix(&hex, 16).ok();
        } else if let (Some(t), Some(src)) = (tos.take(), line.split_whitespace().next()) {
            let host = src.rsplit_once('.').map_or(src, |(host, _port)| host);
            packets.push((host.to_string(), t));
        }
    }
    packets
}

#[test]
fn tclass_is_the_tos_of_every_roce_packet_both_ways() {
    if !rdma_ready("tclass_is_the_tos_of_every_roce_packet_both_ways") {
        return;
    }
    let _alone = alone();
    for (i, (tclass, want)) in [(Some("106"), 0x6a), (None, 0)].into_iter().enumerate() {
        let port = 19500 + i as u16;
        let mut run = None;
        let packets = tos_on_the_wire(|| {
            let mut args = vec!["-n", "200", "-s", "4K"];
            args.extend(tclass.iter().flat_map(|t| ["--tclass", *t]));
            // The server is not given --tclass: it adopts the client's, for its ACKs.
            run = Some(pair("write-bw", port, &[], &args));
        });
        let run = run.unwrap();
        run.assert_ok();
        both_record(&run, "tclass", want);
        for from in ["10.251.0.2", "10.251.0.1"] {
            let seen: Vec<u8> = packets
                .iter()
                .filter(|(src, _)| src == from)
                .map(|&(_, tos)| tos)
                .collect();
            assert!(!seen.is_empty(), "no RoCE packet from {from}: {packets:?}");
            assert!(
                seen.iter().all(|&tos| tos == want),
                "--tclass {tclass:?}: packets from {from} had TOS {seen:x?}, not {want:#x}"
            );
        }
    }
}

#[test]
fn sl_runs_and_both_sides_record_the_clients_value() {
    if !rdma_ready("sl_runs_and_both_sides_record_the_clients_value") {
        return;
    }
    let _alone = alone();
    for (i, test) in ["write-bw", "send-lat"].into_iter().enumerate() {
        let run = pair(test, 19510 + i as u16, &[], &["-n", "100", "--sl", "3"]);
        run.assert_ok();
        both_record(&run, "sl", 3);
        header_says(&run, "Service level", "3");
    }
}

#[test]
fn hugepages_hold_each_sides_buffer_and_too_few_are_refused_clearly() {
    if !rdma_ready("hugepages_hold_each_sides_buffer_and_too_few_are_refused_clearly") {
        return;
    }
    let _alone = alone();
    // The guest's own kernel: its pool is this test's to set.
    common::sh("sysctl -qw vm.nr_hugepages=16");
    let hp = ["-n", "200", "--use-hugepages"];
    let run = pair("write-bw", 19520, &hp[2..], &hp);
    run.assert_ok();
    both_record(&run, "hugepages", true);
    header_says(&run, "Huge pages", "true");
    common::sh("sysctl -qw vm.nr_hugepages=0");
    let mut args = vec!["write-bw", "-n", "10", "--use-hugepages", "--timeout", "20"];
    args.extend(common::LOOPBACK);
    let out = common::client(&args);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("0 of the 0 reserved are free") && said.contains("vm.nr_hugepages"),
        "{said}"
    );
}

#[test]
fn rate_limit_holds_the_run_to_its_pace_and_says_so() {
    if !rdma_ready("rate_limit_holds_the_run_to_its_pace_and_says_so") {
        return;
    }
    let _alone = alone();
    // 10 MB/s, a fifth of what rxe does between two guest CPUs: 300 x 64 KiB in about 2 s.
    let run = pair(
        "write-bw",
        19530,
        &[],
        &["-n", "300", "--rate-limit", "0.01GB/s"],
    );
    run.assert_ok();
    both_record(&run, "rate_limit", 0.01);
    let gbps = run.results()[0]["bw_gbps"].as_f64().unwrap();
    assert!(
        (0.008..=0.0105).contains(&gbps),
        "paced to 0.01 GB/s, measured {gbps}: {}",
        text(&run.client)
    );
    header_says(&run, "Paced to GB/s", "0.01");
}

#[test]
fn odp_is_refused_on_a_device_without_on_demand_paging() {
    if !rdma_ready("odp_is_refused_on_a_device_without_on_demand_paging") {
        return;
    }
    let _alone = alone();
    let said = refused(&["write-bw", "-n", "10", "--odp"]);
    assert!(said.contains("offers no on-demand paging"), "{said}");
    assert!(said.contains("leave --odp out"), "{said}");
}

#[test]
fn rdma_cm_connects_every_test() {
    if !rdma_ready("rdma_cm_connects_every_test") {
        return;
    }
    let _alone = alone();
    for (i, test) in [
        "write-bw",
        "read-bw",
        "send-bw",
        "atomic-bw",
        "write-lat",
        "read-lat",
        "send-lat",
        "atomic-lat",
    ]
    .into_iter()
    .enumerate()
    {
        // Two QPs for the bandwidth tests: each CM request must find its own QP.
        let qps: &[&str] = if test.ends_with("-bw") {
            &["-q", "2"]
        } else {
            &[]
        };
        let mut args = vec!["-n", "100", "-R"];
        args.extend_from_slice(qps);
        let run = pair(test, 19540 + i as u16, &["-R"], &args);
        run.assert_ok();
        both_record(&run, "rdma_cm", true);
        assert!(
            run.results()[0]["iterations"].as_u64().unwrap() > 0,
            "{test}"
        );
    }
}

#[test]
fn srq_feeds_every_qp_of_a_receiving_side() {
    if !rdma_ready("srq_feeds_every_qp_of_a_receiving_side") {
        return;
    }
    let _alone = alone();
    let cases: [(&str, &[&str]); 3] = [
        ("send-bw", &["-q", "4"]),
        ("send-bw", &["-q", "2", "-b"]),
        ("send-lat", &[]),
    ];
    for (i, (test, more)) in cases.into_iter().enumerate() {
        let mut args = vec!["-n", "200", "--srq"];
        args.extend_from_slice(more);
        let run = pair(test, 19560 + i as u16, &[], &args);
        run.assert_ok();
        both_record(&run, "srq", true);
        let r = &run.results()[0];
        assert!(
            r["iterations"].as_u64().unwrap() > 0,
            "{test} {more:?}: {r}"
        );
    }
}

#[test]
fn threads_add_up_their_message_rates_against_one_ceiling() {
    if !rdma_ready("threads_add_up_their_message_rates_against_one_ceiling") {
        return;
    }
    let _alone = alone();
    let run = pair(
        "write-bw",
        19570,
        &["--threads", "2"],
        &["-n", "2000", "-s", "4K", "--threads", "2"],
    );
    run.assert_ok();
    let record = &run.client_json;
    assert_eq!(record["params"]["threads"], 2, "{}", text(&run.client));
    let rails = record["rails"].as_array().expect("one entry per thread");
    assert_eq!(rails.len(), 2);
    let rate = |r: &serde_json::Value| r["msg_rate_mpps"].as_f64().unwrap();
    let each: f64 = rails.iter().map(|t| rate(&t["results"][0])).sum();
    let all = rate(&run.results()[0]);
    assert!(
        (all - each).abs() <= 0.02 * each,
        "all together {all} Mpps, the threads' sum {each}"
    );
    // One device's ceiling, not two.
    assert_eq!(
        record["ceilings"]["limit_gbps"],
        rails[0]["ceilings"]["limit_gbps"]
    );
}

#[test]
fn retry_count_reaches_both_ways_of_connecting_and_ud_refuses_it() {
    if !rdma_ready("retry_count_reaches_both_ways_of_connecting_and_ud_refuses_it") {
        return;
    }
    let _alone = alone();
    for (i, cm) in [&[][..], &["-R"][..]].into_iter().enumerate() {
        let mut args = vec!["-n", "100", "--retry_count", "3"];
        args.extend_from_slice(cm);
        let run = pair("write-bw", 19590 + i as u16, cm, &args);
        run.assert_ok();
        both_record(&run, "retry_count", 3);
    }
    let run = pair("send-bw", 19592, &[], &["-n", "100"]);
    run.assert_ok();
    both_record(&run, "retry_count", 7);
    let said = refused(&["send-bw", "-c", "UD", "--retry-count", "3"]);
    assert!(said.contains("only RC sends a request again"), "{said}");
}

/// On soft-RoCE's port, index 0 (the default partition's key) runs on RC and UD and is
/// recorded as the default; an index past the port's table is refused before anything is
/// allocated, naming the table's size.
#[test]
fn pkey_index_runs_within_the_ports_table_and_is_refused_past_it() {
    if !rdma_ready("pkey_index_runs_within_the_ports_table_and_is_refused_past_it") {
        return;
    }
    let _alone = alone();
    for (i, (test, c)) in [("write-bw", "RC"), ("send-lat", "UD")]
        .into_iter()
        .enumerate()
    {
        let args = ["-n", "100", "-c", c, "--pkey_index", "0"];
        let run = pair(test, 19595 + i as u16, &[], &args);
        run.assert_ok();
        both_record(&run, "pkey_index", serde_json::Value::Null);
    }
    let said = refused(&["write-bw", "-n", "10", "--pkey-index", "60000"]);
    assert!(
        said.contains("--pkey-index 60000 is out of range"),
        "{said}"
    );
    assert!(said.contains("(valid: 0 to "), "{said}");
}

#[test]
fn mr_per_qp_carries_every_verb_through_each_qps_own_region() {
    if !rdma_ready("mr_per_qp_carries_every_verb_through_each_qps_own_region") {
        return;
    }
    let _alone = alone();
    for (i, test) in ["write-bw", "read-bw", "send-bw", "write-lat"]
        .into_iter()
        .enumerate()
    {
        let qps: &[&str] = if test.ends_with("-bw") {
            &["-q", "3"]
        } else {
            &[]
        };
        let mut args = vec!["-n", "100", "--mr_per_qp", "--validate"];
        args.extend_from_slice(qps);
        let run = pair(test, 19600 + i as u16, &[], &args);
        run.assert_ok();
        both_record(&run, "mr_per_qp", true);
        header_says(&run, "MR per QP", "true");
    }
    let out = common::client(&["write-bw", "--mem", "cuda:0", "--mr-per-qp", "localhost"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("--mr-per-qp registers each QP's part"),
        "{said}"
    );
}
