//! The GPU memory modes on a machine without a CUDA driver: every `--mem cuda*` mode (and
//! perftest's `--use_cuda`) fails at once with one line naming the missing driver, on the
//! client and on the server, and bad values are usage errors.

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

#[test]
fn every_gpu_mode_fails_fast_naming_the_missing_driver() {
    if has_cuda_driver() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    for mem in [
        vec!["--mem", "cuda"],
        vec!["--mem", "cuda:0"],
        vec!["--mem", "cuda-peermem:1"],
        vec!["--mem", "cuda-staged"],
        vec!["--mem", "cuda:0000:17:00.0"],
        vec!["--use_cuda", "0"],
        vec!["--use_cuda=0", "--use_cuda_dmabuf"],
    ] {
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
            assert!(
                stderr.contains("no CUDA driver") && stderr.contains("libcuda.so.1"),
                "{args:?}: {stderr}"
            );
            assert!(
                stderr.contains("--mem "),
                "the message names the mode: {stderr}"
            );
        }
    }
}

#[test]
fn bad_gpu_values_are_usage_errors() {
    for (args, needle) in [
        (vec!["write-bw", "--mem", "cuda:x"], "'x'"),
        (vec!["write-bw", "--mem", "gpu"], "'gpu'"),
        (vec!["write-bw", "--use_cuda=-1"], "--use_cuda=-1"),
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
            "apply to --mem cuda-staged only",
        ),
        (
            vec!["write-bw", "--staging-depth", "8"],
            "apply to --mem cuda-staged only",
        ),
        (vec!["write-bw", "--peer-mem", "cuda-staged"], "--loopback"),
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}
