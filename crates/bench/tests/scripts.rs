//! The helper scripts' output where no device is needed: a server that cannot start makes
//! `two-node.sh` show the server's own output (and nothing of the script's plumbing), and
//! `gdr-compare.sh` prints its header before what did not run, and `gpu-check.sh` on a machine
//! with neither an NVIDIA driver nor an RDMA device skips each check saying why and exits 3.
//! With or without devices: no machine has a device called nosuch0.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{scratch, text, write_executable};

/// Runs a script from scripts/ with stdout and stderr merged in the order they were written.
fn script(name: &str, args: &[&str]) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name);
    Command::new("bash")
        .arg("-c")
        .arg(r#"script=$1; shift; exec bash "$script" "$@" 2>&1"#)
        .arg("bash")
        .arg(path)
        .args(args)
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .output()
        .unwrap()
}

#[test]
fn two_node_shows_a_failed_servers_output_without_its_pid_line() {
    let dir = scratch("two-node-fails");
    let results = dir.join("results");
    let out = script(
        "two-node.sh",
        &[
            "--results",
            results.to_str().unwrap(),
            "local:nosuch0",
            "local:nosuch1",
            "-p",
            "19230",
            "--timeout",
            "5",
        ],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("  server: rdmabench: error:"), "{t}");
    assert!(t.contains("exited (status 1) before it listened"), "{t}");
    assert!(!t.contains("two-node: pid"), "{t}");
    assert!(!results.exists());
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gdr_compare_prints_its_header_before_what_did_not_run() {
    let dir = scratch("gdr-compare-order");
    let results = dir.join("records");
    let out = script(
        "gdr-compare.sh",
        &[
            "--results",
            results.to_str().unwrap(),
            "--modes",
            "host cuda",
            "local:nosuch0",
            "-s",
            "4K",
        ],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0].starts_with("gdr-compare: write-bw against local:nosuch0; records in"),
        "{t}"
    );
    assert!(
        lines[1].starts_with(
            "gdr-compare: host did not run: the local server on nosuch0 did not start: "
        ),
        "{t}"
    );
    assert_eq!(
        t.matches("rdmabench: error").count(),
        0,
        "one reason, said once: {t}"
    );
    assert!(
        lines[2].starts_with("gdr-compare: cuda did not run: "),
        "{t}"
    );
    assert_eq!(lines.last(), Some(&"gdr-compare: no mode ran"), "{t}");
    std::fs::remove_dir_all(dir).ok();
}

/// `check-records.sh` passes the stored records and names a record that breaks its schema:
/// the schemas hold the types to what a validator other than serde accepts.
#[test]
fn check_records_names_a_record_that_breaks_its_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let stored = script(
        "check-records.sh",
        &[root.join("results").to_str().unwrap()],
    );
    assert!(stored.status.success(), "{}", text(&stored));
    assert!(
        text(&stored).contains("rdmabench.cluster/1 record(s) valid"),
        "{}",
        text(&stored)
    );
    let dir = scratch("check-records");
    let good = root.join("results/baselines/soft-roce-emulated/write-bw.json");
    let record = std::fs::read_to_string(&good).unwrap();
    std::fs::write(dir.join("good.json"), &record).unwrap();
    let bad = record.replacen("\"iterations\": ", "\"iterations\": \"many\", \"x\": ", 1);
    std::fs::write(dir.join("bad.json"), bad).unwrap();
    let out = script("check-records.sh", &[dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("bad.json)===")
            && text(&out).contains("'many' is not of type 'integer'"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("good.json)"), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

/// `fw-regression.sh` with a baseline that is not there (`fw_old` for the saved `fw-old`), or
/// lacks a test of the suite, or with no baseline at all, refuses before anything runs: exit
/// 2 naming the baselines there, no test started, no report written. (The devices named do
/// not exist: a run would fail with exit 1.)
#[test]
fn fw_regression_refuses_a_missing_baseline_before_running_anything() {
    let dir = scratch("fw-regression-missing");
    let results = dir.join("results");
    let record = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../results/baselines/soft-roce-emulated/write-bw.json");
    for (name, tests) in [
        (
            "fw-old",
            &["write-bw", "read-bw", "send-bw", "write-lat", "send-lat"][..],
        ),
        ("partial", &["write-bw", "write-lat"][..]),
    ] {
        let folder = results.join("baselines").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for test in tests {
            std::fs::copy(&record, folder.join(format!("{test}.json"))).unwrap();
        }
    }
    let run = |args: &[&str]| {
        let mut all = vec!["--results", results.to_str().unwrap()];
        all.extend_from_slice(args);
        all.extend_from_slice(&["local:nosuch0", "local:nosuch1"]);
        script("fw-regression.sh", &all)
    };
    for (args, said) in [
        (&["--baseline", "fw_old"][..], "no baseline 'fw_old' in"),
        (
            &["--baseline", "partial"][..],
            "baseline 'partial' has no record of read-bw send-bw send-lat",
        ),
        (&[][..], "give --baseline NAME"),
    ] {
        let out = run(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(said), "{args:?}: {t}");
        assert!(
            said.contains("partial") || t.contains("fw-old, partial"),
            "{args:?}: {t}"
        );
        assert!(!t.contains("fw-regression: write-bw"), "{args:?}: {t}");
        assert!(!results.join("fw-regression").exists(), "{args:?}: {t}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gpu_check_on_a_machine_without_driver_or_nic_skips_each_check_saying_why_and_exits_3() {
    let test =
        "gpu_check_on_a_machine_without_driver_or_nic_skips_each_check_saying_why_and_exits_3";
    if Path::new("/proc/driver/nvidia").exists() || Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped {test}: this machine has an NVIDIA driver or an RDMA device");
        return;
    }
    let dir = scratch("gpu-check");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh");
    let out = Command::new("bash")
        .arg(path)
        .arg("run")
        // A gpu_check to find (the bundle is not built here); it never runs without a driver.
        .env("GPU_CHECK_BIN", "/bin/false")
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .env("OUT", &dir)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "nothing could be checked: unknown\n{said}"
    );
    let lines: Vec<&str> = said.lines().filter(|l| l.starts_with("SKIP ")).collect();
    assert_eq!(lines.len(), 4, "one SKIP per check:\n{said}");
    assert!(
        lines.iter().all(|l| l.contains(": no NVIDIA driver")),
        "{said}"
    );
    assert!(!said.contains("FAIL") && !said.contains("PASS"), "{said}");
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    assert_eq!(summary.lines().count(), 4, "{summary}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gpu_check_skips_the_dma_buf_loopback_where_the_driver_cannot_export() {
    let test = "gpu_check_skips_the_dma_buf_loopback_where_the_driver_cannot_export";
    if Path::new("/proc/driver/nvidia").exists() || Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped {test}: this machine has an NVIDIA driver or an RDMA device");
        return;
    }
    // A driver the script finds (a libcuda.so.1 on LD_LIBRARY_PATH), a gpu_check that passes with its dma-buf
    // checks skipped (NVIDIA's proprietary kernel modules), and an rdmabench whose loopback passes.
    let dir = scratch("gpu-check-no-dmabuf");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libcuda.so.1"), "").unwrap();
    let script = |name: &str, body: &str| {
        let path = dir.join(name);
        write_executable(&path, &format!("#!/bin/sh\n{body}\n"));
        path
    };
    let gpu_check = script(
        "gpu_check",
        "echo '  [SKIP] dma-buf attribute: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0'; exit 0",
    );
    let rdmabench = script("rdmabench", "echo '   1048576   2000   24.00'; exit 0");
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
        .arg("run")
        .env("GPU_CHECK_BIN", &gpu_check)
        .env("RDMABENCH_BIN", &rdmabench)
        .env("RDMA_DEV", "rxe0")
        .env("LD_LIBRARY_PATH", &lib)
        .env("OUT", dir.join("out"))
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let summary = std::fs::read_to_string(dir.join("out/summary.txt")).unwrap();
    let lines: Vec<&str> = summary.lines().collect();
    assert!(
        lines[0] == "PASS gpu_check" && lines[1].starts_with("PASS "),
        "{summary}"
    );
    assert!(
        lines[2].starts_with(
            "SKIP rdmabench write-bw --loopback --mem cuda: the driver cannot export GPU memory as a dma-buf"
        ),
        "{summary}"
    );
    assert!(lines[3].contains("software RDMA device"), "{summary}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn gpu_check_refuses_a_bundle_that_needs_a_newer_glibc_naming_both_versions() {
    let test = "gpu_check_refuses_a_bundle_that_needs_a_newer_glibc_naming_both_versions";
    if Path::new("/proc/driver/nvidia").exists() || Path::new("/sys/class/infiniband").exists() {
        eprintln!("skipped {test}: this machine has an NVIDIA driver or an RDMA device");
        return;
    }
    let dir = scratch("gpu-check-glibc");
    // A bundle: a gpu_check (never run without a driver) and the glibc floor its build found.
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let gpu_check = bundle.join("gpu_check");
    write_executable(&gpu_check, "#!/bin/sh\nexit 1\n");
    let run = |floor: &str| {
        std::fs::write(bundle.join("glibc-floor"), format!("{floor}\n")).unwrap();
        let out = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
            .arg("run")
            .env("GPU_CHECK_BIN", &gpu_check)
            .env("OUT", dir.join("out"))
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        (out.status.code(), text(&out))
    };
    let (code, said) = run("9.99");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.starts_with(
            "FAIL glibc: the bundle needs glibc 9.99 or newer and this machine has 2."
        ),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "nothing else runs:\n{said}");
    // An old enough floor is said, and the checks go on (here, each skipped: unknown).
    let (code, said) = run("2.2.5");
    assert_eq!(code, Some(3), "{said}");
    assert!(
        said.lines()
            .next()
            .is_some_and(|l| l.starts_with("glibc 2.")
                && l.ends_with(" here; the bundle needs 2.2.5 or newer")),
        "{said}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `gpu-check.sh build` on a fresh machine: where a registry answers it fetches what Cargo.lock
/// names and builds online (--locked, not --offline); where none does it says so and builds
/// --offline; an offline build that fails says what to fetch where. Either way the bundle holds
/// the two binaries and the script. Run with a stand-in cargo that logs its arguments.
#[test]
fn gpu_check_build_fetches_where_a_registry_answers_and_builds_offline_only_where_not() {
    let dir = scratch("gpu-check-build");
    let log = dir.join("cargo.log");
    let cargo = dir.join("cargo");
    // fetch: exit $FAKE_FETCH; build: exit $FAKE_BUILD after making the two binaries.
    let stand_in = r#"#!/bin/bash
echo "$*" >> "$FAKE_LOG"
case $1 in
  fetch) exit "${FAKE_FETCH:-0}" ;;
  build) mkdir -p "$CARGO_TARGET_DIR/release/examples"
         printf '#!/bin/sh\n' > "$CARGO_TARGET_DIR/release/rdmabench"
         printf '#!/bin/sh\n' > "$CARGO_TARGET_DIR/release/examples/gpu_check"
         exit "${FAKE_BUILD:-0}" ;;
esac
"#;
    write_executable(&cargo, stand_in);
    let build = |fetch: &str, build: &str| {
        std::fs::write(&log, "").unwrap();
        let bundle = dir.join(format!("bundle-{fetch}-{build}"));
        let out = Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
            .arg("build")
            .arg(&bundle)
            .env("CARGO", &cargo)
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env("FAKE_LOG", &log)
            .env("FAKE_FETCH", fetch)
            .env("FAKE_BUILD", build)
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&log).unwrap();
        (out.status.code(), text(&out), calls, bundle)
    };
    // A registry answers: fetched, then built online.
    let (code, said, calls, bundle) = build("0", "0");
    assert_eq!(code, Some(0), "{said}");
    let calls: Vec<&str> = calls.lines().collect();
    assert_eq!(calls[0], "fetch --locked", "{calls:?}");
    assert!(
        calls[1].starts_with("build --release --locked -p rdmabench"),
        "{calls:?}"
    );
    for file in ["rdmabench", "gpu_check", "gpu-check.sh"] {
        assert!(bundle.join(file).is_file(), "{file} in the bundle: {said}");
    }
    // None answers: said, and built offline from what is here.
    let (code, said, calls, _) = build("1", "0");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("no crate registry reachable"), "{said}");
    assert!(
        calls
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("build --release --offline --locked")),
        "{calls}"
    );
    // Offline, and a crate missing: what to do, exit 1.
    let (code, said, _, _) = build("1", "101");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("run 'cargo fetch --locked' where a registry is reachable"),
        "{said}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `gpu-check.sh run` on a machine with a driver and no RDMA device tries to bring up a
/// soft-RoCE device for the loopback checks; where it cannot, each loopback SKIPs saying why
/// (not root, no rdma tool, no rdma_rxe module), and nothing is left behind. Run with a PATH of
/// this machine's tools and stand-ins for `id`, `modprobe`, `ip` and `rdma` (the last two
/// record any call: none may come, since nothing can be brought up).
#[test]
fn gpu_check_without_an_rdma_device_says_why_no_soft_roce_device_came_up() {
    let test = "gpu_check_without_an_rdma_device_says_why_no_soft_roce_device_came_up";
    if Path::new("/proc/driver/nvidia").exists()
        || Path::new("/sys/class/infiniband").exists()
        || Path::new("/sys/module/rdma_rxe").exists()
    {
        eprintln!("skipped {test}: this machine has an NVIDIA driver, an RDMA device or rdma_rxe");
        return;
    }
    let dir = scratch("gpu-check-soft-roce");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libcuda.so.1"), "").unwrap();
    let exe = |path: &Path, body: &str| write_executable(path, &format!("#!/bin/sh\n{body}\n"));
    let gpu_check = dir.join("gpu_check");
    exe(&gpu_check, "exit 0");
    let calls = dir.join("calls");
    let run = |uid: &str, tools: &[&str]| {
        let bin = dir.join(format!("bin-{uid}-{}", tools.len()));
        std::fs::create_dir_all(&bin).unwrap();
        for tool in [
            "dirname", "mkdir", "uname", "cat", "ls", "grep", "timeout", "tee", "head", "tail",
            "sed", "sort", "getconf", "awk", "seq", "tr", "cut",
        ] {
            if let Some(path) = which(tool) {
                std::os::unix::fs::symlink(path, bin.join(tool)).ok();
            }
        }
        exe(&bin.join("id"), &format!("echo {uid}"));
        let modprobe = "echo \"modprobe: FATAL: Module rdma_rxe not found in directory /lib/modules/x\" >&2; exit 1";
        for tool in tools {
            let body = if *tool == "modprobe" {
                modprobe.to_string()
            } else {
                format!("echo \"{tool} $*\" >> '{}'; exit 1", calls.display())
            };
            exe(&bin.join(tool), &body);
        }
        let out = Command::new("/bin/bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gpu-check.sh"))
            .arg("run")
            .env("PATH", &bin)
            .env("GPU_CHECK_BIN", &gpu_check)
            .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
            .env("LD_LIBRARY_PATH", &lib)
            .env("OUT", dir.join("out"))
            .env_remove("RDMA_DEV")
            .env_remove("GPU_CHECK_SOFT_ROCE")
            .output()
            .unwrap();
        let summary = std::fs::read_to_string(dir.join("out/summary.txt")).unwrap_or_default();
        (out.status.code(), text(&out), summary)
    };
    let all = ["rdma", "ip", "modprobe"];
    for (uid, tools, why) in [
        (
            "1000",
            &all[..],
            "not root (rdma_rxe and a veth pair need root)",
        ),
        (
            "0",
            &["ip", "modprobe"][..],
            "no iproute2 rdma tool (install iproute2)",
        ),
        ("0", &all[..], "no rdma_rxe module in this kernel ("),
    ] {
        let (code, said, summary) = run(uid, tools);
        // gpu_check passed: the run passed what it could check.
        assert_eq!(code, Some(0), "{said}");
        let lines: Vec<&str> = summary.lines().collect();
        assert_eq!(lines.len(), 4, "{summary}");
        assert_eq!(lines[0], "PASS gpu_check", "{summary}");
        let prefix = "no RDMA device (/sys/class/infiniband is empty or absent), and no soft-RoCE \
                      device could be brought up: ";
        for (line, mode) in lines[1..]
            .iter()
            .zip(["cuda-staged", "cuda", "cuda-peermem"])
        {
            let skip = format!("SKIP rdmabench write-bw --loopback --mem {mode}: {prefix}{why}");
            assert!(line.starts_with(&skip), "{line}\nwanted {skip}");
        }
        if why.starts_with("no rdma_rxe") {
            assert!(
                lines[1].contains("modprobe rdma_rxe: modprobe: FATAL: Module rdma_rxe not found"),
                "{summary}"
            );
        }
        assert!(
            !calls.exists(),
            "nothing brought up, nothing to remove: {said}"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Where `tool` is on this machine's PATH.
fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|path| path.is_file())
    })
}
