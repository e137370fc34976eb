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
mod figures;
pub mod limits;
pub mod port_counters;
mod server;

pub use client::run_client;
pub use server::run_server;

use std::time::Duration;

use verbs::format_gid;

use crate::clock::{self, Clock, ClockChoice, TscFacts};
use crate::control::Token;
use crate::engine::bw::Stop;
use crate::engine::effective::Effective;
use crate::engine::{Connected, SideConfig};
use crate::memory::MemMode;
use crate::output::table::{self, Header};
use crate::placement::{self, CpuFacts, PinChoice, Placement};
use crate::plan::{Mode, PlanRequest, Role, TestKind, TestPlan};
use crate::report::{
    now_rfc3339, DeviceRecord, GpuRecord, HostRecord, ParamsRecord, RunRecord, SizeResult,
    StagingRecord, ToolRecord, SCHEMA,
};
use crate::run::admission::Admission;
use crate::run::limits::RunLimits;
use crate::run::port_counters::CounterDelta;

/// Round trips before a latency test starts measuring.
pub const LAT_WARMUP: u64 = 16;

/// Everything one side needs to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Which test.
    pub test: TestKind,
    /// This side's device, port and GID.
    pub side: SideConfig,
    /// The test parameters given on this side's command line.
    pub request: PlanRequest,
    /// Timeout of every connect and read, and of a stalled loop.
    pub timeout: Duration,
    /// Print Gb/s instead of GB/s.
    pub report_gbits: bool,
    /// Print nothing (the server half of `--loopback`).
    pub quiet: bool,
    /// Show a progress bar on a terminal.
    pub progress: bool,
    /// `--clock`.
    pub clock: ClockChoice,
    /// `--cpus` or `--no-pin`.
    pub pin: PinChoice,
    /// `--token` or `RDMABENCH_TOKEN`: the secret both sides prove they hold.
    pub token: Option<Token>,
    /// The server's limits on a client's plan.
    pub admission: Admission,
}

/// Where this side's measuring thread runs and the clock that stamps its latencies.
#[derive(Debug, Clone)]
pub struct Measuring {
    /// The CPU it is pinned to while it measures.
    pub placement: Placement,
    /// The latency loops' clock.
    pub clock: Clock,
}

impl Measuring {
    /// Chooses the CPU (from the device's NUMA node) and the clock for this side.
    pub fn resolve(opts: &RunOptions, device: &str, role: Role) -> anyhow::Result<Self> {
        let facts = CpuFacts::read(&topo::Sysfs::system(), device)?;
        let placement = placement::choose(&opts.pin, &facts, role)?;
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
pub fn stop_of(plan: &TestPlan) -> Stop {
    match plan.duration {
        Some(secs) => Stop::for_duration(secs),
        None => Stop::Iters(plan.iters),
    }
}

/// Prints progress unless quiet.
#[derive(Debug, Clone, Copy)]
struct Printer {
    quiet: bool,
    gbits: bool,
    lat: bool,
    repeat: u32,
}

impl Printer {
    fn new(opts: &RunOptions, plan: &TestPlan) -> Self {
        Printer {
            quiet: opts.quiet,
            gbits: opts.report_gbits,
            lat: plan.test.mode == Mode::Lat,
            repeat: plan.repeat,
        }
    }

    fn header(
        &self,
        role: Role,
        side: &Connected,
        params: &ParamsRecord,
        limits: &RunLimits,
        measuring: &Measuring,
    ) {
        if self.quiet {
            return;
        }
        print!(
            "{}",
            table::header(&header(role, side, params, limits, measuring))
        );
        let bold = std::io::IsTerminal::is_terminal(&std::io::stdout());
        for warning in &limits.warnings {
            if bold {
                println!(" \x1b[1mWARNING: {warning}\x1b[0m");
            } else {
                println!(" WARNING: {warning}");
            }
        }
        for note in &limits.notes {
            println!(" note: {note}");
        }
        println!("{}", self.columns());
    }

    fn columns(&self) -> String {
        let prefix = if self.repeat > 1 { " rep " } else { "" };
        let cols = if self.lat {
            table::lat_columns()
        } else {
            table::columns(self.gbits)
        };
        format!("{prefix}{cols}")
    }

    fn row(&self, rep: u32, r: &SizeResult) {
        if self.quiet {
            return;
        }
        let prefix = if self.repeat > 1 {
            format!(" {:<3} ", rep + 1)
        } else {
            String::new()
        };
        let line = if self.lat {
            table::lat_row(r)
        } else {
            table::row(r, self.gbits)
        };
        println!("{prefix}{line}");
        if let Some(d) = &r.directions {
            println!(
                "{prefix}{}",
                table::direction_row("client->server", &d.client_to_server, self.gbits)
            );
            println!(
                "{prefix}{}",
                table::direction_row("server->client", &d.server_to_client, self.gbits)
            );
        }
    }

    fn summary(&self, results: &[SizeResult]) {
        if self.quiet {
            return;
        }
        if self.repeat > 1 {
            println!("{}", table::footer());
            println!(" medians of {} repetitions:", self.repeat);
            println!(
                "{}",
                if self.lat {
                    table::lat_columns()
                } else {
                    table::columns(self.gbits)
                }
            );
            for r in results {
                println!(
                    "{}",
                    if self.lat {
                        table::lat_row(r)
                    } else {
                        table::row(r, self.gbits)
                    }
                );
            }
        }
        println!("{}", table::footer());
    }
}

fn header(
    role: Role,
    side: &Connected,
    params: &ParamsRecord,
    limits: &RunLimits,
    measuring: &Measuring,
) -> Header {
    let facts = side.device.facts();
    let gid = side
        .gid
        .map(|g| format!("{} ({})", g.index, g.kind))
        .unwrap_or_else(|| "none (LID routing)".to_string());
    let mut fields = vec![
        ("Device", facts.name.clone()),
        (
            "Firmware",
            if facts.fw_ver.is_empty() {
                "-".to_string()
            } else {
                facts.fw_ver.clone()
            },
        ),
        ("Port", side.port.port.to_string()),
        ("Link layer", side.port.link_layer.to_string()),
        (
            "Rate",
            side.port
                .rate
                .clone()
                .unwrap_or_else(|| "unknown".to_string()),
        ),
        ("GID index", gid),
    ];
    fields.extend(crate::report::params::header_fields(params));
    fields.push(("Run", run_text(params)));
    fields.push(("Memory", memory_text(side)));
    if let Some(s) = &side.staging {
        fields.push(("Staging", format!("{} per QP", s.layout())));
    }
    if params.bidirectional {
        fields.push((
            "Direction",
            "bidirectional: each side measures what it sends".to_string(),
        ));
    }
    if let Some(kind) = &params.latency {
        let kind = if kind == "one_way" {
            "one-way (RTT/2)"
        } else {
            "round trip"
        };
        fields.push(("Latency", kind.to_string()));
        fields.push(("Clock", measuring.clock.describe()));
    }
    fields.push(("NUMA node", numa_text(&measuring.placement)));
    fields.push(("Measuring on", measuring.placement.describe()));
    fields.push(("Ceiling", ceiling_text(limits)));
    Header {
        title: test_title(&params.test),
        role: role.name(),
        fields,
    }
}

/// perftest's title for a test named in a record.
fn test_title(test: &str) -> String {
    crate::plan::TestKind::parse(test).map_or_else(|| test.to_string(), |t| t.title().to_string())
}

/// The NIC's NUMA node, or why it is unknown.
fn numa_text(p: &Placement) -> String {
    match p.numa_node {
        Some(n) => n.to_string(),
        None => "unknown (sysfs gives none: a virtual device, or -1)".to_string(),
    }
}

/// "host", or "cuda:0: NVIDIA H200 at 0000:17:00.0, GPUDirect RDMA on (dma-buf)".
fn memory_text(side: &Connected) -> String {
    let Some(g) = &side.gpu_device else {
        return side.mem.name();
    };
    let path = match side.mem {
        MemMode::Cuda(_) => "GPUDirect RDMA on (dma-buf)",
        MemMode::CudaPeermem(_) => "GPUDirect RDMA on (nvidia-peermem)",
        _ => "GPUDirect RDMA off (staged through host memory)",
    };
    format!(
        "{}: {} at {}, {path}",
        side.mem.name(),
        g.name(),
        g.pci_bus_id()
    )
}

/// "5000 iterations per QP and size" or "3 s per size, 2.4 s measured (0.3 s margins)".
fn run_text(params: &ParamsRecord) -> String {
    let reps = if params.repeat > 1 {
        format!(", {} repetitions", params.repeat)
    } else {
        String::new()
    };
    let stop = match params.duration {
        Some(secs) => Stop::for_duration(secs),
        None => Stop::Iters(params.iters.unwrap_or(0)),
    };
    match stop {
        Stop::Iters(n) => {
            let warm = if params.latency.is_some() {
                format!(" after {LAT_WARMUP} warm-up")
            } else {
                String::new()
            };
            format!("{n} iterations per QP and size{warm}{reps}")
        }
        Stop::Duration { total, margin } => format!(
            "{:.1} s per size, {:.1} s measured ({:.1} s warm-up and cool-down left out){reps}",
            total.as_secs_f64(),
            (total - 2 * margin).as_secs_f64(),
            margin.as_secs_f64()
        ),
    }
}

/// "wire 48.30 GB/s (wire 48.30, PCIe 51.98)", or "unknown".
fn ceiling_text(limits: &RunLimits) -> String {
    let c = &limits.ceilings;
    match (c.limit.as_deref(), c.limit_gbps) {
        (Some(limit), Some(gbps)) => {
            let mut text = format!("{limit} {gbps:.2} GB/s");
            if let (Some(w), Some(p)) = (c.wire_gbps, c.pcie_gbps) {
                text.push_str(&format!(" (wire {w:.2}, PCIe {p:.2})"));
            }
            text
        }
        _ => "unknown".to_string(),
    }
}

/// The record's `params`: the plan as the loops ran it, on the CPU and with the clock
/// `measuring` names.
pub fn params_record(plan: &TestPlan, side: &Connected, measuring: &Measuring) -> ParamsRecord {
    let eff = Effective::of(plan, side);
    let bw = plan.test.mode == Mode::Bw;
    ParamsRecord {
        test: plan.test.to_string(),
        mem: side.mem.name(),
        connection: plan.connection.name().to_string(),
        qps: plan.qps,
        tx_depth: bw.then_some(eff.tx_depth),
        rx_depth: eff.rx_depth,
        outs: eff.outs,
        atomic: eff.atomic.map(|a| a.name().to_string()),
        inline: eff.inline,
        post_list: bw.then_some(eff.post_list),
        cq_mod: bw.then_some(eff.cq_mod),
        path_mtu: Some(eff.path_mtu),
        validate: eff.validate,
        relaxed_ordering: eff.relaxed_ordering,
        iters: plan.duration.is_none().then_some(plan.iters),
        duration: plan.duration,
        bidirectional: plan.bidirectional,
        latency: (!bw).then(|| {
            if plan.test.one_way() {
                "one_way"
            } else {
                "round_trip"
            }
            .to_string()
        }),
        repeat: plan.repeat,
        clock: (!bw).then(|| measuring.clock.kind().name().to_string()),
        clock_hz: (!bw).then(|| measuring.clock.hz()),
        cpus: measuring.placement.cpu.map(|c| c.to_string()),
        numa_node: measuring.placement.numa_node,
    }
}

fn record(
    side: &Connected,
    params: ParamsRecord,
    limits: &RunLimits,
    counters: CounterDelta,
    started_at: String,
    results: Vec<SizeResult>,
) -> RunRecord {
    let facts = side.device.facts();
    RunRecord {
        schema: SCHEMA.to_string(),
        tool: ToolRecord::current(),
        started_at,
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
            gid: side.gid.map(|g| format_gid(&g.gid)),
        },
        pcie: limits.pcie.clone(),
        params,
        ceilings: limits.ceilings.clone(),
        counters: counters.into_map(),
        gpu: side.gpu_device.as_ref().map(|g| GpuRecord {
            name: g.name().to_string(),
            bus_id: g.pci_bus_id().to_string(),
            gdr: matches!(side.mem, MemMode::Cuda(_) | MemMode::CudaPeermem(_)),
            staging: side.staging.as_ref().map(|s| {
                let layout = s.layout();
                StagingRecord {
                    chunk: layout.buffer_len,
                    depth: u64::from(layout.depth),
                }
            }),
        }),
        results,
    }
}

/// Ends a run on either side: folds each size's repetitions (sizes never run are left out),
/// prints the summary and builds the record.
#[allow(clippy::too_many_arguments)] // each is one part of the run the record describes
fn finish(
    printer: &Printer,
    side: &Connected,
    params: ParamsRecord,
    limits: &RunLimits,
    counters: crate::run::port_counters::Counters,
    started_at: String,
    reps: Vec<Vec<SizeResult>>,
) -> anyhow::Result<Outcome> {
    let results = reps
        .into_iter()
        .filter(|r| !r.is_empty())
        .map(figures::aggregate)
        .collect::<anyhow::Result<Vec<_>>>()?;
    printer.summary(&results);
    let counters = counters.finish(side);
    Ok(Outcome {
        record: record(side, params, limits, counters, started_at, results),
    })
}

/// Now, for `started_at`.
fn started_at() -> String {
    now_rfc3339()
}
