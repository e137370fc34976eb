//! `rdmabench topo`, `ceiling` and `doctor` through the binary, against the sysfs fixture
//! trees of crates/topo/tests/fixtures (see their README.md for the machines they model),
//! and in the soft-RoCE guest against the live /sys. What they print on each fixture is
//! snapshot-tested (`tests/snapshots/topo_cli__*.snap`), run from the workspace root with
//! relative paths as the docs run them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{bin, doctor_check as check, text, transcript, workspace_root};
use serde_json::Value;

fn fixture(name: &str) -> String {
    format!(
        "{}/../topo/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The GPU behind mlx5_0's switch in the dgx-h100 tree.
const GPU_0: &str = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0";

#[test]
fn accelerators_are_found_by_vendor_and_class_and_each_runtime_takes_its_own() {
    // The dgx-h100 tree with the GPU behind mlx5_0's switch made an AMD MI300X (a display
    // controller of vendor 0x1002): topo names it, a CUDA run on mlx5_0 takes the NVIDIA GPU
    // across the sockets rather than it, and a ROCm run takes it.
    let dir = common::scratch("topo-amd");
    let root = common::changed_dgx(
        &dir,
        &format!(
            "echo 0x1002 > {GPU_0}/vendor && echo 0x74a1 > {GPU_0}/device && \
             echo 0x038000 > {GPU_0}/class"
        ),
    );
    let root = root.to_str().unwrap();
    let out = run(&["topo", "--sysfs-root", root]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let tree = stdout(&out);
    assert!(
        tree.contains("0000:19:00.0 GPU (AMD) 1002:74a1  Gen5 x16")
            && tree.contains("0000:9e:00.0 GPU 10de:2330"),
        "{tree}"
    );
    let out = run(&["topo", "--sysfs-root", root, "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = doc["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["amd", "nvidia"]);
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:19:00.0"), "PIX");
    let tree = topo::Topology::scan(&topo::Sysfs::new(root)).unwrap();
    let cuda = rdmabench::memory::MemMode::parse("cuda").unwrap();
    let (mem, why) = rdmabench::memory::nearest_gpu(&cuda, "mlx5_0", Some(&tree));
    assert_eq!(mem.name(), "cuda:0000:9e:00.0");
    assert_eq!(why, "the GPU nearest mlx5_0 (SYS on the PCIe tree)");
    let rocm = rdmabench::memory::MemMode::parse("rocm-staged").unwrap();
    let (mem, why) = rdmabench::memory::nearest_gpu(&rocm, "mlx5_0", Some(&tree));
    assert_eq!(mem.name(), "rocm-staged:0000:19:00.0");
    assert_eq!(why, "the GPU nearest mlx5_0 (PIX on the PCIe tree)");
    // doctor on mlx5_0 meets the MI300X: AMD's GPUDirect pieces are asked, not NVIDIA's
    // (the copy has nvidia_peermem loaded, no amdgpu and no kernel configuration).
    let doctor = || {
        let out = run(&[
            "doctor",
            "--sysfs-root",
            root,
            "-d",
            "mlx5_0",
            "--sample-secs",
            "0",
        ]);
        stdout(&out)
    };
    let report = doctor();
    let (verdict, evidence) = check(&report, "GPUDirect RDMA");
    assert_eq!(verdict, "FAIL", "{report}");
    assert!(
        evidence.contains("amdgpu PeerDirect not loaded and no dma-buf")
            && evidence.contains("the amdgpu module is not loaded")
            && !evidence.contains("nvidia"),
        "{report}"
    );
    assert!(report.contains("GPU dma-buf support"), "{report}");
    // amdgpu's PeerDirect registered with the RDMA core: ready.
    let peers = Path::new(root).join("sys/kernel/mm/memory_peers/amdkfd");
    std::fs::create_dir_all(&peers).unwrap();
    std::fs::write(peers.join("version"), "1.0\n").unwrap();
    let report = doctor();
    let (verdict, evidence) = check(&report, "GPUDirect RDMA");
    assert_eq!(verdict, "PASS", "{report}");
    assert!(evidence.starts_with("amdgpu PeerDirect loaded"), "{report}");
    std::fs::remove_dir_all(dir).ok();
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run rdmabench")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn topo(name: &str) -> String {
    let out = run(&["topo", "--sysfs-root", &fixture(name)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    stdout(&out)
}

fn topo_json(name: &str) -> Value {
    let out = run(&["topo", "--sysfs-root", &fixture(name), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("topo --json is JSON")
}

fn pair_class<'a>(doc: &'a Value, nic: &str, gpu: &str) -> &'a str {
    doc["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["nic"] == nic && p["gpu"] == gpu)
        .and_then(|p| p["class"].as_str())
        .unwrap_or_else(|| panic!("no pair {nic}-{gpu} in {doc}"))
}

fn doctor(name: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let root = fixture(name);
    let mut args = vec![
        "doctor",
        "--sysfs-root",
        root.as_str(),
        "--sample-secs",
        "0.05",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    (
        out.status.code(),
        stdout(&out),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn topo_json_has_nics_gpus_links_and_pairs() {
    let doc = topo_json("dgx-h100");
    let nic = &doc["nics"][0];
    assert_eq!(nic["name"], "mlx5_0");
    assert_eq!(nic["bdf"], "0000:18:00.0");
    assert_eq!(nic["numa_node"], 0);
    assert_eq!(nic["virtual"], false);
    let link = &nic["link"];
    assert_eq!(link["speed_gts"], 32.0);
    assert_eq!(link["width"], 16);
    assert_eq!(link["max_speed_gts"], 32.0);
    assert_eq!(link["max_width"], 16);
    assert_eq!(link["mps"], 256);
    let gpus = doc["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "the NVSwitch is not a GPU: {doc}");
    assert_eq!(gpus[1]["bdf"], "0000:9e:00.0");
    assert_eq!(gpus[1]["numa_node"], 1);
    assert_eq!(gpus[1]["link"]["mps"], 256);
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:19:00.0"), "PIX");
    assert_eq!(pair_class(&doc, "mlx5_1", "0000:9e:00.0"), "PIX");
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:9e:00.0"), "SYS");
}

#[test]
fn topo_two_socket_is_sys_across_sockets_and_node_within() {
    let text = topo("two-socket");
    assert!(text.contains("SYS") && text.contains("NODE"), "{text}");
    assert!(text.contains("port 1: rate ? Ethernet DOWN"), "{text}");
    let doc = topo_json("two-socket");
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:cb:00.0"), "SYS");
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:4b:00.0"), "NODE");
    assert_eq!(doc["iommu"]["group_types"][0], "DMA-FQ");
}

#[test]
fn topo_downtrained_marks_the_link() {
    let text = topo("downtrained");
    let nic = text.lines().find(|l| l.contains("NIC mlx5_0")).unwrap();
    assert!(
        nic.contains(
            "Gen3 x8 (max Gen4 x16) MPS 512  <-- DOWNTRAINED: running Gen3 x8, capable of Gen4 x16"
        ),
        "{nic}"
    );
    assert!(text.contains("PHB"), "{text}");
    let doc = topo_json("downtrained");
    assert_eq!(doc["nics"][0]["link"]["speed_gts"], 8.0);
    assert_eq!(doc["nics"][0]["link"]["max_speed_gts"], 16.0);
}

#[test]
fn topo_old_kernel_parses_short_speed_strings() {
    let text = topo("old-kernel");
    assert!(text.contains("0000:07:00.0 NIC mlx5_0"), "{text}");
    assert!(text.contains("Gen3 x16 (max Gen3 x16) MPS ?"), "{text}");
    assert!(text.contains("PXB"), "{text}");
    let doc = topo_json("old-kernel");
    let mlx = doc["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "mlx5_0")
        .unwrap();
    assert_eq!(mlx["link"]["speed_gts"], 8.0, "\"8 GT/s\" read as Gen3");
    assert!(
        mlx["link"]["mps"].is_null(),
        "MPS unknown without root, not guessed"
    );
    assert_eq!(pair_class(&doc, "mlx5_0", "0000:06:00.0"), "PXB");
}

#[test]
fn topo_rxe_vm_says_virtual_instead_of_failing() {
    let text = topo("rxe-vm");
    assert!(text.contains("rxe0  virtual, no PCI function"), "{text}");
    assert!(text.contains("siw0  virtual, no PCI function"), "{text}");
    let doc = topo_json("rxe-vm");
    assert_eq!(doc["nics"][0]["virtual"], true);
    assert!(doc["nics"][0]["link"].is_null());
    assert!(doc["pairs"].as_array().unwrap().is_empty());
}

#[test]
fn a_sysfs_root_without_sys_is_a_usage_error() {
    let out = run(&["topo", "--sysfs-root", "/nonexistent/snapshot"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("'/nonexistent/snapshot' is not a directory"));
    let sys = format!("{}/sys", fixture("dgx-h100"));
    let out = run(&["doctor", "--sysfs-root", &sys]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no sys/ directory"), "{}", text(&out));
}

fn ceiling_json(args: &[&str]) -> Value {
    let mut all = vec!["ceiling", "--json"];
    all.extend_from_slice(args);
    let out = run(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).expect("ceiling --json is JSON")
}

#[test]
fn ceiling_400g_behind_gen4_is_pcie_bound_and_behind_gen5_wire_bound() {
    // The arithmetic as printed is the snapshot `ceiling_400g_gen4x16`.
    let gen4 = ceiling_json(&["--nic-rate", "400", "--pcie", "gen4x16"]);
    assert_eq!(gen4["limit"], "pcie");
    let pcie = gen4["pcie_gbps"].as_f64().unwrap();
    assert!((25.5..26.5).contains(&pcie), "{gen4}");
    assert_eq!(gen4["limit_gbps"], gen4["pcie_gbps"]);
    let gen5 = ceiling_json(&[
        "--nic-rate",
        "400",
        "--pcie",
        "gen5x16",
        "--mps",
        "256",
        "--mtu",
        "4096",
    ]);
    assert_eq!(gen5["limit"], "wire");
    let wire = gen5["wire_gbps"].as_f64().unwrap();
    assert!((49.6..49.8).contains(&wire), "{gen5}");
    assert!(gen5["pcie_gbps"].as_f64().unwrap() > wire);
    assert_eq!(gen5["limit_gbps"], gen5["wire_gbps"]);
    assert!(gen5["staged_gbps"].is_null());
}

#[test]
fn ceiling_roce_costs_more_header_than_ib() {
    let ib = ceiling_json(&[
        "--nic-rate",
        "400",
        "--pcie",
        "gen5x16",
        "--link-layer",
        "ib",
    ]);
    let roce = ceiling_json(&[
        "--nic-rate",
        "400",
        "--pcie",
        "gen5x16",
        "--link-layer",
        "roce",
    ]);
    assert!(roce["wire_gbps"].as_f64().unwrap() < ib["wire_gbps"].as_f64().unwrap());
    assert_eq!(roce["inputs"]["link_layer"], "ethernet");
}

#[test]
fn ceiling_bad_values_are_usage_errors_naming_value_and_forms() {
    for (args, value, forms) in [
        (
            &["--pcie", "gen9x16"][..],
            "gen9x16",
            "gen<1-6>x<1|2|4|8|12|16|32>",
        ),
        (
            &["--pcie", "gen5x16", "--mtu", "1000"][..],
            "1000",
            "256, 512, 1024, 2048, 4096",
        ),
        (
            &["--pcie", "gen5x16", "--mps", "100"][..],
            "100",
            "128, 256, 512",
        ),
    ] {
        let mut all = vec!["ceiling", "--nic-rate", "400"];
        all.extend_from_slice(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(value) && err.contains(forms),
            "{args:?}: {err}"
        );
    }
    let out = run(&["ceiling", "--pcie", "gen5x16"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing --nic-rate: {}",
        text(&out)
    );
}

#[test]
fn doctor_dgx_passes_with_pix_and_exit_0() {
    let (code, report, stderr) = doctor("dgx-h100", &[]);
    assert_eq!(code, Some(0), "{report}{stderr}");
    assert!(!report.contains("\nFAIL"), "{report}");
    assert_eq!(check(&report, "port state").0, "PASS");
    let (v, e) = check(&report, "NIC PCIe link");
    assert_eq!(v, "PASS");
    assert!(
        e.contains("0000:18:00.0 Gen5 x16 (max Gen5 x16), MPS 256"),
        "{e}"
    );
    assert_eq!(check(&report, "MTU").0, "PASS");
    let (v, e) = check(&report, "NIC-GPU path");
    assert_eq!(v, "PASS");
    assert!(e.contains("mlx5_0 <-> 0000:19:00.0: PIX"), "{e}");
    assert_eq!(check(&report, "ACS on the path").0, "PASS");
    assert_eq!(check(&report, "GPUDirect RDMA").0, "PASS");
    let (v, e) = check(&report, "GPU dma-buf support");
    assert_eq!(v, "SKIP");
    assert!(
        e.contains("a snapshot: CUDA answers for the live machine only"),
        "{e}"
    );
    assert_eq!(check(&report, "IOMMU").0, "PASS");
    assert_eq!(check(&report, "CPU governor").0, "PASS");
    assert_eq!(check(&report, "congestion counters").0, "PASS");
    assert_eq!(check(&report, "error counters").0, "PASS");
    let (v, e) = check(&report, "ceilings");
    assert_eq!(v, "PASS");
    assert!(e.starts_with("wire-bound: wire 49.68 GB/s"), "{e}");
}

#[test]
fn topo_and_doctor_judge_a_link_by_both_its_ends() {
    // mlx5_0 (0000:18:00.0) below its switch port 0000:17:00.0: the port made Gen4-only and
    // the link Gen4, then the port's capability unreadable.
    let port = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0";
    let nic = format!("{port}/0000:18:00.0");
    let gen4 = "echo '16.0 GT/s PCIe' >";
    let dir = common::scratch("topo-both-ends");
    for case in ["slot", "unread"] {
        std::fs::create_dir_all(dir.join(case)).unwrap();
    }
    let doctor_on = |root: &Path| {
        let root = root.to_str().unwrap();
        let out = run(&["doctor", "--sysfs-root", root, "--sample-secs", "0"]);
        stdout(&out)
    };
    let slot = common::changed_dgx(
        &dir.join("slot"),
        &format!(
            "{gen4} {port}/max_link_speed && {gen4} {port}/current_link_speed && \
             {gen4} {nic}/current_link_speed"
        ),
    );
    let tree = stdout(&run(&["topo", "--sysfs-root", slot.to_str().unwrap()]));
    let line = tree.lines().find(|l| l.contains("NIC mlx5_0")).unwrap();
    assert!(
        line.ends_with(
            "Gen4 x16 (max Gen5 x16) MPS 256  (limited by the other end: Gen4 x16 is the \
             most both ends can do)"
        ),
        "{tree}"
    );
    assert!(!tree.contains("DOWNTRAINED"), "{tree}");
    let report = doctor_on(&slot);
    let (v, e) = check(&report, "NIC PCIe link");
    assert_eq!(v, "WARN", "{report}");
    assert!(
        e.contains("its slot (port 0000:17:00.0) only Gen4 x16"),
        "{e}"
    );
    let unread = common::changed_dgx(
        &dir.join("unread"),
        &format!("rm {port}/max_link_speed && {gen4} {nic}/current_link_speed"),
    );
    let tree = stdout(&run(&["topo", "--sysfs-root", unread.to_str().unwrap()]));
    assert!(tree.contains("<-- UNKNOWN whether trained down"), "{tree}");
    assert!(!tree.contains("DOWNTRAINED"), "{tree}");
    let report = doctor_on(&unread);
    let (v, e) = check(&report, "NIC PCIe link");
    assert_eq!(v, "WARN", "{report}");
    assert!(
        e.starts_with("0000:18:00.0 UNKNOWN whether trained down: running Gen4 x16"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn doctor_numa_against_the_given_cpus() {
    let (code, report, _) = doctor("dgx-h100", &["--cpus", "0-7"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(check(&report, "NUMA locality").0, "PASS");
    let (code, report, stderr) = doctor("dgx-h100", &["--cpus", "56-63"]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "NUMA locality");
    assert_eq!(v, "FAIL");
    assert!(e.contains("on node 1"), "{e}");
    assert!(stderr.contains("NUMA locality"), "{stderr}");
    let (_, report, _) = doctor("dgx-h100", &["--cpus", "0-63"]);
    assert_eq!(check(&report, "NUMA locality").0, "WARN");
}

#[test]
fn doctor_gpu_on_the_other_socket_fails_for_gdr() {
    let (code, report, _) = doctor("dgx-h100", &["--gpu", "1"]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "NIC-GPU path");
    assert_eq!(v, "FAIL");
    assert!(e.contains("SYS"), "{e}");
    assert!(
        report.contains("GPU 0000:19:00.0 is PIX to mlx5_0; NIC mlx5_1 is PIX to GPU 0000:9e:00.0"),
        "{report}"
    );
    let (code, _, stderr) = doctor("dgx-h100", &["--gpu", "5"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("0: 0000:19:00.0, 1: 0000:9e:00.0"),
        "{stderr}"
    );
}

#[test]
fn doctor_expected_rate() {
    let (code, report, _) = doctor("dgx-h100", &["--expect-rate", "800"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(check(&report, "port rate").0, "FAIL");
    let (code, report, _) = doctor("dgx-h100", &["--expect-rate", "400"]);
    assert_eq!(code, Some(0), "{report}");
}

#[test]
fn doctor_two_socket_node_path_translating_iommu_and_roce_checks() {
    let (code, report, _) = doctor("two-socket", &[]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "NIC-GPU path");
    assert_eq!(v, "FAIL");
    assert!(e.contains("NODE"), "{e}");
    assert_eq!(check(&report, "ACS on the path").0, "SKIP");
    assert_eq!(check(&report, "IOMMU").0, "WARN");
    assert_eq!(check(&report, "CPU governor").0, "WARN");
    let (v, e) = check(&report, "MTU");
    assert_eq!(v, "PASS");
    assert!(e.contains("MTU 9000"), "{e}");
    let (v, e) = check(&report, "RoCEv2 GID");
    assert_eq!(v, "PASS");
    assert!(e.contains("GID[3] ::ffff:192.168.10.11"), "{e}");
    assert!(report.contains("ethtool -S ens2f0np0"), "{report}");

    let (code, report, _) = doctor("two-socket", &["-d", "mlx5_1"]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "port state");
    assert_eq!(v, "FAIL");
    assert!(e.contains("DOWN"), "{e}");
    assert_eq!(check(&report, "MTU").0, "SKIP");
}

#[test]
fn doctor_downtrained_link_fails_with_the_evidence() {
    let (code, report, stderr) = doctor("downtrained", &[]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "NIC PCIe link");
    assert_eq!(v, "FAIL");
    assert!(e.contains("DOWNTRAINED: running Gen3 x8"), "{e}");
    assert!(e.contains("Gen4 x16"), "{e}");
    assert!(report.contains("reseat the card"), "{report}");
    assert_eq!(check(&report, "NIC-GPU path").0, "WARN", "PHB");
    assert_eq!(
        check(&report, "GPUDirect RDMA").0,
        "PASS",
        "dma-buf: 6.8 and the config"
    );
    assert_eq!(check(&report, "IOMMU").0, "PASS");
    let (v, e) = check(&report, "ceilings");
    assert_eq!(v, "WARN");
    assert!(e.starts_with("PCIe-bound"), "{e}");
    assert!(stderr.contains("1 check FAIL (NIC PCIe link)"), "{stderr}");
}

#[test]
fn doctor_old_kernel_has_no_gpudirect_and_unreadable_acs() {
    let (code, report, _) = doctor("old-kernel", &[]);
    assert_eq!(code, Some(1), "{report}");
    let (v, e) = check(&report, "GPUDirect RDMA");
    assert_eq!(v, "FAIL");
    assert!(e.contains("4.15.0-213-generic is older than 5.12"), "{e}");
    assert_eq!(check(&report, "ACS on the path").0, "WARN");
    let (v, e) = check(&report, "NIC PCIe link");
    assert_eq!(v, "PASS");
    assert!(e.contains("Gen3 x16") && e.contains("MPS unknown"), "{e}");
    let (code, report, _) = doctor("old-kernel", &["-d", "rxe0"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        check(&report, "NIC PCIe link").1,
        "virtual device, no PCI function"
    );
}

#[test]
fn doctor_rxe_vm_skips_pcie_checks_as_virtual_and_exits_0() {
    let (code, report, stderr) = doctor("rxe-vm", &[]);
    assert_eq!(code, Some(0), "{report}{stderr}");
    for name in ["NIC PCIe link", "NUMA locality"] {
        assert_eq!(
            check(&report, name),
            ("SKIP", "virtual device, no PCI function")
        );
    }
    assert_eq!(
        check(&report, "MTU").0,
        "WARN",
        "1500-byte netdev: RoCE MTU 1024"
    );
    assert_eq!(check(&report, "RoCEv2 GID").0, "PASS");
    assert_eq!(check(&report, "port rate").0, "INFO");
    let (code, report, _) = doctor("rxe-vm", &["-d", "siw0"]);
    assert_eq!(code, Some(0), "{report}");
    let (v, e) = check(&report, "RoCEv2 GID");
    assert_eq!(v, "SKIP");
    assert!(e.contains("iWARP"), "{e}");
}

#[test]
fn doctor_unknown_device_names_the_present_ones() {
    let (code, _, stderr) = doctor("dgx-h100", &["-d", "mlx5_9"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("present: mlx5_0, mlx5_1"), "{stderr}");
}

/// The dgx-h100 tree with hostile text wherever sysfs names something: mlx5_0's directory
/// and its netdev renamed, its firmware, port state, rate and link layer and a counter's name
/// holding escape sequences (a window title, a line erased, a colour) and newlines.
fn hostile_dgx(dir: &Path) -> std::path::PathBuf {
    let nic = "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0";
    common::changed_dgx(
        dir,
        &format!(
            "E=$(printf 'mlx5_0\\033]0;owned\\007\\nX') && N=$(printf 'ib0\\033[1A') && \
             C=$(printf 'np_cnp_sent\\033]0;cnt\\007') && \
             mv sys/{nic}/infiniband/mlx5_0 \"sys/{nic}/infiniband/$E\" && \
             rm sys/class/infiniband/mlx5_0 && \
             ln -s \"../../{nic}/infiniband/$E\" \"sys/class/infiniband/$E\" && \
             mv sys/{nic}/net/ibp24s0 \"sys/{nic}/net/$N\" && \
             P=\"sys/{nic}/infiniband/$E/ports/1\" && \
             printf 'v1\\033]0;fw\\007\\nHEALTH OK\\n' > \"sys/{nic}/infiniband/$E/fw_ver\" && \
             printf '4: ACTIVE\\033[1A\\033[2K\\nPASS\\n' > \"$P/state\" && \
             printf '400 Gb/sec (4X NDR)\\033[31m\\n' > \"$P/rate\" && \
             printf 'InfiniBand\\033[0m\\n' > \"$P/link_layer\" && \
             echo 5 > \"$P/hw_counters/$C\""
        ),
    )
}

#[test]
fn names_from_a_sysfs_copy_reach_the_terminal_escaped() {
    let dir = common::scratch("topo-hostile");
    let root = hostile_dgx(&dir);
    let root = root.to_str().unwrap();
    let raw = |said: &str| said.chars().any(|c| c.is_control() && c != '\n');
    let tree = run(&["topo", "--sysfs-root", root]);
    let said = text(&tree);
    assert_eq!(tree.status.code(), Some(0), "{said:?}");
    assert!(
        !raw(&said),
        "a control character reached the terminal: {said:?}"
    );
    assert!(
        said.contains(
            "NIC mlx5_0\\u{1b}]0;owned\\u{7}\\nX (ib0\\u{1b}[1A)  port 1: 400 Gb/sec (4X NDR)\\u{1b}[31m \
             InfiniBand\\u{1b}[0m ACTIVE\\u{1b}[1A\\u{1b}[2K\\nPASS  Gen5 x16"
        ),
        "{said}"
    );
    // The pairs' column stays aligned on the name as shown.
    let shown = "mlx5_0\\u{1b}]0;owned\\u{7}\\nX";
    assert!(
        said.contains(&format!("  {shown}  0000:19:00.0  PIX "))
            && said.contains(&format!(
                "  {:w$}  0000:19:00.0  SYS",
                "mlx5_1",
                w = shown.len()
            )),
        "{said}"
    );
    // JSON keeps the names as read (serde escapes them).
    let json = run(&["topo", "--sysfs-root", root, "--json"]);
    let doc: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["nics"][0]["name"], "mlx5_0\u{1b}]0;owned\u{7}\nX");
    for args in [&["-d", "mlx5_1"][..], &[][..], &["-d", "mlx5_9"][..]] {
        let out = run(&[
            &["doctor", "--sysfs-root", root, "--sample-secs", "0"][..],
            args,
        ]
        .concat());
        let said = text(&out);
        assert!(!raw(&said), "doctor {args:?}: {said:?}");
        assert!(
            !said
                .lines()
                .any(|l| l.starts_with("HEALTH OK") || l == "PASS"),
            "{said}"
        );
    }
    let hostile = "mlx5_0\u{1b}]0;owned\u{7}\nX";
    let out = run(&[
        "doctor",
        "--sysfs-root",
        root,
        "-d",
        hostile,
        "--sample-secs",
        "0",
    ]);
    let report = stdout(&out);
    assert!(!raw(&text(&out)), "{:?}", text(&out));
    for line in [
        "rdmabench doctor: mlx5_0\\u{1b}]0;owned\\u{7}\\nX port 1",
        "mlx5_0\\u{1b}]0;owned\\u{7}\\nX: PCI 0000:18:00.0, fw v1\\u{1b}]0;fw\\u{7}\\nHEALTH OK, \
         NUMA node 0, netdev ib0\\u{1b}[1A",
        "hw_counters/np_cnp_sent\\u{1b}]0;cnt\\u{7} 5",
    ] {
        assert!(report.contains(line), "{line} not in {report}");
    }
    let out = run(&["doctor", "--sysfs-root", root, "-d", "mlx5_9"]);
    assert!(
        text(&out).contains("present: mlx5_0\\u{1b}]0;owned\\u{7}\\nX, mlx5_1."),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Every fixture tree, by name.
const FIXTURES: [&str; 5] = [
    "dgx-h100",
    "two-socket",
    "downtrained",
    "old-kernel",
    "rxe-vm",
];

/// `rdmabench ARGS` from the workspace root, as a terminal shows it.
fn shown(args: &[&str]) -> String {
    transcript(&workspace_root(), args)
}

#[test]
fn snapshot_topo_of_every_fixture() {
    for name in FIXTURES {
        let root = format!("crates/topo/tests/fixtures/{name}");
        insta::assert_snapshot!(
            format!("topo_{name}"),
            shown(&["topo", "--sysfs-root", &root])
        );
    }
    let root = "crates/topo/tests/fixtures/dgx-h100";
    insta::assert_snapshot!(
        "topo_dgx-h100_json",
        shown(&["topo", "--sysfs-root", root, "--json"])
    );
}

#[test]
fn snapshot_doctor_of_every_fixture() {
    for name in FIXTURES {
        let root = format!("crates/topo/tests/fixtures/{name}");
        let args = ["doctor", "--sysfs-root", &root, "--sample-secs", "0"];
        insta::assert_snapshot!(format!("doctor_{name}"), shown(&args));
    }
}

#[test]
fn snapshot_ceiling() {
    let gen4 = ["ceiling", "--nic-rate", "400", "--pcie", "gen4x16"];
    insta::assert_snapshot!("ceiling_400g_gen4x16", shown(&gen4));
    insta::assert_snapshot!(
        "ceiling_400g_gen4x16_json",
        shown(&[&gen4[..], &["--json"]].concat())
    );
    let staged = [
        "ceiling",
        "--nic-rate",
        "200",
        "--pcie",
        "gen5x16",
        "--link-layer",
        "roce",
        "--mtu",
        "1024",
        "--mps",
        "512",
        "--gpu-pcie",
        "gen4x16",
    ];
    insta::assert_snapshot!("ceiling_200g_roce_staged", shown(&staged));
    let bad = ["ceiling", "--nic-rate", "400", "--pcie", "gen9x16"];
    insta::assert_snapshot!("ceiling_bad_pcie", shown(&bad));
}
