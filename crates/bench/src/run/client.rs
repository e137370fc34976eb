//! The client: sends the plan, drives the measured loops, reports each size to the server.

use anyhow::{bail, Context, Result};

use super::{record, started_at, Outcome, Printer, RunOptions};
use crate::ceilings::run_limits;
use crate::control::{Channel, Message};
use crate::engine::bw::{measure_writes, LoopShape};
use crate::engine::{Connected, Local};
use crate::memory::fill_pattern;
use crate::plan::TestPlan;
use crate::report::SizeResult;

/// Runs the client side against the server at `host`:`port`.
pub fn run_client(opts: &RunOptions, plan: &TestPlan, host: &str, port: u16) -> Result<Outcome> {
    let started = started_at();
    let local = Local::open(&opts.side)?;
    let mut ch = Channel::connect(host, port, opts.timeout)?;
    match drive(opts, plan, &mut ch, local, started) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            ch.reject(&format!("the client failed: {e:#}"));
            Err(e)
        }
    }
}

fn drive(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    local: Local,
    started: String,
) -> Result<Outcome> {
    ch.send(&Message::Plan(plan.clone()))?;
    ch.expect("PlanAccepted")?;
    let prepared = local.prepare(plan)?;
    ch.send(&Message::Endpoints {
        qps: prepared.endpoints(),
    })?;
    let Message::Endpoints { qps: remote } = ch.expect("Endpoints")? else {
        bail!("protocol error: expected the server's endpoints");
    };
    let mut side = prepared.connect(remote)?;
    ch.send(&Message::Ready)?;
    ch.expect("Ready")?;

    let printer = Printer {
        quiet: opts.quiet,
        gbits: opts.report_gbits,
    };
    let limits = run_limits(&side);
    printer.header("client", &side, plan, &limits);
    let mut results = Vec::with_capacity(plan.sizes.len());
    for &size in &plan.sizes {
        let r = run_size(opts, plan, ch, &mut side, size, limits.limit_gbps())
            .with_context(|| format!("size {size} bytes"))?;
        printer.row(&r);
        results.push(r);
    }
    ch.send(&Message::Finish)?;
    printer.footer();
    Ok(Outcome {
        record: record(&side, plan, &limits, started, results),
    })
}

fn run_size(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    size: u64,
    ceiling_gbps: Option<f64>,
) -> Result<SizeResult> {
    ch.send(&Message::StartSize { size })?;
    ch.expect("Ready")?;
    if plan.validate {
        for q in 0..side.qps.len() {
            fill_pattern(side.slot_bytes_mut(q, size)?, q as u32, size);
        }
    }
    let size32 = u32::try_from(size).context("message size above 4 GiB")?;
    let shape = LoopShape {
        size: size32,
        iters: plan.iters,
        tx_depth: plan.tx_depth,
        post_list: plan.post_list,
        cq_mod: plan.cq_mod,
        inline: plan.inline > 0 && size <= u64::from(plan.inline),
        stall_timeout: opts.timeout,
    };
    // Warm-up: one full pipe per QP, not timed.
    let warm = LoopShape {
        iters: plan.iters.min(u64::from(plan.tx_depth)),
        ..shape
    };
    let window = ch.with_heartbeat(|| -> Result<_> {
        measure_writes(side, &warm)?;
        measure_writes(side, &shape)
    })??;
    let result =
        SizeResult::from_window(size, window.ops, window.seconds)?.with_ceiling(ceiling_gbps);
    ch.send(&Message::SizeDone(result.clone()))?;
    match ch.expect("Validated")? {
        Message::Validated { ok: false, detail } => bail!("the server found wrong bytes: {detail}"),
        _ => Ok(result),
    }
}
