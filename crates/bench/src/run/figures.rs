//! From measured windows to the figures both sides report: the client's own figures, the
//! server's part combined in (what a SEND receiver counted, the other direction of `-b`),
//! and repetitions folded into medians.

use anyhow::{bail, Result};

use crate::engine::bw::Window;
use crate::engine::lat::LatMeasured;
use crate::histogram::LatencyRecorder;
use crate::plan::{Mode, TestPlan, Verb};
use crate::report::{
    DirectionFigures, Directions, LatencyStats, Repetition, SizeResult, WindowFacts,
};

/// Figures from one window, with what it held.
pub fn from_window(size: u64, w: Window) -> Result<SizeResult> {
    let mut r = SizeResult::from_window(size, w.ops, w.seconds).map_err(|e| {
        e.context(format!(
            "{} completion event(s) in the window; raise -D or --timeout",
            w.events
        ))
    })?;
    r.window = Some(facts(w));
    Ok(r)
}

/// What window `w` held.
pub fn facts(w: Window) -> WindowFacts {
    WindowFacts {
        completions: w.events,
        signal_every: None,
        extended_s: (!w.extended.is_zero()).then_some(w.extended.as_secs_f64()),
    }
}

/// A latency loop's figures, with its statistics and histogram.
pub fn from_latency(size: u64, m: &LatMeasured) -> Result<SizeResult> {
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
pub struct ServerPart {
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
}

/// The figures both sides report for one size (the client's peak of operations in flight
/// stays with them).
pub fn combine(
    plan: &TestPlan,
    size: u64,
    client: SizeResult,
    server: ServerPart,
) -> Result<SizeResult> {
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
        let mut sum = SizeResult::from_window(
            size,
            client.iterations + back.iterations,
            client.seconds.max(back.seconds),
        )?;
        // The sum of two rates, not the rate of the sum over the longer window.
        sum.bw_gbps = client.bw_gbps + back.bw_gbps;
        sum.gbits = client.gbits + back.gbits;
        sum.msg_rate_mpps = client.msg_rate_mpps + back.msg_rate_mpps;
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
        let seconds = match server.received {
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
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
pub fn fold_windows<'a>(results: impl IntoIterator<Item = &'a SizeResult>) -> Option<WindowFacts> {
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
pub fn aggregate(reps: Vec<SizeResult>) -> Result<SizeResult> {
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
}
