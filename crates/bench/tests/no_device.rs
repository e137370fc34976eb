//! On a machine without RDMA devices (or without rdma-core), every test command fails at
//! once with one line saying what is missing, the server included: it must not sit waiting
//! for a client it could never serve.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{bin, text};

fn has_devices() -> bool {
    bin()
        .arg("devices")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn write_bw_without_a_device_fails_fast_with_one_line() {
    if has_devices() {
        eprintln!("skipped: this machine has RDMA devices");
        return;
    }
    for args in [
        vec!["write-bw", "127.0.0.1", "--timeout", "20"],
        vec!["write-bw", "--timeout", "20", "-p", "19200"],
        vec!["write-bw", "--loopback", "--timeout", "20"],
    ] {
        let start = Instant::now();
        let out = bin().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            start.elapsed()
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("no RDMA device") || stderr.contains("libibverbs.so.1"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out));
    }
}

/// A server opens its device (and, for GPU memory, its GPU) before it says that it waits: one
/// that could never serve fails at once, without the "waiting" line. Runs with or without
/// devices: no machine has a device called nosuch0 or a GPU 99.
#[test]
fn a_server_that_cannot_open_its_device_or_gpu_never_says_it_waits() {
    for (args, needle) in [
        (vec!["write-bw", "-d", "nosuch0", "-p", "19201"], "nosuch0"),
        (
            vec!["write-bw", "--mem", "cuda:99", "-p", "19202"],
            "cuda:99",
        ),
        (
            vec!["send-lat", "--mem", "cuda-staged:99", "-p", "19203"],
            "cuda-staged:99",
        ),
        (
            vec!["write-bw", "--mem", "rocm-peermem:99", "-p", "19204"],
            "rocm-peermem:99",
        ),
    ] {
        let start = Instant::now();
        let out = bin()
            .args(&args)
            .args(["--timeout", "20"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?}");
        assert!(!text(&out).contains("waiting"), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        let named = stderr.contains(needle) || stderr.contains("no RDMA device");
        assert!(named, "{args:?}: {stderr}");
    }
}

#[test]
fn devices_without_a_device_says_so() {
    if has_devices() {
        eprintln!("skipped: this machine has RDMA devices");
        return;
    }
    let out = bin().arg("devices").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rdma link"),
        "{}",
        text(&out)
    );
}

#[test]
fn bad_values_are_usage_errors_with_exit_code_2() {
    for (args, needle) in [
        (vec!["write-bw", "-s", "12X"], "'12X'"),
        (vec!["write-bw", "-q", "0"], "--qps 0"),
        (vec!["write-bw", "-q", "2000"], "valid values are 1 to 1024"),
        (vec!["write-bw", "-t", "16", "-Q", "32"], "--cq-mod 32"),
        (vec!["write-bw", "--timeout", "-1"], "'-1'"),
        (vec!["read-bw", "-c", "UD"], "not possible over UD"),
        (vec!["atomic-bw", "-c", "UC"], "not possible over UC"),
        (vec!["atomic-bw", "-s", "64"], "8 bytes"),
        (vec!["write-lat", "-q", "4"], "--qps 4"),
        (
            vec!["send-lat", "-b"],
            "--bidirectional does not apply to send-lat: a latency test is already a round trip",
        ),
        (vec!["read-lat", "-c", "UD"], "not possible over UD"),
        (vec!["write-bw", "-I", "100000"], "--inline-size 100000"),
        (vec!["write-bw", "-o", "4"], "--outs 4 does not apply"),
        (vec!["send-bw", "-b", "-c", "UD"], "-c RC for bidirectional"),
        (vec!["write-bw", "-m", "1500"], "--mtu 1500"),
        (vec!["write-bw", "-c", "XX"], "'XX'"),
        (vec!["atomic-bw", "-A", "SWAP"], "'SWAP'"),
        (
            vec!["write-bw", "--peer-dev", "rxe1"],
            "--peer-dev needs --loopback",
        ),
        (
            vec!["write-bw", "-s", "4K", "-a", "-q", "4"],
            "\n\nUsage: rdmabench write-bw [OPTIONS] [SERVER_HOST]\n",
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}

/// Hides libibverbs.so.1 behind an empty file in a private mount namespace (needs root and
/// util-linux's `unshare`); returns `None` when that cannot be done here.
fn run_without_libibverbs(args: &str) -> Option<std::process::Output> {
    let ldconfig = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .ok()?;
    let lib = String::from_utf8_lossy(&ldconfig.stdout)
        .lines()
        .find(|l| l.trim_start().starts_with("libibverbs.so.1 "))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)?;
    let script = format!(
        "mount --bind /dev/null {lib} || exit 97; exec {} {args}",
        env!("CARGO_BIN_EXE_rdmabench")
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .ok()?;
    (out.status.code() != Some(97) && !String::from_utf8_lossy(&out.stderr).contains("unshare:"))
        .then_some(out)
}

#[test]
fn without_libibverbs_the_binary_starts_and_says_what_to_install() {
    let Some(out) = run_without_libibverbs("write-bw 127.0.0.1 --timeout 5") else {
        eprintln!("skipped: cannot hide libibverbs.so.1 here (needs root, unshare and an installed rdma-core)");
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("libibverbs.so.1 could not be loaded") && stderr.contains("rdma-core"),
        "{stderr}"
    );
}

#[test]
fn a_bad_token_is_a_usage_error_naming_where_it_came_from_not_the_secret() {
    let out = bin()
        .args(["write-bw", "--token", "/nonexistent/rdmabench.token"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("--token /nonexistent/rdmabench.token: cannot read the token file"),
        "{}",
        text(&out)
    );
    let out = bin()
        .args(["write-bw", "127.0.0.1"])
        .env("RDMABENCH_TOKEN", "hunter2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("RDMABENCH_TOKEN: the token has 7 bytes, fewer than the 16"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("hunter2"), "{}", text(&out));
}
