//! The GPU memory modes end to end on soft-RoCE, with the cuda crate's fake libcuda in its
//! `hostmem` mode: its "GPU memory" is host memory, so nvidia-peermem-style registration is
//! a plain ibv_reg_mr and runs on rxe, while its dma-buf export (a memfd) is refused by rxe as
//! every non-dma-buf is. This exercises allocation, registration, --validate through copies,
//! and the header and record's GPU facts, without a GPU.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{rdma_ready, scratch, text};

/// Builds the fake libcuda.so.1 (skips the test when there is no C compiler).
fn fake_libcuda() -> Option<PathBuf> {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/tests/fake_libcuda/fake_libcuda.c");
    let lib = dir.join("libcuda.so.1");
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(src)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "cannot build the fake libcuda: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).ok();
    Some(dir)
}

fn run(lib: &Path, args: &[&str]) -> Output {
    common::bin()
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .env("FAKE_CUDA_MODE", "hostmem")
        .output()
        .unwrap()
}

#[test]
fn gpu_memory_modes_run_end_to_end_on_a_fake_driver() {
    if !rdma_ready("gpu_memory_modes_run_end_to_end_on_a_fake_driver") {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return;
    };
    let dir = scratch("fake-gpu");
    let json = dir.join("peermem.json");
    let loopback = [
        "--loopback",
        "-d",
        "rxe0",
        "--peer-dev",
        "rxe1",
        "-x",
        "1",
        "-n",
        "100",
        "-t",
        "16",
    ];

    // Registration by address (nvidia-peermem style), every bandwidth verb, payload checked.
    for test in ["write-bw", "read-bw", "send-bw", "atomic-bw", "send-lat"] {
        let mut args = vec![test];
        args.extend(loopback);
        args.extend([
            "--mem",
            "cuda-peermem:0",
            "--validate",
            "--json",
            json.to_str().unwrap(),
        ]);
        let out = run(&lib, &args);
        assert!(out.status.success(), "{test}: {}", text(&out));
        assert!(
            text(&out).contains("Fake GPU 0 at 0000:17:00.0, GPUDirect RDMA on (nvidia-peermem)"),
            "{}",
            text(&out)
        );
        let record: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(record["params"]["mem"], "cuda-peermem:0", "{test}");
        assert_eq!(record["gpu"]["name"], "Fake GPU 0");
        assert_eq!(record["gpu"]["gdr"], true);
    }

    // dma-buf: rxe has no dma-buf support, and says what to use instead.
    let mut args = vec!["write-bw"];
    args.extend(loopback);
    args.extend(["--mem", "cuda:0"]);
    let out = run(&lib, &args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("cannot register this memory as a dma-buf")
            && text(&out).contains("cuda-peermem"),
        "{}",
        text(&out)
    );

    // GPU 1 of the fake has no dma-buf support: refused before anything is allocated.
    let mut args = vec!["write-bw"];
    args.extend(loopback);
    args.extend(["--mem", "cuda:1"]);
    let out = run(&lib, &args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).to_lowercase().contains("dma-buf"),
        "{}",
        text(&out)
    );

    // The staged mode says it is not wired in yet; write-lat cannot poll GPU memory.
    let mut args = vec!["write-bw"];
    args.extend(loopback);
    args.extend(["--mem", "cuda-staged:0"]);
    let out = run(&lib, &args);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not wired into the tests yet"),
        "{}",
        text(&out)
    );
    let mut args = vec!["write-lat"];
    args.extend([
        "--loopback",
        "-d",
        "rxe0",
        "--peer-dev",
        "rxe1",
        "--mem",
        "cuda-peermem",
    ]);
    let out = run(&lib, &args);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("cannot read GPU memory"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
    std::fs::remove_dir_all(lib).ok();
}
