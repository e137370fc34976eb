//! `rdmabench nccl-log` on its fixtures (`tests/fixtures/nccl/`, each naming in its header
//! where its format comes from): the path table of two nodes that used GPUDirect RDMA
//! everywhere (exit 0); a node whose GPU went through host memory, with NCCL's own reason
//! (exit 3); TCP sockets instead of RDMA; a GPU that sent through the far NIC of the
//! dgx-h100 topology fixture, found with `--topo` (a saved `topo --json`); a log without
//! NCCL's lines refused; a folder or a missing file refused naming it (exit 2); findings
//! said on stderr in one line, the report on stdout; a log past the read limit refused naming
//! it; escape sequences from a log never reach the terminal; and logs of 300,000 ranks and of
//! 15,000 ranks by 15,000 NICs read in seconds and bounded memory (docs/gpu.md's figures).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod synthetic;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::{bin, scratch, text};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/nccl/{name}"))
}

fn nccl_log(files: &[&str], more: &[&str]) -> Output {
    let paths: Vec<PathBuf> = files.iter().map(|f| fixture(f)).collect();
    bin()
        .arg("nccl-log")
        .args(&paths)
        .args(more)
        .output()
        .unwrap()
}

#[test]
fn every_gpu_is_tabled_and_a_clean_log_says_so() {
    let out = nccl_log(&["two-nodes-gdr.log"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    insta::assert_snapshot!("two_nodes_gdr", text(&out));
}

#[test]
fn a_gpu_through_host_memory_or_sockets_is_named_with_the_reason() {
    let out = nccl_log(&["host-memory.log"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    insta::assert_snapshot!("host_memory", text(&out));
    let out = nccl_log(&["sockets.log"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("over TCP sockets (NET/Socket/0), no RDMA at all"),
        "{}",
        text(&out)
    );
    // Several files at once read as one log.
    let out = nccl_log(&["host-memory.log", "two-nodes-gdr.log"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        text(&out).matches("sends through host memory").count(),
        1,
        "{}",
        text(&out)
    );
}

#[test]
fn a_gpu_on_a_far_nic_is_named_against_the_saved_topology() {
    let dir = scratch("nccl-topo");
    let topo = dir.join("dgx.json");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topo/tests/fixtures/dgx-h100");
    let saved = bin()
        .args(["topo", "--json", "--sysfs-root", root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(saved.status.success(), "{}", text(&saved));
    std::fs::write(&topo, &saved.stdout).unwrap();
    // Without the tree, every edge used GDRDMA: nothing to say.
    let out = nccl_log(&["far-nic.log"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = nccl_log(&["far-nic.log"], &["--topo", topo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    insta::assert_snapshot!("far_nic", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_log_without_nccl_lines_or_a_bad_topology_is_refused() {
    let dir = scratch("nccl-bad");
    let empty = dir.join("app.log");
    std::fs::write(&empty, "epoch 1 loss 0.3\nNCCL version 2.18.1+cuda12.1\n").unwrap();
    let out = bin().arg("nccl-log").arg(&empty).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("run the job with NCCL_DEBUG=INFO"),
        "{}",
        text(&out)
    );
    let out = nccl_log(&["far-nic.log"], &["--topo", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("not a topology (`rdmabench topo --json` writes one)"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_folder_or_a_missing_file_is_refused_naming_the_path_and_what_would_do() {
    let dir = scratch("nccl-folder");
    std::fs::write(dir.join("dgx.json"), "{}").unwrap();
    let out = nccl_log(&["far-nic.log"], &["--topo", dir.to_str().unwrap()]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("--topo '{}' is a folder", dir.display()))
            && t.contains("`rdmabench topo --json > topo.json`")
            && t.contains("holds dgx.json")
            && !t.contains("Is a directory"),
        "{t}"
    );
    let missing = dir.join("rank0.log");
    let out = bin().arg("nccl-log").arg(&missing).output().unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains(&format!("the log '{}' does not exist", missing.display())),
        "{t}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn findings_say_why_on_stderr_in_one_line_the_report_on_stdout() {
    let out = nccl_log(&["host-memory.log"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "rdmabench: nccl-log: 1 GPU path finding(s) (exit 3)\n"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("sends through host memory"));
}

#[test]
fn a_log_past_the_read_limit_is_refused_naming_it() {
    let out = bin().args(["nccl-log", "/dev/zero"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the log '/dev/zero' is larger than the 512 MiB this reads"),
        "{}",
        text(&out)
    );
}

#[test]
fn escape_sequences_in_a_log_never_reach_the_terminal() {
    let dir = scratch("nccl-escapes");
    let log = dir.join("hostile.log");
    // A host that retitles the window, a bus id and NCCL's text that overwrite lines.
    let host = "node\x1b]0;owned\x07";
    let lines = [
        format!("{host}:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1b\x1b[1A\x1b[2K000"),
        format!("{host}:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (\x1b[2Kgone)"),
        format!("{host}:1:2 [0] NCCL INFO Channel 00/0 : 0[1b000] -> 1[1c000] [send] via NET/IB/0"),
    ];
    std::fs::write(&log, lines.join("\n")).unwrap();
    let out = bin().arg("nccl-log").arg(&log).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let shown = text(&out);
    assert!(
        !shown.contains('\x1b') && !shown.contains('\x07'),
        "{shown:?}"
    );
    assert!(
        shown.contains("node\\u{1b}]0;owned\\u{7}: rank 0"),
        "{shown}"
    );
    assert!(shown.contains("(\\u{1b}[2Kgone)"), "{shown}");
    std::fs::remove_dir_all(dir).ok();
}

/// `nccl-log` of a generated log: exit 3 (every GPU went through host memory), the CPU time
/// and peak memory it took (printed with its wall time), and what it printed.
fn read_generated(name: &str, gpus: usize, ranks: usize, nics: usize) -> (Duration, u64, String) {
    let dir = scratch(name);
    let log = dir.join(format!("{name}.log"));
    std::fs::write(&log, synthetic::nccl_log(gpus, ranks, nics)).unwrap();
    let mut cmd = bin();
    cmd.arg("nccl-log").arg(&log);
    let m = common::measured(&mut cmd);
    eprintln!(
        "nccl-log, {gpus} GPU(s), {ranks} ranks, {nics} NIC(s): {:.2} s ({:.2} s CPU), peak {} \
         MiB, {} bytes out",
        m.wall.as_secs_f64(),
        m.cpu.as_secs_f64(),
        m.rss_kib / 1024,
        m.text.len()
    );
    assert_eq!(m.code, Some(3), "{}", &m.text[..m.text.len().min(2000)]);
    std::fs::remove_dir_all(dir).ok();
    (m.cpu, m.rss_kib, m.text)
}

#[test]
fn a_log_of_15000_ranks_by_15000_nics_reads_in_seconds_and_megabytes() {
    let (cpu, rss_kib, shown) = read_generated("nccl-15k", 1, 15_000, 15_000);
    assert!(cpu < Duration::from_secs(5), "{cpu:?}");
    assert!(rss_kib < 512 * 1024, "{rss_kib} KiB");
    // One finding per NIC, each naming the GPU's ranks in a few words, not 15,000 of them.
    assert_eq!(shown.matches("sends through host memory").count(), 15_000);
    assert!(
        shown.contains("node0: ranks 0-14999 (GPU 0, 1b000) sends"),
        "{}",
        &shown[..2000]
    );
    assert!(shown.len() < 8 << 20, "{} bytes", shown.len());
}

#[test]
fn a_log_of_300000_ranks_reads_in_time_linear_in_its_lines() {
    // One GPU in 300,000 communicators: each new rank once looked through all before it.
    let (cpu, _, shown) = read_generated("nccl-300k", 1, 300_000, 1);
    assert!(
        shown.contains("ranks 0-299999 (GPU 0"),
        "{}",
        &shown[..2000]
    );
    // docs/gpu.md's figures; a bound a debug build meets on a busy machine, where looking
    // for each new rank among all before it grew with the square of the ranks.
    assert!(cpu < Duration::from_secs(10), "{cpu:?}");
}
