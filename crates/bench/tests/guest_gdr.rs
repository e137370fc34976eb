//! scripts/gdr-compare.sh in the soft-RoCE guest: host memory runs and lands in the table;
//! the GPU modes, without a GPU or CUDA driver there, are reported with their one-line reason
//! and the script exits 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{rdma_ready, scratch, text};

#[test]
fn gdr_compare_tabulates_what_ran_and_names_what_could_not() {
    if !rdma_ready("gdr_compare_tabulates_what_ran_and_names_what_could_not") {
        return;
    }
    let dir = scratch("gdr-compare");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gdr-compare.sh");
    let out = Command::new("bash")
        .arg(script)
        .args([
            "--modes",
            "host cuda",
            "--results",
            dir.to_str().unwrap(),
            "local:rxe0",
        ])
        .args(["-d", "rxe1", "-x", "1", "-s", "4K", "-n", "100", "-t", "16"])
        .env("RDMABENCH_BIN", env!("CARGO_BIN_EXE_rdmabench"))
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the cuda mode cannot run here:\n{t}"
    );
    assert!(
        t.contains("cuda did not run") && t.contains("no CUDA driver"),
        "{t}"
    );
    assert!(t.contains("host GB/s (% ceiling)"), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("4096 "))
        .unwrap_or_default();
    assert!(
        row.contains('%'),
        "a row for 4096 with its share of the ceiling:\n{t}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("host.json")).unwrap()).unwrap();
    assert_eq!(record["params"]["mem"], "host");
    std::fs::remove_dir_all(dir).ok();
}
