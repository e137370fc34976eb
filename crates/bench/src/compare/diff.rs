//! What differs between two records: the differences that make the figures incomparable
//! (warnings: a different NIC model, link rate, MTU, memory mode, test or parameters), and
//! those that are the point of a comparison (information: firmware, kernel, host, tool).

use std::collections::BTreeSet;

use serde::Serialize;

use crate::catalogue::{Compared, PARAMS};
use crate::plan::{Mode, PlanError, TestKind};
use crate::report::{PcieLinkRecord, RunRecord};
use crate::units::format_size;

/// One field that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct Difference {
    /// What differs, e.g. "MTU (device.active_mtu)".
    pub what: String,
    /// The baseline's value.
    pub baseline: String,
    /// The candidate's value.
    pub candidate: String,
}

/// The differences between two records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct Differences {
    /// Differences that make the comparison doubtful.
    pub warnings: Vec<Difference>,
    /// Differences shown for information (usually what is being compared).
    pub info: Vec<Difference>,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map(ToString::to_string)
        .unwrap_or_else(|| "unknown".to_string())
}

fn push(list: &mut Vec<Difference>, what: &str, a: String, b: String) {
    if a != b {
        list.push(Difference {
            what: what.to_string(),
            baseline: a,
            candidate: b,
        });
    }
}

fn model(r: &RunRecord) -> String {
    format!(
        "vendor 0x{:04x} part {}",
        r.device.vendor_id, r.device.part_id
    )
}

fn link(l: &Option<PcieLinkRecord>) -> String {
    match l {
        None => "none".to_string(),
        Some(l) => format!(
            "{} GT/s x{} (max {} GT/s x{}), MPS {}",
            opt(&l.speed),
            opt(&l.width),
            opt(&l.max_speed),
            opt(&l.max_width),
            opt(&l.mps)
        ),
    }
}

/// Describes a set of sizes compactly: "64 KiB" or "23 sizes, 2 B .. 8 MiB".
pub(crate) fn describe_sizes(sizes: &BTreeSet<u64>) -> String {
    match (sizes.len(), sizes.first(), sizes.last()) {
        (0, _, _) => "none".to_string(),
        (1, Some(s), _) => format_size(*s),
        (n, Some(a), Some(b)) => format!("{n} sizes, {} .. {}", format_size(*a), format_size(*b)),
        _ => "none".to_string(),
    }
}

/// The message sizes of a record.
pub(crate) fn sizes(r: &RunRecord) -> BTreeSet<u64> {
    r.results.iter().map(|s| s.size).collect()
}

/// What a record measures: "latency" for the latency tests (or, for a test this rdmabench
/// does not know, when every size has latency figures), else "bandwidth".
pub(crate) fn measure(r: &RunRecord) -> &'static str {
    let lat = match TestKind::parse(&r.params.test) {
        Some(t) => t.mode == Mode::Lat,
        None => !r.results.is_empty() && r.results.iter().all(|s| s.lat_us.is_some()),
    };
    if lat {
        "latency"
    } else {
        "bandwidth"
    }
}

/// What records must share to be used together: `compare` needs one test (a verdict between
/// write-bw and read-bw means nothing), `plot` one measure (bandwidth or latency: one axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Together {
    /// The same `params.test`.
    SameTest,
    /// All bandwidth or all latency records.
    SameMeasure,
}

/// Refuses records that differ in what `together` needs, naming the first two files that
/// differ and their tests; `--mixed-tests` (`mixed`) lets them through.
pub(crate) fn check_together(
    records: &[(&str, &RunRecord)],
    together: Together,
    mixed: bool,
) -> Result<(), PlanError> {
    let key = |r: &RunRecord| match together {
        Together::SameTest => r.params.test.clone(),
        Together::SameMeasure => measure(r).to_string(),
    };
    let Some(((first, a), rest)) = records.split_first() else {
        return Ok(());
    };
    let Some((other, b)) = rest.iter().find(|(_, b)| key(b) != key(a)) else {
        return Ok(());
    };
    if mixed {
        return Ok(());
    }
    let why = match together {
        Together::SameTest => {
            "a verdict between two different tests means nothing; give records of one test"
        }
        Together::SameMeasure => {
            "one chart cannot show bandwidth and latency on one axis; plot them separately"
        }
    };
    let shown = |r: &RunRecord| format!("{} ({})", r.params.test, measure(r));
    Err(PlanError::Value(format!(
        "'{first}' is {} and '{other}' is {}: {why}, or add --mixed-tests to use them together \
         anyway",
        shown(a),
        shown(b)
    )))
}

/// Refuses records that share no figure to compare, even with `--mixed-tests`: a bandwidth
/// record's figure is its GB/s, a latency record's its p99, and a latency record's GB/s and
/// Mpps are those of a ping-pong (one message in flight), not a bandwidth test's. Names the
/// first two files that differ and their tests.
pub(crate) fn check_shared_figure(records: &[(&str, &RunRecord)]) -> Result<(), PlanError> {
    let Some(((first, a), rest)) = records.split_first() else {
        return Ok(());
    };
    let Some((other, b)) = rest.iter().find(|(_, b)| measure(b) != measure(a)) else {
        return Ok(());
    };
    let shown = |r: &RunRecord| format!("{} ({})", r.params.test, measure(r));
    Err(PlanError::Value(format!(
        "'{first}' is {} and '{other}' is {}: they share no figure to compare, even with \
         --mixed-tests (a bandwidth test's figure is its GB/s, a latency test's its p99; a \
         latency record's GB/s is a ping-pong's, one message in flight); give bandwidth \
         records only, or latency records only",
        shown(a),
        shown(b)
    )))
}

/// Compares everything but the figures.
pub(crate) fn differences(a: &RunRecord, b: &RunRecord) -> Differences {
    let mut w = device_differences(a, b);
    let (param_warnings, mut i) = param_differences(a, b);
    w.extend(param_warnings);
    w.extend(size_differences(a, b));
    i.extend(setup_differences(a, b));
    Differences {
        warnings: w,
        info: i,
    }
}

/// The differences in the device's model, link layer, link rate and MTU (warnings).
fn device_differences(a: &RunRecord, b: &RunRecord) -> Vec<Difference> {
    let mut w = Vec::new();
    let (da, db) = (&a.device, &b.device);
    push(
        &mut w,
        "device model (device.vendor_id/part_id)",
        model(a),
        model(b),
    );
    push(
        &mut w,
        "link layer (device.link_layer)",
        da.link_layer.clone(),
        db.link_layer.clone(),
    );
    push(
        &mut w,
        "link rate (device.active_speed)",
        opt(&da.active_speed),
        opt(&db.active_speed),
    );
    push(
        &mut w,
        "MTU (device.active_mtu)",
        da.active_mtu.to_string(),
        db.active_mtu.to_string(),
    );
    w
}

/// The differences in the parameters: the warnings, then the information.
fn param_differences(a: &RunRecord, b: &RunRecord) -> (Vec<Difference>, Vec<Difference>) {
    let mut w = Vec::new();
    let mut i = Vec::new();
    for param in PARAMS {
        let list = match param.compare {
            Compared::Warn => &mut w,
            Compared::Info => &mut i,
            Compared::Skip => continue,
        };
        let shown = |r: &RunRecord| (param.value)(&r.params).unwrap_or_else(|| "-".to_string());
        push(
            list,
            &format!("{} (params.{})", param.label, param.key),
            shown(a),
            shown(b),
        );
    }
    (w, i)
}

/// The difference in the message sizes measured, if any (a warning).
fn size_differences(a: &RunRecord, b: &RunRecord) -> Vec<Difference> {
    let mut w = Vec::new();
    let (sa, sb) = (sizes(a), sizes(b));
    if sa != sb {
        push(
            &mut w,
            "message sizes (results[].size)",
            describe_sizes(&sa),
            describe_sizes(&sb),
        );
    }
    w
}

/// The differences in firmware, host, tool, PCIe links and ceiling (information).
fn setup_differences(a: &RunRecord, b: &RunRecord) -> Vec<Difference> {
    let mut i = Vec::new();
    let (da, db) = (&a.device, &b.device);
    push(
        &mut i,
        "firmware (device.fw_ver)",
        da.fw_ver.clone(),
        db.fw_ver.clone(),
    );
    push(
        &mut i,
        "kernel (host.kernel)",
        opt(&a.host.kernel),
        opt(&b.host.kernel),
    );
    push(
        &mut i,
        "host (host.hostname)",
        opt(&a.host.hostname),
        opt(&b.host.hostname),
    );
    push(
        &mut i,
        "device name (device.name)",
        da.name.clone(),
        db.name.clone(),
    );
    push(&mut i, "tool (tool.version, tool.git)", tool(a), tool(b));
    push(
        &mut i,
        "NIC PCIe link (pcie.nic)",
        link(&a.pcie.nic),
        link(&b.pcie.nic),
    );
    push(
        &mut i,
        "GPU PCIe link (pcie.gpu)",
        link(&a.pcie.gpu),
        link(&b.pcie.gpu),
    );
    push(
        &mut i,
        "NIC-GPU path (pcie.path_class)",
        opt(&a.pcie.path_class),
        opt(&b.pcie.path_class),
    );
    push(
        &mut i,
        "binding ceiling (ceilings.limit)",
        ceiling(a),
        ceiling(b),
    );
    i
}

fn tool(r: &RunRecord) -> String {
    match &r.tool.git {
        Some(g) => format!("{} ({g})", r.tool.version),
        None => r.tool.version.clone(),
    }
}

fn ceiling(r: &RunRecord) -> String {
    match (&r.ceilings.limit, r.ceilings.limit_gbps) {
        (Some(l), Some(g)) => format!("{l} {g:.3} GB/s"),
        (Some(l), None) => l.clone(),
        _ => "unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::tests::{lat_record, record};

    #[test]
    fn records_of_different_tests_are_refused_unless_mixed() {
        let bw = record("write-bw", &[(65536, 1.0)]);
        let read = record("read-bw", &[(65536, 1.0)]);
        let lat = lat_record(&[2], &[(1.0, 2.0)]);
        let (same, two) = (Together::SameTest, Together::SameMeasure);
        assert!(check_together(&[("a", &bw), ("b", &bw.clone())], same, false).is_ok());
        let err = check_together(&[("a", &bw), ("b", &bw), ("c", &read)], same, false);
        assert!(err
            .unwrap_err()
            .message()
            .starts_with("'a' is write-bw (bandwidth) and 'c' is read-bw (bandwidth): a verdict"));
        assert!(check_together(&[("a", &bw), ("c", &read)], same, true).is_ok());
        // A chart takes several bandwidth tests, but not bandwidth with latency.
        assert!(check_together(&[("a", &bw), ("c", &read)], two, false).is_ok());
        let err = check_together(&[("a", &bw), ("l", &lat)], two, false).unwrap_err();
        assert!(
            err.message().contains("'l' is write-lat (latency)"),
            "{err}"
        );
        assert!(check_together(&[("a", &bw), ("l", &lat)], two, true).is_ok());
        // A test this version does not know is judged by its figures.
        let mut odd = lat.clone();
        odd.params.test = "future-test".to_string();
        assert_eq!(measure(&odd), "latency");
        assert_eq!(measure(&bw), "bandwidth");
    }

    #[test]
    fn bandwidth_and_latency_records_share_no_figure() {
        let bw = record("write-bw", &[(65536, 1.0)]);
        let read = record("read-bw", &[(65536, 1.0)]);
        let lat = lat_record(&[2], &[(1.0, 2.0)]);
        let mut read_lat = lat.clone();
        read_lat.params.test = "read-lat".to_string();
        assert!(check_shared_figure(&[("a", &bw), ("c", &read)]).is_ok());
        assert!(check_shared_figure(&[("l", &lat), ("r", &read_lat)]).is_ok());
        let err = check_shared_figure(&[("a", &bw), ("c", &read), ("l", &lat)]).unwrap_err();
        assert!(
            err.message().starts_with(
                "'a' is write-bw (bandwidth) and 'l' is write-lat (latency): they share no \
                 figure to compare, even with --mixed-tests"
            ),
            "{err}"
        );
    }

    #[test]
    fn identical_records_differ_in_nothing() {
        let a = record("write-bw", &[(65536, 1.0)]);
        let d = differences(&a, &a.clone());
        assert!(d.warnings.is_empty() && d.info.is_empty(), "{d:?}");
    }

    #[test]
    fn firmware_kernel_and_host_are_information_not_warnings() {
        let a = record("write-bw", &[(65536, 1.0)]);
        let mut b = a.clone();
        b.device.fw_ver = "28.40.1000".to_string();
        b.host.kernel = Some("6.8.0".to_string());
        b.host.hostname = Some("node9".to_string());
        let d = differences(&a, &b);
        assert!(d.warnings.is_empty(), "{d:?}");
        let whats: Vec<&str> = d.info.iter().map(|x| x.what.as_str()).collect();
        assert!(whats.iter().any(|w| w.contains("fw_ver")), "{whats:?}");
        assert!(whats.iter().any(|w| w.contains("host.kernel")), "{whats:?}");
        let fw = d.info.iter().find(|x| x.what.contains("fw_ver")).unwrap();
        assert_eq!(
            (fw.baseline.as_str(), fw.candidate.as_str()),
            ("28.39.1002", "28.40.1000")
        );
    }

    #[test]
    fn what_makes_records_incomparable_is_warned_and_named() {
        let a = record("write-bw", &[(4096, 1.0), (65536, 1.0)]);
        let mut b = a.clone();
        b.device.part_id = 4131;
        b.device.active_speed = Some("200 Gb/sec (4X HDR)".to_string());
        b.device.active_mtu = 1024;
        b.params.mem = "cuda:0".to_string();
        b.params.test = "read-bw".to_string();
        b.params.connection = "UC".to_string();
        b.params.qps = 4;
        b.params.tx_depth = Some(64);
        b.params.inline = 64;
        b.params.post_list = Some(8);
        b.params.cq_mod = Some(16);
        b.results.pop();
        let d = differences(&a, &b);
        let whats: Vec<&str> = d.warnings.iter().map(|x| x.what.as_str()).collect();
        for field in [
            "params.test",
            "vendor_id/part_id",
            "active_speed",
            "active_mtu",
            "params.mem",
            "params.connection",
            "params.qps",
            "params.tx_depth",
            "params.inline",
            "params.post_list",
            "params.cq_mod",
            "results[].size",
        ] {
            assert!(
                whats.iter().any(|w| w.contains(field)),
                "{field} not in {whats:?}"
            );
        }
        let mtu = d.warnings.iter().find(|x| x.what.contains("MTU")).unwrap();
        assert_eq!(
            (mtu.baseline.as_str(), mtu.candidate.as_str()),
            ("4096", "1024")
        );
        let sizes = d
            .warnings
            .iter()
            .find(|x| x.what.contains("sizes"))
            .unwrap();
        assert_eq!(sizes.baseline, "2 sizes, 4 KiB .. 64 KiB");
        assert_eq!(sizes.candidate, "4 KiB");
        assert!(d.info.is_empty(), "{d:?}");
    }
}
