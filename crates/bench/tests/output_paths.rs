//! Output files (`--json`, `--csv`, `plot -o`) are checked before any work: a path into a
//! folder that does not exist, or a folder given as the file, is a usage error (exit 2) whose
//! message names the path as given, before any device is opened or any record is read. No
//! RDMA device needed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bin, scratch, text};

#[test]
fn a_test_refuses_an_output_path_before_opening_any_device() {
    let dir = scratch("out-test");
    let missing = dir.join("no-such-folder").join("run.json");
    let missing = missing.to_str().unwrap();
    let folder = dir.to_str().unwrap();
    for (args, message) in [
        (
            vec!["write-bw", "127.0.0.1", "--json", missing],
            format!("--json '{missing}': the folder '"),
        ),
        (
            vec!["write-bw", "--loopback", "--csv", missing],
            format!("--csv '{missing}': the folder '"),
        ),
        (
            vec![
                "read-lat",
                "-p",
                "19210",
                "--timeout",
                "20",
                "--json",
                folder,
            ],
            format!("--json '{folder}' is a folder"),
        ),
    ] {
        let out = bin().args(&args).output().unwrap();
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(&message), "{args:?}: {t}");
        assert!(
            t.contains("does not exist") || t.contains("is a folder"),
            "{t}"
        );
        // Refused before the device: nothing about devices, no server waiting, one line.
        assert!(!t.contains("RDMA device") && !t.contains("waiting"), "{t}");
        assert_eq!(t.trim().lines().count(), 1, "{t}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing was left behind"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn plot_into_a_missing_folder_says_so_in_one_line() {
    let dir = scratch("out-plot");
    let out_path = dir.join("charts").join("bw.png");
    let out = bin()
        .args(["plot", "-o"])
        .arg(&out_path)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../results/soft-roce-emulated/2026-11-30T040439Z-write-bw.json"),
        )
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert_eq!(
        t.trim(),
        format!(
            "rdmabench: error: -o '{}': the folder '{}' does not exist; create it first, or give \
             a path in an existing folder",
            out_path.display(),
            dir.join("charts").display()
        )
    );
    std::fs::remove_dir_all(dir).ok();
}
