//! perftest's option names and values with units, end to end through the binary, on a
//! machine with or without RDMA devices: a refused perftest name exits 2 naming itself, why
//! and rdmabench's way (never a clap tip to an unrelated flag), an accepted one reaches the
//! run, and values take their units.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, text};
use rdmabench::perftest_names::{Answer, NAMES};

#[test]
fn every_refused_perftest_name_exits_2_naming_itself_why_and_the_way() {
    let mut checked = 0;
    for row in NAMES {
        let Answer::Refused(why, instead) = row.answer else {
            continue;
        };
        let long = format!("--{}", row.long);
        let mut forms = vec![[long.clone()]
            .into_iter()
            .chain(row.value.map(String::from))
            .collect::<Vec<_>>()];
        if let Some(c) = row.short {
            forms.push(
                [format!("-{c}")]
                    .into_iter()
                    .chain(row.value.map(String::from))
                    .collect(),
            );
        }
        for form in forms {
            let out = bin().arg("write-bw").args(&form).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{form:?}: {}", text(&out));
            assert_eq!(
                stderr.trim(),
                format!(
                    "rdmabench: error: perftest's {} is not supported: {why}; instead: {instead}",
                    form[0]
                ),
                "{form:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn the_issues_refused_spellings_get_no_clap_tip() {
    for name in [
        "--cpu_util",
        "--perform_warm_up",
        "--run_infinitely",
        "--margin",
        "--hop_limit",
        "--flow_label",
        "--use_old_post_send",
    ] {
        let out = bin().args(["write-bw", name, "1"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        assert!(
            stderr.contains(&format!("perftest's {name} is not supported")),
            "{stderr}"
        );
        assert!(
            !stderr.contains("tip:") && !stderr.contains("-- --"),
            "{stderr}"
        );
    }
}

/// A run that fails at its device (exit 1) got past the command line: every value parsed.
#[test]
fn perftest_spellings_and_values_with_units_reach_the_run() {
    for args in [
        &[
            "--rate_limit=10",
            "--qp",
            "2",
            "--tos",
            "0x68",
            "--post_list",
            "4",
            "-D",
            "500ms",
        ][..],
        &[
            "--limit-bw",
            "10Gb",
            "--rate-limit",
            "5Gbps",
            "-s",
            "64KiB",
            "--timeout",
            "5s",
        ],
        &[
            "-w",
            "100",
            "--report_gbits",
            "--inline_size=64",
            "--rdma_cm",
            "--CPU-freq",
        ],
        &[
            "--report-both",
            "-b",
            "-N",
            "--out_json_file",
            "/dev/null",
            "--interval",
            "100ms",
            "-D",
            "2s",
        ],
    ] {
        let out = bin()
            .args(["write-bw", "--loopback", "-d", "nosuch0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let device = ["nosuch0", "no RDMA device", "libibverbs"];
        assert!(
            device.iter().any(|d| stderr.contains(d)),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn perftests_rate_limit_is_in_gbits_not_rdmabenchs_old_gbytes() {
    // 10 Gb/s is 1.25 GB/s: the plan says so where it refuses the flag for a latency test.
    let out = bin()
        .args(["write-lat", "--rate_limit", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--rate-limit 1.25 "), "{}", text(&out));
    let out = bin()
        .args(["write-lat", "--rate-limit", "10"])
        .output()
        .unwrap();
    assert!(text(&out).contains("--rate-limit 1.25 "), "{}", text(&out));
}

#[test]
fn bad_values_name_themselves_and_the_accepted_forms() {
    for (args, said) in [
        (&["--tclass", "0x100"][..], "'0x100' is not a class: give 0 to 255, decimal or hex (0x68)"),
        (&["-D", "10 days"], "'10 days' is not a duration: give seconds or a number with a unit, e.g. 10, 10s, 500ms, 2m"),
        (&["--limit-bw", "fast"], "'fast' is not a rate: give a number with a unit, e.g. 10Gb, 400G, 5Gbps, 3GB, 25GB/s"),
        (&["--rate-limit", "10GB/h"], "a bare number is Gb/s"),
        (&["--timeout", "0ms"], "'0ms' is not a timeout"),
        (&["-I", "8G"], "'8G' is too large"),
    ] {
        let out = bin().arg("write-bw").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(said), "{args:?}: {}", text(&out));
    }
}
