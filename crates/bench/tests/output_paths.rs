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

/// `-` means stdout for a test's `--json` or `--csv` (one of them), and nothing else: the
/// commands whose output cannot go to stdout refuse it with exit 2, naming what would do.
#[test]
fn dash_is_stdout_for_one_test_record_and_refused_elsewhere() {
    let dir = scratch("out-dash");
    let record = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../results/soft-roce-emulated/2026-11-30T040439Z-write-bw.json");
    let record = record.to_str().unwrap();
    // Each command, the environment it runs in (cluster's launcher) and its first line.
    type Case<'a> = (Vec<&'a str>, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 4] = [
        (
            vec!["write-bw", "127.0.0.1", "--json", "-", "--csv", "-"],
            &[],
            "rdmabench: error: --json and --csv both name '-': stdout can hold one of them \
             only; give the other a file path",
        ),
        (
            vec!["compare", record, "--json", "-"],
            &[],
            "rdmabench: error: '-' is not a record: compare reads records from files, not from \
             stdin (and --json takes no FILE: it prints the comparison to stdout)",
        ),
        (
            vec!["plot", record, "-o", "-"],
            &[],
            "error: invalid value '-' for '--output <FILE>': plot writes its chart to a file, \
             not to stdout; give a file name ending in .svg or .png",
        ),
        (
            vec!["cluster", "--json", "-", "--timeout", "1"],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "19231"),
            ],
            "rdmabench: error: --json '-': this command writes --json to a file, not to stdout; \
             give a file path (./- for a file named -)",
        ),
    ];
    for (args, env, message) in cases {
        let mut cmd = bin();
        // The launchers found before torchrun's variables are left out.
        for v in ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"] {
            cmd.env_remove(v);
        }
        let out = cmd
            .current_dir(&dir)
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert_eq!(t.lines().next(), Some(message), "{args:?}: {t}");
        assert!(out.stdout.is_empty(), "{args:?}: {t}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file named '-' (nor any other) was left behind"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// A client whose record goes to stdout leaves no file named `-` and, having measured
/// nothing (no device here, or no server there), writes nothing to stdout: its error is on
/// stderr alone.
#[test]
fn a_client_with_json_to_stdout_that_measures_nothing_prints_nothing_there() {
    let dir = scratch("out-dash-client");
    let out = bin()
        .current_dir(&dir)
        .args([
            "write-bw",
            "127.0.0.1",
            "-p",
            "19232",
            "--timeout",
            "1",
            "--json",
            "-",
        ])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(out.stdout.is_empty(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rdmabench: error: "),
        "{t}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{t}");
    std::fs::remove_dir_all(dir).ok();
}
