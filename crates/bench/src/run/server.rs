//! The server: adopts the client's plan, takes its part in every size (a passive target, a
//! SEND receiver, the other direction of `-b`, the latency responder), checks the payload
//! when asked, and reports the figures both sides print.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::client::{bw_shape, lat_shape, pinned, planned_length};
use super::figures::{check_ops_per_qp, combine, ServerPart};
use super::limits::RunLimits;
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
    /// Where this side's buffers live (its memory mode, staging and GPU's size), for its
    /// rails' budget.
    pub(crate) fn rail_mem(&self) -> crate::run::rails::RailMem {
        crate::run::rails::RailMem {
            mem: self.local.mem().clone(),
            staging: self.local.staging(),
            gpu_total: self.local.gpu_memory(),
        }
    }

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
    pub(crate) fn serve_channel(self, opts: &RunOptions, mut ch: Channel) -> Result<Outcome> {
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
    admit_plan(&opts.admission, &plan, &local).map_err(|r| PlanError::Refused(r.0))?;
    if let Some(l) = &opts.rail {
        l.board
            .budget
            .admit(l.index, &plan, &opts.admission)
            .map_err(|r| PlanError::Refused(r.0))?;
    }
    let admitted = Instant::now();
    ch.send(&Message::PlanAccepted)?;
    let mut prepared = local.prepare(&plan, Role::Server)?;
    let Message::Endpoints {
        qps: remote,
        bounce: peer_bounce,
    } = ch.expect("Endpoints")?
    else {
        bail!("protocol error: expected the client's endpoints");
    };
    if plan.rdma_cm {
        // Listening before the client has the endpoints it dials with.
        let port = ch
            .local()
            .map_or(crate::control::DEFAULT_PORT, |a| a.port());
        let listener = prepared.cm_listener(port)?;
        prepared.use_cm(listener, opts.timeout);
    }
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
            serve_sizes(
                opts, &plan, ch, side, measuring, printer, limits, admitted, recorder,
            )
        },
    )
}

/// The share of `--timeout` a run waits at its [`crate::run::StartGate`] for the other runs
/// of its round: its client waits for the first size's `Ready` within `--timeout`.
const GATE_SHARE: f64 = 0.75;

/// Serves each size and repetition the client starts, in the plan's order, until it says it
/// is done. Each step has one deadline that the client's heartbeats do not extend:
/// `--timeout`, plus the planned length of the size just measured (a rail of a multi-rail
/// client waits for its other rails to end that size, heartbeating meanwhile), or before the
/// first size another `--timeout` (for the other rails to end their set-up).
#[allow(clippy::too_many_arguments)] // the run's parts, each used here
fn serve_sizes(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    measuring: &Measuring,
    printer: &Printer,
    limits: &RunLimits,
    admitted: Instant,
    recorder: &mut Recorder,
) -> Result<()> {
    let mut steps = Steps::new(plan);
    let mut last = ch.timeout();
    let mut gate = opts.start_gate.as_ref();
    loop {
        let within = ch.timeout().saturating_add(last);
        match steps.next(ch.next_within("the client's next step", within)?)? {
            Step::Measure { index, size, rep } => {
                // The runs of a congestion round start their windows together; the client
                // waits for this size's Ready within --timeout, so the gate within less.
                if let Some(g) = gate.take() {
                    g.0.wait(ch.timeout().mul_f64(GATE_SHARE))?;
                }
                opts.admission
                    .check_elapsed(admitted.elapsed())
                    .map_err(|r| PlanError::Refused(r.0))?;
                // The size's deadlines end with the run's --max-duration too.
                let left = opts.admission.time_left(admitted.elapsed());
                last = planned_length(plan, size, opts.timeout).min(left);
                let r = serve_size(opts, plan, ch, side, measuring, size, last, limits)
                    .map_err(|e| beyond_max_duration(opts, admitted, e))?;
                printer.row(rep, &r);
                recorder.add(index, r)?;
            }
            Step::Wait => {}
            Step::Finish => {
                ch.run_over();
                return Ok(());
            }
        }
    }
}

/// A size's failure `e`, or the refusal of a run that went on beyond `--max-duration` (its
/// deadlines end there), which is what ended it then.
fn beyond_max_duration(opts: &RunOptions, admitted: Instant, e: anyhow::Error) -> anyhow::Error {
    match opts.admission.check_elapsed(admitted.elapsed()) {
        Err(r) => PlanError::Refused(r.0).into(),
        Ok(()) => e,
    }
}

/// What the server does on the client's next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Measure planned size `index` (`size` bytes), repetition `rep`.
    Measure { index: usize, size: u64, rep: u32 },
    /// Nothing: a heartbeat between sizes.
    Wait,
    /// The run is over.
    Finish,
}

/// The client's steps through the plan, as the server follows them: every size of a
/// repetition in the plan's order, then the next repetition (the client's loop), each step
/// once. The server expects exactly the next one and the end only after the last.
#[derive(Debug)]
struct Steps<'a> {
    plan: &'a TestPlan,
    /// Steps measured so far.
    done: u64,
}

impl<'a> Steps<'a> {
    fn new(plan: &'a TestPlan) -> Self {
        Steps { plan, done: 0 }
    }

    /// All the plan's steps: its sizes times its repetitions.
    fn total(&self) -> u64 {
        self.plan.sizes.len() as u64 * u64::from(self.plan.repeat)
    }

    /// The plan, as a refusal names it.
    fn described(&self) -> String {
        format!(
            "{} size(s) x {} repetition(s), every size of a repetition before the next",
            self.plan.sizes.len(),
            self.plan.repeat
        )
    }

    /// What the client's message `msg` asks of the server.
    fn next(&mut self, msg: Message) -> Result<Step> {
        match msg {
            Message::StartSize { size, rep } => self.start(size, rep),
            Message::Heartbeat => Ok(Step::Wait),
            Message::Finish if self.done < self.total() => bail!(
                "the client finished after {} of the plan's {} steps ({}): the record would \
                 lack the rest",
                self.done,
                self.total(),
                self.described()
            ),
            Message::Finish => Ok(Step::Finish),
            other => bail!(
                "protocol error: unexpected {} from the client",
                other.name()
            ),
        }
    }

    /// The client starts size `size`, repetition `rep`: the plan's next step, or refused.
    fn start(&mut self, size: u64, rep: u32) -> Result<Step> {
        let per_rep = self.plan.sizes.len() as u64;
        let (Some(at), Some(want_rep)) = (
            self.done.checked_rem(per_rep),
            self.done.checked_div(per_rep),
        ) else {
            bail!("the client started size {size} repetition {rep} of a plan without sizes");
        };
        if self.done >= self.total() {
            bail!(
                "the client started size {size} repetition {rep} after all {} steps of the \
                 plan ({}) were measured",
                self.total(),
                self.described()
            );
        }
        let index = usize::try_from(at)?;
        let want_size = self.plan.sizes.get(index).copied().unwrap_or_default();
        if (size, u64::from(rep)) != (want_size, want_rep) {
            bail!(
                "the client started size {size} repetition {rep}, but the plan's next is size \
                 {want_size} repetition {want_rep} ({})",
                self.described()
            );
        }
        self.done += 1;
        Ok(Step::Measure { index, size, rep })
    }
}

/// Waits for the peer's operations to end (a passive target), up to `within` (the size's
/// planned length plus `--timeout`), after which the size fails naming the peer `who`. It
/// sleeps until the companion reader marks the peer done or failed.
fn wait_for(peer: &PeerState, within: Duration, who: SocketAddr) -> Result<ServerPart> {
    if !peer.wait_over(Instant::now().checked_add(within)) {
        bail!(
            "the client {who} did not end its loop within {:.1} s (the size's planned length \
             and --timeout)",
            within.as_secs_f64()
        );
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
    waits: (Duration, SocketAddr),
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
                ..ServerPart::default()
            })
        }
        Mode::Lat if matches!(plan.test.verb, Verb::Write | Verb::Send) => {
            let shape = lat_shape(opts, plan, size, measuring.clock)?;
            respond(side, &shape, peer)?;
            Ok(ServerPart::default())
        }
        _ => wait_for(peer, waits.0, waits.1),
    }
}

/// Serves one size; the client's loop may take `length` (its planned length), and its
/// figures must come within that and `--timeout`, heartbeats or not.
#[allow(clippy::too_many_arguments)] // the run's parts, each used here
fn serve_size(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    measuring: &Measuring,
    size: u64,
    length: Duration,
    limits: &RunLimits,
) -> Result<SizeResult> {
    prepare_buffers(side, plan, size)?;
    let started = Instant::now();
    ch.send(&Message::Ready)?;
    let peer = PeerState::default();
    let waits = (length.saturating_add(ch.timeout()), ch.peer());
    let (mut part, done) = ch.measuring(&peer, Listen::SizeDone, length, || {
        pinned(measuring, || {
            server_part(opts, plan, side, measuring, size, &peer, waits)
        })
    })?;
    let Some(Message::SizeDone { result, ops_per_qp }) = done else {
        bail!("protocol error: expected the client's figures");
    };
    part.seen = Some(started.elapsed());
    part.bound = limits.report_bound();
    check_ops_per_qp(plan, size, &ops_per_qp)?;
    let verdict = check_received(side, plan, size, Role::Server, &ops_per_qp);
    let own_ops = part.ops_per_qp.clone();
    let ceiling_gbps = limits.limit_gbps();
    let figures = combine(plan, size, *result, part).map(|r| r.with_ceiling(ceiling_gbps));
    let (ok, detail) = match (&verdict, &figures) {
        (Err(detail), _) => (false, format!("found wrong bytes: {detail}")),
        (Ok(_), Err(e)) => (false, format!("refused the client's figures: {e:#}")),
        (Ok(what), Ok(_)) => (true, what.clone()),
    };
    // A failed size's report holds no figures (the client stops on `ok: false`).
    let report = figures
        .as_ref()
        .cloned()
        .unwrap_or_else(|_| SizeResult::empty(size));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, TestKind};

    /// Sizes 2 and 4096, twice each.
    fn plan() -> TestPlan {
        let mut plan = PlanRequest {
            repeat: Some(2),
            ..PlanRequest::default()
        }
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .unwrap();
        plan.sizes = vec![2, 4096];
        plan
    }

    /// What the server makes of a client's messages: each step, or the first refusal.
    fn follow(plan: &TestPlan, messages: &[Message]) -> Result<Vec<Step>> {
        let mut steps = Steps::new(plan);
        messages.iter().map(|m| steps.next(m.clone())).collect()
    }

    fn start(size: u64, rep: u32) -> Message {
        Message::StartSize { size, rep }
    }

    #[test]
    fn the_client_runs_every_size_of_a_repetition_then_the_next() {
        let plan = plan();
        let steps = follow(
            &plan,
            &[
                start(2, 0),
                Message::Heartbeat,
                start(4096, 0),
                start(2, 1),
                start(4096, 1),
                Message::Finish,
            ],
        )
        .unwrap();
        let measure = |index, size, rep| Step::Measure { index, size, rep };
        assert_eq!(
            steps,
            [
                measure(0, 2, 0),
                Step::Wait,
                measure(1, 4096, 0),
                measure(0, 2, 1),
                measure(1, 4096, 1),
                Step::Finish
            ]
        );
    }

    #[test]
    fn a_passive_target_waits_no_longer_than_its_deadline() {
        let who: SocketAddr = ([192, 0, 2, 7], 40000).into();
        let start = Instant::now();
        let err = wait_for(&PeerState::default(), Duration::from_millis(300), who).unwrap_err();
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(1),
            "{took:?}"
        );
        assert!(
            err.to_string()
                .starts_with("the client 192.0.2.7:40000 did not end its loop within 0.3 s"),
            "{err}"
        );
        let done = PeerState::default();
        done.set_done();
        assert!(wait_for(&done, Duration::from_millis(300), who).is_ok());
    }

    #[test]
    fn a_passive_target_returns_once_its_peer_ends_or_fails() {
        let who: SocketAddr = ([192, 0, 2, 7], 40000).into();
        let peer = PeerState::default();
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                peer.set_done();
            });
            assert!(wait_for(&peer, Duration::from_secs(30), who).is_ok());
        });
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "{took:?}");
        let failed = PeerState::default();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                failed.set_failed();
            });
            assert!(failed.wait_over(None) && failed.is_failed());
        });
    }

    /// A hostile client's steps out of the plan's order: each is refused, naming what it
    /// sent and what the plan expected, before anything is measured or recorded.
    #[test]
    fn a_step_out_of_the_plans_order_is_refused_naming_the_next() {
        let plan = plan();
        let refused = |messages: &[Message]| match follow(&plan, messages) {
            Ok(steps) => panic!("{messages:?} were all taken: {steps:?}"),
            Err(e) => e.to_string(),
        };
        let e = refused(&[start(2, 0), start(2, 0)]);
        assert!(
            e.contains("size 2 repetition 0") && e.contains("next is size 4096 repetition 0"),
            "{e}"
        );
        let e = refused(&[start(4096, 0)]);
        assert!(e.contains("next is size 2 repetition 0"), "{e}");
        let e = refused(&[start(2, 0), start(4096, 0), start(2, 0)]);
        assert!(e.contains("next is size 2 repetition 1"), "{e}");
        let all = [start(2, 0), start(4096, 0), start(2, 1), start(4096, 1)];
        let e = refused(&[&all[..], &[start(2, 2)]].concat());
        assert!(
            e.contains("all 4 steps") && e.contains("size 2 repetition 2"),
            "{e}"
        );
        let e = refused(&[start(2, 0), Message::Finish]);
        assert!(e.contains("after 1 of the plan's 4 steps"), "{e}");
        let e = refused(&[start(3, 0)]);
        assert!(e.contains("size 3"), "{e}");
    }
}
