//! The client's figures as the server takes them: input from a peer, checked before they are
//! combined, printed or recorded. Each must be a measurement of the size started under the
//! plan: its counts within the plan's, its window no longer than the server saw the size
//! last, its rates within the run's ceilings, every number finite and each derived figure
//! the one its counts make. A figure that is none is refused, naming it, and ends the run.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::histogram::LatencyRecorder;
use crate::plan::{Mode, TestPlan};
use crate::report::{IntervalFigure, IntervalFigures, LatencyStats, SizeResult};
use crate::run::limits::{ReportBound, MAX_MPPS};

/// An honest client's window never outlasts the size on the server, by construction: the
/// server's time runs from just before it sends `Ready` to just after the client's `SizeDone`
/// arrives, and the client's window from after `Ready` arrived to before it sent `SizeDone`,
/// so the control messages' delays on any link, however slow, lengthen only the server's
/// time. Both are read on a monotonic clock (a latency loop's TSC only divides the loop's
/// monotonic length, `engine/lat.rs`), so what is left between them is the two hosts' clock
/// rates, a few hundred parts per million apart at most. The window may pass the server's
/// time by this factor...
const SEEN_SLACK: f64 = 1.1;
/// ... and by this much (scheduling around the two reads of each side's clock).
const SEEN_MARGIN: Duration = Duration::from_millis(50);

/// Checks the figures `r` a client reported for the size `size` it started under `plan`:
/// `bound` is the most bandwidth its direction may show, `seen` how long the size lasted on
/// the server (from its `Ready` to the client's `SizeDone`), when known.
pub(crate) fn check_client(
    plan: &TestPlan,
    size: u64,
    r: &SizeResult,
    bound: &ReportBound,
    seen: Option<Duration>,
) -> Result<()> {
    if r.size != size {
        bail!(
            "the client reported figures for size {} after it started size {size}: not a \
             measurement of the size started",
            r.size
        );
    }
    check_count(plan, size, r)?;
    check_seconds(size, r, seen)?;
    check_rates(size, r, bound)?;
    if !r.repetitions.is_empty() {
        bail!(
            "the client reported {} repetitions for size {size} in one step: a step is one \
             repetition, folded by each side",
            r.repetitions.len()
        );
    }
    if r.directions.is_some() {
        bail!(
            "the client reported both directions for size {size}: it measures its own, the \
             server the other"
        );
    }
    match plan.test.mode {
        Mode::Bw => {
            check_intervals(plan, size, r, bound)?;
            check_bw_facts(plan, size, r, seen)
        }
        Mode::Lat => check_latency(size, r),
    }
}

/// The operations each QP carried (`SizeDone`'s `ops_per_qp`): one count per QP of the plan
/// at most.
pub(crate) fn check_ops_per_qp(plan: &TestPlan, size: u64, ops_per_qp: &[u64]) -> Result<()> {
    let qps = usize::try_from(plan.qps.max(1)).unwrap_or(usize::MAX);
    if ops_per_qp.len() > qps {
        bail!(
            "the client reported operations of {} QPs for size {size}; the plan has {qps}",
            ops_per_qp.len()
        );
    }
    Ok(())
}

/// At least one operation, and without `-D` no more than the plan posts.
fn check_count(plan: &TestPlan, size: u64, r: &SizeResult) -> Result<()> {
    let n = r.iterations;
    if n == 0 {
        bail!(
            "the client reported 0 operations for size {size}: not a measurement (a window \
             holds at least one)"
        );
    }
    if plan.duration.is_some() {
        // Bounded below by the window the server saw and the ceiling's rates.
        return Ok(());
    }
    let qps = plan.qps.max(1);
    let most = plan.iters.saturating_mul(u64::from(qps));
    if n > most {
        bail!(
            "the client reported {n} operations for size {size}, more than the plan's {most} \
             (-n {} x {qps} QP{}): not a measurement",
            plan.iters,
            if qps == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// A window of finite length above 0 s, no longer than the size lasted on the server.
fn check_seconds(size: u64, r: &SizeResult, seen: Option<Duration>) -> Result<()> {
    let s = r.seconds;
    if !(s.is_finite() && s > 0.0) {
        bail!(
            "the client reported {} operations in {s:?} s for size {size}: not a measurement \
             (a window lasts a finite time above 0 s)",
            r.iterations
        );
    }
    if let Some(seen) = seen {
        let most = seen.as_secs_f64() * SEEN_SLACK + SEEN_MARGIN.as_secs_f64();
        if s > most {
            bail!(
                "the client reported a window of {s:?} s for size {size}, longer than the \
                 {:.3} s the size lasted on the server: not a measurement",
                seen.as_secs_f64()
            );
        }
    }
    Ok(())
}

/// The rates its counts make within `bound` and [`MAX_MPPS`], and the rates it reported
/// those.
fn check_rates(size: u64, r: &SizeResult, bound: &ReportBound) -> Result<()> {
    let (n, s) = (r.iterations, r.seconds);
    let own = SizeResult::from_window(size, n, s)?;
    if !(own.bw_gbps <= bound.gbps && own.msg_rate_mpps <= MAX_MPPS) {
        bail!(
            "the client reported {n} operations in {s:?} s for size {size}: {:?} GB/s and \
             {:?} Mpps, above {} GB/s ({}) or {MAX_MPPS} Mpps: not a measurement",
            own.bw_gbps,
            own.msg_rate_mpps,
            bound.gbps,
            bound.why
        );
    }
    for (theirs, ours, unit) in [
        (r.bw_gbps, own.bw_gbps, "GB/s"),
        (r.gbits, own.gbits, "Gb/s"),
        (r.msg_rate_mpps, own.msg_rate_mpps, "Mpps"),
    ] {
        if !close(theirs, ours) {
            bail!(
                "the client reported {theirs:?} {unit} for size {size}, but its {n} operations \
                 in {s:?} s make {ours:?} {unit}: not a measurement"
            );
        }
    }
    Ok(())
}

/// Equal but for the last bits of two computations of one figure; never for a NaN.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// A bandwidth test's window facts: no latencies, operations in flight within the plan's
/// depths, completion events within the operations, signaling within `--cq-mod`, an
/// extension of finite length within what the server saw.
fn check_bw_facts(
    plan: &TestPlan,
    size: u64,
    r: &SizeResult,
    seen: Option<Duration>,
) -> Result<()> {
    if r.lat_us.is_some() || r.hdr.is_some() {
        bail!("the client reported latencies for size {size} of a bandwidth test");
    }
    let depth = u64::from(plan.tx_depth.max(plan.rx_depth));
    if let Some(n) = r.in_flight_max.filter(|&n| n > depth) {
        bail!(
            "the client reported {n} operations in flight on one QP for size {size}, more than \
             the plan's depth of {depth}"
        );
    }
    let Some(w) = r.window else {
        return Ok(());
    };
    if w.completions > r.iterations {
        bail!(
            "the client reported {} completion events for size {size}, more than its {} \
             operations",
            w.completions,
            r.iterations
        );
    }
    let cq_mod = plan.cq_mod.max(1);
    if let Some(e) = w.signal_every.filter(|&e| e == 0 || e > cq_mod) {
        bail!(
            "the client reported a completion every {e} operations per QP for size {size}; \
             --cq-mod {cq_mod} allows 1 to {cq_mod}"
        );
    }
    let most = seen.map_or(f64::MAX, |d| {
        d.as_secs_f64() * SEEN_SLACK + SEEN_MARGIN.as_secs_f64()
    });
    if let Some(x) = w
        .extended_s
        .filter(|&x| !(x.is_finite() && x >= 0.0 && x <= most))
    {
        bail!(
            "the client reported its window for size {size} extended by {x:?} s: not a \
             measurement (finite, from 0 s to the time the size lasted on the server)"
        );
    }
    Ok(())
}

/// `--interval`: intervals only under a plan that has it, at its length; they partition the
/// window (in order, their operations adding up to the figure's, ending within it), each a
/// rate its counts make within `bound`; and the worst interval, its share of the median and
/// the variation are the ones the list makes.
fn check_intervals(plan: &TestPlan, size: u64, r: &SizeResult, bound: &ReportBound) -> Result<()> {
    let Some(got) = &r.intervals else {
        return Ok(());
    };
    let no = |what: String| -> Result<()> {
        bail!("the client reported intervals for size {size} {what}: not a measurement")
    };
    let Some(every) = plan.interval.filter(|e| close(*e, got.every_s)) else {
        return no(format!(
            "{:?} s long; the plan's --interval is {:?}",
            got.every_s, plan.interval
        ));
    };
    let most = (r.seconds / every).ceil() as usize + 2;
    if got.list.len() > most {
        return no(format!(
            "that are {}, more than a window of {:?} s holds",
            got.list.len(),
            r.seconds
        ));
    }
    let (mut at, mut ops) = (0.0_f64, 0_u64);
    for i in &got.list {
        let own = IntervalFigure::new(size, i.start_s, i.seconds, i.iterations);
        let whole = i.start_s.is_finite() && i.seconds.is_finite() && i.seconds > 0.0;
        if !(whole && i.start_s >= at - 1e-9 && close(i.bw_gbps, own.bw_gbps))
            || own.bw_gbps > bound.gbps
        {
            return no(format!(
                "with {i:?} (in order, a rate its counts make, within {} GB/s)",
                bound.gbps
            ));
        }
        at = i.end_s();
        ops = ops.saturating_add(i.iterations);
    }
    if ops != r.iterations || at > r.seconds * (1.0 + 1e-9) + 1e-9 {
        return no(format!(
            "that hold {ops} operations up to {at:?} s, where the window holds {} in {:?} s",
            r.iterations, r.seconds
        ));
    }
    let own = IntervalFigures::from_list(every, got.list.clone());
    let same = own.as_ref().is_some_and(|o| {
        o.worst == got.worst
            && close(o.worst_pct_of_median, got.worst_pct_of_median)
            && (close(o.cov, got.cov) || (o.cov - got.cov).abs() < 1e-12)
    });
    if !same {
        return no(format!(
            "whose worst interval or variation its list does not make ({own:?})"
        ));
    }
    Ok(())
}

/// A latency test's statistics and histogram: the histogram decodes (within its bounds),
/// holds one latency per round trip reported, and makes the statistics reported.
fn check_latency(size: u64, r: &SizeResult) -> Result<()> {
    let (Some(stats), Some(hdr)) = (&r.lat_us, &r.hdr) else {
        bail!("the client reported no latency statistics or histogram for size {size}");
    };
    let hist = LatencyRecorder::from_base64(hdr)
        .with_context(|| format!("the client's histogram for size {size}"))?;
    if hist.len() != r.iterations {
        bail!(
            "the client's histogram for size {size} holds {} latencies, its figures {} round \
             trips",
            hist.len(),
            r.iterations
        );
    }
    let own = hist.stats()?;
    if !same_stats(stats, &own) {
        bail!(
            "the client reported latencies for size {size} ({stats:?}) that its histogram does \
             not make ({own:?})"
        );
    }
    Ok(())
}

fn same_stats(a: &LatencyStats, b: &LatencyStats) -> bool {
    let fields = |s: &LatencyStats| {
        [
            s.min, s.p50, s.p90, s.p99, s.p999, s.p9999, s.max, s.mean, s.stdev,
        ]
    };
    fields(a)
        .iter()
        .zip(fields(b))
        .all(|(&x, y)| close(x, y) || (x - y).abs() < 1e-12)
}
