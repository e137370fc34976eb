//! `rdmabench counters BEFORE AFTER` on the dumps of `tests/fixtures/counters/` (one folder
//! per case, each an mlx5 ConnectX-7's `ethtool -S` followed by `grep -r .` of mlx5_0 port
//! 1's `counters/` and `hw_counters/`, taken 10 s apart; the folder's README says what each
//! holds): the finding lines and exit codes a user sees for each case, the lossless priority
//! inferred or given, the interval from the files' times, counters that went backwards, the
//! record, and bad input (a missing, endless, empty or two-NIC dump, bad values) refused
//! naming it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use common::{bin, read_record, scratch, text};

fn fixture(case: &str, which: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/counters/{case}/{which}.txt"))
}

/// `rdmabench counters` on a case's two dumps, 10 s apart, and `more`.
fn counters(case: &str, more: &[&str]) -> Output {
    bin()
        .arg("counters")
        .arg(fixture(case, "before"))
        .arg(fixture(case, "after"))
        .args(["--interval", "10"])
        .args(more)
        .output()
        .unwrap()
}

/// The output's finding and note codes, in order ("PAUSE_RECEIVED", "note ECN_WORKING").
fn codes(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_once(": ").map(|(head, _)| head))
        .filter(|h| h.chars().all(|c| c.is_ascii_uppercase() || c == '_') || h.starts_with("note "))
        .map(str::to_string)
        .collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_healthy_port_exits_0_with_its_pause_and_ecn_read_as_normal() {
    let out = counters("healthy", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(
        codes(&s),
        ["note PAUSE_RECEIVED_LIGHT", "note ECN_WORKING"],
        "{s}"
    );
    assert!(
        s.contains("lossless priority: 3 (the one with pause activity)"),
        "{s}"
    );
    assert!(s.contains("after.txt (10.0 s later: --interval)"), "{s}");
    assert!(
        s.contains("checked: pause on priority 3, drops, pause storms, link errors, ECN/DCQCN, retransmissions"),
        "{s}"
    );
    assert!(s.ends_with("no finding over 10.0 s\n"), "{s}");
    // The rates a person reads: Gb/s for bytes, the share of the time paused.
    assert!(s.contains("traffic rx_bytes_phy "), "{s}");
    assert!(
        s.contains("364.1 Gb/s") && s.contains("0.2% of the time"),
        "{s}"
    );
    // Per-queue counters are counted, not listed.
    assert!(
        !s.contains("rx0_packets") && s.contains("--json lists each"),
        "{s}"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out));
}

#[test]
fn pause_received_on_the_lossless_priority_says_look_downstream() {
    let out = counters("pause-received", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(codes(&s), ["PAUSE_RECEIVED", "note ECN_WORKING"], "{s}");
    assert!(
        s.contains("PAUSE_RECEIVED: priority 3 receives pause (rx_prio3_pause +84,210, 8.42k/s, paused 29.3% of the"),
        "{s}"
    );
    assert!(
        s.contains("first: look downstream, not at this host"),
        "{s}"
    );
    assert!(s.ends_with("1 finding\n"), "{s}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rdmabench: counters: 1 finding(s) (exit 3)\n"
    );
}

#[test]
fn pause_sent_with_drops_says_this_host_cannot_take_what_arrives() {
    let out = counters("host-drops", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(
        codes(&s),
        ["HOST_DROPS", "RETRANSMITS", "note ECN_WORKING"],
        "{s}"
    );
    assert!(
        s.contains("HOST_DROPS: priority 3 sends pause (tx_prio3_pause +51,200, 5.12k/s, paused 18.0% of the time) while"),
        "{s}"
    );
    assert!(
        s.contains("rx_discards_phy +3,412, hw_counters/out_of_buffer +12,840"),
        "{s}"
    );
    assert!(
        s.contains("means: this host cannot take what arrives"),
        "{s}"
    );
    assert!(
        s.contains("first: the host side, in this order: the NIC's PCIe link"),
        "{s}"
    );
    assert!(s.contains("GPUDirect RDMA off"), "{s}");
}

#[test]
fn a_pause_storm_says_drain_the_node_first() {
    let out = counters("pause-storm", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    // The storm comes first; what ECN did about a stuck receiver is beside the point.
    assert_eq!(codes(&s), ["PAUSE_STORM", "HOST_DROPS"], "{s}");
    assert!(
        s.contains("PAUSE_STORM: pause storm: tx_pause_storm_error_events +1, tx_pause_storm_warning_events +2"),
        "{s}"
    );
    assert!(s.contains("NIC stopped sending pause"), "{s}");
    assert!(s.contains("first: drain the node"), "{s}");
    assert!(s.contains("99.7% of the time"), "{s}");
}

#[test]
fn drops_with_the_traffic_outside_the_lossless_priority_name_the_class() {
    let out = counters("wrong-class", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert!(
        s.contains("lossless priority: 3 (the only one with PFC counters)"),
        "{s}"
    );
    assert_eq!(codes(&s), ["CLASS_NOT_LOSSLESS", "RETRANSMITS"], "{s}");
    assert!(
        s.contains("CLASS_NOT_LOSSLESS: discards outside the lossless priority: rx_prio0_discards +2,150; 100% of the"),
        "{s}"
    );
    assert!(
        s.contains("rdmabench --tclass 106, NCCL_IB_TC=106: DSCP 26"),
        "{s}"
    );
    // Told that priority 0 is the lossless one, the same drops are PFC not protecting it.
    let out = counters("wrong-class", &["--lossless-prio", "0"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert!(s.contains("lossless priority: 0 (--lossless-prio)"), "{s}");
    assert_eq!(codes(&s), ["DROPS_WITHOUT_PAUSE", "RETRANSMITS"], "{s}");
    assert!(s.contains("PFC is off there"), "{s}");
    assert!(s.contains("not checked (their counters are missing from a dump or went backwards): pause on priority 0"), "{s}");
}

#[test]
fn congestion_without_ecn_and_cnps_is_a_finding() {
    let out = counters("no-ecn", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(codes(&s), ["PAUSE_RECEIVED", "ECN_ABSENT"], "{s}");
    assert!(
        s.contains("ECN_ABSENT: congestion (pause on priority 3) and no ECN: no packet arrived ECN-marked, no CNP"),
        "{s}"
    );
    assert!(s.contains("/sys/class/net/DEV/ecn/roce_np/enable/3"), "{s}");
}

#[test]
fn symbol_and_crc_errors_and_a_link_down_point_at_the_cable() {
    let out = counters("link-errors", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(
        codes(&s),
        [
            "LINK_DOWN",
            "LINK_ERRORS",
            "RETRANSMITS",
            "note ECN_WORKING"
        ],
        "{s}"
    );
    assert!(
        s.contains("LINK_DOWN: the link went down or retrained in 10.0 s: link_down_events_phy +1"),
        "{s}"
    );
    assert!(
        s.contains(
            "LINK_ERRORS: the link takes errors: rx_crc_errors_phy +57, rx_symbol_err_phy +12"
        ),
        "{s}"
    );
    assert!(s.contains("first: cable or optics"), "{s}");
    // The table puts the link down first, the FEC's corrected bits last of the link's.
    let link: Vec<&str> = s.lines().filter(|l| l.starts_with("link ")).collect();
    assert!(link[0].contains("link_down_events_phy"), "{link:?}");
    assert!(
        link.last().unwrap().contains("rx_corrected_bits_phy"),
        "{link:?}"
    );
}

#[test]
fn counters_that_went_backwards_are_said_and_give_no_rate() {
    let out = counters("reset", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let s = stdout(&out);
    assert!(
        s.contains("went backwards between the dumps (reset or wrapped: no rate):"),
        "{s}"
    );
    assert!(
        s.contains("  counters/port_rcv_data  3,165,053,305,979,471 to 31,650,533,059"),
        "{s}"
    );
    assert!(s.contains("  and 10 more"), "{s}");
    assert!(!s.contains("traffic counters/port_rcv_data"), "{s}");
    // What they would have told is not said to be fine.
    assert!(
        s.contains("not checked (their counters are missing from a dump or went backwards): ECN/DCQCN, retransmissions"),
        "{s}"
    );
}

/// Copies of a case's dumps in `dir`, their modification times `secs` apart.
fn timed_copies(dir: &Path, case: &str, secs: u64) -> [PathBuf; 2] {
    let t0 = SystemTime::now() - Duration::from_secs(3600);
    ["before", "after"].map(|which| {
        let path = dir.join(format!("{case}-{which}.txt"));
        std::fs::copy(fixture(case, which), &path).unwrap();
        let at = if which == "before" {
            t0
        } else {
            t0 + Duration::from_secs(secs)
        };
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(at)
            .unwrap();
        path
    })
}

#[test]
fn without_interval_the_files_times_give_it_and_the_output_says_so() {
    let dir = scratch("counters-mtime");
    let [before, after] = timed_copies(&dir, "pause-received", 20);
    let out = bin()
        .arg("counters")
        .args([&before, &after])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let s = stdout(&out);
    assert!(
        s.contains("(20.0 s later: from the files' modification times)"),
        "{s}"
    );
    assert!(s.contains("4.21k/s"), "half the rate of 10 s: {s}");
    // Swapped, or taken at the same time: no interval; --interval is asked for.
    let out = bin()
        .arg("counters")
        .args([&after, &before])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the files' modification times give no interval"),
        "{}",
        text(&out)
    );
    assert!(
        text(&out).contains("give --interval SECS"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_record_holds_the_rates_and_the_findings() {
    let dir = scratch("counters-json");
    let json = dir.join("reading.json");
    let out = counters("host-drops", &["--json", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let rec = read_record(&json);
    assert_eq!(rec["schema"], "rdmabench.counters/1");
    assert_eq!(rec["exit_code"], 3);
    assert_eq!(rec["seconds"], 10.0);
    assert_eq!(rec["interval_from"], "option");
    assert_eq!(rec["lossless_priority"], 3);
    assert_eq!(rec["port"], "mlx5_0 port 1");
    assert_eq!(rec["findings"][0]["code"], "HOST_DROPS");
    assert_eq!(rec["findings"][0]["severity"], "finding");
    let first = &rec["counters"][0];
    assert_eq!(first["name"], "rx_discards_phy");
    assert_eq!(first["class"], "drop");
    assert_eq!(first["per_second"], 341.2);
    // Every changed counter is there, the queues' too.
    let all = rec["counters"].as_array().unwrap();
    assert!(all
        .iter()
        .any(|c| c["name"] == "rx0_packets" && c["per_queue"] == true));
}

#[test]
fn bad_values_and_bad_dumps_are_refused_naming_them() {
    let out = counters("healthy", &["--lossless-prio", "9"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("'9' is not a priority: give 0 to 7"),
        "{}",
        text(&out)
    );
    let out = bin()
        .arg("counters")
        .args([fixture("healthy", "before"), fixture("healthy", "after")])
        .args(["--interval", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("'0' is not an interval"),
        "{}",
        text(&out)
    );
    // A dump that is not there.
    let out = bin()
        .args(["counters", "no-such-dump.txt"])
        .arg(fixture("healthy", "after"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("BEFORE 'no-such-dump.txt' does not exist"),
        "{}",
        text(&out)
    );
    // One that never ends: refused at the read limit, named.
    let out = bin()
        .args(["counters", "/dev/zero"])
        .arg(fixture("healthy", "after"))
        .args(["--interval", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("'/dev/zero' is larger than the 16 MiB this reads"),
        "{}",
        text(&out)
    );
    // One without a counter.
    let dir = scratch("counters-bad");
    let empty = dir.join("notes.txt");
    std::fs::write(&empty, "took the dump at 10:02\n").unwrap();
    let out = bin()
        .arg("counters")
        .arg(&empty)
        .arg(fixture("healthy", "after"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("notes.txt' holds no counter (1 lines read)"),
        "{}",
        text(&out)
    );
    // Two NICs in one file.
    let two = dir.join("two.txt");
    let one = std::fs::read_to_string(fixture("healthy", "before")).unwrap();
    std::fs::write(&two, format!("{one}{}", one.replace("mlx5_0", "mlx5_1"))).unwrap();
    let out = bin()
        .arg("counters")
        .arg(&two)
        .arg(fixture("healthy", "after"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("a second `ethtool -S` output"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_unreadable_dump_exits_1_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("counters-unreadable");
    let locked = dir.join("locked.txt");
    std::fs::copy(fixture("healthy", "before"), &locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads a file of mode 000; no one reads the process's memory at address 0 (EIO).
    let unreadable = if std::fs::read(&locked).is_ok() {
        PathBuf::from("/proc/self/mem")
    } else {
        locked
    };
    let out = bin()
        .arg("counters")
        .arg(&unreadable)
        .arg(fixture("healthy", "after"))
        .args(["--interval", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = format!("cannot read BEFORE '{}'", unreadable.display());
    assert!(text(&out).contains(&said), "{}", text(&out));
}

#[test]
fn text_from_a_dump_or_a_path_never_reaches_the_terminal_raw() {
    let dir = scratch("counters-escape");
    let before = dir.join("before\x1b]0;pwned\x07.txt");
    let after = dir.join("after.txt");
    let one = std::fs::read_to_string(fixture("pause-received", "before")).unwrap();
    std::fs::write(&before, format!("{one}     rx\x1b[2J_evil: 1\n")).unwrap();
    let two = std::fs::read_to_string(fixture("pause-received", "after")).unwrap();
    std::fs::write(&after, format!("{two}     rx\x1b[2J_evil: 9\n")).unwrap();
    let out = bin()
        .arg("counters")
        .args([&before, &after])
        .args(["--interval", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let all = text(&out);
    assert!(!all.contains('\x1b') && !all.contains('\x07'), "{all:?}");
    assert!(all.contains("before\\u{1b}]0;pwned\\u{7}.txt"), "{all}");
}
