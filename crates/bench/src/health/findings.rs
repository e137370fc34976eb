//! What `health` finds, as pure functions of what it read: each finding a stable code, a
//! severity as Nagios counts them, the NIC or GPU it is about and one line of evidence. The
//! codes are the interface (a drain reason, a fault ticket, an alert): they never change
//! meaning; new ones may be added.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use topo::{PciLink, Topology};

use super::expect::{Expectations, ExpectedGpu, ExpectedLink, ExpectedNic};
use crate::doctor::congestion::{Kind, Sample};

/// How bad a finding is, and the exit status it gives (Nagios plugins' codes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing wrong: exit 0.
    Ok,
    /// Worth a look; a job may still land: exit 1.
    Warning,
    /// Drain the node: exit 2.
    Critical,
    /// The check could not tell (its input could not be read): exit 3.
    Unknown,
}

impl Severity {
    /// The exit status: 0 ok, 1 warning, 2 critical, 3 unknown.
    pub fn code(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
            Severity::Unknown => 3,
        }
    }

    /// "OK", "WARNING", "CRITICAL", "UNKNOWN".
    pub fn word(self) -> &'static str {
        match self {
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
            Severity::Unknown => "UNKNOWN",
        }
    }

    /// How much it weighs: critical over unknown over warning over ok (a node with a
    /// critical fault is drained whatever else could not be read).
    pub fn rank(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Unknown => 2,
            Severity::Critical => 3,
        }
    }

    /// The status of several findings: the weightiest ([`rank`](Self::rank)).
    pub fn of(findings: &[Finding]) -> Severity {
        findings
            .iter()
            .map(|f| f.severity)
            .max_by_key(|s| s.rank())
            .unwrap_or(Severity::Ok)
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// The stable code (docs/health-and-metrics.md).
    pub code: String,
    /// What it is about: a NIC's name, a GPU's bus id, "node".
    pub subject: String,
    /// The evidence and what was expected, in a line.
    pub message: String,
}

fn finding(severity: Severity, code: &str, subject: &str, message: String) -> Finding {
    Finding {
        severity,
        code: code.to_string(),
        subject: subject.to_string(),
        message,
    }
}

/// "32 GT/s x16" ("?" where sysfs does not say).
fn link_text(speed: Option<f64>, width: Option<u32>) -> String {
    let speed = speed.map_or("? GT/s".to_string(), |s| format!("{s} GT/s"));
    let width = width.map_or("x?".to_string(), |w| format!("x{w}"));
    format!("{speed} {width}")
}

/// A link slower or narrower than expected, as a finding about `subject`.
fn link_finding(subject: &str, link: &PciLink, want: ExpectedLink) -> Option<Finding> {
    let slow = link.speed_gts.is_some_and(|s| s < want.speed_gts);
    let narrow = link.width.is_some_and(|w| w < want.width);
    if !(slow || narrow) {
        return None;
    }
    let capable = link
        .downtrain_note()
        .map_or(String::new(), |n| format!(" ({n})"));
    Some(finding(
        Severity::Critical,
        "PCIE_DEGRADED",
        subject,
        format!(
            "PCIe link runs {}, expected at least {}{capable}",
            link_text(link.speed_gts, link.width),
            link_text(Some(want.speed_gts), Some(want.width))
        ),
    ))
}

/// The link a healthy node has: the function's capability where sysfs gives it, else what
/// it runs at.
pub fn capable_link(link: &PciLink) -> Option<ExpectedLink> {
    Some(ExpectedLink {
        speed_gts: link.max_speed_gts.or(link.speed_gts)?,
        width: link.max_width.or(link.width)?,
    })
}

/// Each expected NIC present, its port ACTIVE at the rate expected, its PCIe link as fast
/// and wide as expected.
pub fn nics(topology: &Topology, expect: &Expectations) -> Vec<Finding> {
    expect
        .nics
        .iter()
        .flat_map(|want| nic(topology, want))
        .collect()
}

fn nic(topology: &Topology, want: &ExpectedNic) -> Vec<Finding> {
    let name = want.name.as_str();
    let Some(nic) = topology.nic(name) else {
        return vec![finding(
            Severity::Critical,
            "NIC_MISSING",
            name,
            "expected, not found under /sys/class/infiniband (driver not loaded, device gone \
             from the bus, or renamed)"
                .to_string(),
        )];
    };
    let mut out = Vec::new();
    match nic.ports.iter().find(|p| p.port == want.port) {
        None => out.push(finding(
            Severity::Critical,
            "PORT_DOWN",
            name,
            format!("has no port {}", want.port),
        )),
        Some(p) if !p.is_active() => out.push(finding(
            Severity::Critical,
            "PORT_DOWN",
            name,
            format!(
                "port {} is {} ({}), not ACTIVE",
                want.port,
                p.state.as_deref().unwrap_or("in an unknown state"),
                p.phys_state.as_deref().unwrap_or("physical state unknown")
            ),
        )),
        Some(p) => {
            let rate = p.port_rate().map(|r| r.gbps);
            if let (Some(have), Some(min)) = (rate, want.rate_gbps) {
                if have < min {
                    out.push(finding(
                        Severity::Critical,
                        "PORT_RATE_LOW",
                        name,
                        format!(
                            "port {} runs at {} ({have} Gb/s), expected at least {min} Gb/s",
                            want.port,
                            p.rate.as_deref().unwrap_or("?")
                        ),
                    ));
                }
            }
        }
    }
    if let (Some(link), Some(want_link)) = (&nic.link, want.pcie) {
        out.extend(link_finding(name, link, want_link));
    }
    out
}

/// Each expected GPU present, its PCIe link as expected, its nearest NIC the expected one
/// over the expected class of path.
pub fn gpus(topology: &Topology, expect: &Expectations) -> Vec<Finding> {
    expect
        .gpus
        .iter()
        .flat_map(|want| gpu(topology, want))
        .collect()
}

fn gpu(topology: &Topology, want: &ExpectedGpu) -> Vec<Finding> {
    let bdf = want.bdf.as_str();
    let Some(gpu) = topology.gpu(bdf) else {
        return vec![finding(
            Severity::Critical,
            "GPU_MISSING",
            bdf,
            "expected, not on the PCI bus (fallen off the bus, or the slot is empty)".to_string(),
        )];
    };
    let mut out = Vec::new();
    if let Some(want_link) = want.pcie {
        out.extend(link_finding(bdf, &gpu.link, want_link));
    }
    if let Some(near) = &want.nearest_nic {
        let class = topology
            .pair(&near.name, bdf)
            .map(|p| p.path.class.to_string());
        if class.as_deref() != Some(near.path.as_str()) {
            out.push(finding(
                Severity::Warning,
                "PLACEMENT",
                bdf,
                format!(
                    "path to {} is {}, expected {} (GPUDirect RDMA through the CPU, or the \
                     NICs or GPUs renumbered)",
                    near.name,
                    class
                        .as_deref()
                        .unwrap_or("unknown (NIC missing or virtual)"),
                    near.path
                ),
            ));
        }
    }
    out
}

/// GPUDirect RDMA's readiness where it must be ready: `ready` says how (dma-buf, a
/// peer-memory module), `None` that neither is there, with `why`.
pub fn gdr(must: bool, ready: Result<String, String>) -> Vec<Finding> {
    match ready {
        Err(why) if must => vec![finding(
            Severity::Critical,
            "GDR_UNAVAILABLE",
            "node",
            format!("GPUDirect RDMA is expected and cannot work: {why}"),
        )],
        _ => Vec::new(),
    }
}

/// Link error counters that rose between two samples of `nic` taken `secs` apart: a link
/// that went down or retrained is critical, symbol and receive errors a warning.
pub fn counters(nic: &str, before: &Sample, after: &Sample, secs: f64) -> Vec<Finding> {
    let mut flaps = Vec::new();
    let mut errors = Vec::new();
    for (name, &(kind, now)) in after {
        let Some(&(_, then)) = before.get(name).filter(|_| kind == Kind::Link) else {
            continue;
        };
        let rise = now.saturating_sub(then);
        if rise == 0 {
            continue;
        }
        let line = format!("{name} +{rise}");
        if name.contains("link_downed") || name.contains("link_error_recovery") {
            flaps.push(line);
        } else {
            errors.push(line);
        }
    }
    let mut out = Vec::new();
    if !flaps.is_empty() {
        out.push(finding(
            Severity::Critical,
            "LINK_FLAPPING",
            nic,
            format!(
                "the link went down or retrained in {secs:.1} s: {}",
                flaps.join(", ")
            ),
        ));
    }
    if !errors.is_empty() {
        out.push(finding(
            Severity::Warning,
            "LINK_ERRORS_CLIMBING",
            nic,
            format!(
                "physical errors rose in {secs:.1} s (a cable, a transceiver or a dirty \
                 connector): {}",
                errors.join(", ")
            ),
        ));
    }
    out
}

/// The names of the NICs the findings call missing or down: no counters or bandwidth for
/// them.
pub fn gone(findings: &[Finding]) -> BTreeSet<String> {
    findings
        .iter()
        .filter(|f| f.code == "NIC_MISSING" || f.code == "PORT_DOWN")
        .map(|f| f.subject.clone())
        .collect()
}

/// Expectations of a node as it is: its NICs with their ports' rates and their links'
/// capabilities (a link that trained down is not learned down), its GPUs with theirs and
/// their nearest NIC; GPUDirect RDMA expected where there are GPUs.
pub fn of_node(topology: &Topology) -> Expectations {
    let nics = topology
        .nics
        .iter()
        .filter_map(|n| {
            let port = n.ports.iter().find(|p| p.is_active()).or(n.ports.first())?;
            Some(ExpectedNic {
                name: n.name.clone(),
                port: port.port,
                rate_gbps: port.port_rate().map(|r| r.gbps),
                pcie: n.link.as_ref().and_then(capable_link),
                min_gbits: None,
            })
        })
        .collect();
    let gpus = topology
        .gpus
        .iter()
        .map(|g| ExpectedGpu {
            bdf: g.bdf.clone(),
            pcie: capable_link(&g.link),
            nearest_nic: topology
                .nearest_nic(&g.bdf)
                .map(|p| super::expect::NearestNic {
                    name: p.nic.clone(),
                    path: p.path.class.to_string(),
                }),
        })
        .collect();
    Expectations {
        schema: super::expect::EXPECT_SCHEMA.to_string(),
        learned_from: None,
        nics,
        gdr: !topology.gpus.is_empty(),
        gpus,
    }
}

/// Each loopback run that failed, or measured less than its NIC's `min_gbits`.
pub fn bandwidth(runs: &[super::bandwidth::BandwidthRun]) -> Vec<Finding> {
    runs.iter()
        .filter_map(|r| match (r.gbits, r.min_gbits, &r.error) {
            (None, _, error) => Some(finding(
                Severity::Critical,
                "BW_FAILED",
                &r.nic,
                format!(
                    "the loopback write-bw on port {} failed: {}",
                    r.port,
                    error.as_deref().unwrap_or("no figure")
                ),
            )),
            (Some(have), Some(min), _) if have < min => Some(finding(
                Severity::Critical,
                "BW_LOW",
                &r.nic,
                format!(
                    "the loopback write-bw on port {} measured {have:.1} Gb/s, expected at \
                     least {min:.1} Gb/s",
                    r.port
                ),
            )),
            _ => None,
        })
        .collect()
}
