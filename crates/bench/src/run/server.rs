//! The server: adopts the client's plan, takes its part in every size (a passive target, a
//! SEND receiver, the other direction of `-b`, the latency responder), checks the payload
//! when asked, and reports the figures both sides print.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::client::{bw_shape, lat_shape, pinned};
use super::figures::{combine, ServerPart};
use super::rails::read_rail;
use super::{measure_run, started_at, Measuring, Outcome, Printer, Recorder, RunOptions};
use crate::control::{Channel, Listen, Listener, Message};
use crate::engine::bw::{measure_bw, PeerState};
use crate::engine::lat::respond;
use crate::engine::staged::measure_staged;
use crate::engine::validate::{check_received, prepare_buffers};
use crate::engine::{Connected, Local};
use crate::plan::{Mode, PlanError, Role, TestPlan, Verb};
use crate::report::SizeResult;
use crate::run::admission::admit_plan;

/// Opens this side's device, then waits for one client on `listener` and serves its run.
pub fn run_server(opts: &RunOptions, listener: &Listener) -> Result<Outcome> {
    ServerSide::open(opts)?.serve(opts, listener)
}

/// A server's own side, opened and checked before it says that it waits: the GPU of a GPU
/// memory mode, the device, its port and GID, the measuring CPU and the clock. A server that
/// could never serve fails at once instead of waiting for a client.
#[derive(Debug)]
pub struct ServerSide {
    local: Local,
    measuring: Measuring,
    started: String,
}

impl ServerSide {
    /// Opens the device (and the GPU) and chooses the CPU and clock.
    pub fn open(opts: &RunOptions) -> Result<Self> {
        let started = started_at();
        let local = Local::open(&opts.side)?;
        let measuring = Measuring::resolve(opts, local.device_name(), Role::Server)?;
        Ok(ServerSide {
            local,
            measuring,
            started,
        })
    }

    /// Waits for one client on `listener` and serves its run.
    pub fn serve(self, opts: &RunOptions, listener: &Listener) -> Result<Outcome> {
        let mut ch = listener.accept_client(opts.timeout)?;
        if !opts.quiet {
            opts.files
                .screen()
                .line(&format!("rdmabench: client {} connected", ch.peer()));
        }
        if let Err(e) = read_rail(&mut ch, &[self.local.device_name().to_string()]) {
            ch.end_with("the server", &e);
            return Err(e);
        }
        self.serve_channel(opts, ch)
    }

    /// Serves the run of the client on `ch` (whose rail was read).
    pub fn serve_channel(self, opts: &RunOptions, mut ch: Channel) -> Result<Outcome> {
        match serve(opts, &mut ch, self.local, &self.measuring, self.started) {
            Ok(outcome) => Ok(outcome),
            Err(e) => {
                ch.end_with("the server", &e);
                Err(e)
            }
        }
    }
}

fn serve(
    opts: &RunOptions,
    ch: &mut Channel,
    local: Local,
    measuring: &Measuring,
    started: String,
) -> Result<Outcome> {
    let Message::Plan(asked) = ch.expect("Plan")? else {
        bail!("protocol error: expected the client's plan");
    };
    let plan = TestPlan::adopt(*asked, opts.test, &opts.request)?;
    // Above this server's limits is a plan that cannot run as asked: a refusal (exit 2 on
    // both sides), said before anything is allocated.
    admit_plan(&opts.admission, &plan, &local).map_err(|r| PlanError(r.0))?;
    let admitted = Instant::now();
    ch.send(&Message::PlanAccepted)?;
    let prepared = local.prepare(&plan, Role::Server)?;
    let Message::Endpoints {
        qps: remote,
        bounce: peer_bounce,
    } = ch.expect("Endpoints")?
    else {
        bail!("protocol error: expected the client's endpoints");
    };
    ch.send(&Message::Endpoints {
        qps: prepared.endpoints(&plan),
        bounce: prepared.bounce(),
    })?;
    let mut side = prepared.connect(remote, peer_bounce, &plan)?;
    ch.expect("Ready")?;
    ch.send(&Message::Ready)?;

    measure_run(
        opts,
        Role::Server,
        &plan,
        &mut side,
        measuring,
        started,
        |side, printer, limits, recorder| {
            let limit_gbps = limits.limit_gbps();
            serve_sizes(
                opts, &plan, ch, side, measuring, printer, limit_gbps, admitted, recorder,
            )
        },
    )
}

/// Serves each size the client starts until it says it is done.
#[allow(clippy::too_many_arguments)] // the run's parts, each used here
fn serve_sizes(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    measuring: &Measuring,
    printer: &Printer,
    limit_gbps: Option<f64>,
    admitted: Instant,
    recorder: &mut Recorder,
) -> Result<()> {
    loop {
        match ch.recv("the client's next step")? {
            Message::StartSize { size, rep } => {
                opts.admission
                    .check_elapsed(admitted.elapsed())
                    .map_err(|r| PlanError(r.0))?;
                let Some(i) = plan.sizes.iter().position(|&s| s == size) else {
                    bail!("the client started size {size}, which is not in the plan");
                };
                let r = serve_size(opts, plan, ch, side, measuring, size, limit_gbps)?;
                printer.row(rep, &r);
                recorder.add(i, r)?;
            }
            Message::Heartbeat => {}
            Message::Finish => {
                ch.run_over();
                return Ok(());
            }
            other => bail!(
                "protocol error: unexpected {} from the client",
                other.name()
            ),
        }
    }
}

/// Waits for the peer's operations to end (a passive target). It looks every 10 ms: waking
/// more often would take CPU time from the machine's other spinning threads (the client's,
/// in loopback or a one-machine run) for nothing.
fn wait_for(peer: &PeerState) -> Result<ServerPart> {
    while !peer.is_done() && !peer.is_failed() {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(ServerPart::default())
}

/// This side's part of one size.
fn server_part(
    opts: &RunOptions,
    plan: &TestPlan,
    side: &mut Connected,
    measuring: &Measuring,
    size: u64,
    peer: &PeerState,
) -> Result<ServerPart> {
    match plan.test.mode {
        Mode::Bw
            if plan.sends(Role::Server)
                || plan.receives(Role::Server)
                || side.staging.is_some() =>
        {
            let shape = bw_shape(opts, plan, size, Role::Server)?;
            let staged = side.staging.is_some();
            let m = if staged {
                measure_staged(side, &shape, peer)?
            } else {
                measure_bw(side, &shape, peer)?
            };
            Ok(ServerPart {
                sent: m.sent,
                received: m.received,
                received_count: if shape.recv.is_some() {
                    m.ops_per_qp.iter().sum()
                } else {
                    0
                },
                staged,
                ops_per_qp: if shape.send { m.ops_per_qp } else { Vec::new() },
            })
        }
        Mode::Lat if matches!(plan.test.verb, Verb::Write | Verb::Send) => {
            respond(side, &lat_shape(opts, plan, size, measuring.clock)?, peer)?;
            Ok(ServerPart::default())
        }
        _ => wait_for(peer),
    }
}

fn serve_size(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    measuring: &Measuring,
    size: u64,
    ceiling_gbps: Option<f64>,
) -> Result<SizeResult> {
    prepare_buffers(side, plan, size)?;
    ch.send(&Message::Ready)?;
    let peer = PeerState::default();
    let (part, done) = ch.measuring(&peer, Listen::SizeDone, || {
        pinned(measuring, || {
            server_part(opts, plan, side, measuring, size, &peer)
        })
    })?;
    let Some(Message::SizeDone { result, ops_per_qp }) = done else {
        bail!("protocol error: expected the client's figures");
    };
    let verdict = check_received(side, plan, size, Role::Server, &ops_per_qp);
    let own_ops = part.ops_per_qp.clone();
    let figures = combine(plan, size, *result, part).map(|r| r.with_ceiling(ceiling_gbps));
    let (ok, detail) = match (&verdict, &figures) {
        (Err(detail), _) => (false, detail.clone()),
        (Ok(_), Err(e)) => (false, format!("{e:#}")),
        (Ok(what), Ok(_)) => (true, what.clone()),
    };
    let report = figures.as_ref().cloned().unwrap_or_else(|_| SizeResult {
        pct_of_ceiling: None,
        ..empty(size)
    });
    ch.send(&Message::SizeReport {
        result: Box::new(report),
        ok,
        detail: detail.clone(),
        ops_per_qp: own_ops,
    })?;
    if !ok {
        bail!("size {size}: {detail}");
    }
    figures
}

/// A placeholder result for a failed size's report (the client stops on `ok: false`).
fn empty(size: u64) -> SizeResult {
    SizeResult {
        size,
        iterations: 0,
        seconds: 0.0,
        bw_gbps: 0.0,
        gbits: 0.0,
        msg_rate_mpps: 0.0,
        pct_of_ceiling: None,
        lat_us: None,
        hdr: None,
        directions: None,
        repetitions: Vec::new(),
        in_flight_max: None,
        window: None,
    }
}
