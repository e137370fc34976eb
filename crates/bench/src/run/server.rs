//! The server: adopts the client's plan, lends its buffer to the client's writes, checks the
//! payload when asked, and prints the same figures the client measured.

use anyhow::{bail, Result};

use super::{record, started_at, Outcome, Printer, RunOptions};
use crate::ceilings::run_limits;
use crate::control::{Channel, Listener, Message};
use crate::engine::{Connected, Local};
use crate::memory::check_pattern;
use crate::plan::TestPlan;

/// Opens this side's device, then waits for one client on `listener` and serves its run.
pub fn run_server(opts: &RunOptions, listener: &Listener) -> Result<Outcome> {
    let started = started_at();
    let local = Local::open(&opts.side)?;
    let mut ch = listener.accept_client(opts.timeout)?;
    if !opts.quiet {
        println!("rdmabench: client {} connected", ch.peer());
    }
    match serve(opts, &mut ch, local, started) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            ch.reject(&format!("the server failed: {e:#}"));
            Err(e)
        }
    }
}

fn serve(opts: &RunOptions, ch: &mut Channel, local: Local, started: String) -> Result<Outcome> {
    let Message::Plan(asked) = ch.expect("Plan")? else {
        bail!("protocol error: expected the client's plan");
    };
    let plan = TestPlan::adopt(asked, opts.test, &opts.request)?;
    ch.send(&Message::PlanAccepted)?;
    let prepared = local.prepare(&plan)?;
    let Message::Endpoints { qps: remote } = ch.expect("Endpoints")? else {
        bail!("protocol error: expected the client's endpoints");
    };
    ch.send(&Message::Endpoints {
        qps: prepared.endpoints(),
    })?;
    let mut side = prepared.connect(remote)?;
    ch.expect("Ready")?;
    ch.send(&Message::Ready)?;

    let printer = Printer {
        quiet: opts.quiet,
        gbits: opts.report_gbits,
    };
    let limits = run_limits(&side);
    printer.header("server", &side, &plan, &limits);
    let mut results = Vec::with_capacity(plan.sizes.len());
    let mut current = None;
    loop {
        match ch.recv("the client's next step")? {
            Message::StartSize { size } => {
                if !plan.sizes.contains(&size) {
                    bail!("the client started size {size}, which is not in the plan");
                }
                for q in 0..side.qps.len() {
                    side.slot_bytes_mut(q, size)?.fill(0);
                }
                current = Some(size);
                ch.send(&Message::Ready)?;
            }
            Message::Heartbeat => {}
            Message::SizeDone(r) => {
                if current != Some(r.size) {
                    bail!("the client reported size {} before starting it", r.size);
                }
                let verdict = validate(&side, &plan, r.size);
                ch.send(&Message::Validated {
                    ok: verdict.is_ok(),
                    detail: verdict.clone().unwrap_or_else(|e| e),
                })?;
                if let Err(detail) = verdict {
                    bail!("payload check failed: {detail}");
                }
                printer.row(&r);
                results.push(r);
            }
            Message::Finish => break,
            other => bail!(
                "protocol error: unexpected {} from the client",
                other.name()
            ),
        }
    }
    printer.footer();
    Ok(Outcome {
        record: record(&side, &plan, &limits, started, results),
    })
}

/// Checks every QP's slot carries the client's pattern for `size`.
fn validate(side: &Connected, plan: &TestPlan, size: u64) -> Result<String, String> {
    if !plan.validate {
        return Ok("not checked".to_string());
    }
    for q in 0..side.qps.len() {
        let bytes = side.slot_bytes(q, size).map_err(|e| e.to_string())?;
        check_pattern(bytes, q as u32, size)?;
    }
    Ok(format!(
        "{} QPs x {size} bytes carry the pattern",
        side.qps.len()
    ))
}
