//! One run between a server and a client: the control-channel choreography around the
//! engine, the terminal output as sizes finish, and the record at the end.

mod client;
mod server;

pub use client::run_client;
pub use server::run_server;

use std::time::Duration;

use verbs::format_gid;

use crate::ceilings::RunLimits;
use crate::engine::{Connected, SideConfig};
use crate::plan::{PlanRequest, TestKind, TestPlan};
use crate::report::table::{self, Header};
use crate::report::{
    now_rfc3339, DeviceRecord, HostRecord, ParamsRecord, RunRecord, SizeResult, ToolRecord, SCHEMA,
};
use crate::units::format_size;

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
}

/// What a finished run hands back: the record of what ran, with every size's figures.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The record, ready to export.
    pub record: RunRecord,
}

/// Prints progress unless quiet.
#[derive(Debug, Clone, Copy)]
struct Printer {
    quiet: bool,
    gbits: bool,
}

impl Printer {
    fn header(&self, role: &'static str, side: &Connected, plan: &TestPlan, limits: &RunLimits) {
        if self.quiet {
            return;
        }
        print!("{}", table::header(&header(role, side, plan, limits)));
        for note in &limits.notes {
            println!(" note: {note}");
        }
        println!("{}", table::columns(self.gbits));
    }

    fn row(&self, r: &SizeResult) {
        if !self.quiet {
            println!("{}", table::row(r, self.gbits));
        }
    }

    fn footer(&self) {
        if !self.quiet {
            println!("{}", table::footer());
        }
    }
}

fn header(role: &'static str, side: &Connected, plan: &TestPlan, limits: &RunLimits) -> Header {
    let facts = side.device.facts();
    let gid = side
        .gid
        .map(|g| format!("{} ({})", g.index, g.kind))
        .unwrap_or_else(|| "none (LID routing)".to_string());
    Header {
        title: plan.test.title().to_string(),
        role,
        fields: vec![
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
            ("MTU", side.port.active_mtu.to_string()),
            ("GID index", gid),
            ("Connection", "RC".to_string()),
            ("QPs", plan.qps.to_string()),
            ("TX depth", plan.tx_depth.to_string()),
            ("CQ moderation", plan.cq_mod.to_string()),
            ("Post list", plan.post_list.to_string()),
            (
                "Inline",
                if plan.inline == 0 {
                    "off".to_string()
                } else {
                    format!("up to {}", format_size(u64::from(plan.inline)))
                },
            ),
            ("Iterations", format!("{} per QP and size", plan.iters)),
            ("Memory", "host".to_string()),
            (
                "Validate",
                if plan.validate { "on" } else { "off" }.to_string(),
            ),
            ("Ceiling", ceiling_text(limits)),
        ],
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

fn record(
    side: &Connected,
    plan: &TestPlan,
    limits: &RunLimits,
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
        params: ParamsRecord {
            test: plan.test.to_string(),
            mem: "host".to_string(),
            connection: "RC".to_string(),
            qps: plan.qps,
            tx_depth: plan.tx_depth,
            inline: plan.inline,
            post_list: plan.post_list,
            cq_mod: plan.cq_mod,
            iters: Some(plan.iters),
            duration: None,
            bidirectional: false,
            latency: None,
            repeat: 1,
        },
        ceilings: limits.ceilings.clone(),
        results,
    }
}

/// Now, for `started_at`.
fn started_at() -> String {
    now_rfc3339()
}
