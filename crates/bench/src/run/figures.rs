//! From measured windows to the figures both sides report: the client's own figures, the
//! server's part combined in (what a SEND receiver counted, the other direction of `-b`),
//! and repetitions folded into medians. The client's figures reach the server as input:
//! `peer.rs` checks them before they are combined.

mod peer;

pub(crate) use peer::check_ops_per_qp;

use std::time::Duration;

use anyhow::{bail, Result};

use crate::engine::bw::{Intervals, Window};
use crate::engine::lat::LatMeasured;
use crate::histogram::LatencyRecorder;
use crate::plan::{Mode, TestPlan, Verb};
use crate::report::{
    DirectionFigures, Directions, IntervalFigure, IntervalFigures, LatencyStats, Repetition,
    SizeResult, WindowFacts,
};
use crate::run::limits::ReportBound;

/// Figures from one window, with what it held.
pub(crate) fn from_window(size: u64, w: Window) -> Result<SizeResult> {
    let mut r = SizeResult::from_window(size, w.ops, w.seconds).map_err(|e| {
        e.context(format!(
            "{} completion event(s) in the window; raise -D or --timeout",
            w.events
        ))
    })?;
    r.window = Some(facts(&w));
    r.intervals = w.intervals.as_ref().and_then(|i| interval_figures(size, i));
    Ok(r)
}

/// The figures of a window's intervals (`--interval`) of messages of `size` bytes.
fn interval_figures(size: u64, i: &Intervals) -> Option<IntervalFigures> {
    let list = i
        .list
        .iter()
        .map(|x| {
            let (start, length) = (x.start.as_secs_f64(), x.length.as_secs_f64());
            IntervalFigure::new(size, start, length, x.ops)
        })
        .collect();
    IntervalFigures::from_list(i.every.as_secs_f64(), list)
}

/// What window `w` held.
pub(crate) fn facts(w: &Window) -> WindowFacts {
    WindowFacts {
        completions: w.events,
        signal_every: None,
        extended_s: (!w.extended.is_zero()).then_some(w.extended.as_secs_f64()),
    }
}

/// A latency loop's figures, with its statistics and histogram.
pub(crate) fn from_latency(size: u64, m: &LatMeasured) -> Result<SizeResult> {
    let mut r = SizeResult::from_window(size, m.window.ops, m.window.seconds)?;
    r.lat_us = Some(m.hist.stats()?);
    r.hdr = Some(m.hist.to_base64()?);
    Ok(r)
}

fn direction(r: &SizeResult) -> DirectionFigures {
    DirectionFigures {
        iterations: r.iterations,
        seconds: r.seconds,
        bw_gbps: r.bw_gbps,
        msg_rate_mpps: r.msg_rate_mpps,
    }
}

/// What the server measured for one size.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerPart {
    /// Its own operations (`-b`).
    pub sent: Option<Window>,
    /// SENDs that arrived, counted and timed by the server.
    pub received: Option<Window>,
    /// SENDs that arrived in all.
    pub received_count: u64,
    /// The server staged what it received through host memory (`--mem cuda-staged`).
    pub staged: bool,
    /// Its own operations completed per QP (`-b`).
    pub ops_per_qp: Vec<u64>,
    /// How long the size lasted on the server, from its `Ready` to the client's `SizeDone`:
    /// no window the client reports is longer.
    pub seen: Option<Duration>,
    /// The most bandwidth the client may report for its direction.
    pub bound: ReportBound,
}

/// The figures both sides report for one size (the client's peak of operations in flight
/// stays with them), from the client's, refused unless they are a measurement of `size`
/// under `plan` within the server's bounds (`peer.rs`).
pub(crate) fn combine(
    plan: &TestPlan,
    size: u64,
    client: SizeResult,
    server: ServerPart,
) -> Result<SizeResult> {
    peer::check_client(plan, size, &client, &server.bound, server.seen)?;
    let (in_flight_max, window) = (client.in_flight_max, client.window);
    let mut r = combine_figures(plan, size, client, server)?;
    r.in_flight_max = in_flight_max;
    // A SEND receiver's window stands when its count is the figure.
    r.window = r.window.or(window);
    Ok(r)
}

fn combine_figures(
    plan: &TestPlan,
    size: u64,
    client: SizeResult,
    server: ServerPart,
) -> Result<SizeResult> {
    if plan.bidirectional {
        let Some(sent) = server.sent else {
            bail!("the server did not measure its direction of a bidirectional run");
        };
        let back = from_window(size, sent)?;
        let Some(iterations) = client.iterations.checked_add(back.iterations) else {
            bail!(
                "the client's {} and the server's {} operations for size {size} overflow a \
                 count: not a measurement",
                client.iterations,
                back.iterations
            );
        };
        let mut sum = SizeResult::from_window(size, iterations, client.seconds.max(back.seconds))?;
        // The sum of two rates, not the rate of the sum over the longer window.
        sum.bw_gbps = client.bw_gbps + back.bw_gbps;
        sum.gbits = client.gbits + back.gbits;
        sum.msg_rate_mpps = client.msg_rate_mpps + back.msg_rate_mpps;
        sum.intervals =
            IntervalFigures::summed(size, &[client.intervals.as_ref(), back.intervals.as_ref()]);
        sum.directions = Some(Directions {
            client_to_server: direction(&client),
            server_to_client: direction(&back),
        });
        return Ok(sum);
    }
    if plan.test.verb == Verb::Send && plan.test.mode == Mode::Bw {
        // Only completed receives count: UC and UD may lose messages. A staged receiver's
        // last copy to the GPU ends after the sender's last completion: the run lasts until
        // the data is where the application wants it.
        let seconds = match &server.received {
            Some(w) if server.staged => client.seconds.max(w.seconds),
            _ => client.seconds,
        };
        return match plan.duration {
            None => SizeResult::from_window(size, server.received_count, seconds),
            Some(_) => match server.received {
                Some(w) => from_window(size, w),
                None => bail!("no SEND arrived at the server during the measured window"),
            },
        };
    }
    Ok(client)
}

/// The median of `values` (`compare`'s), 0 for none.
fn median(values: Vec<f64>) -> f64 {
    model::stats::median(&values).unwrap_or(0.0)
}

/// Each latency statistic's median over the repetitions; `None` when there are none.
fn median_stats(reps: &[LatencyStats]) -> Option<LatencyStats> {
    if reps.is_empty() {
        return None;
    }
    let pick = |f: fn(&LatencyStats) -> f64| median(reps.iter().map(f).collect());
    Some(LatencyStats {
        min: pick(|l| l.min),
        p50: pick(|l| l.p50),
        p90: pick(|l| l.p90),
        p99: pick(|l| l.p99),
        p999: pick(|l| l.p999),
        p9999: pick(|l| l.p9999),
        max: pick(|l| l.max),
        mean: pick(|l| l.mean),
        stdev: pick(|l| l.stdev),
    })
}

/// Several windows together (repetitions, rails): the fewest completions, the most often
/// signaled, the longest extension.
pub(crate) fn fold_windows<'a>(
    results: impl IntoIterator<Item = &'a SizeResult>,
) -> Option<WindowFacts> {
    let all: Vec<WindowFacts> = results.into_iter().filter_map(|r| r.window).collect();
    let mut out = *all.first()?;
    out.completions = all.iter().map(|w| w.completions).min().unwrap_or(0);
    out.signal_every = all.iter().filter_map(|w| w.signal_every).min();
    out.extended_s = all.iter().filter_map(|w| w.extended_s).reduce(f64::max);
    Some(out)
}

/// Folds the repetitions of one size into one result: the median of each figure (latency
/// statistics included), the histograms pooled, and every repetition kept. One repetition
/// is returned as it is.
pub(crate) fn aggregate(reps: Vec<SizeResult>) -> Result<SizeResult> {
    let Some(first) = reps.first().cloned() else {
        bail!("no repetition to report");
    };
    if reps.len() == 1 {
        return Ok(first);
    }
    let pick = |f: fn(&SizeResult) -> f64| median(reps.iter().map(f).collect());
    let mut out = first.clone();
    out.iterations = pick(|r| r.iterations as f64).round() as u64;
    out.seconds = pick(|r| r.seconds);
    out.bw_gbps = pick(|r| r.bw_gbps);
    out.gbits = pick(|r| r.gbits);
    out.msg_rate_mpps = pick(|r| r.msg_rate_mpps);
    out.pct_of_ceiling = first
        .pct_of_ceiling
        .map(|_| pick(|r| r.pct_of_ceiling.unwrap_or(0.0)));
    out.directions = None;
    out.in_flight_max = reps.iter().filter_map(|r| r.in_flight_max).max();
    out.window = fold_windows(&reps);
    if first.hdr.is_some() {
        // Each statistic is the median of the repetitions' (as every other figure, and as
        // `compare` reads them); the histogram pools every repetition's samples.
        let stats: Vec<LatencyStats> = reps.iter().filter_map(|r| r.lat_us).collect();
        out.lat_us = median_stats(&stats);
        let mut merged = LatencyRecorder::new()?;
        for r in &reps {
            if let Some(h) = &r.hdr {
                merged.merge(&LatencyRecorder::from_base64(h)?)?;
            }
        }
        out.hdr = Some(merged.to_base64()?);
    }
    out.repetitions = reps
        .into_iter()
        .map(|r| Repetition {
            iterations: r.iterations,
            seconds: r.seconds,
            bw_gbps: r.bw_gbps,
            msg_rate_mpps: r.msg_rate_mpps,
            lat_us: r.lat_us,
        })
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, TestKind};

    fn plan(verb: Verb, b: bool, duration: Option<f64>) -> TestPlan {
        PlanRequest {
            bidirectional: b,
            duration,
            ..PlanRequest::default()
        }
        .resolve(TestKind::new(verb, Mode::Bw))
        .unwrap()
    }

    #[test]
    fn bidirectional_reports_both_directions_and_their_sum() {
        let client = SizeResult::from_window(4096, 1000, 1.0).unwrap();
        let server = ServerPart {
            sent: Some(Window {
                ops: 500,
                seconds: 0.5,
                ..Window::default()
            }),
            ..ServerPart::default()
        };
        let r = combine(&plan(Verb::Write, true, None), 4096, client.clone(), server).unwrap();
        let d = r.directions.as_ref().unwrap();
        assert_eq!(d.client_to_server.iterations, 1000);
        assert_eq!(d.server_to_client.iterations, 500);
        assert!((r.bw_gbps - 2.0 * client.bw_gbps).abs() < 1e-12, "{r:?}");
        assert_eq!(r.iterations, 1500);
    }

    #[test]
    fn a_send_counts_only_what_arrived() {
        let client = SizeResult::from_window(1024, 1000, 1.0).unwrap();
        let server = ServerPart {
            received_count: 900,
            ..ServerPart::default()
        };
        let r = combine(&plan(Verb::Send, false, None), 1024, client, server).unwrap();
        assert_eq!(r.iterations, 900);
        assert!((r.seconds - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_staged_receiver_counts_until_its_last_copy() {
        let client = SizeResult::from_window(1024, 1000, 1.0).unwrap();
        let mut server = ServerPart {
            received: Some(Window {
                ops: 1000,
                seconds: 1.25,
                ..Window::default()
            }),
            received_count: 1000,
            staged: true,
            ..ServerPart::default()
        };
        let r = combine(
            &plan(Verb::Send, false, None),
            1024,
            client.clone(),
            server.clone(),
        )
        .unwrap();
        assert!((r.seconds - 1.25).abs() < 1e-12, "{r:?}");
        server.staged = false;
        let r = combine(&plan(Verb::Send, false, None), 1024, client, server).unwrap();
        assert!((r.seconds - 1.0).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn write_figures_are_the_clients() {
        let client = SizeResult::from_window(1024, 1000, 1.0).unwrap();
        let r = combine(
            &plan(Verb::Write, false, None),
            1024,
            client.clone(),
            ServerPart::default(),
        )
        .unwrap();
        assert_eq!(r, client);
    }

    /// The client's figures of one 65536-byte size of a WRITE bandwidth run (5000
    /// iterations on one QP).
    fn reported(iterations: u64, seconds: f64) -> SizeResult {
        SizeResult::from_window(65536, iterations, seconds).unwrap()
    }

    /// What the server makes of figures a hostile client reports (no ceiling known, no time
    /// seen): each is refused naming the figure, never stored.
    fn refused(plan: &TestPlan, size: u64, client: SizeResult, server: ServerPart) -> String {
        match combine(plan, size, client.clone(), server) {
            Ok(r) => panic!("the server took {client:?} as {r:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn a_clients_figures_that_are_no_measurement_are_refused() {
        let write = plan(Verb::Write, false, None);
        let none = ServerPart::default;
        // A window of 5e-324 s makes an infinite bandwidth, which a record holds as null.
        let mut tiny = reported(1000, 1.0);
        tiny.seconds = 5e-324;
        let e = refused(&write, 65536, tiny, none());
        assert!(
            e.contains("the client reported 1000 operations in 5e-324 s for size 65536")
                && e.contains("not a measurement"),
            "{e}"
        );
        let e = refused(&write, 65536, reported(1000, 1e-300), none());
        assert!(
            e.contains("1e-300 s") && e.contains("not a measurement"),
            "{e}"
        );
        // More operations than the plan posts: -n 5000 on one QP.
        let e = refused(&write, 65536, reported(5001, 1.0), none());
        assert!(
            e.contains("5001 operations") && e.contains("-n 5000 x 1 QP"),
            "{e}"
        );
        let e = refused(&write, 65536, reported(0, 1.0), none());
        assert!(e.contains("0 operations"), "{e}");
        // Another size than the one started.
        let e = refused(&write, 4096, reported(1000, 1.0), none());
        assert!(
            e.contains("size 65536") && e.contains("started size 4096"),
            "{e}"
        );
        // A bandwidth its own counts do not make.
        let mut inflated = reported(1000, 1.0);
        inflated.bw_gbps = 1e300;
        let e = refused(&write, 65536, inflated, none());
        assert!(
            e.contains("1e300 GB/s") && e.contains("make 0.065536"),
            "{e}"
        );
    }

    #[test]
    fn a_client_reports_one_repetition_of_its_own_direction_only() {
        let write = plan(Verb::Write, false, None);
        let mut reps = reported(1000, 1.0);
        reps.repetitions = vec![
            Repetition {
                iterations: 1,
                seconds: 1.0,
                bw_gbps: 0.0,
                msg_rate_mpps: 0.0,
                lat_us: None,
            };
            3
        ];
        let e = refused(&write, 65536, reps, ServerPart::default());
        assert!(e.contains("3 repetitions"), "{e}");
        let mut both = reported(1000, 1.0);
        both.directions = Some(Directions {
            client_to_server: direction(&both),
            server_to_client: direction(&both),
        });
        let e = refused(&write, 65536, both, ServerPart::default());
        assert!(e.contains("directions"), "{e}");
    }

    #[test]
    fn a_bidirectional_sum_of_counts_never_overflows() {
        // -D has no count to bound the client's by: its sum with the server's overflows.
        let b = plan(Verb::Write, true, Some(5.0));
        let server = ServerPart {
            sent: Some(Window {
                ops: 500,
                seconds: 0.5,
                events: 50,
                ..Window::default()
            }),
            ..ServerPart::default()
        };
        let e = refused(&b, 65536, reported(u64::MAX, 1e300), server);
        assert!(e.contains("18446744073709551615"), "{e}");
    }

    /// What the server knows of a size that lasted `seen` seconds on a NIC whose figures
    /// are bounded at 30 GB/s.
    fn seen(seen: f64) -> ServerPart {
        ServerPart {
            seen: Some(Duration::from_secs_f64(seen)),
            bound: ReportBound {
                gbps: 30.0,
                why: "1.5 x the 20.000 GB/s PCIe ceiling of NIC 0000:17:00.0".to_string(),
            },
            ..ServerPart::default()
        }
    }

    /// A -D 10 --interval 1 window of 8 s: 1,000 operations a second, 10 in the fourth.
    fn cut_window() -> Window {
        let list: Vec<crate::engine::bw::Interval> = (0..8u64)
            .map(|k| crate::engine::bw::Interval {
                start: Duration::from_secs(k),
                length: Duration::from_secs(1),
                ops: if k == 3 { 10 } else { 1000 },
            })
            .collect();
        Window {
            ops: list.iter().map(|i| i.ops).sum(),
            seconds: 8.0,
            events: 160,
            intervals: Some(Intervals {
                every: Duration::from_secs(1),
                list,
            }),
            ..Window::default()
        }
    }

    fn cut_plan(b: bool) -> TestPlan {
        PlanRequest {
            bidirectional: b,
            duration: Some(10.0),
            interval: Some(1.0),
            ..PlanRequest::default()
        }
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .unwrap()
    }

    #[test]
    fn intervals_reach_the_figures_and_a_client_cannot_bend_them() {
        let r = from_window(65536, cut_window()).unwrap();
        let i = r.intervals.clone().unwrap();
        assert_eq!(
            (i.list.len(), i.worst.start_s, i.worst.iterations),
            (8, 3.0, 10)
        );
        assert!((i.worst_pct_of_median - 1.0).abs() < 1e-9, "{i:?}");
        let cut = cut_plan(false);
        assert_eq!(combine(&cut, 65536, r.clone(), seen(9.0)).unwrap(), r);

        let bent = |f: fn(&mut IntervalFigures)| {
            let mut r = r.clone();
            f(r.intervals.as_mut().unwrap());
            refused(&cut, 65536, r, seen(9.0))
        };
        let e = bent(|i| i.worst = i.list[0]);
        assert!(e.contains("worst interval or variation"), "{e}");
        let e = bent(|i| i.list[3].bw_gbps = 1.0);
        assert!(e.contains("a rate its counts make"), "{e}");
        let e = bent(|i| i.list[3] = IntervalFigure::new(65536, 3.0, 1.0, 11));
        assert!(
            e.contains("7011 operations") && e.contains("holds 7010"),
            "{e}"
        );
        let e = bent(|i| i.every_s = 0.5);
        assert!(e.contains("--interval"), "{e}");
        let e = refused(
            &plan(Verb::Write, false, Some(10.0)),
            65536,
            r.clone(),
            seen(9.0),
        );
        assert!(e.contains("the plan's --interval is None"), "{e}");

        // -b: each direction's interval k added up.
        let server = ServerPart {
            sent: Some(cut_window()),
            ..seen(9.0)
        };
        let sum = combine(&cut_plan(true), 65536, r, server).unwrap();
        let i = sum.intervals.unwrap();
        assert_eq!((i.list[0].iterations, i.worst.iterations), (2000, 20));
    }

    #[test]
    fn an_honest_clients_figures_pass_every_check() {
        let write = plan(Verb::Write, false, None);
        let mut r = reported(5000, 0.1);
        r.in_flight_max = Some(128);
        r.window = Some(WindowFacts {
            completions: 50,
            signal_every: Some(write.cq_mod),
            extended_s: None,
        });
        assert_eq!(combine(&write, 65536, r.clone(), seen(0.2)).unwrap(), r);
        let lat = PlanRequest::default()
            .resolve(TestKind::new(Verb::Write, Mode::Lat))
            .unwrap();
        let mut h = LatencyRecorder::new().unwrap();
        (1..=100).for_each(|i| h.record(1_000 + 37 * i));
        let m = LatMeasured {
            window: Window {
                ops: 100,
                seconds: 0.01,
                ..Window::default()
            },
            hist: h,
            total: 116,
        };
        let r = from_latency(2, &m).unwrap();
        assert_eq!(combine(&lat, 2, r.clone(), seen(0.05)).unwrap(), r);

        // Latencies its histogram does not make, or a histogram of other round trips.
        let mut faster = r.clone();
        faster.lat_us.as_mut().unwrap().p99 = 0.5;
        let e = refused(&lat, 2, faster, seen(0.05));
        assert!(e.contains("that its histogram does not make"), "{e}");
        let fewer = SizeResult {
            lat_us: r.lat_us,
            hdr: r.hdr.clone(),
            ..SizeResult::from_window(2, 99, 0.01).unwrap()
        };
        let e = refused(&lat, 2, fewer, seen(0.05));
        assert!(e.contains("holds 100 latencies, its figures 99"), "{e}");
        let mut lost = r;
        lost.hdr = None;
        let e = refused(&lat, 2, lost, seen(0.05));
        assert!(e.contains("no latency statistics or histogram"), "{e}");
    }

    #[test]
    fn a_slow_link_lengthens_the_time_the_server_saw_never_an_honest_window() {
        // The six-node guest's write-lat over its 5 Mbit/s uplink: the server saw size 2
        // last 5.90 s. An honest client's window lies inside that time on any link (the
        // link's delays lengthen only the server's part): taken up to all of it.
        let lat = PlanRequest::default()
            .resolve(TestKind::new(Verb::Write, Mode::Lat))
            .unwrap();
        let window = |seconds: f64| {
            let mut hist = LatencyRecorder::new().unwrap();
            (0..1000).for_each(|_| hist.record(2_950_000));
            let w = Window {
                ops: 1000,
                seconds,
                ..Window::default()
            };
            let m = LatMeasured {
                window: w,
                hist,
                total: 1016,
            };
            from_latency(2, &m).unwrap()
        };
        for s in [0.5, 5.0, 5.90] {
            assert!(combine(&lat, 2, window(s), seen(5.90)).is_ok(), "{s} s");
        }
        // 6.87 s came from a TSC calibrated wrong (`engine/lat.rs` now sets no window's
        // length by it): beyond the time the server saw, it is no measurement.
        let e = refused(&lat, 2, window(6.87), seen(5.90));
        assert!(
            e.contains("window of 6.87 s for size 2, longer than the 5.900 s"),
            "{e}"
        );
    }

    #[test]
    fn figures_beyond_the_ceiling_or_the_time_the_server_saw_are_refused() {
        let write = plan(Verb::Write, false, None);
        // 5000 x 65536 bytes in 0.01 s: 32.8 GB/s, above 1.5 x a 20 GB/s ceiling.
        let e = refused(&write, 65536, reported(5000, 0.01), seen(0.2));
        assert!(
            e.contains("above 30 GB/s (1.5 x the 20.000 GB/s PCIe ceiling of NIC 0000:17:00.0)"),
            "{e}"
        );
        // A window of 2 s in a size that lasted 0.5 s on the server.
        let e = refused(&write, 65536, reported(5000, 2.0), seen(0.5));
        assert!(e.contains("longer than the 0.500 s the size lasted"), "{e}");
        // -D: no count in the plan, the message rate bounds it.
        let d = plan(Verb::Write, false, Some(2.0));
        let mut r = SizeResult::from_window(2, 1 << 40, 1.0).unwrap();
        let e = refused(&d, 2, r.clone(), seen(1.5));
        assert!(e.contains("10000 Mpps"), "{e}");
        r = SizeResult::from_window(2, 1 << 20, 1.0).unwrap();
        r.window = Some(WindowFacts {
            completions: 1 << 21,
            signal_every: None,
            extended_s: None,
        });
        let e = refused(&d, 2, r.clone(), seen(1.5));
        assert!(e.contains("2097152 completion events"), "{e}");
        r.window = Some(WindowFacts {
            completions: 10,
            signal_every: Some(1000),
            extended_s: Some(1e300),
        });
        let e = refused(&d, 2, r.clone(), seen(1.5));
        let cq_mod = d.cq_mod;
        assert!(
            e.contains(&format!("--cq-mod {cq_mod} allows 1 to {cq_mod}")),
            "{e}"
        );
        r.window.as_mut().unwrap().signal_every = None;
        let e = refused(&d, 2, r.clone(), seen(1.5));
        assert!(e.contains("extended by 1e300 s"), "{e}");
        r.window = None;
        r.in_flight_max = Some(1 << 40);
        let e = refused(&d, 2, r, seen(1.5));
        assert!(e.contains("in flight"), "{e}");
        assert!(check_ops_per_qp(&d, 2, &[1, 2]).is_err());
        assert!(check_ops_per_qp(&d, 2, &[1]).is_ok());
    }

    #[test]
    fn repetitions_fold_into_medians_and_are_kept() {
        let reps: Vec<SizeResult> = [1.0, 3.0, 2.0]
            .iter()
            .map(|&s| SizeResult::from_window(1000, 1000, s).unwrap())
            .collect();
        let r = aggregate(reps).unwrap();
        assert_eq!(r.repetitions.len(), 3);
        assert!((r.seconds - 2.0).abs() < 1e-12);
        assert!((r.msg_rate_mpps - 0.0005).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn latency_repetitions_give_medians_and_a_pooled_histogram() {
        // Three repetitions, one with a long tail: the pooled p99 would be the tail's, the
        // median of the repetitions' p99s is the typical repetition's.
        let mut reps = Vec::new();
        for (base, tail) in [(1_000u64, 0u64), (2_000, 0), (3_000, 50_000)] {
            let mut h = LatencyRecorder::new().unwrap();
            for i in 0..100 {
                h.record(if i >= 97 && tail > 0 { tail } else { base + i });
            }
            let m = LatMeasured {
                window: Window {
                    ops: 100,
                    seconds: 0.1,
                    ..Window::default()
                },
                hist: h,
                total: 100,
            };
            reps.push(from_latency(2, &m).unwrap());
        }
        let p99s: Vec<f64> = reps.iter().map(|r| r.lat_us.unwrap().p99).collect();
        let r = aggregate(reps).unwrap();
        let back = LatencyRecorder::from_base64(r.hdr.as_ref().unwrap()).unwrap();
        assert_eq!(back.len(), 300, "the histogram pools every sample");
        let lat = r.lat_us.unwrap();
        assert_eq!(lat.p99, median(p99s.clone()), "{lat:?} {p99s:?}");
        assert_eq!(lat.p99, r.repetitions[1].lat_us.unwrap().p99);
        assert!(
            lat.min > 1.9 && lat.max < 3.2,
            "medians, not pooled: {lat:?}"
        );
    }

    /// Any number in the likeness of a figure: ordinary, tiny, huge, zero, negative or not
    /// a number at all.
    fn any_number() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        prop_oneof![
            0.0..1e3f64,
            Just(5e-324),
            Just(f64::MAX),
            Just(0.0),
            Just(-1.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            any::<f64>(),
        ]
    }

    /// 64 cases, unless PROPTEST_CASES says otherwise (the long run).
    fn fuzz_config() -> proptest::prelude::ProptestConfig {
        let mut config = proptest::prelude::ProptestConfig::default();
        if std::env::var_os("PROPTEST_CASES").is_none() {
            config.cases = 64;
        }
        config.failure_persistence = None;
        config
    }

    proptest::proptest! {
        #![proptest_config(fuzz_config())]

        /// Whatever figures a client reports, the server takes none that is not finite,
        /// or a bandwidth beyond its bound, or a window longer than it saw the size last
        /// (a fuzz target of the long run in docs/server-safety.md).
        #[test]
        fn a_clients_figures_are_refused_or_finite_and_within_bounds(
            iterations in proptest::prelude::any::<u64>(),
            seconds in any_number(),
            bw in any_number(),
            rate in any_number(),
            gbits in any_number(),
        ) {
            let write = plan(Verb::Write, false, None);
            let r = SizeResult {
                iterations,
                seconds,
                bw_gbps: bw,
                msg_rate_mpps: rate,
                gbits,
                ..reported(1, 1.0)
            };
            if let Ok(took) = combine(&write, 65536, r, seen(0.2)) {
                for v in [took.seconds, took.bw_gbps, took.msg_rate_mpps, took.gbits] {
                    proptest::prop_assert!(v.is_finite() && v >= 0.0, "{took:?}");
                }
                proptest::prop_assert!(took.bw_gbps <= 30.0, "{took:?}");
                proptest::prop_assert!(took.seconds <= 0.2 * 1.1 + 0.05, "{took:?}");
            }
        }
    }
}
