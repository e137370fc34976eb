//! The client: sends the plan, drives the measured loops, reports each size to the server.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::figures::{from_latency, from_window};
use super::rails::rail_message;
use super::{measure_run, started_at, stop_of, Measuring, Outcome, RunOptions, LAT_WARMUP};
use crate::clock::Clock;
use crate::control::{printable, Channel, Listen, Message};
use crate::engine::bw::pace::LARGE_READ;
use crate::engine::bw::{measure_bw, LoopShape, PeerState, Stop};
use crate::engine::cm::CmSide;
use crate::engine::lat::{initiate, LatShape};
use crate::engine::staged::measure_staged;
use crate::engine::validate::{check_received, prepare_buffers};
use crate::engine::{Connected, Local};
use crate::memory::MemMode;
use crate::output::progress_bar::ProgressBar;
use crate::plan::{Connection, Mode, Role, TestPlan, Verb};
use crate::report::SizeResult;

/// Runs the client side against the server at `host`:`port`.
pub fn run_client(opts: &RunOptions, plan: &TestPlan, host: &str, port: u16) -> Result<Outcome> {
    let started = started_at();
    let local = Local::open(&opts.side)?;
    let measuring = Measuring::resolve(opts, local.device_name(), Role::Client)?;
    let plan = &with_default_inline(plan, opts, &local)?;
    let mut ch = Channel::connect(host, port, opts.timeout, opts.token.as_ref())?;
    if let Err(e) = ch.send(&rail_message(opts, local.device_name())) {
        ch.end_with("the client", &e);
        return Err(e);
    }
    match drive(opts, plan, &mut ch, local, &measuring, started) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            ch.end_with("the client", &e);
            Err(e)
        }
    }
}

fn drive(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    local: Local,
    measuring: &Measuring,
    started: String,
) -> Result<Outcome> {
    ch.send(&Message::Plan(Box::new(plan.clone())))?;
    ch.expect("PlanAccepted")?;
    let mut prepared = local.prepare(plan, Role::Client)?;
    if plan.rdma_cm {
        let server = ch.peer();
        let side = CmSide::Dial {
            port: server.port(),
            peer: server.ip(),
        };
        prepared.use_cm(side, opts.timeout);
    }
    ch.send(&Message::Endpoints {
        qps: prepared.endpoints(plan),
        bounce: prepared.bounce(),
    })?;
    let Message::Endpoints {
        qps: remote,
        bounce: peer_bounce,
    } = ch.expect("Endpoints")?
    else {
        bail!("protocol error: expected the server's endpoints");
    };
    let mut side = prepared.connect(remote, peer_bounce, plan)?;
    ch.send(&Message::Ready)?;
    ch.expect("Ready")?;

    measure_run(
        opts,
        Role::Client,
        plan,
        &mut side,
        measuring,
        started,
        |side, printer, _, recorder| {
            let steps = plan.sizes.len() as u64 * u64::from(plan.repeat);
            let progress = ProgressBar::new(steps, opts.progress && !opts.quiet);
            for rep in 0..plan.repeat {
                for (i, &size) in plan.sizes.iter().enumerate() {
                    // The rails of a multi-rail run start each size together.
                    if let Some(l) = &opts.rail {
                        l.board.barrier(l.index, || ch.send(&Message::Heartbeat))?;
                    }
                    progress.start(size, rep);
                    let r = run_size(opts, plan, ch, side, measuring, size, rep)
                        .with_context(|| format!("size {size} bytes"))?;
                    progress.suspend(|| printer.row(rep, &r));
                    recorder.add(i, r)?;
                }
            }
            progress.finish();
            ch.send(&Message::Finish)
        },
    )
}

/// The rate, in Gb/s, at which [`planned_length`] counts a `-n` loop's bytes: far below any
/// RDMA link's, so that an honest run, soft-RoCE's included, ends well within it.
const FLOOR_GBPS: f64 = 0.1;

/// [`FLOOR_GBPS`] for READs of [`LARGE_READ`] or more: soft-RoCE sends a READ's whole
/// response at once, and one of more packets than the requester's host queues loses its
/// tail and waits for the QP's retransmission timer; 4 MiB READs in the two-node guest ran
/// at 4.8 MB/s (38 Mb/s, at the QP timeout of 14), a fifth of this floor.
const LARGE_READ_FLOOR_GBPS: f64 = 0.01;

/// The time [`planned_length`] allows each operation of a `-n` loop on top of its bytes.
const PER_OP: Duration = Duration::from_millis(1);

/// The longest [`planned_length`]: a week.
const MAX_LENGTH: Duration = Duration::from_secs(7 * 86_400);

/// How long one size's loop may honestly take, which bounds the peer's waits while it
/// measures (heartbeats do not extend them): with `-D`, the whole run of the loop (window
/// and margins) plus the `--timeout` a loop may wait for its last completions; with `-n`, a
/// generous estimate (every operation's bytes at [`FLOOR_GBPS`], or large READs' at
/// [`LARGE_READ_FLOOR_GBPS`], plus [`PER_OP`] each, both
/// directions with `-b`), so that only a peer that holds the seat without measuring meets
/// it.
pub(crate) fn planned_length(plan: &TestPlan, size: u64, timeout: Duration) -> Duration {
    let secs = match stop_of(plan) {
        Stop::Duration { total, .. } => total.saturating_add(timeout).as_secs_f64(),
        Stop::Iters(n) => {
            let ways = if plan.bidirectional { 2.0 } else { 1.0 };
            let ops = (n as f64 + LAT_WARMUP as f64) * f64::from(plan.qps.max(1)) * ways;
            let floor = if plan.test.verb == Verb::Read && size >= u64::from(LARGE_READ) {
                LARGE_READ_FLOOR_GBPS
            } else {
                FLOOR_GBPS
            };
            ops * (size as f64 * 8.0 / (floor * 1e9) + PER_OP.as_secs_f64())
        }
    };
    Duration::try_from_secs_f64(secs)
        .unwrap_or(MAX_LENGTH)
        .min(MAX_LENGTH)
}

/// The shape of this plan's bandwidth loop for one size. Every verb keeps `tx-depth` operations posted: the QP's outstanding-read
/// limit (`-o`) holds back READs and atomics in the NIC, not in the loop.
pub(crate) fn bw_shape(
    opts: &RunOptions,
    plan: &TestPlan,
    size: u64,
    role: Role,
) -> Result<LoopShape> {
    Ok(LoopShape {
        verb: plan.test.verb,
        atomic: plan.atomic,
        size: u32::try_from(size).context("message size above 4 GiB")?,
        stop: stop_of(plan),
        depth: plan.tx_depth,
        rx_depth: plan.rx_depth,
        post_list: plan.post_list,
        cq_mod: plan.cq_mod,
        inline: inline_for(plan, size),
        send: plan.sends(role),
        recv: plan.receives(role).then_some(plan.iters),
        stall_timeout: opts.timeout,
        rate_limit: plan.rate_limit.map(|gbps| gbps * 1e9),
        interval: plan.interval.map(Duration::from_secs_f64),
    })
}

/// The shape of this plan's latency loop for one size.
pub(crate) fn lat_shape(
    opts: &RunOptions,
    plan: &TestPlan,
    size: u64,
    clock: Clock,
) -> Result<LatShape> {
    Ok(LatShape {
        verb: plan.test.verb,
        atomic: plan.atomic,
        size: u32::try_from(size).context("message size above 4 GiB")?,
        stop: stop_of(plan),
        warmup: LAT_WARMUP,
        cq_mod: plan.cq_mod,
        inline: inline_for(plan, size),
        stall_timeout: opts.timeout,
        clock,
        rx_depth: plan.rx_depth,
        gap: Duration::from_micros(plan.latency_gap.into()),
    })
}

/// perftest's default inline size of a latency test on a device it knows (DEF_INLINE_WRITE,
/// DEF_INLINE_SEND_RC_UC_XRC, DEF_INLINE_SEND_UD in its perftest_parameters.h); 0 for
/// bandwidth tests, READ and atomics.
fn perftest_inline(plan: &TestPlan) -> u32 {
    match (plan.test.mode, plan.test.verb, plan.connection) {
        (Mode::Lat, Verb::Write, _) => 220,
        (Mode::Lat, Verb::Send, Connection::Ud) => 188,
        (Mode::Lat, Verb::Send, _) => 236,
        _ => 0,
    }
}

/// The plan the client runs: `-I` as given; else, for host memory, perftest's latency default
/// capped by what this side's device allows (perftest leaves devices it does not know, such
/// as soft-RoCE, at 0; rdmabench asks the device). The server adopts the plan's value.
fn with_default_inline(plan: &TestPlan, opts: &RunOptions, local: &Local) -> Result<TestPlan> {
    let want = perftest_inline(plan);
    if opts.request.inline.is_some() || want == 0 || opts.side.mem != MemMode::Host {
        return Ok(plan.clone());
    }
    let mut plan = plan.clone();
    plan.inline = local.inline_limit(&plan, want)?;
    Ok(plan)
}

/// Why a loop measured no window: nothing completed once it was to open.
fn no_window(plan: &TestPlan) -> String {
    match plan.duration {
        Some(d) => format!(
            "no operation completed between the warm-up's end and --timeout after the planned \
             window (-D {d}); the link is slower than one message per window: lower -s or raise \
             --timeout"
        ),
        None => "no operation completed".to_string(),
    }
}

fn inline_for(plan: &TestPlan, size: u64) -> bool {
    plan.inline > 0
        && size <= u64::from(plan.inline)
        && matches!(plan.test.verb, Verb::Write | Verb::Send)
}

fn run_size(
    opts: &RunOptions,
    plan: &TestPlan,
    ch: &mut Channel,
    side: &mut Connected,
    measuring: &Measuring,
    size: u64,
    rep: u32,
) -> Result<SizeResult> {
    // This side's receive half is cleared before the server hears of the size: with -b the
    // server's WRITEs start as soon as it is ready, and may land before a later clear.
    prepare_buffers(side, plan, size)?;
    ch.send(&Message::StartSize { size, rep })?;
    ch.expect("Ready")?;
    let peer = PeerState::default();
    let length = planned_length(plan, size, opts.timeout);
    let (mine, ops_per_qp) = match plan.test.mode {
        Mode::Bw => {
            let shape = bw_shape(opts, plan, size, Role::Client)?;
            // With -b this side also receives: its receives end when the server's sends do.
            let listen = if plan.bidirectional {
                Listen::SendsOver
            } else {
                Listen::Nothing
            };
            let (m, _) = if side.staging.is_some() {
                ch.measuring(&peer, listen, length, || {
                    pinned(measuring, || measure_staged(side, &shape, &peer))
                })?
            } else {
                ch.measuring(&peer, listen, length, || {
                    pinned(measuring, || measure_bw(side, &shape, &peer))
                })?
            };
            let sent = m.sent.with_context(|| no_window(plan))?;
            let mut r = from_window(size, sent)?;
            r.in_flight_max = Some(m.in_flight_max);
            if let Some(w) = r.window.as_mut() {
                w.signal_every = (m.signal_every > 0).then_some(m.signal_every);
            }
            (r, m.ops_per_qp)
        }
        Mode::Lat => {
            let shape = lat_shape(opts, plan, size, measuring.clock)?;
            let (m, _) = ch.measuring(&peer, Listen::Nothing, length, || {
                pinned(measuring, || initiate(side, &shape))
            })?;
            (from_latency(size, &m)?, vec![m.total])
        }
    };
    ch.send(&Message::SizeDone {
        result: Box::new(mine),
        ops_per_qp: ops_per_qp.clone(),
    })?;
    let Message::SizeReport {
        result,
        ok,
        detail,
        ops_per_qp: server_ops,
    } = ch.expect("SizeReport")?
    else {
        bail!("protocol error: expected the server's report");
    };
    server_verdict(ok, &detail)?;
    // Checked only now: with -b the server's operations land here until its loop ends.
    if let Err(detail) = check_received(side, plan, size, Role::Client, &server_ops) {
        bail!("payload check failed on the client: {detail}");
    }
    Ok(*result)
}

/// The server's verdict on a size: its `detail` ("found wrong bytes: ...", "refused the
/// client's figures: ...") is the peer's text, shown as text only.
fn server_verdict(ok: bool, detail: &str) -> Result<()> {
    if !ok {
        bail!("the server {}", printable(detail));
    }
    Ok(())
}

/// Runs a measured loop on the measuring thread's CPU (helper threads started before keep
/// the process's CPUs).
pub(crate) fn pinned<T>(measuring: &Measuring, work: impl FnOnce() -> Result<T>) -> Result<T> {
    let cpu = measuring.placement.cpu;
    let _pin = measuring
        .placement
        .pin()
        .with_context(|| format!("pinning the measuring thread to CPU {cpu:?}"))?;
    work()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, TestKind};

    fn plan(verb: Verb, mode: Mode, connection: Option<Connection>) -> TestPlan {
        let kind = TestKind::new(verb, mode);
        PlanRequest {
            connection,
            ..Default::default()
        }
        .resolve(kind)
        .unwrap()
    }

    #[test]
    fn latency_inline_defaults_are_perftests() {
        let lat = |verb, c| perftest_inline(&plan(verb, Mode::Lat, c));
        assert_eq!(lat(Verb::Write, None), 220);
        assert_eq!(lat(Verb::Send, None), 236);
        assert_eq!(lat(Verb::Send, Some(Connection::Ud)), 188);
        assert_eq!(lat(Verb::Read, None), 0);
        assert_eq!(perftest_inline(&plan(Verb::Write, Mode::Bw, None)), 0);
    }

    #[test]
    fn a_sizes_planned_length_bounds_an_honest_loop() {
        let timeout = Duration::from_secs(30);
        let timed = PlanRequest {
            duration: Some(5.0),
            ..Default::default()
        }
        .resolve(TestKind::new(Verb::Write, Mode::Bw))
        .unwrap();
        assert_eq!(
            planned_length(&timed, 65536, timeout),
            Duration::from_secs(35)
        );
        // 5000 x 64 KiB at 0.1 Gb/s and 1 ms each: some 31 s, where a soft-RoCE link takes
        // well under 3.
        let counted = plan(Verb::Write, Mode::Bw, None);
        let n = planned_length(&counted, 65536, timeout).as_secs_f64();
        assert!((30.0..32.0).contains(&n), "{n}");
        // 50 READs of 4 MiB (and the warm-up it counts) at 10 Mb/s: 221 s, where the guest's
        // took 36 s at its default options.
        let reads = PlanRequest {
            iters: Some(50),
            ..Default::default()
        }
        .resolve(TestKind::new(Verb::Read, Mode::Bw))
        .unwrap();
        let r = planned_length(&reads, 4 << 20, timeout).as_secs_f64();
        assert!((200.0..240.0).contains(&r), "{r}");
        // Latency: a millisecond a round trip.
        let lat = planned_length(&plan(Verb::Send, Mode::Lat, None), 2, timeout);
        assert!(lat >= Duration::from_secs(1), "{lat:?}");
        // Absurd counts are bounded, not overflowed.
        let mut huge = counted.clone();
        huge.iters = u64::MAX;
        assert_eq!(planned_length(&huge, u64::MAX, timeout), MAX_LENGTH);
    }

    #[test]
    fn the_servers_verdict_is_shown_as_text() {
        assert!(server_verdict(true, "").is_ok());
        let err = server_verdict(false, "found wrong bytes\x1b]0;owned\x07").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the server found wrong bytes\\u{1b}]0;owned\\u{7}"
        );
    }
}
