//! The GPU memory modes end to end on soft-RoCE, against each runtime's fake: the cuda
//! crate's fake libcuda in its `hostmem` mode and the rocm crate's fake ROCm. Their "GPU
//! memory" is host memory, so peer-memory registration (`cuda-peermem`, `rocm-peermem`) is a
//! plain ibv_reg_mr and runs on rxe, while their dma-buf export (a memfd) is refused by rxe as
//! every non-dma-buf is. This exercises allocation, registration, --validate through copies,
//! and the header and record's GPU facts, without a GPU, through the same seam (`accel`) a
//! real runtime sits behind.
//!
//! The staged path (`--mem cuda-staged`, `rocm-staged`) runs for real too: the fakes' async
//! copies are only carried out once their event is seen complete, so an engine that posted
//! from a bounce buffer before its copy finished, or copied before the data landed, would
//! move stale bytes and fail `--validate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{fake_libcuda, fake_rocm, rdma_ready, scratch, text, Server, LOOPBACK};

/// A fake GPU runtime: the folder of its library, what it must be told, what it reports.
struct Fake {
    /// `--mem`'s prefix: "cuda", "rocm".
    runtime: &'static str,
    /// The folder for `LD_LIBRARY_PATH`.
    lib: PathBuf,
    /// Its environment.
    env: &'static [(&'static str, &'static str)],
    /// GPU 0's name.
    gpu0: &'static str,
    /// What the header calls its peer memory.
    peer_memory: &'static str,
    /// The variable that makes it log every free.
    free_log: &'static str,
}

impl Fake {
    fn cuda() -> Option<Fake> {
        Some(Fake {
            runtime: "cuda",
            lib: fake_libcuda()?,
            env: &[("FAKE_CUDA_MODE", "hostmem")],
            gpu0: "Fake GPU 0",
            peer_memory: "nvidia-peermem",
            free_log: "FAKE_CUDA_FREE_LOG",
        })
    }

    fn rocm() -> Option<Fake> {
        Some(Fake {
            runtime: "rocm",
            lib: fake_rocm()?,
            env: &[],
            gpu0: "Fake AMD GPU 0",
            peer_memory: "amdgpu PeerDirect",
            free_log: "FAKE_ROCM_FREE_LOG",
        })
    }

    /// The fake `make` builds, or `None`, having said why `test` is skipped.
    fn ready(test: &str, make: fn() -> Option<Fake>) -> Option<Fake> {
        if !rdma_ready(test) {
            return None;
        }
        let fake = make();
        if fake.is_none() {
            eprintln!("{test}: skipped: no C compiler for the fake runtime");
        }
        fake
    }

    /// The memory mode `suffix` of this runtime: `mode("-staged:0")` is "rocm-staged:0".
    fn mode(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.runtime)
    }

    /// `rdmabench` against this fake.
    fn bin(&self) -> Command {
        let mut cmd = common::bin();
        cmd.env("LD_LIBRARY_PATH", &self.lib)
            .envs(self.env.iter().copied());
        cmd
    }

    /// Its environment for a [`Server`].
    fn server_env(&self) -> Vec<(&'static str, &OsStr)> {
        let mut env = vec![("LD_LIBRARY_PATH", self.lib.as_os_str())];
        env.extend(self.env.iter().map(|(k, v)| (*k, OsStr::new(v))));
        env
    }

    /// `rdmabench TEST --loopback` on rxe0 (server) and rxe1 (client) with `args`.
    fn loopback(&self, test: &str, args: &[&str]) -> Output {
        let mut all = vec![test];
        all.extend(LOOPBACK);
        all.extend(["--timeout", "20"]);
        all.extend(args);
        self.bin().args(&all).output().unwrap()
    }
}

#[test]
fn gpu_memory_modes_run_end_to_end_on_fake_cuda() {
    if let Some(fake) = Fake::ready("gpu_memory_modes_run_end_to_end_on_fake_cuda", Fake::cuda) {
        end_to_end(&fake);
        cuda_flushes_unordered_nic_writes(&fake);
    }
}

#[test]
fn gpu_memory_modes_run_end_to_end_on_fake_rocm() {
    if let Some(fake) = Fake::ready("gpu_memory_modes_run_end_to_end_on_fake_rocm", Fake::rocm) {
        end_to_end(&fake);
    }
}

/// Peer-memory registration with every bandwidth verb, the GPU chosen where none was named,
/// and what cannot run said.
fn end_to_end(fake: &Fake) {
    let dir = scratch(&format!("fake-gpu-{}", fake.runtime));
    let json = dir.join("peermem.json");
    let small = ["-n", "100", "-t", "16"];
    let peermem = fake.mode("-peermem:0");

    // Registration by address (peer memory), every bandwidth verb, payload checked.
    for test in ["write-bw", "read-bw", "send-bw", "atomic-bw", "send-lat"] {
        let mut args = vec!["--mem", &peermem, "--validate", "--json"];
        args.push(json.to_str().unwrap());
        args.extend(small);
        let out = fake.loopback(test, &args);
        assert!(out.status.success(), "{test}: {}", text(&out));
        let want = format!(
            "{} at 0000:17:00.0, GPUDirect RDMA on ({})",
            fake.gpu0, fake.peer_memory
        );
        assert!(text(&out).contains(&want), "{want}: {}", text(&out));
        let record: serde_json::Value = common::read_record(&json);
        assert_eq!(record["params"]["mem"], peermem.as_str(), "{test}");
        assert_eq!(record["gpu"]["name"], fake.gpu0);
        assert_eq!(record["gpu"]["gdr"], true);
    }

    // No GPU named on one soft-RoCE device: GPU 0, since rxe has no PCIe tree, and said (the
    // client's record: rxe1).
    let unnamed = fake.mode("-peermem");
    let mut args = vec!["--mem", &unnamed, "--json", json.to_str().unwrap()];
    args.extend(small);
    let out = fake.loopback("write-bw", &args);
    assert!(out.status.success(), "{}", text(&out));
    let want = format!(
        "GPUDirect RDMA on ({}); GPU 0: no GPU on rxe1's PCIe tree",
        fake.peer_memory
    );
    assert!(text(&out).contains(&want), "{}", text(&out));
    let record: serde_json::Value = common::read_record(&json);
    assert_eq!(record["gpu"]["chosen"], "GPU 0: no GPU on rxe1's PCIe tree");

    // ROCm's dma-buf is refused on a kernel without CONFIG_DMABUF_MOVE_NOTIFY and
    // CONFIG_PCI_P2PDMA, as the guest's (Debian's, or unreadable) is: forced, to reach rxe.
    let dmabuf = match fake.runtime {
        "rocm" => {
            rocm_dmabuf_is_refused_without_force(fake);
            format!("{} --force-rocm-dmabuf", fake.mode(":0"))
        }
        _ => fake.mode(":0"),
    };
    let inline = format!("{peermem} -I 64");
    for (test, mem, code, needle) in [
        // dma-buf: rxe has no dma-buf support, and says what to use instead (this machine
        // lacks what the mode needs: the run fails).
        (
            "write-bw",
            dmabuf.as_str(),
            1,
            "cannot register this memory as a dma-buf",
        ),
        // write-lat cannot poll GPU memory: a combination that cannot run (usage).
        ("write-lat", unnamed.as_str(), 2, "cannot read GPU memory"),
        // Inline data would be a CPU copy out of GPU memory.
        ("send-bw", inline.as_str(), 2, "inline data"),
    ] {
        let mut args = vec!["--mem"];
        args.extend(mem.split(' '));
        let out = fake.loopback(test, &args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{test} {mem}: {}",
            text(&out)
        );
        assert!(text(&out).contains(needle), "{test} {mem}: {}", text(&out));
    }
    let mut args = vec!["--mem"];
    args.extend(dmabuf.split(' '));
    let out = fake.loopback("write-bw", &args);
    let (peer, staged) = (fake.mode("-peermem"), fake.mode("-staged"));
    assert!(
        text(&out).contains(&peer) && text(&out).contains(&staged),
        "the refusal names {peer} and {staged}: {}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `--mem rocm` without `--force-rocm-dmabuf` is refused in this guest, whose kernel
/// configuration lacks (or does not show) what ROCm's dma-buf needs, before any registration.
fn rocm_dmabuf_is_refused_without_force(fake: &Fake) {
    let kernel = rdmabench::kconfig::RocmDmabufKernel::read(&topo::Sysfs::system());
    if kernel.ready() {
        eprintln!("not checked: this kernel has CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA");
        return;
    }
    let out = fake.loopback("write-bw", &["--mem", &fake.mode(":0")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("ROCm dma-buf refused"),
        "{}",
        text(&out)
    );
}

/// CUDA only: a GPU whose NIC writes are not ordered (before Hopper) has them flushed before
/// --validate copies the received bytes out; and GPU 1 of the fake, without dma-buf, is
/// refused before anything is allocated.
fn cuda_flushes_unordered_nic_writes(fake: &Fake) {
    let dir = scratch("fake-gpu-flush");
    let flushes = dir.join("flushes.log");
    let mut args = vec!["write-bw"];
    args.extend(LOOPBACK);
    args.extend(["--timeout", "20", "--mem", "cuda-peermem:0", "--validate"]);
    args.extend(["-n", "100", "-t", "16"]);
    let out = fake
        .bin()
        .args(&args)
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
    let out = fake.loopback("write-bw", &["--mem", "cuda:1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("dma-buf"), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_staged_path_moves_every_byte_through_bounce_buffers_on_fake_cuda() {
    let test = "the_staged_path_moves_every_byte_through_bounce_buffers_on_fake_cuda";
    if let Some(fake) = Fake::ready(test, Fake::cuda) {
        staged_path(&fake);
    }
}

#[test]
fn the_staged_path_moves_every_byte_through_bounce_buffers_on_fake_rocm() {
    let test = "the_staged_path_moves_every_byte_through_bounce_buffers_on_fake_rocm";
    if let Some(fake) = Fake::ready(test, Fake::rocm) {
        staged_path(&fake);
    }
}

/// Every staged shape of every test, payload checked, and what cannot be staged refused.
fn staged_path(fake: &Fake) {
    let dir = scratch(&format!("staged-{}", fake.runtime));
    let json = dir.join("staged.json");
    let staged = fake.mode("-staged:0");
    let small = ["-s", "64", "-n", "300", "--staging-chunk", "4K"];
    // 10 KiB through 4 KiB buffers: split in 4K + 4K + 2K (a SEND gets a 12 KiB buffer).
    let large = ["-s", "10K", "-n", "40", "-q", "2", "--staging-chunk", "4K"];

    // send-bw staged at both ends: the client copies out and SENDs, the server receives into
    // bounce buffers and copies in; -r 4 makes the receive queue the limit.
    for (shape, extra) in [
        (&small[..], &["--staging-depth", "2", "-I", "64"][..]),
        (&large[..], &["-r", "4"][..]),
    ] {
        let mut args = vec!["--mem", &staged, "--validate", "--json"];
        args.push(json.to_str().unwrap());
        args.extend(shape);
        args.extend(extra);
        let out = fake.loopback("send-bw", &args);
        assert!(out.status.success(), "send-bw {shape:?}: {}", text(&out));
        assert!(
            text(&out).contains("GPUDirect RDMA off (staged through host memory)")
                && text(&out).contains("pinned bounce buffers per QP"),
            "{}",
            text(&out)
        );
    }
    let record: serde_json::Value = common::read_record(&json);
    assert_eq!(record["params"]["mem"], staged.as_str());
    assert_eq!(record["gpu"]["gdr"], false);
    assert_eq!(
        record["gpu"]["staging"]["chunk"], 12288,
        "a SEND is never split"
    );
    assert_eq!(record["gpu"]["staging"]["depth"], 4);
    assert_eq!(record["results"][0]["iterations"], 80);

    // write-bw and read-bw staged at both ends (WRITEs into the server's bounce buffers with
    // credits back; READs of what the server announced ready, with credits back), then with a
    // staged client against a host server.
    for test in ["write-bw", "read-bw"] {
        for mem in [
            &["--mem", &staged][..],
            &["--mem", "host", "--peer-mem", &staged][..],
        ] {
            for shape in [&small[..], &large[..]] {
                let mut args = mem.to_vec();
                args.push("--validate");
                args.extend(shape);
                let out = fake.loopback(test, &args);
                assert!(
                    out.status.success(),
                    "{test} {mem:?} {shape:?}: {}",
                    text(&out)
                );
            }
        }
    }
    // Latency, staged: every message is copied out of and into the GPU inside the round trip.
    for (test, mem) in [
        ("send-lat", &["--mem", &staged][..]),
        ("write-lat", &["--mem", &staged][..]),
        ("read-lat", &["--mem", "host", "--peer-mem", &staged][..]),
    ] {
        for size in ["64", "10K"] {
            let mut args = vec!["-s", size, "-n", "100", "--validate"];
            args.extend(mem);
            let out = fake.loopback(test, &args);
            assert!(out.status.success(), "{test} {size}: {}", text(&out));
        }
    }
    staged_refusals(fake, &staged);
    std::fs::remove_dir_all(dir).ok();
}

/// What cannot be staged says why.
fn staged_refusals(fake: &Fake, staged: &str) {
    for (test, args, needle) in [
        (
            "read-bw",
            &["--mem", staged, "--peer-mem", "host"][..],
            "read from it",
        ),
        ("read-lat", &["--mem", staged][..], "passive source"),
        ("atomic-lat", &["--mem", staged][..], "no payload"),
        ("send-bw", &["--mem", staged, "-D", "1"][..], "needs -n"),
        ("write-bw", &["--mem", staged, "-c", "UC"][..], "needs RC"),
        (
            "write-bw",
            &["--mem", staged, "--peer-mem", "host"][..],
            "same bounce buffers",
        ),
        (
            "atomic-bw",
            &["--mem", "host", "--peer-mem", staged][..],
            "no payload",
        ),
    ] {
        let out = fake.loopback(test, args);
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
}

#[test]
fn a_staged_receiver_whose_sender_dies_fails_within_its_timeout_on_fake_cuda() {
    let test = "a_staged_receiver_whose_sender_dies_fails_within_its_timeout_on_fake_cuda";
    if let Some(fake) = Fake::ready(test, Fake::cuda) {
        staged_receiver_outlives_no_sender(&fake, 19140);
    }
}

#[test]
fn a_staged_receiver_whose_sender_dies_fails_within_its_timeout_on_fake_rocm() {
    let test = "a_staged_receiver_whose_sender_dies_fails_within_its_timeout_on_fake_rocm";
    if let Some(fake) = Fake::ready(test, Fake::rocm) {
        staged_receiver_outlives_no_sender(&fake, 19141);
    }
}

/// A staged send-bw server on `port` whose client is killed mid-run fails within --timeout.
fn staged_receiver_outlives_no_sender(fake: &Fake, port: u16) {
    let p = port.to_string();
    let staged = fake.mode("-staged");
    let server = Server::start_with_env(
        &[
            "send-bw",
            "-d",
            "rxe0",
            "-x",
            "1",
            "-p",
            &p,
            "--timeout",
            "5",
            "--mem",
            &staged,
        ],
        &fake.server_env(),
    );
    common::kill_client_mid_run(
        "send-bw",
        port,
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

/// A client on rxe1 against a host-memory server on rxe0 (port `port`), its GPU memory from
/// `fake`, which logs every free to `log`; returns the client's output.
fn client_logging_frees(fake: &Fake, log: &Path, port: u16, test: &str, args: &[&str]) -> Output {
    let server = Server::start(&common::server_args(test, port, 10, &[]));
    let out = fake
        .bin()
        .args(common::client_args(test, port, 10, &[]))
        .args(args)
        .env(fake.free_log, log)
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
fn memory_is_freed_only_after_its_registration_is_gone_on_fake_cuda() {
    let test = "memory_is_freed_only_after_its_registration_is_gone_on_fake_cuda";
    if let Some(fake) = Fake::ready(test, Fake::cuda) {
        release_order(&fake, 19160);
    }
}

#[test]
fn memory_is_freed_only_after_its_registration_is_gone_on_fake_rocm() {
    let test = "memory_is_freed_only_after_its_registration_is_gone_on_fake_rocm";
    if let Some(fake) = Fake::ready(test, Fake::rocm) {
        release_order(&fake, 19170);
    }
}

/// GPU and pinned memory are freed only after their registration is gone, from a failed
/// prepare and from runs that end normally; `port` and the two after it are used.
fn release_order(fake: &Fake, port: u16) {
    let dir = scratch(&format!("release-order-{}", fake.runtime));
    let log = dir.join("frees.log");
    let staged = fake.mode("-staged:0");

    // prepare() fails after registering: the bounce buffers (pinned, registered) and the GPU
    // payload are freed on the way out, each only after the region is deregistered.
    let args = ["--mem", &staged, "-s", "64", "-n", "100", "-I", "60000"];
    let out = client_logging_frees(fake, &log, port, "send-bw", &args);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("inline limit"), "{}", text(&out));
    assert_freed_after_deregistration(&log, 2, "prepare failed after registration");

    // Runs that end normally, registering GPU memory itself (peer memory) or bounce buffers.
    let peermem = fake.mode("-peermem:0");
    for (port, test, mem, frees) in [
        (port + 1, "write-bw", peermem.as_str(), 1),
        (port + 2, "send-bw", staged.as_str(), 2),
    ] {
        let args = ["--mem", mem, "-s", "4K", "-n", "200", "--validate"];
        let out = client_logging_frees(fake, &log, port, test, &args);
        assert!(out.status.success(), "{test} {mem}: {}", text(&out));
        assert!(
            common::header_value(&text(&out), "Relaxed order").is_some(),
            "the header says whether relaxed ordering is on: {}",
            text(&out)
        );
        assert_freed_after_deregistration(&log, frees, &format!("{test} {mem}"));
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Grace-based and Data Direct systems' dma-buf (perftest's `--use_cuda_pcie_mapping` and
/// `--use_data_direct`): the PCIe mapping is refused by a driver older than 12.8, naming both
/// versions, before anything is exported; 12.8's export asks for it (the fake logs the flag) and
/// rxe then refuses the dma-buf as it does `--mem cuda`'s; Data Direct is refused on rxe, naming
/// the device, before any GPU memory is exported. (perftest's spellings become these modes:
/// `perftest_names::rewrite`'s tests.)
#[test]
fn the_pcie_mapping_and_data_direct_are_checked_against_the_driver_and_the_nic() {
    let test = "the_pcie_mapping_and_data_direct_are_checked_against_the_driver_and_the_nic";
    let Some(fake) = Fake::ready(test, Fake::cuda) else {
        return;
    };
    let dir = scratch("fake-gpu-pcie-mapping");
    let log = dir.join("exports.log");
    let run = |args: &[&str], version: &str| {
        std::fs::remove_file(&log).ok();
        let mut all = vec!["write-bw"];
        all.extend(LOOPBACK);
        all.extend(["--timeout", "20"]);
        all.extend(args);
        let out = fake
            .bin()
            .args(&all)
            .env("FAKE_CUDA_DRIVER_VERSION", version)
            .env("FAKE_CUDA_EXPORT_LOG", &log)
            .output()
            .unwrap();
        let exports = std::fs::read_to_string(&log).unwrap_or_default();
        (out.status.code(), text(&out), exports)
    };
    let (code, said, exports) = run(&["--mem", "cuda-pcie:0"], "12040");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("the CUDA driver is 12.4") && said.contains("needs 12.8 or newer"),
        "{said}"
    );
    assert!(exports.is_empty(), "nothing exported: {exports}");
    eprintln!("{said}");
    let (code, said, exports) = run(&["--mem", "cuda-pcie:0"], "12080");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("cannot register this memory as a dma-buf"),
        "{said}"
    );
    assert!(
        !exports.is_empty() && exports.lines().all(|l| l == "EXPORT 1"),
        "exported mapped through PCIe: {exports:?}"
    );
    let (code, said, exports) = run(&["--mem", "cuda-data-direct:0"], "12080");
    eprintln!("{said}");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("Data Direct is not available on rxe"),
        "{said}"
    );
    assert!(exports.is_empty(), "nothing exported: {exports}");
    std::fs::remove_dir_all(dir).ok();
}
