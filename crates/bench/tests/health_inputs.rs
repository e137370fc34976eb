//! `rdmabench health` never says OK about what it did not check, and its inputs are confined
//! and bounded (issue 35): a link that is down or a file that cannot be read is a finding;
//! a node without RDMA devices, or an expectation of none, is refused; `--learn` on a node
//! that fails its own check writes nothing; the outputs never change the exit status; the
//! first line is one printable line; a hostile copy of sysfs shows nothing of this host and
//! cannot hang the check past `--budget`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, changed_dgx, scratch, text, topo_fixture as fixture};

const NIC_1: &str = "sys/devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/0000:9c:00.0/0000:9d:00.0";
const GPU_1: &str = "sys/devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/0000:9c:01.0/0000:9e:00.0";
const PORT_0: &str = "sys/class/infiniband/mlx5_0/ports/1";

/// `rdmabench health` on `root` with `more` in `dir`, killed (and the test failed) if it
/// runs past `limit`.
fn health_in(dir: &Path, root: &Path, more: &[&str], limit: Duration) -> Output {
    let mut child = bin()
        .args(["health", "--sysfs-root", root.to_str().unwrap()])
        .args(["--sample-secs", "0"])
        .args(more)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!(
                "health ran past {limit:?}: {}",
                text(&child.wait_with_output().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn health(dir: &Path, root: &Path, more: &[&str]) -> Output {
    health_in(dir, root, more, Duration::from_secs(60))
}

/// The dgx-h100 fixture's own expectations, learned into `dir`.
fn learned(dir: &Path) -> String {
    let file = dir.join("dgx.json");
    let out = health(
        dir,
        &fixture("dgx-h100"),
        &["--learn", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    file.to_str().unwrap().to_string()
}

fn first_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_link_that_is_down_or_an_input_that_cannot_be_read_is_a_finding_not_ok() {
    let dir = scratch("health-links");
    let expect = learned(&dir);
    let down = |dev: &str| {
        format!("echo Unknown > {dev}/current_link_speed && echo 0 > {dev}/current_link_width")
    };
    // (case, change, exit status, first line's start, the finding's message)
    for (name, change, code, head, message) in [
        (
            "down",
            format!("{} && {}", down(NIC_1), down(GPU_1)),
            2,
            "HEALTH CRITICAL - mlx5_1 PCIE_DEGRADED",
            "PCIe link is down (current_link_speed Unknown or current_link_width 0), expected \
             at least 32 GT/s x16",
        ),
        (
            "gone",
            format!("rm {NIC_1}/current_link_speed {NIC_1}/current_link_width"),
            3,
            "HEALTH UNKNOWN - mlx5_1 UNREADABLE",
            "its PCIe link (expected at least 32 GT/s x16) not known: cannot read \
             DIR/sys/class/infiniband/mlx5_1/device/current_link_speed: no such file inside \
             the root",
        ),
        (
            "no_rate",
            format!("rm {PORT_0}/rate"),
            3,
            "HEALTH UNKNOWN - mlx5_0 UNREADABLE",
            "port 1's rate (expected at least 400 Gb/s) not known: cannot read \
             DIR/sys/class/infiniband/mlx5_0/ports/1/rate: no such file inside the root",
        ),
        (
            "no_state",
            format!("rm {PORT_0}/state"),
            3,
            "HEALTH UNKNOWN - mlx5_0 UNREADABLE",
            "port 1's state not known: cannot read \
             DIR/sys/class/infiniband/mlx5_0/ports/1/state: no such file inside the root",
        ),
        (
            "no_counters",
            format!("rm -r {PORT_0}/counters {PORT_0}/hw_counters"),
            3,
            "HEALTH UNKNOWN - mlx5_0 UNREADABLE",
            "its link error counters not known: none could be read in \
             /sys/class/infiniband/mlx5_0/ports/1/counters or \
             /sys/class/infiniband/mlx5_0/ports/1/hw_counters",
        ),
    ] {
        let case = dir.join(name);
        std::fs::create_dir_all(&case).unwrap();
        let root = changed_dgx(&case, &change);
        let out = health(&case, &root, &["--expect", &expect]);
        let said = text(&out).replace(root.to_str().unwrap(), "DIR");
        assert_eq!(out.status.code(), Some(code), "{name}: {said}");
        assert!(
            first_line(&out).starts_with(head) && said.contains(message),
            "{name}: {said}"
        );
        if name == "down" {
            assert!(said.contains("0000:9e:00.0"), "the GPU's link too: {said}");
        }
        // The node as found cannot pass what it cannot read either.
        let out = health(&case, &root, &[]);
        assert_ne!(out.status.code(), Some(0), "{name}: {}", text(&out));
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_node_without_rdma_devices_or_an_expectation_of_none_is_refused() {
    let dir = scratch("health-no-nic");
    let root = changed_dgx(&dir, "rm -r sys/class/infiniband");
    let out = health(&dir, &root, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        first_line(&out).starts_with(
            "HEALTH CRITICAL - node NIC_MISSING: no RDMA device under /sys/class/infiniband"
        ),
        "{}",
        text(&out)
    );
    let file = dir.join("none.json");
    let out = health(&dir, &root, &["--learn", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!file.exists(), "a node without NICs taught its emptiness");
    std::fs::write(
        &file,
        r#"{"schema": "rdmabench.health-expect/1", "nics": []}"#,
    )
    .unwrap();
    let out = health(
        &dir,
        &fixture("dgx-h100"),
        &["--expect", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("none.json: it expects no NIC, which any node would pass"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_expectations_file_is_read_to_a_limit_named_in_its_error() {
    let dir = scratch("health-expect-limit");
    let out = health_in(
        &dir,
        &fixture("dgx-h100"),
        &["--expect", "/dev/zero"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        first_line(&out).starts_with(
            "HEALTH UNKNOWN - node CHECK_FAILED: --expect /dev/zero: cannot read it: more than \
             1048576 bytes, the most an expectations file may hold"
        ),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_node_that_fails_its_own_check_teaches_nothing() {
    // No peer-memory module and no kernel configuration: GPUDirect RDMA cannot be confirmed.
    let dir = scratch("health-bad-teacher");
    let root = changed_dgx(&dir, "rm -r sys/module/nvidia_peermem");
    let file = dir.join("learned.json");
    let out = health(&dir, &root, &["--learn", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.starts_with("HEALTH CRITICAL - node GDR_UNAVAILABLE")
            && said.contains(&format!(
                "rdmabench: error: health --learn {}: refused, nothing written: this node is \
                 not healthy (HEALTH CRITICAL - node GDR_UNAVAILABLE",
                file.display()
            )),
        "{said}"
    );
    assert!(
        !file.exists(),
        "a node without GPUDirect RDMA taught \"gdr\": true"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_outputs_never_change_the_verdict() {
    let dir = scratch("health-outputs-fail");
    let root = changed_dgx(&dir, &format!("echo 8 > {NIC_1}/current_link_width"));
    let prom = dir.join("health.prom");
    let out = health(
        &dir,
        &root,
        &[
            "--json",
            "/nonexistent/health.json",
            "--prom",
            prom.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rdmabench: health: --json: cannot write '/nonexistent/health.json'")
            && err.contains("the status stays CRITICAL (exit 2)"),
        "{err}"
    );
    assert!(prom.exists(), "a failed --json skipped --prom");
    let out = health(&dir, &root, &["--prom", "/nonexistent/x.prom"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // `-` is stdout, for either; the text then goes to stderr.
    let out = health(&dir, &root, &["--prom", "-"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("# HELP rdmabench_health_status") && !dir.join("-").exists(),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("HEALTH CRITICAL"));
    let out = health(&dir, &root, &["--prom", "-", "--json", "-"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("cannot both take stdout"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn names_from_sysfs_or_expect_cannot_split_the_first_line() {
    let dir = scratch("health-names");
    let file = dir.join("evil.json");
    let evil = r#"{"schema": "rdmabench.health-expect/1", "nics": [{"name": "mlx5_9\nHEALTH OK\u001b[2K\u001b]0;owned\u0007", "port": 1}]}"#;
    std::fs::write(&file, evil).unwrap();
    let out = health(
        &dir,
        &fixture("dgx-h100"),
        &["--expect", file.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert_eq!(
        first_line(&out),
        "HEALTH CRITICAL - mlx5_9\\nHEALTH OK\\u{1b}[2K\\u{1b}]0;owned\\u{7} NIC_MISSING: \
         expected, not found under /sys/class/infiniband (driver not loaded, device gone from \
         the bus, or renamed)",
    );
    assert!(
        !stdout.lines().any(|l| l.starts_with("HEALTH OK")),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_hostile_sysfs_copy_shows_nothing_of_this_host_and_cannot_hang() {
    let dir = scratch("health-hostile");
    let root = changed_dgx(
        &dir,
        &format!(
            "rm {PORT_0}/state && ln -s /etc/passwd {PORT_0}/state && \
             rm {PORT_0}/counters/symbol_error && ln -s /dev/zero {PORT_0}/counters/symbol_error && \
             rm sys/class/infiniband/mlx5_1/fw_ver && mkfifo sys/class/infiniband/mlx5_1/fw_ver"
        ),
    );
    let json = dir.join("report.json");
    let out = health_in(
        &dir,
        &root,
        &["--budget", "5", "--json", json.to_str().unwrap()],
        Duration::from_secs(20),
    );
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    let report = std::fs::read_to_string(&json).unwrap();
    assert!(
        !said.contains("root:") && !report.contains("root:"),
        "this host's /etc/passwd shown: {said}"
    );
    assert!(
        said.contains("port 1's state not known: cannot read") && said.contains("ports/1/state"),
        "{said}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_check_that_cannot_end_is_stopped_at_its_budget() {
    // An --expect that is a pipe no one writes: opening it waits for ever.
    let dir = scratch("health-budget");
    let fifo = dir.join("expect.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let prom = dir.join("health.prom");
    let start = Instant::now();
    let out = health_in(
        &dir,
        &fixture("dgx-h100"),
        &[
            "--budget",
            "2",
            "--expect",
            fifo.to_str().unwrap(),
            "--prom",
            prom.to_str().unwrap(),
        ],
        Duration::from_secs(15),
    );
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(
        first_line(&out).starts_with(
            "HEALTH UNKNOWN - node CHECK_FAILED: the check did not end within the --budget of 2 s"
        ),
        "{}",
        text(&out)
    );
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(
        metrics.contains("rdmabench_health_status{host="),
        "{metrics}"
    );
    assert!(metrics.contains("} 3\n"), "{metrics}");
    std::fs::remove_dir_all(dir).ok();
}
