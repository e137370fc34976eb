//! The figures and the record of a multi-rail run, all rails together: pure functions of the
//! rails' own records. Bandwidth is summed over the rails (each size's rails ran at the same
//! time: the clients start every size together); a latency test's rails are each their own
//! ping-pong, and all of them together is the worst rail (the highest p99) of each size.

use crate::report::{
    CeilingsRecord, DirectionFigures, Directions, IntervalFigures, RailRecord, Repetition,
    RunRecord, RunStatus, SizeResult,
};

/// Each size's figures of all rails (`rails[k]` is rail k's results), for the sizes every
/// rail measured, in rail 0's order; `lat`: a latency test. `ceiling_gbps` is the sum of the
/// rails' ceilings, which the summed bandwidth is judged against.
pub(crate) fn combine_sizes(
    rails: &[&[SizeResult]],
    lat: bool,
    ceiling_gbps: Option<f64>,
) -> Vec<SizeResult> {
    let Some(first) = rails.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in first.iter() {
        let parts: Vec<&SizeResult> = rails
            .iter()
            .filter_map(|results| results.iter().find(|x| x.size == r.size))
            .collect();
        if parts.len() != rails.len() {
            break;
        }
        out.push(if lat {
            worst(&parts)
        } else {
            summed(&parts).with_ceiling(ceiling_gbps)
        });
    }
    out
}

/// The rail with the highest p99 (the first of equals).
fn worst(parts: &[&SizeResult]) -> SizeResult {
    let p99 = |r: &SizeResult| r.lat_us.map_or(f64::NEG_INFINITY, |l| l.p99);
    let mut worst = parts[0];
    for r in parts {
        if p99(r) > p99(worst) {
            worst = r;
        }
    }
    worst.clone()
}

/// The rails' bandwidth figures added up; the window is the longest rail's.
fn summed(parts: &[&SizeResult]) -> SizeResult {
    let sum = |f: fn(&SizeResult) -> f64| parts.iter().map(|r| f(r)).sum::<f64>();
    SizeResult {
        size: parts[0].size,
        iterations: parts.iter().map(|r| r.iterations).sum(),
        seconds: parts.iter().map(|r| r.seconds).fold(0.0, f64::max),
        bw_gbps: sum(|r| r.bw_gbps),
        gbits: sum(|r| r.gbits),
        msg_rate_mpps: sum(|r| r.msg_rate_mpps),
        pct_of_ceiling: None,
        lat_us: None,
        hdr: None,
        directions: summed_directions(parts),
        repetitions: summed_repetitions(parts),
        in_flight_max: parts.iter().filter_map(|r| r.in_flight_max).max(),
        window: crate::run::figures::fold_windows(parts.iter().copied()),
        intervals: IntervalFigures::summed(
            parts[0].size,
            &parts
                .iter()
                .map(|r| r.intervals.as_ref())
                .collect::<Vec<_>>(),
        ),
    }
}

fn add(a: &DirectionFigures, b: &DirectionFigures) -> DirectionFigures {
    DirectionFigures {
        iterations: a.iterations + b.iterations,
        seconds: a.seconds.max(b.seconds),
        bw_gbps: a.bw_gbps + b.bw_gbps,
        msg_rate_mpps: a.msg_rate_mpps + b.msg_rate_mpps,
    }
}

/// `-b`: each direction summed, when every rail has both.
fn summed_directions(parts: &[&SizeResult]) -> Option<Directions> {
    let mut all = parts.iter().map(|r| r.directions.as_ref());
    let mut acc = all.next()??.clone();
    for d in all {
        let d = d?;
        acc.client_to_server = add(&acc.client_to_server, &d.client_to_server);
        acc.server_to_client = add(&acc.server_to_client, &d.server_to_client);
    }
    Some(acc)
}

/// `--repeat`: repetition i of all rails summed, when every rail has the same repetitions.
fn summed_repetitions(parts: &[&SizeResult]) -> Vec<Repetition> {
    let n = parts[0].repetitions.len();
    if parts.iter().any(|r| r.repetitions.len() != n) {
        return Vec::new();
    }
    (0..n)
        .map(|i| {
            let reps: Vec<&Repetition> = parts.iter().map(|r| &r.repetitions[i]).collect();
            Repetition {
                iterations: reps.iter().map(|r| r.iterations).sum(),
                seconds: reps.iter().map(|r| r.seconds).fold(0.0, f64::max),
                bw_gbps: reps.iter().map(|r| r.bw_gbps).sum(),
                msg_rate_mpps: reps.iter().map(|r| r.msg_rate_mpps).sum(),
                lat_us: None,
            }
        })
        .collect()
}

/// The ceilings of all rails together: each one summed where every rail knows it; the
/// binding one named when every rail's is the same kind, else "mixed".
pub(crate) fn summed_ceilings(rails: &[&CeilingsRecord]) -> CeilingsRecord {
    let sum = |f: fn(&CeilingsRecord) -> Option<f64>| -> Option<f64> {
        rails.iter().map(|c| f(c)).sum::<Option<f64>>()
    };
    let limit = match rails.first().and_then(|c| c.limit.clone()) {
        Some(l) if rails.iter().all(|c| c.limit.as_deref() == Some(&l)) => Some(l),
        Some(_) => Some("mixed".to_string()),
        None => None,
    };
    CeilingsRecord {
        wire_gbps: sum(|c| c.wire_gbps),
        pcie_gbps: sum(|c| c.pcie_gbps),
        staged_gbps: sum(|c| c.staged_gbps),
        limit,
        limit_gbps: sum(|c| c.limit_gbps),
    }
}

/// The ceilings of `records`' devices, each device once: threads on one device (`--threads`)
/// share its ceilings, which the sum must not count twice.
pub(crate) fn device_ceilings<'a>(records: &[&'a RunRecord]) -> Vec<&'a CeilingsRecord> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for r in records {
        if !seen.contains(&r.device.name.as_str()) {
            seen.push(&r.device.name);
            out.push(&r.ceilings);
        }
    }
    out
}

/// One rail's entry of the combined record.
fn rail_entry(r: &RunRecord) -> RailRecord {
    RailRecord {
        device: r.device.clone(),
        pcie: r.pcie.clone(),
        ceilings: r.ceilings.clone(),
        gpu: r.gpu.clone(),
        cpus: r.params.cpus.clone(),
        numa_node: r.params.numa_node,
        counters: r.counters.clone(),
        status: r.status,
        error: r.error.clone(),
        results: r.results.clone(),
    }
}

/// How far the run got: failed if a rail failed, else incomplete if a rail is, else complete.
fn worst_status(records: &[&RunRecord]) -> RunStatus {
    let has = |s| records.iter().any(|r| r.status == s);
    if has(RunStatus::Failed) {
        RunStatus::Failed
    } else if has(RunStatus::Incomplete) {
        RunStatus::Incomplete
    } else {
        RunStatus::Complete
    }
}

/// The record of a run on `count` rails from the rails' records so far (`None`: a rail
/// that has none yet); `None` when no rail has one. The top level is rail 0's (its device,
/// parameters, PCIe facts), with the ceilings summed, every rail's warnings and notes, and
/// `results` all rails together (only once every rail has a record); `rails` holds each.
pub(crate) fn combined_record(records: &[Option<RunRecord>]) -> Option<RunRecord> {
    let present: Vec<&RunRecord> = records.iter().flatten().collect();
    let base = present.first()?;
    let all = present.len() == records.len();
    let ceilings = summed_ceilings(&device_ceilings(&present));
    let lat = base.params.latency.is_some();
    let results = if all {
        let each: Vec<&[SizeResult]> = present.iter().map(|r| r.results.as_slice()).collect();
        combine_sizes(&each, lat, ceilings.limit_gbps)
    } else {
        Vec::new()
    };
    let mut warnings = Vec::new();
    let mut notes = Vec::new();
    for r in &present {
        extend_unique(&mut warnings, &r.warnings);
        extend_unique(&mut notes, &r.notes);
    }
    let errors: Vec<String> = records
        .iter()
        .enumerate()
        .filter_map(|(k, r)| {
            let r = r.as_ref()?;
            Some(format!(
                "rail {k} ({}): {}",
                r.device.name,
                r.error.as_ref()?
            ))
        })
        .collect();
    Some(RunRecord {
        ceilings,
        counters: None,
        warnings,
        notes,
        status: worst_status(&present),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
        results,
        rails: present.iter().map(|r| rail_entry(r)).collect(),
        ..(*base).clone()
    })
}

fn extend_unique(into: &mut Vec<String>, from: &[String]) {
    for item in from {
        if !into.contains(item) {
            into.push(item.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::samples;

    fn bw(size: u64, gbps: f64) -> SizeResult {
        SizeResult::from_window(size, 1000, size as f64 * 1000.0 / (gbps * 1e9)).unwrap()
    }

    #[test]
    fn threads_on_one_device_share_its_ceiling() {
        let a = samples::write_bw().record;
        let mut other = a.clone();
        other.device.name = "mlx5_1".to_string();
        let one = a.ceilings.limit_gbps.unwrap();
        let two_threads = summed_ceilings(&device_ceilings(&[&a, &a]));
        assert_eq!(
            two_threads.limit_gbps,
            Some(one),
            "one device, counted once"
        );
        let two_rails = summed_ceilings(&device_ceilings(&[&a, &other]));
        assert_eq!(two_rails.limit_gbps, Some(2.0 * one));
    }

    #[test]
    fn bandwidth_is_summed_and_judged_against_the_summed_ceiling() {
        let a = [bw(4096, 10.0), bw(65536, 20.0)];
        let b = [bw(4096, 12.0), bw(65536, 22.0)];
        let all = combine_sizes(&[&a, &b], false, Some(50.0));
        assert_eq!(all.len(), 2);
        assert!((all[0].bw_gbps - 22.0).abs() < 1e-9, "{:?}", all[0]);
        assert!((all[1].bw_gbps - 42.0).abs() < 1e-9);
        assert!((all[1].pct_of_ceiling.unwrap() - 84.0).abs() < 1e-9);
        assert_eq!(all[0].iterations, 2000);
        assert!((all[1].gbits - (a[1].gbits + b[1].gbits)).abs() < 1e-9);
    }

    #[test]
    fn only_sizes_every_rail_measured_are_combined() {
        let a = [bw(4096, 10.0), bw(65536, 20.0)];
        let b = [bw(4096, 12.0)];
        let all = combine_sizes(&[&a, &b], false, None);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].pct_of_ceiling, None);
    }

    #[test]
    fn latency_takes_the_worst_rail() {
        let s = samples::write_lat().record.results;
        let mut slow = s[0].clone();
        if let Some(l) = slow.lat_us.as_mut() {
            l.p99 += 5.0;
        }
        let fast = [s[0].clone()];
        let slow_rail = [slow.clone()];
        assert_eq!(combine_sizes(&[&fast, &slow_rail], true, None), vec![slow]);
    }

    #[test]
    fn ceilings_add_up_and_a_mixed_limit_says_so() {
        let a = CeilingsRecord {
            wire_gbps: Some(48.0),
            pcie_gbps: Some(52.0),
            staged_gbps: None,
            limit: Some("wire".into()),
            limit_gbps: Some(48.0),
        };
        let b = CeilingsRecord {
            limit: Some("pcie".into()),
            limit_gbps: Some(40.0),
            ..a.clone()
        };
        let c = summed_ceilings(&[&a, &b]);
        assert_eq!(c.limit_gbps, Some(88.0));
        assert_eq!(c.limit.as_deref(), Some("mixed"));
        assert_eq!(c.staged_gbps, None);
        assert_eq!(summed_ceilings(&[&a, &a]).limit.as_deref(), Some("wire"));
    }

    #[test]
    fn the_combined_record_holds_every_rail_and_their_sum() {
        let mut a = samples::write_bw().record;
        let mut b = a.clone();
        b.device.name = "mlx5_1".into();
        b.status = RunStatus::Failed;
        b.error = Some("the peer closed the connection".into());
        a.notes = vec!["same".into()];
        b.notes = vec!["same".into(), "other".into()];
        let r = combined_record(&[Some(a.clone()), Some(b.clone())]).unwrap();
        assert_eq!(r.rails.len(), 2);
        assert_eq!(r.rails[1].device.name, "mlx5_1");
        assert_eq!(r.rails[0].results, a.results);
        assert_eq!(r.status, RunStatus::Failed);
        assert_eq!(
            r.error.as_deref(),
            Some("rail 1 (mlx5_1): the peer closed the connection")
        );
        assert_eq!(r.notes, vec!["same".to_string(), "other".to_string()]);
        let sum = a.results[0].bw_gbps + b.results[0].bw_gbps;
        assert!((r.results[0].bw_gbps - sum).abs() < 1e-9);
        // A rail without a record yet: no sums, the rails that have one.
        let partial = combined_record(&[Some(a), None]).unwrap();
        assert!(partial.results.is_empty());
        assert_eq!(partial.rails.len(), 1);
        assert!(combined_record(&[None, None]).is_none());
    }
}
