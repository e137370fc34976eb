//! `scripts/gpu-check.sh run` bringing up its own soft-RoCE device (issue 36 item 9): a lent GPU
//! machine without an RDMA NIC still checks the staged engine loop. In the soft-RoCE guest (root,
//! rdma_rxe, iproute2's rdma), with the cuda crate's fake libcuda standing in for the GPU and
//! `GPU_CHECK_SOFT_ROCE=1` (the guest already has rxe0 and rxe1), the script brings up
//! gpuchk_rxe0 on a veth pair, passes the staged loopback on it with --validate, SKIPs dma-buf
//! (rxe refuses it: EOPNOTSUPP) and peer memory (a software device), and removes the device and
//! the veth pair on exit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{fake_libcuda, rdma_ready, scratch, text, write_executable};

#[test]
fn gpu_check_brings_up_soft_roce_runs_the_staged_loopback_and_removes_it() {
    let test = "gpu_check_brings_up_soft_roce_runs_the_staged_loopback_and_removes_it";
    if !rdma_ready(test) {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("{test}: skipped: no C compiler for the fake libcuda");
        return;
    };
    let dir = scratch("guest-gpu-check");
    let gpu_check = dir.join("gpu_check");
    write_executable(&gpu_check, "#!/bin/sh\necho '  [PASS] fake'\nexit 0\n");
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
        .arg("run")
        .env("GPU_CHECK_BIN", &gpu_check)
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .env("RDMABENCH_SHAPE", "-s 64K -n 200")
        .env("LD_LIBRARY_PATH", &lib)
        .env("FAKE_CUDA_MODE", "hostmem")
        .env("GPU_CHECK_SOFT_ROCE", "1")
        .env("OUT", dir.join("out"))
        .env_remove("RDMA_DEV")
        .output()
        .unwrap();
    let said = text(&out);
    eprintln!("{said}");
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("soft-RoCE device gpuchk_rxe0 brought up on veth gpuchk0"),
        "{said}"
    );
    let summary = std::fs::read_to_string(dir.join("out/summary.txt")).unwrap();
    let lines: Vec<&str> = summary.lines().collect();
    assert_eq!(lines.len(), 4, "{summary}");
    assert_eq!(lines[0], "PASS gpu_check", "{summary}");
    assert!(
        lines[1].starts_with(
            "PASS rdmabench write-bw --loopback -d gpuchk_rxe0 --mem cuda-staged:0 --validate: "
        ),
        "{summary}\n{}",
        std::fs::read_to_string(dir.join("out/rdmabench-cuda-staged.txt")).unwrap_or_default()
    );
    assert!(
        lines[2].starts_with(
            "SKIP rdmabench write-bw --loopback -d gpuchk_rxe0 --mem cuda:0: the provider of \
             gpuchk_rxe0 does not take dma-buf memory"
        ),
        "{summary}"
    );
    assert!(
        lines[3].contains("gpuchk_rxe0 is a software RDMA device"),
        "{summary}"
    );
    // Removed on exit: the device and both ends of the veth pair.
    assert!(!Path::new("/sys/class/infiniband/gpuchk_rxe0").exists());
    assert!(!Path::new("/sys/class/net/gpuchk0").exists());
    assert!(!Path::new("/sys/class/net/gpuchk1").exists());
    std::fs::remove_dir_all(dir).ok();
}
