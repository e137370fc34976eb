//! `rdmabench health` on the topology fixtures (no device needed): a healthy DGX-H100-like
//! tree, the same with one NIC at x8, one GPU at Gen4 and one NIC missing, each with the
//! findings, codes and exit codes a monitor reads (snapshots of the whole text, timings
//! blanked); `--learn` then `--expect` round-trips; a file that is no expectations is
//! UNKNOWN (3); `--json` and `--prom` are written; an AMD node is judged by AMD's GPUDirect
//! pieces. A climbing counter is `health::check`'s
//! unit test (it needs the counters to change between the two readings).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;

use common::{bin, changed_dgx, keep_json, promtool, scratch, text, topo_fixture as fixture};

const NIC_1: &str = "sys/devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/0000:9c:00.0/0000:9d:00.0";
const GPU_1: &str = "sys/devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/0000:9c:01.0/0000:9e:00.0";
const GPU_0: &str = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0";

/// `rdmabench health` on `root` with `more`, the counters read twice at once.
fn health(root: &Path, more: &[&str]) -> Output {
    bin()
        .args(["health", "--sysfs-root", root.to_str().unwrap()])
        .args(["--sample-secs", "0"])
        .args(more)
        .output()
        .unwrap()
}

/// The text with every time ("0.01 s") blanked and the scratch folder's path named.
fn stable(out: &Output, dir: &Path) -> String {
    let mut t = text(out).replace(dir.to_str().unwrap(), "DIR");
    for w in t.clone().split_whitespace() {
        let digits = w.trim_end_matches(',').trim_end_matches(';');
        if digits.contains('.') && digits.parse::<f64>().is_ok() && t.contains(&format!("{w} s")) {
            t = t.replace(&format!("{w} s"), "T s");
        }
    }
    t
}

#[test]
fn a_healthy_node_is_ok_and_what_it_learns_it_expects_back() {
    let dir = scratch("health-learn");
    let root = fixture("dgx-h100");
    let out = health(&root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    insta::assert_snapshot!("healthy", stable(&out, &root));

    let learned = dir.join("dgx.json");
    let out = health(&root, &["--learn", learned.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let file = std::fs::read_to_string(&learned).unwrap();
    keep_json(file.as_bytes(), "learned.json");
    let without_origin: Vec<&str> = file
        .lines()
        .filter(|l| !l.contains("learned_from"))
        .collect();
    insta::assert_snapshot!("learned", without_origin.join("\n"));
    let out = health(&root, &["--expect", learned.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).starts_with("HEALTH OK - 2 NIC(s), 2 GPU(s), GPUDirect RDMA ready"));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_nic_at_x8_a_gpu_at_gen4_and_a_missing_nic_are_critical() {
    let dir = scratch("health-faults");
    let learned = dir.join("dgx.json");
    let out = health(
        &fixture("dgx-h100"),
        &["--learn", learned.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let expect = ["--expect", learned.to_str().unwrap()];
    for (name, change) in [
        ("nic_x8", format!("echo 8 > {NIC_1}/current_link_width")),
        (
            "gpu_gen4",
            format!("echo '16.0 GT/s PCIe' > {GPU_1}/current_link_speed"),
        ),
        ("nic_missing", "rm sys/class/infiniband/mlx5_1".to_string()),
    ] {
        let case = dir.join(name);
        std::fs::create_dir_all(&case).unwrap();
        let root = changed_dgx(&case, &change);
        // Against the learned file, and (but for the missing NIC, which the node as found
        // cannot know of) without one: a link below its capability is found either way.
        let out = health(&root, &expect);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        insta::assert_snapshot!(name, stable(&out, &dir));
        if name != "nic_missing" {
            let out = health(&root, &[]);
            assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
            assert!(text(&out).contains("PCIE_DEGRADED"), "{}", text(&out));
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

/// GPU_1's switch downstream port: the other end of its link.
const GPU_1_PORT: &str = "sys/devices/pci0000:9a/0000:9a:01.0/0000:9b:00.0/0000:9c:01.0";

#[test]
fn a_gen5_gpu_in_a_gen4_slot_is_healthy_and_below_what_both_ends_can_do_is_critical() {
    let dir = scratch("health-both-ends");
    let gen4 = "echo '16.0 GT/s PCIe' >";
    // The port above GPU_1 can do Gen4 only, and the link runs Gen4: what both ends can do.
    let case = dir.join("slot");
    std::fs::create_dir_all(&case).unwrap();
    let root = changed_dgx(
        &case,
        &format!(
            "{gen4} {GPU_1_PORT}/max_link_speed && {gen4} {GPU_1_PORT}/current_link_speed && \
             {gen4} {GPU_1}/current_link_speed"
        ),
    );
    let out = health(&root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("PCIE_DEGRADED"), "{}", text(&out));
    // What it learns is what both ends can do: checked back, still OK.
    let learned = case.join("learned.json");
    let out = health(&root, &["--learn", learned.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&learned).unwrap()).unwrap();
    let gpu = file["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["bdf"] == "0000:9e:00.0")
        .unwrap();
    assert_eq!(gpu["pcie"]["speed_gts"], 16.0, "{file}");
    let out = health(&root, &["--expect", learned.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The same port unreadable: whether the link trained down is UNKNOWN, naming the port.
    let case = dir.join("unread");
    std::fs::create_dir_all(&case).unwrap();
    let root = changed_dgx(
        &case,
        &format!("rm {GPU_1_PORT}/max_link_speed && {gen4} {GPU_1}/current_link_speed"),
    );
    let out = health(&root, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains(
            "0000:9e:00.0 UNREADABLE: the capability of the port above it (the link runs \
             Gen4 x16, below the function's Gen5 x16) not known"
        ) && said.contains("0000:9e:00.0/../max_link_speed"),
        "{said}"
    );
    assert!(!said.contains("PCIE_DEGRADED"), "{said}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_amd_node_needs_amdgpu_peer_direct_or_dma_buf_not_nvidias_pieces() {
    // Both GPUs made MI300X (the copy keeps nvidia_peermem loaded, which an AMD GPU cannot
    // use, and has no amdgpu and no kernel configuration).
    let dir = scratch("health-amd");
    let amd = |gpu: &str| {
        format!(
            "echo 0x1002 > {gpu}/vendor && echo 0x74a1 > {gpu}/device && \
             echo 0x038000 > {gpu}/class"
        )
    };
    let root = changed_dgx(&dir, &format!("{} && {}", amd(GPU_0), amd(GPU_1)));
    let out = health(&root, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.starts_with("HEALTH CRITICAL - node GDR_UNAVAILABLE")
            && said.contains("amdgpu PeerDirect not loaded and no dma-buf")
            && said.contains("the amdgpu module is not loaded"),
        "{said}"
    );
    let peers = root.join("sys/kernel/mm/memory_peers/amdkfd");
    std::fs::create_dir_all(&peers).unwrap();
    std::fs::write(peers.join("version"), "1.0\n").unwrap();
    let out = health(&root, &[]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("GPUDirect RDMA ready"), "{said}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_file_that_is_no_expectations_is_unknown_naming_it() {
    let dir = scratch("health-bad");
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        "{\"schema\": \"rdmabench.health-expect/1\", \"nics\": 3}",
    )
    .unwrap();
    let out = health(&fixture("dgx-h100"), &["--expect", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.starts_with("HEALTH UNKNOWN - node CHECK_FAILED: --expect ")
            && said.contains("not an expectations file"),
        "{said}"
    );
    std::fs::write(&bad, "{\"schema\": \"x\", \"nics\": []}").unwrap();
    let out = health(&fixture("dgx-h100"), &["--expect", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("its schema is 'x'"), "{}", text(&out));
    // A command line it cannot read is UNKNOWN too (Nagios' guidelines), not clap's 2.
    let out = bin().args(["health", "--budget", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("'0' is not a budget"), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn the_report_and_the_metrics_are_written_for_a_monitor() {
    let dir = scratch("health-outputs");
    let root = changed_dgx(&dir, &format!("echo 8 > {NIC_1}/current_link_width"));
    let (json, prom) = (dir.join("health.json"), dir.join("health.prom"));
    let out = health(
        &root,
        &[
            "--json",
            json.to_str().unwrap(),
            "--prom",
            prom.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let bytes = std::fs::read(&json).unwrap();
    keep_json(&bytes, "health.json");
    let report: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(report["schema"], "rdmabench.health/1");
    assert_eq!(
        (report["status"].as_str(), report["exit_code"].as_u64()),
        (Some("critical"), Some(2))
    );
    assert_eq!(report["findings"][0]["code"], "PCIE_DEGRADED");
    assert_eq!(report["findings"][0]["subject"], "mlx5_1");
    assert_eq!(promtool(&prom), "");
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(
        metrics.contains("rdmabench_health_status{host="),
        "{metrics}"
    );
    assert!(
        metrics.contains("code=\"PCIE_DEGRADED\",subject=\"mlx5_1\",severity=\"critical\"} 2"),
        "{metrics}"
    );
    // --json -: the report on stdout, the text on stderr.
    let out = health(&root, &["--json", "-"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit_code"], 2);
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("HEALTH CRITICAL - mlx5_1 PCIE_DEGRADED")
    );
    std::fs::remove_dir_all(dir).ok();
}
