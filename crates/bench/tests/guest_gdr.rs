//! scripts/gdr-compare.sh in the soft-RoCE guest: host memory runs and lands in the table;
//! the GPU modes, without a GPU or CUDA driver there, are reported with their one-line reason
//! and the script exits 1. With each runtime's fake (host memory posing as GPU memory: the
//! cuda crate's libcuda, the rocm crate's ROCm) the staged and peer-memory columns run too.

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
        .env("RDMABENCH_BIN", common::exe())
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
    staged_beside_host("cuda", &lib, &[("FAKE_CUDA_MODE", "hostmem")]);
}

#[test]
fn gdr_compare_runs_the_rocm_modes_alike() {
    if !rdma_ready("gdr_compare_runs_the_rocm_modes_alike") {
        return;
    }
    let Some(lib) = common::fake_rocm() else {
        eprintln!("skipped: no C compiler for the fake ROCm");
        return;
    };
    staged_beside_host("rocm", &lib, &[]);
}

/// gdr-compare.sh with host memory and `runtime`'s three modes against the fake runtime in
/// `lib`: rxe cannot register a dma-buf, so the dma-buf column is the one left out.
fn staged_beside_host(runtime: &str, lib: &Path, env: &[(&str, &str)]) {
    let dir = scratch(&format!("gdr-compare-staged-{runtime}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gdr-compare.sh");
    let (staged, peermem) = (format!("{runtime}-staged"), format!("{runtime}-peermem"));
    let out = Command::new("bash")
        .arg(script)
        .args([
            "--modes",
            &format!("host {staged} {peermem} {runtime}"),
            "--results",
        ])
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
        .env("RDMABENCH_BIN", common::exe())
        .env("LD_LIBRARY_PATH", lib)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains(&format!("{runtime} did not run")) && t.contains("dma-buf"),
        "{t}"
    );
    let header = t
        .lines()
        .find(|l| l.starts_with("size"))
        .unwrap_or_default();
    for m in ["host", &staged, &peermem] {
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
    let record: serde_json::Value = common::read_record(&dir.join(format!("{staged}.json")));
    assert_eq!(record["gpu"]["gdr"], false);
    assert_eq!(record["results"][0]["iterations"], 100);
    std::fs::remove_dir_all(dir).ok();
}
