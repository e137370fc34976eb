//! One run between a server and a client: the control-channel choreography around the
//! engine, the terminal output as sizes finish, and the record at the end.
//!
//! Per size (and repetition) the client sends `StartSize`; both sides zero their receive
//! halves and fill their send halves; the server answers `Ready`; both run their part (the
//! client with heartbeats, the server watching the channel for the client's `SizeDone`);
//! the client reports `SizeDone` with its figures; the server checks what landed, combines
//! the figures (a SEND receiver counts what arrived; `-b` adds both directions) and answers
//! `SizeReport`, so both sides print and record the same numbers.

pub mod admission;
mod client;
pub(crate) mod figures;
pub(crate) mod limits;
pub(crate) mod port_counters;
pub mod rails;
mod recorder;
mod server;

pub use client::run_client;
pub(crate) use rails::RailLink;
pub use rails::{run_client_rails, ServerRails};
pub use recorder::RecordFiles;
pub(crate) use recorder::Recorder;
pub use server::{run_server, ServerSide};

use std::time::Duration;

use verbs::format_gid;

use crate::clock::{self, Clock, ClockChoice, TscFacts};
use crate::control::Token;
use crate::engine::bw::Stop;
use crate::engine::{Connected, SideConfig};
use crate::output::header;
use crate::output::table::Table;
use crate::output::Screen;
use crate::placement::{self, CpuFacts, PinChoice, Placement};
use crate::plan::{Mode, PlanRequest, Role, TestKind, TestPlan};
use crate::report::{
    now_rfc3339, DeviceRecord, GpuRecord, HostRecord, ParamsRecord, RunRecord, RunStatus,
    SizeResult, StagingRecord, ToolRecord, SCHEMA,
};
use crate::run::admission::Admission;
use crate::run::limits::{run_limits, RunLimits};
use crate::run::port_counters::Counters;

pub(crate) use crate::plan::LAT_WARMUP;

/// Everything one side needs to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `--threads`: measuring threads on this side's one device (1 without).
    pub threads: u32,
    /// Which test.
    pub test: TestKind,
    /// This side's device, port and GID.
    pub side: SideConfig,
    /// The test parameters given on this side's command line.
    pub request: PlanRequest,
    /// Timeout of every connect and read, and of a stalled loop.
    pub timeout: Duration,
    /// Print nothing (the server half of `--loopback`).
    pub quiet: bool,
    /// Show a progress bar on a terminal.
    pub progress: bool,
    /// `--clock`.
    pub clock: ClockChoice,
    /// `--cpus` or `--no-pin`.
    pub pin: PinChoice,
    /// Where this side's record goes, rewritten as each size completes.
    pub files: RecordFiles,
    /// `--token` or `RDMABENCH_TOKEN`: the secret both sides prove they hold.
    pub token: Option<Token>,
    /// The server's limits on a client's plan.
    pub admission: Admission,
    /// This side's rail of a multi-rail run (`-d a,b`); `None` for a run on one device.
    pub rail: Option<RailLink>,
    /// A cluster sweep's run: its CPU slot among the round's runs on this host, which rank 0
    /// numbers ([`placement::choose_for_slot`]); `None` outside a sweep.
    pub cpu_slot: Option<usize>,
    /// With several rails and GPU memory: which GPU each rail's buffers live on.
    pub rail_gpus: rails::gpus::RailGpus,
    /// A server's runs that start their measured windows together (a cluster sweep's
    /// congestion round); `None` for a run on its own.
    pub start_gate: Option<StartGate>,
}

/// Runs that start their measured windows together (a cluster sweep's congestion round):
/// the server of each waits here, its run set up, before it lets its client start the
/// first size. Where the runs' servers live decides what waiting means (one process, or the
/// ranks of a sweep through rank 0).
pub(crate) trait StartTogether: Send + Sync + std::fmt::Debug {
    /// Returns once every run of the round may start, or fails after `within`.
    fn wait(&self, within: Duration) -> anyhow::Result<()>;
}

/// A run's place at a [`StartTogether`].
#[derive(Debug, Clone)]
pub struct StartGate(pub(crate) std::sync::Arc<dyn StartTogether>);

/// Where this side's measuring thread runs and the clock that stamps its latencies.
#[derive(Debug, Clone)]
pub(crate) struct Measuring {
    /// The CPU it is pinned to while it measures.
    pub placement: Placement,
    /// The latency loops' clock.
    pub clock: Clock,
}

impl Measuring {
    /// Chooses the CPU (from the device's NUMA node) and the clock for this side.
    pub(crate) fn resolve(opts: &RunOptions, device: &str, role: Role) -> anyhow::Result<Self> {
        let facts = CpuFacts::read(&topo::Sysfs::system(), device)?;
        let rail = opts.rail.as_ref().map_or(0, |l| l.index);
        let placement = match opts.cpu_slot {
            Some(slot) => placement::choose_for_slot(&opts.pin, &facts, slot)?,
            None => placement::choose_for_rail(&opts.pin, &facts, role, rail)?,
        };
        let kind = clock::choose(opts.clock, TscFacts::of_this_cpu(placement.cpu.is_some()))?;
        Ok(Measuring {
            placement,
            clock: Clock::new(kind),
        })
    }
}

/// What a finished run hands back: the record of what ran, with every size's figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The record, ready to export.
    pub record: RunRecord,
}

/// How a loop of this plan stops.
pub(crate) fn stop_of(plan: &TestPlan) -> Stop {
    match plan.duration {
        Some(secs) => Stop::for_duration(secs),
        None => Stop::Iters(plan.iters),
    }
}

/// Prints progress unless quiet (on stderr when stdout holds the record); a rail of a
/// multi-rail run prints through its board.
#[derive(Debug, Clone)]
struct Printer {
    quiet: bool,
    screen: Screen,
    table: Table,
    rail: Option<RailLink>,
}

impl Printer {
    /// The table's bandwidth unit is the plan's: the client's `--report-gbits`, which the
    /// server adopted with the plan, so both sides print the same figures.
    fn new(opts: &RunOptions, params: &ParamsRecord) -> Self {
        Printer {
            quiet: opts.quiet,
            screen: opts.files.screen(),
            table: Table::of(params),
            rail: opts.rail.clone(),
        }
    }

    /// The header of the run `record` describes, its warnings and notes, and the columns.
    fn header(&self, record: &RunRecord) {
        if let Some(l) = &self.rail {
            return l.board.header(l.index, record, self.table);
        }
        if self.quiet {
            return;
        }
        let bold = self.screen.is_terminal();
        self.screen.print(&header::render(record, bold));
        self.screen.line(&self.table.columns());
    }

    fn row(&self, rep: u32, r: &SizeResult) {
        if let Some(l) = &self.rail {
            return l.board.row(l.index, rep, r);
        }
        if !self.quiet {
            self.screen.print(&self.table.rows(rep, r));
        }
    }

    fn summary(&self, results: &[SizeResult]) {
        if let Some(l) = &self.rail {
            return l.board.summary(l.index, results);
        }
        if !self.quiet {
            self.screen.print(&self.table.summary(results));
        }
    }
}

/// The record's `params`: the plan as the loops ran it, on the CPU and with the clock
/// `measuring` names, one of `threads` measuring threads on this side's device.
pub(crate) fn params_record(
    plan: &TestPlan,
    side: &Connected,
    measuring: &Measuring,
    threads: u32,
) -> ParamsRecord {
    let bw = plan.test.mode == Mode::Bw;
    ParamsRecord {
        mem: side.mem.name(),
        threads,
        clock: (!bw).then(|| measuring.clock.kind().name().to_string()),
        clock_hz: (!bw).then(|| measuring.clock.hz()),
        cpus: measuring.placement.cpu.map(|c| c.to_string()),
        numa_node: measuring.placement.numa_node,
        placement: Some(measuring.placement.source.clone()),
        ..side.params.clone()
    }
}

/// The record of this side's run before it measures: everything the header shows; the
/// status, the counters and the figures come as it goes.
fn record_template(
    role: Role,
    side: &Connected,
    params: ParamsRecord,
    limits: &RunLimits,
    started_at: String,
) -> RunRecord {
    let facts = side.device.facts();
    RunRecord {
        schema: SCHEMA.to_string(),
        tool: ToolRecord::current(),
        started_at,
        role: Some(role.name().to_string()),
        host: HostRecord::current(),
        device: DeviceRecord {
            name: facts.name.clone(),
            fw_ver: facts.fw_ver.clone(),
            vendor_id: facts.vendor_id,
            part_id: facts.part_id,
            port: side.port.port,
            link_layer: side.port.link_layer.to_string(),
            active_mtu: side.port.active_mtu,
            active_speed: side.port.rate.clone(),
            gid_index: side.gid.map(|g| g.index),
            gid_kind: side.gid.map(|g| g.kind.to_string()),
            gid: side.gid.map(|g| format_gid(&g.gid)),
        },
        pcie: limits.pcie.clone(),
        params,
        ceilings: limits.ceilings.clone(),
        counters: None,
        gpu: side.gpu_device.as_ref().map(|g| GpuRecord {
            name: g.name().to_string(),
            bus_id: g.pci_bus_id().to_string(),
            gdr: side.mem.gdr(),
            chosen: side.gpu_chosen.clone(),
            staging: side.staging.as_ref().map(|s| {
                let layout = s.layout();
                StagingRecord {
                    chunk: layout.buffer_len,
                    depth: u64::from(layout.depth),
                }
            }),
        }),
        warnings: limits.warnings.clone(),
        notes: limits.notes.clone(),
        status: RunStatus::Incomplete,
        error: None,
        results: Vec::new(),
        rails: Vec::new(),
    }
}

/// What both sides do once connected: print the header, start the record (written at once
/// and after every size), measure every size and repetition through `measure`, and end the
/// run: the summary printed and the complete record written. When `measure` fails, what it
/// measured is written with the error.
fn measure_run(
    opts: &RunOptions,
    role: Role,
    plan: &TestPlan,
    side: &mut Connected,
    measuring: &Measuring,
    started_at: String,
    measure: impl FnOnce(&mut Connected, &Printer, &RunLimits, &mut Recorder) -> anyhow::Result<()>,
) -> anyhow::Result<Outcome> {
    let limits = run_limits(side);
    let params = params_record(plan, side, measuring, opts.threads);
    let printer = Printer::new(opts, &params);
    let template = record_template(role, side, params, &limits, started_at);
    printer.header(&template);
    let counters = Counters::start(side);
    let mut recorder =
        Recorder::start_on_rail(template, plan.sizes.len(), &opts.files, opts.rail.clone())?;
    if let Err(e) = measure(side, &printer, &limits, &mut recorder) {
        recorder.fail(&e);
        return Err(e);
    }
    printer.summary(&recorder.results());
    let counters = counters.finish(side).into_map();
    Ok(Outcome {
        record: recorder.finish(counters)?,
    })
}

/// Now, for `started_at`.
fn started_at() -> String {
    now_rfc3339()
}
