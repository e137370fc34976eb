//! On a machine without the NVIDIA driver (no libcuda.so.1), every entry point returns the clean
//! `CudaError::NoDriver` — never a panic from cudarc's loader — and the GPU check program exits 1 with one line.
//! Where a driver IS present these tests print that they were skipped, and why.

use std::process::Command;

use cuda::{CudaError, Device, DeviceSelector, PciBusId};

mod common;
use common::gpu_check_binary;

/// `true` (after printing why) when a driver is present, so the no-driver paths cannot be exercised here.
fn skip_if_driver_present(test: &str) -> bool {
    if cuda::driver_library_present() {
        eprintln!(
            "{test}: skipped: a CUDA driver library (libcuda.so.1) is present on this machine, so the no-driver \
             error paths cannot be exercised; the GPU check (scripts/gpu-check.sh) covers this machine instead"
        );
        return true;
    }
    false
}

fn assert_no_driver<T: std::fmt::Debug>(what: &str, result: Result<T, CudaError>) {
    match result {
        Err(CudaError::NoDriver) => {}
        other => panic!("{what}: expected Err(NoDriver), got {other:?}"),
    }
}

#[test]
fn every_entry_point_returns_no_driver() {
    if skip_if_driver_present("every_entry_point_returns_no_driver") {
        return;
    }
    assert!(!cuda::driver_library_present());
    assert_no_driver("probe", cuda::probe());
    assert_no_driver("probe (cached, second call)", cuda::probe());
    assert_no_driver("device_count", cuda::device_count());
    assert_no_driver("list_devices", cuda::list_devices());
    assert_no_driver("Device::open_index(0)", Device::open_index(0));
    assert_no_driver("Device::open_index(7)", Device::open_index(7));
    let bus: PciBusId = "0000:17:00.0".parse().unwrap();
    assert_no_driver("Device::open_bus_id", Device::open_bus_id(&bus));
    for sel in ["0", "1", "00000000:17:00.0", "17:00.0"] {
        let selector: DeviceSelector = sel.parse().unwrap();
        assert_no_driver(sel, Device::open(&selector));
    }
    // Everything else (buffers, pinned memory, streams, events, dma-buf export) needs a `Device`, which cannot
    // be had without a driver: the type system closes those paths.
}

#[test]
fn entry_points_are_safe_from_many_threads_at_once() {
    if skip_if_driver_present("entry_points_are_safe_from_many_threads_at_once") {
        return;
    }
    let handles: Vec<_> = (0..8)
        .map(|i| std::thread::spawn(move || (cuda::probe().err(), Device::open_index(i).err())))
        .collect();
    for h in handles {
        let (a, b) = h.join().expect("no panic in any thread");
        assert_eq!(a, Some(CudaError::NoDriver));
        assert!(matches!(b, Some(CudaError::NoDriver)));
    }
}

#[test]
fn the_message_names_the_missing_piece_and_what_to_try() {
    let msg = CudaError::NoDriver.to_string();
    assert!(
        msg.starts_with("no CUDA driver: libcuda.so.1 not found"),
        "{msg}"
    );
    assert!(msg.contains("install the NVIDIA driver"), "{msg}");
    assert!(msg.contains("LD_LIBRARY_PATH"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn gpu_check_exits_1_with_one_line() {
    if skip_if_driver_present("gpu_check_exits_1_with_one_line") {
        return;
    }
    let Some(bin) = gpu_check_binary() else {
        eprintln!(
            "gpu_check_exits_1_with_one_line: skipped: the gpu_check example is not built (plain `cargo test -p \
             rdmabench-cuda` builds it; `--test no_driver` alone does not)"
        );
        return;
    };
    let out = Command::new(&bin).output().expect("run gpu_check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "exit status; stderr: {stderr}");
    assert!(stdout.is_empty(), "nothing on stdout: {stdout}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with("gpu_check: no CUDA driver: libcuda.so.1 not found"),
        "{}",
        lines[0]
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A bad device argument is a usage error (2), also without a panic.
    let out = Command::new(&bin)
        .arg("cuda:x")
        .output()
        .expect("run gpu_check");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid GPU"));
}
