//! The GPU memory modes on a machine without a CUDA driver or ROCm: every `--mem cuda*` and
//! `--mem rocm*` mode (and perftest's `--use_cuda`, `--use_rocm`) fails at once with one line
//! naming the missing runtime, on the client and on the server, and bad values are usage
//! errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{bin, text};

fn has_cuda_driver() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

fn has_rocm() -> bool {
    [
        "/opt/rocm/lib/libamdhip64.so",
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.6",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

/// Each of `modes` fails within seconds, on a client and on a server, with one line that holds
/// every one of `needles` and names the mode.
fn each_fails_fast_naming(modes: &[&[&str]], needles: &[&str]) {
    for mem in modes {
        for side in [
            vec!["write-bw", "127.0.0.1", "--timeout", "20"],
            vec!["send-bw", "-p", "19250", "--timeout", "20"],
        ] {
            let args: Vec<&str> = side.iter().chain(mem.iter()).copied().collect();
            let start = Instant::now();
            let out = bin().args(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
            assert!(start.elapsed() < Duration::from_secs(10), "{args:?} waited");
            assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
            for needle in needles {
                assert!(stderr.contains(needle), "{args:?}: {needle}: {stderr}");
            }
            assert!(
                stderr.contains("--mem "),
                "the message names the mode: {stderr}"
            );
        }
    }
}

#[test]
fn every_gpu_mode_fails_fast_naming_the_missing_driver() {
    if has_cuda_driver() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    each_fails_fast_naming(
        &[
            &["--mem", "cuda"],
            &["--mem", "cuda:0"],
            &["--mem", "cuda-peermem:1"],
            &["--mem", "cuda-staged"],
            &["--mem", "cuda:0000:17:00.0"],
            &["--use_cuda", "0"],
            &["--use_cuda=0", "--use_cuda_dmabuf"],
        ],
        &["no CUDA driver", "libcuda.so.1"],
    );
}

#[test]
fn every_rocm_mode_fails_fast_naming_the_missing_runtime() {
    if has_rocm() {
        eprintln!("skipped: this machine has ROCm");
        return;
    }
    each_fails_fast_naming(
        &[
            &["--mem", "rocm"],
            &["--mem", "rocm-peermem:1"],
            &["--mem", "rocm-staged:0000:17:00.0"],
            &["--use_rocm", "0"],
            &["--use_rocm=0", "--use_rocm_dmabuf"],
        ],
        &["no ROCm runtime", "libamdhip64.so", "LD_LIBRARY_PATH"],
    );
}

#[test]
fn bad_gpu_values_are_usage_errors() {
    for (args, needle) in [
        (vec!["write-bw", "--mem", "cuda:x"], "'x'"),
        (vec!["write-bw", "--mem", "gpu"], "'gpu'"),
        (vec!["write-bw", "--use_cuda=-1"], "--use_cuda=-1"),
        (vec!["write-bw", "--use_rocm=x"], "--use_rocm=x"),
        (
            vec!["write-bw", "--use_rocm_dmabuf"],
            "--use_rocm_dmabuf needs --use_rocm=N",
        ),
        (
            vec!["write-bw", "--use_cuda", "0", "--use_rocm", "0"],
            "cannot be used with",
        ),
        (vec!["write-bw", "--mem", "rocm-gpu"], "rocm-staged[:GPU]"),
        (vec!["write-bw", "--use_cuda", "abc"], "--use_cuda=abc"),
        (
            vec!["write-bw", "--mem", "cuda", "--use_cuda", "0"],
            "cannot be used with",
        ),
        (
            vec![
                "write-bw",
                "--mem",
                "cuda-staged",
                "--staging-chunk",
                "5000",
            ],
            "try 8192 B",
        ),
        (
            vec!["write-bw", "--mem", "cuda-staged", "--staging-chunk", "1K"],
            "at least 4096 B",
        ),
        (
            vec!["write-bw", "--mem", "cuda-staged", "--staging-depth", "0"],
            "1 to 64",
        ),
        (
            vec!["write-bw", "--mem", "cuda", "--staging-chunk", "64K"],
            "apply to --mem cuda-staged and rocm-staged only",
        ),
        (
            vec!["write-bw", "--staging-depth", "8"],
            "apply to --mem cuda-staged and rocm-staged only",
        ),
        (vec!["write-bw", "--peer-mem", "cuda-staged"], "--loopback"),
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}

/// The GPU modes' rules are the plan's: they are checked before anything loads the CUDA
/// driver or opens a device, so a machine without a GPU (this one, or one with a driver but
/// no RDMA device) refuses them with exit 2 and the rule, at once.
#[test]
fn gpu_mode_rules_are_usage_errors_before_any_driver_loads() {
    let rules: &[(&[&str], &str)] = &[
        (
            &["write-lat", "--mem", "cuda"],
            "--mem cuda:0: write-lat polls the last byte with the CPU",
        ),
        (
            &["write-lat", "127.0.0.1", "--mem", "cuda-peermem:1"],
            "write-lat polls the last byte with the CPU",
        ),
        (
            &["atomic-bw", "--mem", "cuda-staged"],
            "--mem cuda-staged:0: atomic-bw is not staged",
        ),
        (
            &["atomic-lat", "127.0.0.1", "--mem", "cuda-staged"],
            "atomic-lat is not staged",
        ),
        (
            &["write-bw", "--mem", "cuda", "-I", "64"],
            "--mem cuda:0: --inline-size 64: inline data is copied from the buffer by the CPU",
        ),
        (
            &["write-bw", "--mem", "rocm", "-I", "64"],
            "or use --mem rocm-staged (which posts from host bounce buffers)",
        ),
        (
            &["atomic-bw", "--mem", "rocm-staged"],
            "--mem rocm-staged:0: atomic-bw is not staged",
        ),
        (
            &["send-lat", "127.0.0.1", "--use_cuda", "0", "-I", "16"],
            "--inline-size 16: inline data is copied",
        ),
        (
            &["read-lat", "--mem", "cuda-staged"],
            "the server of read-lat is a passive source",
        ),
        (
            &["write-bw", "127.0.0.1", "--mem", "cuda-staged", "-b"],
            "-b is not staged",
        ),
        (
            &["send-bw", "--mem", "cuda-staged", "-c", "UD"],
            "a staged server needs RC",
        ),
        (
            &["write-bw", "--mem", "cuda-staged", "-D", "2"],
            "a staged server needs -n",
        ),
        // --loopback: the client's side is --peer-mem's, and the pair is checked too.
        (
            &["write-lat", "--loopback", "--peer-mem", "cuda"],
            "--peer-mem cuda:0: write-lat polls the last byte",
        ),
        (
            &["atomic-lat", "--loopback", "--peer-mem", "cuda-staged:1"],
            "--peer-mem cuda-staged:1: atomic-lat is not staged",
        ),
        (
            &[
                "write-bw",
                "--loopback",
                "--mem",
                "cuda-staged",
                "--peer-mem",
                "host",
            ],
            "the server stages what is written to it (a staged --mem, 4 x 1 MiB pinned \
             bounce buffers), which needs a staged client",
        ),
    ];
    for (args, rule) in rules {
        let start = Instant::now();
        let out = bin()
            .args(*args)
            .args(["-p", "19251", "--timeout", "20"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?} waited");
        assert!(stderr.contains(rule), "{args:?}: {stderr}");
        assert!(!stderr.contains("CUDA driver"), "{args:?}: {stderr}");
    }
}

/// What the rules allow is not refused early: without a driver it still fails naming it.
#[test]
fn gpu_modes_the_rules_allow_reach_the_driver() {
    if has_cuda_driver() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    for args in [
        vec!["write-lat", "127.0.0.1", "--mem", "cuda-staged"],
        vec!["read-lat", "--loopback", "--peer-mem", "cuda-staged"],
        vec!["write-bw", "--loopback", "--mem", "cuda-staged"],
        vec!["write-bw", "--mem", "cuda", "-I", "0"],
    ] {
        let out = bin()
            .args(&args)
            .args(["-p", "19252", "--timeout", "20"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            text(&out).contains("no CUDA driver"),
            "{args:?}: {}",
            text(&out)
        );
    }
}

/// `--mem rocm` on a kernel without CONFIG_DMABUF_MOVE_NOTIFY or CONFIG_PCI_P2PDMA (amdgpu would
/// move the exported buffer to host memory and the figure would be host memory's): refused
/// before any device opens, on a client and a server, naming what is missing and the remedy;
/// `--force-rocm-dmabuf` gets past the check (here, to the peer that is not there), and is a
/// usage error with another mode. Run against the rocm crate's fake ROCm.
#[test]
fn rocm_dmabuf_is_refused_where_the_kernel_would_move_the_buffer_to_host_memory() {
    let kernel = rdmabench::kconfig::RocmDmabufKernel::read(&topo::Sysfs::system());
    if kernel.ready() {
        eprintln!("skipped: this kernel has CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA");
        return;
    }
    let Some(lib) = common::fake_rocm() else {
        eprintln!("skipped: no C compiler for the fake ROCm");
        return;
    };
    let gaps = [kernel.missing(), kernel.unknown()].concat();
    let run = |args: &[&str]| {
        let out = bin()
            .args(args)
            .args(["--timeout", "5"])
            .env("LD_LIBRARY_PATH", &lib)
            .output()
            .unwrap();
        (out.status.code(), text(&out))
    };
    for side in [["write-bw", "127.0.0.1"], ["read-bw", "-p"]] {
        let mut args = side.to_vec();
        if side[1] == "-p" {
            args.push("19253");
        }
        args.extend(["--mem", "rocm:1"]);
        let (code, said) = run(&args);
        assert_eq!(code, Some(1), "{args:?}: {said}");
        assert_eq!(said.trim().lines().count(), 1, "{said}");
        for needle in [
            "--mem rocm:1: ROCm dma-buf refused",
            "system memory (GTT)",
            "--mem rocm-peermem",
            "--force-rocm-dmabuf",
        ]
        .into_iter()
        .chain(gaps.iter().map(String::as_str))
        {
            assert!(said.contains(needle), "{needle}: {said}");
        }
    }
    let (_, said) = run(&[
        "write-bw",
        "127.0.0.1",
        "--mem",
        "rocm",
        "--force-rocm-dmabuf",
    ]);
    assert!(!said.contains("refused"), "{said}");
    let (code, said) = run(&[
        "write-bw",
        "127.0.0.1",
        "--mem",
        "rocm-staged",
        "--force-rocm-dmabuf",
    ]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("--force-rocm-dmabuf applies to --mem rocm (dma-buf)"),
        "{said}"
    );
}
