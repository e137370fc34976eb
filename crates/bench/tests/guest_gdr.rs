//! scripts/gdr-compare.sh in the soft-RoCE guest: host memory runs and lands in the table;
//! the GPU modes, without a GPU or CUDA driver there, are reported with their one-line reason
//! and the script exits 1. With the cuda crate's fake libcuda (host memory posing as GPU
//! memory) the staged and peermem columns run too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{fake_libcuda, rdma_ready, scratch, text};

#[test]
fn gdr_compare_tabulates_what_ran_and_names_what_could_not() {
    if !rdma_ready("gdr_compare_tabulates_what_ran_and_names_what_could_not") {
        return;
    }
    let dir = scratch("gdr-compare");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gdr-compare.sh");
    let out = Command::new("bash")
        .arg(script)
        .args([
            "--modes",
            "host cuda",
            "--results",
            dir.to_str().unwrap(),
            "local:rxe0",
        ])
        .args(["-d", "rxe1", "-x", "1", "-s", "4K", "-n", "100", "-t", "16"])
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the cuda mode cannot run here:\n{t}"
    );
    assert!(
        t.contains("cuda did not run") && t.contains("no CUDA driver"),
        "{t}"
    );
    assert!(t.contains("host GB/s (% ceiling)"), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("4096 "))
        .unwrap_or_default();
    assert!(
        row.contains('%'),
        "a row for 4096 with its share of the ceiling:\n{t}"
    );
    let record: serde_json::Value = common::read_record(&dir.join("host.json"));
    assert_eq!(record["params"]["mem"], "host");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gdr_compare_puts_the_staged_path_beside_host_memory() {
    if !rdma_ready("gdr_compare_puts_the_staged_path_beside_host_memory") {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return;
    };
    let dir = scratch("gdr-compare-staged");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gdr-compare.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(["--modes", "host cuda-staged cuda-peermem cuda", "--results"])
        .arg(&dir)
        .args([
            "local:rxe0",
            "-d",
            "rxe1",
            "-x",
            "1",
            "-s",
            "64K",
            "-n",
            "100",
        ])
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .env("LD_LIBRARY_PATH", &lib)
        .env("FAKE_CUDA_MODE", "hostmem")
        .output()
        .unwrap();
    let t = text(&out);
    // rxe cannot register a dma-buf: the cuda column is the one left out.
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("cuda did not run") && t.contains("dma-buf"),
        "{t}"
    );
    let header = t
        .lines()
        .find(|l| l.starts_with("size"))
        .unwrap_or_default();
    for m in ["host", "cuda-staged", "cuda-peermem"] {
        assert!(header.contains(&format!("{m} GB/s")), "{m}: {t}");
    }
    let row = t
        .lines()
        .find(|l| l.starts_with("65536 "))
        .unwrap_or_default();
    assert_eq!(
        row.matches('%').count(),
        3,
        "three columns with a share:\n{t}"
    );
    let staged: serde_json::Value = common::read_record(&dir.join("cuda-staged.json"));
    assert_eq!(staged["gpu"]["gdr"], false);
    assert_eq!(staged["results"][0]["iterations"], 100);
    std::fs::remove_dir_all(dir).ok();
}
