//! `topo` and `doctor` in the soft-RoCE guest, against the live /sys: rxe devices have no
//! PCI function and are reported as virtual, not as failures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use common::{bin, doctor_check as check, rdma_ready, text};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run rdmabench")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// In the soft-RoCE guest: the live /sys, rxe devices without a PCI function.
#[test]
fn guest_topo_and_doctor_report_rxe_as_virtual() {
    if !rdma_ready("guest_topo_and_doctor_report_rxe_as_virtual") {
        return;
    }
    let out = run(&["topo"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let shown = stdout(&out);
    assert!(shown.contains("rxe0  virtual, no PCI function"), "{shown}");
    let out = run(&["topo", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("topo --json is JSON");
    let rxe0 = doc["nics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "rxe0")
        .unwrap();
    assert_eq!(rxe0["virtual"], true);

    let out = run(&["doctor", "-d", "rxe0", "--sample-secs", "1"]);
    let report = stdout(&out);
    println!("{report}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "doctor must report, not crash: {}",
        text(&out)
    );
    assert_eq!(
        check(&report, "NIC PCIe link"),
        ("SKIP", "virtual device, no PCI function")
    );
    assert_eq!(check(&report, "port state").0, "PASS");
    let (v, e) = check(&report, "MTU");
    assert!(
        e.contains("from verbs"),
        "the live active MTU comes from verbs: {e}"
    );
    assert_ne!(v, "FAIL");
    assert_eq!(check(&report, "RoCEv2 GID").0, "PASS");
    for line in report.lines().filter(|l| l.starts_with("FAIL")) {
        assert!(
            !line.contains("PCIe") && !line.contains("NUMA") && !line.contains("GPU"),
            "a virtual device must not fail PCIe, NUMA or GPU checks: {line}"
        );
    }
}
