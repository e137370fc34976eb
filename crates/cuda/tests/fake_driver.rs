//! The probe and device code against a fake `libcuda.so` (tests/fake_libcuda/fake_libcuda.c, compiled here with
//! the system C compiler), loaded through the same dlopen as the real one: a driver too old for the entry points
//! used, the toolkit's stub library, a driver that sees no GPU, and device selection by index and by bus id
//! (both spellings) — each a clean one-line error from the gpu_check program, never a panic; and gpu_check's
//! verdicts on host memory: dma-buf checks skipped where the driver cannot export, the GPU's link read under load
//! and judged against what both its ends can do. Each scenario runs
//! in its own process (the driver is probed once per process), with LD_LIBRARY_PATH pointing at the fake.
//! Skipped, saying why, where there is no C compiler or the example binary was not built.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

mod common;
use common::gpu_check_binary;

struct Fakes {
    /// Holds a libcuda.so with every entry point the crate calls.
    full: PathBuf,
    /// Holds a libcuda.so that exports cuInit only.
    old: PathBuf,
    /// Holds a libcuda.so without the optional entry points.
    required_only: PathBuf,
}

fn compile(dir: &Path, extra: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_libcuda/fake_libcuda.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join("libcuda.so"))
        .arg(&src)
        .args(extra)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    // No compiler skips these tests; a fake that does not compile is a broken test, never a
    // skip.
    assert!(
        out.status.success(),
        "the fake libcuda does not compile ({cc}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn fakes() -> Result<&'static Fakes, String> {
    static FAKES: OnceLock<Result<Fakes, String>> = OnceLock::new();
    FAKES
        .get_or_init(|| {
            // Under target/ (cargo clean removes it); per process, so concurrent runs do not race.
            let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fake-libcuda-{}", std::process::id()));
            let fakes = Fakes {
                full: base.join("full"),
                old: base.join("old"),
                required_only: base.join("required-only"),
            };
            compile(&fakes.full, &[])?;
            compile(&fakes.old, &["-DONLY_INIT"])?;
            compile(&fakes.required_only, &["-DNO_OPTIONAL"])?;
            Ok(fakes)
        })
        .as_ref()
        .map_err(Clone::clone)
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs gpu_check against the fake in `lib_dir`; `None` (after printing why) when the test cannot run here.
fn run(test: &str, which: fn(&Fakes) -> &Path, mode: &str, args: &[&str]) -> Option<Run> {
    run_with_env(test, which, mode, args, &[])
}

/// [`run`] with the fake's knobs in `env` (FAKE_CUDA_FAIL, FAKE_CUDA_MISALIGN).
fn run_with_env(
    test: &str,
    which: fn(&Fakes) -> &Path,
    mode: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<Run> {
    let fakes = match fakes() {
        Ok(f) => f,
        Err(why) => {
            eprintln!("{test}: skipped: cannot build the fake libcuda.so ({why})");
            return None;
        }
    };
    let Some(bin) = gpu_check_binary() else {
        eprintln!("{test}: skipped: the gpu_check example is not built (plain `cargo test -p rdmabench-cuda` builds it)");
        return None;
    };
    let out = Command::new(bin)
        .args(args)
        .env("LD_LIBRARY_PATH", which(fakes))
        .env("FAKE_CUDA_MODE", mode)
        .envs(env.iter().copied())
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .unwrap_or_else(|e| panic!("cannot run gpu_check: {e}"));
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        !run.stderr.contains("panicked"),
        "{test}: panic: {}",
        run.stderr
    );
    Some(run)
}

fn full(f: &Fakes) -> &Path {
    &f.full
}

fn old(f: &Fakes) -> &Path {
    &f.old
}

fn required_only(f: &Fakes) -> &Path {
    &f.required_only
}

/// The one stderr line, after checking there is exactly one and the exit status.
fn one_error_line(run: &Run, code: i32) -> String {
    assert_eq!(
        run.code,
        Some(code),
        "stdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {}", run.stderr);
    lines[0].to_string()
}

#[test]
fn driver_without_the_needed_entry_points_is_too_old() {
    let Some(r) = run(
        "driver_without_the_needed_entry_points_is_too_old",
        old,
        "ok",
        &[],
    ) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.starts_with("gpu_check: the CUDA driver (libcuda.so.1) lacks cuDriverGetVersion"),
        "{line}"
    );
    assert!(line.contains("update the driver"), "{line}");
    assert!(r.stdout.is_empty());
}

#[test]
fn driver_that_sees_no_gpu() {
    let Some(r) = run("driver_that_sees_no_gpu", full, "nodevice", &[]) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.contains(
            "the CUDA driver is loaded but sees no GPU (cuInit returned CUDA_ERROR_NO_DEVICE)"
        ),
        "{line}"
    );
    assert!(line.contains("CUDA_VISIBLE_DEVICES"), "{line}");

    let Some(r) = run("driver_that_sees_no_gpu", full, "zero", &[]) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.contains("sees no GPU (cuDeviceGetCount reports 0 devices)"),
        "{line}"
    );
}

#[test]
fn toolkit_stub_library_is_named() {
    let Some(r) = run("toolkit_stub_library_is_named", full, "stub", &[]) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.contains("cuInit failed: CUDA_ERROR_STUB_LIBRARY (34)"),
        "{line}"
    );
    assert!(line.contains("the CUDA toolkit's stub"), "{line}");
}

#[test]
fn devices_are_listed_with_bus_ids_and_attributes() {
    let Some(r) = run(
        "devices_are_listed_with_bus_ids_and_attributes",
        full,
        "ok",
        &[],
    ) else {
        return;
    };
    assert!(
        r.stdout.contains("CUDA driver API 12.4 (12040), 2 GPU(s)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "GPU 0: Fake GPU 0 at 0000:17:00.0, 80.0 GiB, dma-buf yes, GPUDirect RDMA yes"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains(
            "GPU 1: Fake GPU 1 at 0000:9a:00.0, 80.0 GiB, dma-buf no, GPUDirect RDMA yes"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("using GPU 0 (Fake GPU 0, 0000:17:00.0)"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("[PASS] dma-buf attribute"),
        "{}",
        r.stdout
    );
    // The fake's cuMemAlloc fails: a driver error with its name and what to try, not a panic.
    let line = one_error_line(&r, 1);
    assert!(
        line.starts_with("gpu_check: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2); the GPU is out of memory"),
        "{line}"
    );
}

#[test]
fn device_by_bus_id_in_both_spellings() {
    for arg in ["00000000:9A:00.0", "0000:9a:00.0", "9a:00.0", "1"] {
        let Some(r) = run("device_by_bus_id_in_both_spellings", full, "ok", &[arg]) else {
            return;
        };
        assert!(
            r.stdout.contains("using GPU 1 (Fake GPU 1, 0000:9a:00.0)"),
            "{arg}: {}",
            r.stdout
        );
        assert!(
            r.stdout
                .contains("[SKIP] dma-buf attribute: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"),
            "{arg}: {}",
            r.stdout
        );
        one_error_line(&r, 1);
    }
}

#[test]
fn absent_devices_name_what_exists() {
    let Some(r) = run(
        "absent_devices_name_what_exists",
        full,
        "ok",
        &["0000:55:00.0"],
    ) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.contains(
            "no CUDA device at PCI bus id 0000:55:00.0: the GPUs are at 0000:17:00.0 (GPU 0), 0000:9a:00.0 (GPU 1)"
        ),
        "{line}"
    );

    let Some(r) = run("absent_devices_name_what_exists", full, "ok", &["5"]) else {
        return;
    };
    let line = one_error_line(&r, 1);
    assert!(
        line.contains("no CUDA device 5: 2 device(s) exist (indices 0 to 1)"),
        "{line}"
    );
}

#[test]
fn every_check_runs_on_host_memory_and_only_the_dma_buf_ones_fail() {
    // hostmem: "GPU memory" is host memory and async copies run only once their event is seen
    // complete, so the staged pipeline's copy half is checked for ordering, not just arithmetic.
    let Some(r) = run(
        "every_check_runs_on_host_memory_and_only_the_dma_buf_ones_fail",
        full,
        "hostmem",
        &[],
    ) else {
        return;
    };
    for needle in [
        "[PASS] planted corruption found",
        "[PASS] copy bandwidth measured",
        "[PASS] staged send: bytes through D2H bounce buffers intact",
        "[PASS] staged recv: bytes through H2D bounce buffers intact",
        "[PASS] SYNC_MEMOPS set on the allocation: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS reads back 1",
        "GPUDirect RDMA writes ordering: OWNER (100)",
        "GPUDirect RDMA flush-writes options: HOST (cuFlushGPUDirectRDMAWrites) (1)",
        "[PASS] buffer, pinned memory, stream and event across three threads",
        "[PASS] 1 B allocated: direct path, 65536 B",
        "[PASS] 65537 B allocated: direct path, 131072 B",
        "dma-buf export of 4097 B at +0",
        "RESULT: 8 check(s) failed",
    ] {
        assert!(r.stdout.contains(needle), "{needle}: {}", r.stdout);
    }
    // A memfd is not a dma-buf, and the check says so rather than trusting the driver: the three exports of
    // section 3 and one per odd size.
    let failed: Vec<&str> = r.stdout.lines().filter(|l| l.contains("[FAIL]")).collect();
    assert_eq!(failed.len(), 8, "{}", r.stdout);
    assert!(
        failed.iter().all(|l| l.contains("not a dma-buf")),
        "{failed:?}"
    );
    assert!(
        !r.stdout.contains("inf"),
        "every figure finite: {}",
        r.stdout
    );
    assert_eq!(r.code, Some(1));
}

#[test]
fn odd_sizes_take_the_padded_path_when_the_driver_misaligns() {
    // Every allocation 256 B past a 64 KiB boundary, as cuMemAlloc may hand out: each buffer is then made one
    // GPU page larger and starts at the next boundary inside it.
    let Some(r) = run_with_env(
        "odd_sizes_take_the_padded_path_when_the_driver_misaligns",
        full,
        "hostmem",
        &[],
        &[("FAKE_CUDA_MISALIGN", "1")],
    ) else {
        return;
    };
    for len in ["1 B", "4097 B", "65537 B", "196613 B", "2097153 B"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains(&format!("] {len} allocated")))
            .unwrap_or_else(|| panic!("no line for {len}: {}", r.stdout));
        assert!(
            line.contains("[PASS]")
                && line.contains("padded path")
                && line.contains("pattern intact"),
            "{line}"
        );
    }
    assert!(r.stdout.contains("[PASS] 64 KiB aligned"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("[PASS] staged recv: bytes through H2D bounce buffers intact"),
        "{}",
        r.stdout
    );
}

#[test]
fn result_codes_the_bindings_lack_are_reported_as_numbers() {
    // A driver newer than the bindings may return any code: read as an integer, named when known, else kept as
    // its number; never a panic, never an invalid enum.
    for (mode, fail, expect) in [
        (
            "ok",
            "cuMemAlloc_v2:12345",
            "gpu_check: cuMemAlloc_v2 failed: CUDA error 12345 (unknown to these bindings); a code newer",
        ),
        (
            "hostmem",
            "cuEventQuery:-7",
            "gpu_check: cuEventQuery failed: CUDA error -7 (unknown to these bindings)",
        ),
        (
            "hostmem",
            "cuStreamCreate:2",
            "gpu_check: cuStreamCreate failed: CUDA_ERROR_OUT_OF_MEMORY (2); the GPU is out of memory",
        ),
    ] {
        let Some(r) = run_with_env(
            "result_codes_the_bindings_lack_are_reported_as_numbers",
            full,
            mode,
            &[],
            &[("FAKE_CUDA_FAIL", fail)],
        ) else {
            return;
        };
        let line = one_error_line(&r, 1);
        assert!(line.starts_with(expect), "{fail}: {line}");
    }
}

/// A copy of `/sys` holding only the fake's GPU 0 (0000:17:00.0) with this PCIe link, below a root port capable
/// of `port` (no `max_link_*` files where `None`): `now`, `max` and `port` as (sysfs speed, width).
fn gpu_link_root(
    name: &str,
    now: (&str, u32),
    max: (&str, u32),
    port: Option<(&str, u32)>,
) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gpu-link-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let port_dir = root.join("sys/devices/pci0000:00/0000:00:01.0");
    let dir = port_dir.join("0000:17:00.0");
    std::fs::create_dir_all(&dir).unwrap();
    for (file, text) in [
        ("vendor", "0x10de".to_string()),
        ("class", "0x030200".to_string()),
        ("current_link_speed", now.0.to_string()),
        ("current_link_width", now.1.to_string()),
        ("max_link_speed", max.0.to_string()),
        ("max_link_width", max.1.to_string()),
    ] {
        std::fs::write(dir.join(file), format!("{text}\n")).unwrap();
    }
    std::fs::write(port_dir.join("class"), "0x060400\n").unwrap();
    if let Some((speed, width)) = port {
        std::fs::write(port_dir.join("max_link_speed"), format!("{speed}\n")).unwrap();
        std::fs::write(port_dir.join("max_link_width"), format!("{width}\n")).unwrap();
    }
    let devices = root.join("sys/bus/pci/devices");
    std::fs::create_dir_all(&devices).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:01.0/0000:17:00.0",
        devices.join("0000:17:00.0"),
    )
    .unwrap();
    root
}

/// gpu_check on hostmem with the sysfs copy `root`, its copies held to `copy_gbps` (unheld: ""); the run and its
/// line judging the copies against the GPU's link (`None` when the test cannot run here).
fn link_check(test: &str, root: &Path, copy_gbps: &str) -> Option<(Run, String)> {
    let env: &[(&str, &str)] = if copy_gbps.is_empty() {
        &[]
    } else {
        &[("FAKE_CUDA_COPY_GBPS", copy_gbps)]
    };
    link_check_with_env(test, root, env)
}

/// [`link_check`] with the fake's knobs in `env`.
fn link_check_with_env(test: &str, root: &Path, env: &[(&str, &str)]) -> Option<(Run, String)> {
    let r = run_with_env(
        test,
        full,
        "hostmem",
        &["--sysfs-root", root.to_str().unwrap()],
        env,
    )?;
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("copy bandwidth against the GPU's PCIe link"))
        .unwrap_or_else(|| panic!("no link check: {}", r.stdout))
        .to_string();
    Some((r, line))
}

#[test]
fn a_gpu_trained_down_to_gen4_x8_fails_its_copy_check_naming_the_link() {
    // A Gen5 x16 GPU (an H100's 52 GB/s of payload) whose link came up Gen4 x8, the most common real fault: its
    // copies, at most the 13 GB/s that link carries, reach a quarter of what the GPU is capable of.
    let test = "a_gpu_trained_down_to_gen4_x8_fails_its_copy_check_naming_the_link";
    let gen5x16 = ("32.0 GT/s PCIe", 16);
    let root = gpu_link_root("gen4x8", ("16.0 GT/s PCIe", 8), gen5x16, Some(gen5x16));
    let Some((r, line)) = link_check(test, &root, "13") else {
        return;
    };
    assert!(
        r.stdout.contains(
            "PCIe link under load (sysfs, read while copies run): Gen4 x8 (max Gen5 x16) MPS ?"
        ),
        "{}",
        r.stdout
    );
    assert!(line.contains("[FAIL]"), "{line}");
    assert!(
        line.contains("a Gen5 x16 link carries (MPS 256; 60% needed)")
            && line.contains("DOWNTRAINED: running Gen4 x8, capable of Gen5 x16"),
        "{line}"
    );
    assert_eq!(r.code, Some(1));
}

#[test]
fn copies_that_fill_the_gpus_link_pass_and_an_unknown_link_is_skipped_saying_why() {
    let test = "copies_that_fill_the_gpus_link_pass_and_an_unknown_link_is_skipped_saying_why";
    // A Gen1 x1 link (0.2 GB/s of payload) is filled by any copy: PASS, at its capability.
    let gen1x1 = ("2.5 GT/s PCIe", 1);
    let root = gpu_link_root("gen1x1", gen1x1, gen1x1, Some(gen1x1));
    let Some((_, line)) = link_check(test, &root, "") else {
        return;
    };
    assert!(
        line.contains("[PASS]") && line.ends_with("running at what both ends can do"),
        "{line}"
    );
    // A Gen5 x16 link (52 GB/s of payload) at its capability, its copies held below 20 GB/s (a GPU whose copy
    // engines or host memory are the bottleneck): the copies themselves fail, the link named.
    let gen5x16 = ("32.0 GT/s PCIe", 16);
    let root = gpu_link_root("gen5x16", gen5x16, gen5x16, Some(gen5x16));
    let Some((_, line)) = link_check(test, &root, "20") else {
        return;
    };
    assert!(
        line.contains("[FAIL]")
            && line.contains(
                "a Gen5 x16 link carries (MPS 256; 60% needed); running at what both ends can do"
            ),
        "{line}"
    );
    // No such function under the root: SKIP with the reason, not a FAIL.
    let empty = gpu_link_root("none", ("", 0), ("", 0), None);
    std::fs::remove_file(empty.join("sys/bus/pci/devices/0000:17:00.0")).unwrap();
    let Some((_, line)) = link_check(test, &empty, "") else {
        return;
    };
    assert!(
        line.starts_with(
            "  [SKIP] copy bandwidth against the GPU's PCIe link: the link is unknown"
        ),
        "{line}"
    );
    let bad = run(test, full, "hostmem", &["--sysfs-root", "/nonexistent"]).unwrap();
    assert_eq!(
        one_error_line(&bad, 2),
        "gpu_check: --sysfs-root /nonexistent: no sys/ directory there"
    );
}

#[test]
fn a_driver_that_cannot_export_dma_bufs_skips_those_checks_saying_why_and_passes() {
    // NVIDIA's proprietary kernel modules report DMA_BUF_SUPPORTED 0: peer memory and the staged path work, so
    // the attribute and every export SKIP (before: nine FAILs and exit 1). A link every copy fills, so that only
    // the dma-buf checks could fail.
    let test = "a_driver_that_cannot_export_dma_bufs_skips_those_checks_saying_why_and_passes";
    let gen1x1 = ("2.5 GT/s PCIe", 1);
    let root = gpu_link_root("no-dmabuf", gen1x1, gen1x1, Some(gen1x1));
    let Some((r, _)) = link_check_with_env(test, &root, &[("FAKE_CUDA_DMA_BUF", "0")]) else {
        return;
    };
    assert!(
        r.stdout.contains(
            "[SKIP] dma-buf attribute: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: this driver cannot export GPU \
             memory as a dma-buf (NVIDIA's proprietary kernel modules say so"
        ),
        "{}",
        r.stdout
    );
    let exports: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("dma-buf export of"))
        .collect();
    assert_eq!(exports.len(), 8, "{}", r.stdout);
    assert!(
        exports
            .iter()
            .all(|l| l.starts_with("  [SKIP] dma-buf export of")
                && l.ends_with(
                    "the driver cannot export dma-bufs (the dma-buf attribute, section 1)"
                )),
        "{exports:?}"
    );
    assert!(!r.stdout.contains("[FAIL]"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("RESULT: every check that could run passed (9 skipped, each saying why)"),
        "{}",
        r.stdout
    );
    assert_eq!(r.code, Some(0));
}

#[test]
fn the_gpus_link_is_read_under_load_not_at_idle() {
    // A Gen2 x1 GPU below a Gen2 x1 port idles at Gen1, as GPUs lower their link speed at idle, and runs Gen2
    // once the copies start (the fake rewrites current_link_speed when the first copy is queued). Read before
    // any load, it looked trained down and failed.
    let test = "the_gpus_link_is_read_under_load_not_at_idle";
    let gen2x1 = ("5.0 GT/s PCIe", 1);
    let root = gpu_link_root("idle", ("2.5 GT/s PCIe", 1), gen2x1, Some(gen2x1));
    let speed = root.join("sys/devices/pci0000:00/0000:00:01.0/0000:17:00.0/current_link_speed");
    let env = [
        ("FAKE_CUDA_LINK_FILE", speed.to_str().unwrap()),
        ("FAKE_CUDA_LINK_LOADED", "5.0 GT/s PCIe"),
    ];
    let Some((r, line)) = link_check_with_env(test, &root, &env) else {
        return;
    };
    assert!(
        r.stdout
            .contains("PCIe link at idle (sysfs, before any copy): Gen1 x1 (max Gen2 x1) MPS ?")
            && r.stdout.contains(
                "PCIe link under load (sysfs, read while copies run): Gen2 x1 (max Gen2 x1) MPS ?"
            ),
        "{}",
        r.stdout
    );
    assert!(
        line.contains("[PASS]")
            && line.contains("a Gen2 x1 link carries")
            && line.ends_with("running at what both ends can do"),
        "{line}"
    );
}

#[test]
fn the_gpus_link_is_judged_against_what_both_its_ends_can_do() {
    let test = "the_gpus_link_is_judged_against_what_both_its_ends_can_do";
    // A Gen2 GPU in a Gen1 slot at Gen1: full speed, the copies judged against Gen1 (any copy fills it).
    let (gen1x4, gen2x4) = (("2.5 GT/s PCIe", 4), ("5.0 GT/s PCIe", 4));
    let root = gpu_link_root("slot", gen1x4, gen2x4, Some(gen1x4));
    let Some((_, line)) = link_check(test, &root, "") else {
        return;
    };
    assert!(
        line.contains("[PASS]")
            && line.contains("a Gen1 x4 link carries")
            && line.ends_with("limited by the other end: Gen1 x4 is the most both ends can do"),
        "{line}"
    );
    // The port above unreadable: UNKNOWN, said, and the copies judged against the link as it runs.
    let root = gpu_link_root("unread", gen1x4, gen2x4, None);
    let Some((_, line)) = link_check(test, &root, "") else {
        return;
    };
    assert!(
        line.contains("[PASS]")
            && line.contains("a Gen1 x4 link carries")
            && line.ends_with(
                "UNKNOWN whether trained down: running Gen1 x4 of the function's Gen2 x4, the other end's \
                 capability cannot be read: judged against the link as it runs"
            ),
        "{line}"
    );
    // Below a Gen2 port at Gen1: trained down, a FAIL whatever the copies did.
    let root = gpu_link_root("down", gen1x4, gen2x4, Some(gen2x4));
    let Some((_, line)) = link_check(test, &root, "") else {
        return;
    };
    assert!(
        line.contains("[FAIL]")
            && line.ends_with("DOWNTRAINED: running Gen1 x4, capable of Gen2 x4"),
        "{line}"
    );
}

#[test]
fn a_driver_without_the_optional_entry_points_still_runs_the_memory_modes() {
    // The probe no longer fails for what only the GPU check uses: allocation, the pattern, dma-buf export and
    // pinned copies run; the SYNC_MEMOPS read-back fails alone, naming what is missing, and the copy timing ends
    // the check naming its entry point.
    let Some(r) = run(
        "a_driver_without_the_optional_entry_points_still_runs_the_memory_modes",
        required_only,
        "hostmem",
        &[],
    ) else {
        return;
    };
    for needle in [
        "using GPU 0",
        "[PASS] pattern written and read back",
        "[FAIL] SYNC_MEMOPS set on the allocation: the CUDA driver (libcuda.so.1) lacks cuPointerGetAttribute",
    ] {
        assert!(r.stdout.contains(needle), "{needle}: {}", r.stdout);
    }
    let line = one_error_line(&r, 1);
    assert!(
        line.starts_with("gpu_check: the CUDA driver (libcuda.so.1) lacks cuEventElapsedTime"),
        "{line}"
    );
}

#[test]
fn nic_writes_are_flushed_before_a_read_back_only_where_the_gpu_asks() {
    let log =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("flush-{}.log", std::process::id()));
    for (ordering, flushes, needle) in [
        ("100", 0, "not needed: the GPU orders them"),
        (
            "0",
            1,
            "cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER) called (writes ordering NONE)",
        ),
    ] {
        std::fs::write(&log, "").unwrap();
        let Some(r) = run_with_env(
            "nic_writes_are_flushed_before_a_read_back_only_where_the_gpu_asks",
            full,
            "hostmem",
            &[],
            &[
                ("FAKE_CUDA_WRITES_ORDERING", ordering),
                ("FAKE_CUDA_FLUSH_LOG", log.to_str().unwrap()),
            ],
        ) else {
            return;
        };
        assert!(
            r.stdout.contains(&format!(
                "[PASS] NIC writes flushed before a read-back where the GPU asks: {needle}"
            )),
            "{}",
            r.stdout
        );
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(logged.lines().count(), flushes, "{logged}");
        assert!(logged.lines().all(|l| l == "FLUSH 0 100"), "{logged}");
    }
    // A GPU that asks, on a driver that lacks the call: a clean failure naming it.
    let Some(r) = run_with_env(
        "nic_writes_are_flushed_before_a_read_back_only_where_the_gpu_asks",
        required_only,
        "hostmem",
        &[],
        &[("FAKE_CUDA_WRITES_ORDERING", "0")],
    ) else {
        return;
    };
    assert!(
        r.stdout.contains(
            "[FAIL] NIC writes flushed before a read-back where the GPU asks: the CUDA driver \
             (libcuda.so.1) lacks cuFlushGPUDirectRDMAWrites"
        ),
        "{}",
        r.stdout
    );
}

/// A GPU whose NIC writes are unordered but whose flush-writes options lack HOST cannot take
/// cuFlushGPUDirectRDMAWrites (the driver answers CUDA_ERROR_NOT_SUPPORTED, as the fake does): it
/// is not called, the read-back goes on unflushed, and the check says which options the GPU has.
#[test]
fn a_gpu_without_the_host_flush_option_is_not_asked_to_flush() {
    let test = "a_gpu_without_the_host_flush_option_is_not_asked_to_flush";
    let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("no-host-flush-{}.log", std::process::id()));
    for (options, named) in [
        ("0", "none (0)"),
        ("2", "MEMOPS (stream memory operations) (2)"),
    ] {
        std::fs::write(&log, "").unwrap();
        let env = [
            ("FAKE_CUDA_WRITES_ORDERING", "0"),
            ("FAKE_CUDA_FLUSH_OPTIONS", options),
            ("FAKE_CUDA_FLUSH_LOG", log.to_str().unwrap()),
        ];
        let Some(r) = run_with_env(test, full, "hostmem", &[], &env) else {
            return;
        };
        let want = format!(
            "[PASS] NIC writes flushed before a read-back where the GPU asks: not called: writes \
             ordering NONE, but the flush-writes options ({named}) lack HOST"
        );
        assert!(r.stdout.contains(&want), "{want}\n{}", r.stdout);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "never called");
    }
}
