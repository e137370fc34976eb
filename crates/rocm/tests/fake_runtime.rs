//! The ROCm runtime behind the seam against a fake one (tests/fake_rocm/fake_rocm.c, compiled
//! here with the system C compiler into libamdhip64.so.6, with libhsa-runtime64.so.1 the same
//! file), loaded through the same dlopen as the real one: devices by index and bus id, memory,
//! copies both ways, the dma-buf export, pinned buffers and a copy queue whose copies complete
//! only when their marker is reached, and the one-line errors of a missing runtime, a runtime
//! without GPUs or without the export, and a failing call. The runtime is loaded once per
//! process, so each scenario runs in a child process of this test binary (the `scenario`
//! test, which does nothing unless told which to run), with LD_LIBRARY_PATH at the fake.
//! Skipped, saying why, where there is no C compiler.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use accel::{DeviceSelector, Runtime};

struct Fakes {
    /// The full fake.
    full: PathBuf,
    /// Without the HSA runtime's dma-buf export.
    no_dmabuf: PathBuf,
    /// A HIP runtime with one entry point.
    old: PathBuf,
    /// Nothing at all.
    empty: PathBuf,
    /// A runtime-only install's prefix: only the versioned names in its `lib/`, and no
    /// hipDriverGetVersion (which rdmabench never calls).
    installed: PathBuf,
}

fn compile(dir: &Path, src: &Path, extra: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join("libamdhip64.so.6"))
        .arg(src)
        .args(extra)
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    // No compiler skips these tests; a fake that does not compile is a broken test, never a
    // skip.
    assert!(
        out.status.success(),
        "the fake ROCm does not compile ({cc}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::os::unix::fs::symlink("libamdhip64.so.6", dir.join("libhsa-runtime64.so.1"))
        .map_err(|e| e.to_string())
}

fn fakes() -> Result<&'static Fakes, String> {
    static FAKES: OnceLock<Result<Fakes, String>> = OnceLock::new();
    FAKES
        .get_or_init(|| {
            let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("fake-rocm-{}", std::process::id()));
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_rocm/fake_rocm.c");
            let fakes = Fakes {
                full: base.join("full"),
                no_dmabuf: base.join("no-dmabuf"),
                old: base.join("old"),
                empty: base.join("empty"),
                installed: base.join("installed"),
            };
            compile(&fakes.full, &src, &[])?;
            compile(&fakes.no_dmabuf, &src, &["-DNO_DMABUF"])?;
            let one = base.join("one.c");
            std::fs::write(
                &one,
                "int hipGetDeviceCount(int *n) { *n = 1; return 0; }\n",
            )
            .map_err(|e| e.to_string())?;
            compile(&fakes.old, &one, &[])?;
            std::fs::create_dir_all(&fakes.empty).map_err(|e| e.to_string())?;
            compile(&fakes.installed.join("lib"), &src, &["-DNO_DRIVER_VERSION"])?;
            Ok(fakes)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs scenario `name` in a child process against the fake in `lib`, with `env`; its output.
fn child(name: &str, lib: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["scenario", "--exact", "--nocapture", "--test-threads", "1"])
        .env("ROCM_SCENARIO", name)
        .env("LD_LIBRARY_PATH", lib)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The fakes, or `None` (having said why the test is skipped).
fn ready(test: &str) -> Option<&'static Fakes> {
    match fakes() {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("{test}: skipped: cannot build the fake ROCm: {e}");
            None
        }
    }
}

/// Off the loader's path, ROCm is found where it installs itself ($ROCM_PATH/lib, /opt/rocm/lib)
/// by its versioned names alone (no unversioned development symlink), and a runtime without
/// hipDriverGetVersion, which nothing calls, loads.
#[test]
fn a_runtime_only_install_under_rocm_path_loads_without_unused_symbols() {
    let Some(f) = ready("a_runtime_only_install_under_rocm_path_loads") else {
        return;
    };
    let rocm_path = f.installed.to_str().unwrap();
    for name in ["devices", "dmabuf"] {
        let (ok, text) = child(name, &f.empty, &[("ROCM_PATH", rocm_path)]);
        assert!(
            ok && text.contains(&format!("SCENARIO {name} OK")),
            "{name}:\n{text}"
        );
    }
}

#[test]
fn devices_memory_dmabuf_and_copies_run_against_the_fake_runtime() {
    let Some(f) = ready("devices_memory_dmabuf_and_copies") else {
        return;
    };
    for name in ["devices", "memory", "queue"] {
        let (ok, text) = child(name, &f.full, &[]);
        assert!(ok, "{name}:\n{text}");
        assert!(
            text.contains(&format!("SCENARIO {name} OK")),
            "{name}:\n{text}"
        );
    }
}

/// A scenario, the fake it runs against, its environment, and what its error must say.
type Case<'a> = (&'a str, &'a Path, &'a [(&'a str, &'a str)], &'a str);

#[test]
fn a_missing_or_failing_runtime_is_one_line_naming_what_to_do() {
    let Some(f) = ready("a_missing_or_failing_runtime") else {
        return;
    };
    let cases: [Case; 6] = [
        (
            "probe",
            &f.empty,
            &[],
            "no ROCm runtime: libamdhip64.so (.7, .6 or .5) not found",
        ),
        (
            "probe",
            &f.old,
            &[],
            "lacks hipSetDevice: rdmabench needs ROCm 5.6",
        ),
        (
            "probe",
            &f.full,
            &[("FAKE_ROCM_MODE", "nodevice")],
            "hipError 100 (hipErrorNoDevice)",
        ),
        (
            "probe",
            &f.full,
            &[("FAKE_ROCM_MODE", "zero")],
            "sees no GPU (0 devices)",
        ),
        (
            "alloc",
            &f.full,
            &[("FAKE_ROCM_FAIL", "hipMalloc:2")],
            "hipMalloc failed: hipError 2 (hipErrorOutOfMemory)",
        ),
        (
            "dmabuf",
            &f.no_dmabuf,
            &[],
            "lacks hsa_amd_portable_export_dmabuf (ROCm < 5.6); use --mem rocm-peermem",
        ),
    ];
    for (name, lib, env, needle) in cases {
        if name == "probe" && lib == f.empty && accel::Runtime::library_present(&rocm::ROCM) {
            eprintln!("this machine has ROCm: the missing-runtime case is not checked");
            continue;
        }
        let (ok, text) = child(name, lib, env);
        assert!(ok, "{name} {env:?}:\n{text}");
        let line = text
            .lines()
            .find_map(|l| l.split_once("ERROR "))
            .map_or("", |(_, e)| e);
        assert!(line.contains(needle), "{name} {env:?}: {line:?}\n{text}");
    }
}

/// One scenario, in a child process (see the module doc); prints `SCENARIO NAME OK`, or
/// `ERROR message` for the error the scenario expects.
#[test]
fn scenario() {
    let Ok(name) = std::env::var("ROCM_SCENARIO") else {
        return;
    };
    let gpu0: DeviceSelector = "0".parse().unwrap();
    let report = |r: Result<(), accel::AccelError>| match r {
        Ok(()) => println!("SCENARIO {name} OK"),
        Err(e) => println!("ERROR {e}"),
    };
    match name.as_str() {
        "probe" => report(rocm::ROCM.probe()),
        "alloc" => report(rocm::ROCM.open(&gpu0).and_then(|g| g.alloc(100).map(drop))),
        "dmabuf" => report(rocm::ROCM.open(&gpu0).and_then(|g| g.require_dma_buf())),
        "devices" => devices(),
        "memory" => memory(),
        "queue" => queue(),
        other => panic!("no scenario {other}"),
    }
}

fn devices() {
    rocm::ROCM.probe().unwrap();
    let g = rocm::ROCM.open(&"0".parse().unwrap()).unwrap();
    assert_eq!((g.ordinal(), g.name()), (0, "Fake AMD GPU 0"));
    assert_eq!(g.pci_bus_id().to_string(), "0000:17:00.0");
    let g = rocm::ROCM
        .open(&"00000000:9A:00.0".parse().unwrap())
        .unwrap();
    assert_eq!(g.ordinal(), 1);
    assert_eq!(g.total_memory(), 192 << 30);
    let e = rocm::ROCM
        .open(&"5".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no ROCm device 5: 2 device(s) exist (indices 0 to 1)"),
        "{e}"
    );
    let e = rocm::ROCM
        .open(&"0000:33:00.0".parse().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no ROCm device at 0000:33:00.0: the GPUs are at 0000:17:00.0, 0000:9a:00.0"),
        "{e}"
    );
    assert_eq!(rocm::ROCM.peer_memory().name, "amdgpu PeerDirect");
    println!("SCENARIO devices OK");
}

fn memory() {
    let g = rocm::ROCM.open(&"0".parse().unwrap()).unwrap();
    g.require_gpu_direct_rdma().unwrap();
    g.require_dma_buf().unwrap();
    let buf = g.alloc(100).unwrap();
    assert_eq!(buf.len(), 100);
    let bytes: Vec<u8> = (0..100).collect();
    buf.copy_from_host(0, &bytes).unwrap();
    let mut back = vec![0u8; 60];
    buf.copy_nic_written_to_host(40, &mut back).unwrap();
    assert_eq!(back, bytes[40..]);
    let e = buf
        .copy_from_host(90, &bytes[..20])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("20 bytes at offset 90 do not fit a buffer of 100 bytes"),
        "{e}"
    );
    let dmabuf = buf.export_dmabuf(0, 100).unwrap();
    assert_eq!(
        (dmabuf.iova(), dmabuf.len(), dmabuf.offset()),
        (buf.device_ptr(), 100, 0)
    );
    let part = buf.export_dmabuf(40, 50).unwrap();
    assert_eq!((part.iova(), part.len()), (buf.device_ptr() + 40, 50));
    assert_eq!(
        part.offset(),
        40,
        "the fake places the range at its page offset"
    );
    let e = buf.export_dmabuf(90, 20).unwrap_err().to_string();
    assert!(e.contains("dma-buf export: 20 bytes at offset 90"), "{e}");
    drop(part);
    // The fake's export is a memfd: not a dma-buf, as an RDMA driver will find.
    assert_eq!(dmabuf.exporter().unwrap(), None);
    drop(buf);
    drop(dmabuf);
    println!("SCENARIO memory OK");
}

fn queue() {
    let g = rocm::ROCM.open(&"0".parse().unwrap()).unwrap();
    let buf = g.alloc(8192).unwrap();
    let bytes: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    buf.copy_from_host(0, &bytes).unwrap();
    let pinned = g.pinned(4096).unwrap();
    assert!(
        pinned.as_slice().iter().all(|&b| b == 0),
        "pinned memory starts zeroed"
    );
    let q = g.copy_queue(2).unwrap();
    // SAFETY: both buffers live until the queue is synchronised below; nothing else touches them.
    unsafe { q.device_to_host(&pinned, 0, buf.as_ref(), 4096, 4096) }.unwrap();
    q.mark(1).unwrap();
    assert!(
        !q.reached(1).unwrap(),
        "the fake completes a copy on the second look"
    );
    assert!(q.reached(1).unwrap());
    assert_eq!(pinned.as_slice(), &bytes[4096..]);
    // SAFETY: as above.
    let e = unsafe { q.device_to_host(&pinned, 1, buf.as_ref(), 0, 4096) }.unwrap_err();
    assert!(e.to_string().contains("pinned destination"), "{e}");
    assert!(q.mark(2).unwrap_err().to_string().contains("copy marker"));
    // SAFETY: as above.
    unsafe { q.host_to_device(buf.as_ref(), 0, &pinned, 0, 4096) }.unwrap();
    q.synchronize().unwrap();
    let mut back = vec![0u8; 4096];
    buf.copy_nic_written_to_host(0, &mut back).unwrap();
    assert_eq!(back, bytes[4096..]);
    println!("SCENARIO queue OK");
}
