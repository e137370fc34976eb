//! `rdmabench nccl-log` on its fixtures (`tests/fixtures/nccl/`, each naming in its header
//! where its format comes from): the path table of two nodes that used GPUDirect RDMA
//! everywhere (exit 0); a node whose GPU went through host memory, with NCCL's own reason
//! (exit 3); TCP sockets instead of RDMA; a GPU that sent through the far NIC of the
//! dgx-h100 topology fixture, found with `--topo` (a saved `topo --json`); a log without
//! NCCL's lines refused; a folder or a missing file refused naming it (exit 2); findings
//! said on stderr in one line, the report on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

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
