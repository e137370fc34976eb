//! The GPU memory modes end to end on soft-RoCE, with the cuda crate's fake libcuda in its
//! `hostmem` mode: its "GPU memory" is host memory, so nvidia-peermem-style registration is
//! a plain ibv_reg_mr and runs on rxe, while its dma-buf export (a memfd) is refused by rxe as
//! every non-dma-buf is. This exercises allocation, registration, --validate through copies,
//! and the header and record's GPU facts, without a GPU.
//!
//! The staged path (`--mem cuda-staged`) runs for real too: the fake's async copies are only
//! carried out once their event is seen complete, so an engine that posted from a bounce
//! buffer before its copy finished, or copied before the data landed, would move stale bytes
//! and fail `--validate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{fake_libcuda, rdma_ready, scratch, text, Server, LOOPBACK};

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
    let small = ["-n", "100", "-t", "16"];

    // Registration by address (nvidia-peermem style), every bandwidth verb, payload checked.
    for test in ["write-bw", "read-bw", "send-bw", "atomic-bw", "send-lat"] {
        let mut args = vec!["--mem", "cuda-peermem:0", "--validate", "--json"];
        args.push(json.to_str().unwrap());
        args.extend(small);
        let out = loopback(&lib, test, &args);
        assert!(out.status.success(), "{test}: {}", text(&out));
        assert!(
            text(&out).contains("Fake GPU 0 at 0000:17:00.0, GPUDirect RDMA on (nvidia-peermem)"),
            "{}",
            text(&out)
        );
        let record: serde_json::Value = common::read_record(&json);
        assert_eq!(record["params"]["mem"], "cuda-peermem:0", "{test}");
        assert_eq!(record["gpu"]["name"], "Fake GPU 0");
        assert_eq!(record["gpu"]["gdr"], true);
    }

    // A GPU whose NIC writes are not ordered (before Hopper): --validate flushes them before it
    // copies the received bytes out, and passes.
    let flushes = dir.join("flushes.log");
    let mut args = vec!["write-bw"];
    args.extend(LOOPBACK);
    args.extend(["--timeout", "20", "--mem", "cuda-peermem:0", "--validate"]);
    args.extend(small);
    let out = common::bin()
        .args(&args)
        .env("LD_LIBRARY_PATH", &lib)
        .env("FAKE_CUDA_MODE", "hostmem")
        .env("FAKE_CUDA_WRITES_ORDERING", "0")
        .env("FAKE_CUDA_FLUSH_LOG", &flushes)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let logged = std::fs::read_to_string(&flushes).unwrap_or_default();
    assert!(
        !logged.is_empty() && logged.lines().all(|l| l == "FLUSH 0 100"),
        "a flush before the read-back: {logged:?}"
    );

    // No GPU named on one soft-RoCE device: GPU 0, since rxe has no PCIe tree, and said (the
    // client's record: rxe1).
    let mut args = vec!["--mem", "cuda-peermem", "--json", json.to_str().unwrap()];
    args.extend(small);
    let out = loopback(&lib, "write-bw", &args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out)
            .contains("GPUDirect RDMA on (nvidia-peermem); GPU 0: no GPU on rxe1's PCIe tree"),
        "{}",
        text(&out)
    );
    let record: serde_json::Value = common::read_record(&json);
    assert_eq!(record["gpu"]["chosen"], "GPU 0: no GPU on rxe1's PCIe tree");

    for (test, mem, code, needle) in [
        // dma-buf: rxe has no dma-buf support, and says what to use instead (this machine
        // lacks what the mode needs: the run fails).
        (
            "write-bw",
            "cuda:0",
            1,
            "cannot register this memory as a dma-buf",
        ),
        // GPU 1 of the fake has no dma-buf support: refused before anything is allocated.
        ("write-bw", "cuda:1", 1, "dma-buf"),
        // write-lat cannot poll GPU memory: a combination that cannot run (usage).
        ("write-lat", "cuda-peermem", 2, "cannot read GPU memory"),
        // Inline data would be a CPU copy out of GPU memory.
        ("send-bw", "cuda-peermem -I 64", 2, "inline data"),
    ] {
        let mut args = vec!["--mem"];
        args.extend(mem.split(' '));
        let out = loopback(&lib, test, &args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{test} {mem}: {}",
            text(&out)
        );
        assert!(text(&out).contains(needle), "{test} {mem}: {}", text(&out));
    }
    let out = loopback(&lib, "write-bw", &["--mem", "cuda:0"]);
    assert!(
        text(&out).contains("--mem cuda-peermem") && text(&out).contains("--mem cuda-staged"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `rdmabench TEST --loopback` on rxe0 (server) and rxe1 (client) with `args`, on the fake GPU.
fn loopback(lib: &Path, test: &str, args: &[&str]) -> Output {
    let mut all = vec![test];
    all.extend(LOOPBACK);
    all.extend(["--timeout", "20"]);
    all.extend(args);
    run(lib, &all)
}

#[test]
fn the_staged_path_moves_every_byte_through_bounce_buffers() {
    if !rdma_ready("the_staged_path_moves_every_byte_through_bounce_buffers") {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return;
    };
    let dir = scratch("staged");
    let json = dir.join("staged.json");
    let small = ["-s", "64", "-n", "300", "--staging-chunk", "4K"];
    // 10 KiB through 4 KiB buffers: split in 4K + 4K + 2K (a SEND gets a 12 KiB buffer).
    let large = ["-s", "10K", "-n", "40", "-q", "2", "--staging-chunk", "4K"];

    // send-bw staged at both ends: the client copies out and SENDs, the server receives into
    // bounce buffers and copies in; -r 4 makes the receive queue the limit.
    for (shape, extra) in [
        (&small[..], &["--staging-depth", "2", "-I", "64"][..]),
        (&large[..], &["-r", "4"][..]),
    ] {
        let mut args = vec!["--mem", "cuda-staged:0", "--validate", "--json"];
        args.push(json.to_str().unwrap());
        args.extend(shape);
        args.extend(extra);
        let out = loopback(&lib, "send-bw", &args);
        assert!(out.status.success(), "send-bw {shape:?}: {}", text(&out));
        assert!(
            text(&out).contains("GPUDirect RDMA off (staged through host memory)")
                && text(&out).contains("pinned bounce buffers per QP"),
            "{}",
            text(&out)
        );
    }
    let record: serde_json::Value = common::read_record(&json);
    assert_eq!(record["params"]["mem"], "cuda-staged:0");
    assert_eq!(record["gpu"]["gdr"], false);
    assert_eq!(
        record["gpu"]["staging"]["chunk"], 12288,
        "a SEND is never split"
    );
    assert_eq!(record["gpu"]["staging"]["depth"], 4);
    assert_eq!(record["results"][0]["iterations"], 80);

    // write-bw and read-bw staged at both ends: WRITEs into the server's bounce buffers with
    // credits back; READs of what the server announced ready, with credits back.
    for test in ["write-bw", "read-bw"] {
        for shape in [&small[..], &large[..]] {
            let mut args = vec!["--mem", "cuda-staged:0", "--validate"];
            args.extend(shape);
            let out = loopback(&lib, test, &args);
            assert!(out.status.success(), "{test} {shape:?}: {}", text(&out));
        }
    }
    // WRITE and READ with a staged client against a host server.
    for test in ["write-bw", "read-bw"] {
        for shape in [&small[..], &large[..]] {
            let mut args = vec!["--mem", "host", "--peer-mem", "cuda-staged:0", "--validate"];
            args.extend(shape);
            let out = loopback(&lib, test, &args);
            assert!(out.status.success(), "{test} {shape:?}: {}", text(&out));
        }
    }
    // Latency, staged: every message is copied out of and into the GPU inside the round trip.
    for (test, mem) in [
        ("send-lat", &["--mem", "cuda-staged:0"][..]),
        ("write-lat", &["--mem", "cuda-staged:0"][..]),
        (
            "read-lat",
            &["--mem", "host", "--peer-mem", "cuda-staged:0"][..],
        ),
    ] {
        for size in ["64", "10K"] {
            let mut args = vec!["-s", size, "-n", "100", "--validate"];
            args.extend(mem);
            let out = loopback(&lib, test, &args);
            assert!(out.status.success(), "{test} {size}: {}", text(&out));
        }
    }

    // What cannot be staged says why.
    for (test, args, needle) in [
        (
            "read-bw",
            &["--mem", "cuda-staged:0", "--peer-mem", "host"][..],
            "read from it",
        ),
        (
            "read-lat",
            &["--mem", "cuda-staged:0"][..],
            "passive source",
        ),
        ("atomic-lat", &["--mem", "cuda-staged:0"][..], "no payload"),
        (
            "send-bw",
            &["--mem", "cuda-staged:0", "-D", "1"][..],
            "needs -n",
        ),
        (
            "write-bw",
            &["--mem", "cuda-staged:0", "-c", "UC"][..],
            "needs RC",
        ),
        (
            "write-bw",
            &["--mem", "cuda-staged:0", "--peer-mem", "host"][..],
            "same bounce buffers",
        ),
        (
            "atomic-bw",
            &["--mem", "host", "--peer-mem", "cuda-staged:0"][..],
            "no payload",
        ),
    ] {
        let out = loopback(&lib, test, args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{test} {args:?}: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(needle),
            "{test} {args:?}: {}",
            text(&out)
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_staged_receiver_whose_sender_dies_fails_within_its_timeout() {
    if !rdma_ready("a_staged_receiver_whose_sender_dies_fails_within_its_timeout") {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return;
    };
    let server = Server::start_with_env(
        &[
            "send-bw",
            "-d",
            "rxe0",
            "-x",
            "1",
            "-p",
            "19140",
            "--timeout",
            "5",
        ],
        &[
            ("LD_LIBRARY_PATH", lib.as_os_str()),
            ("FAKE_CUDA_MODE", "hostmem".as_ref()),
        ],
    );
    common::kill_client_mid_run(
        "send-bw",
        19140,
        &["-s", "64K", "-n", "100000000", "--timeout", "5"],
    );
    let (ok, server_text, took) = server.finish(Duration::from_secs(15));
    assert!(
        !ok,
        "the staged server passed after its client died:\n{server_text}"
    );
    assert!(took <= Duration::from_secs(6), "the server took {took:?}");
    assert!(
        server_text.contains("closed the connection"),
        "{server_text}"
    );
}

/// A client on rxe1 against a host-memory server on rxe0 (port `port`), its GPU memory from the
/// fake driver, which logs every free to `log`; returns the client's output.
fn client_logging_frees(lib: &Path, log: &Path, port: u16, test: &str, args: &[&str]) -> Output {
    let server = Server::start(&common::server_args(test, port, 10, &[]));
    let out = common::bin()
        .args(common::client_args(test, port, 10, &[]))
        .args(args)
        .env("LD_LIBRARY_PATH", lib)
        .env("FAKE_CUDA_MODE", "hostmem")
        .env("FAKE_CUDA_FREE_LOG", log)
        .output()
        .unwrap();
    server.finish(Duration::from_secs(30));
    out
}

/// Every free in `log` (at least `at_least` of them) came when no page of the process was
/// pinned by a memory registration any more, and no queued copy still touched the memory.
fn assert_freed_after_deregistration(log: &Path, at_least: usize, what: &str) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let frees: Vec<&str> = text.lines().collect();
    assert!(
        frees.len() >= at_least,
        "{what}: expected {at_least} frees or more, the fake logged:\n{text}"
    );
    for free in &frees {
        assert!(
            free.contains(" pinned_kb=0 "),
            "{what}: memory freed while a registration still pinned pages: {free}\n{text}"
        );
        assert!(
            free.ends_with(" pending_copies=0"),
            "{what}: memory freed under a queued copy: {free}"
        );
    }
    std::fs::remove_file(log).ok();
}

#[test]
fn memory_is_freed_only_after_its_registration_is_gone() {
    if !rdma_ready("memory_is_freed_only_after_its_registration_is_gone") {
        return;
    }
    let Some(lib) = fake_libcuda() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return;
    };
    let dir = scratch("release-order");
    let log = dir.join("frees.log");

    // prepare() fails after registering: the bounce buffers (pinned, registered) and the GPU
    // payload are freed on the way out, each only after the region is deregistered.
    let args = [
        "--mem",
        "cuda-staged:0",
        "-s",
        "64",
        "-n",
        "100",
        "-I",
        "60000",
    ];
    let out = client_logging_frees(&lib, &log, 19160, "send-bw", &args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("inline limit"), "{}", text(&out));
    assert_freed_after_deregistration(&log, 2, "prepare failed after registration");

    // Runs that end normally, registering GPU memory itself (peermem) or bounce buffers.
    for (port, test, mem) in [
        (19161, "write-bw", "cuda-peermem:0"),
        (19162, "send-bw", "cuda-staged:0"),
    ] {
        let args = ["--mem", mem, "-s", "4K", "-n", "200", "--validate"];
        let out = client_logging_frees(&lib, &log, port, test, &args);
        assert!(out.status.success(), "{test} {mem}: {}", text(&out));
        assert!(
            common::header_value(&text(&out), "Relaxed order").is_some(),
            "the header says whether relaxed ordering is on: {}",
            text(&out)
        );
        let frees = if mem.starts_with("cuda-staged") { 2 } else { 1 };
        assert_freed_after_deregistration(&log, frees, &format!("{test} {mem}"));
    }
    std::fs::remove_dir_all(dir).ok();
}
