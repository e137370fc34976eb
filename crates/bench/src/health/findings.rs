//! What `health` finds, as pure functions of what it read: each finding a stable code, a
//! severity as Nagios counts them, the NIC or GPU it is about and one line of evidence. The
//! codes are the interface (a drain reason, a fault ticket, an alert): they never change
//! meaning; new ones may be added.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use topo::pci::PCI_DEVICES;
use topo::rdma::INFINIBAND_CLASS;
use topo::{NicInfo, PciLink, RdmaPort, Topology};

use super::expect::{Expectations, ExpectedGpu, ExpectedLink, ExpectedNic};
use crate::doctor::congestion::{Kind, Sample};

/// How bad a finding is, and the exit status it gives (Nagios plugins' codes).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
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
    pub(crate) fn code(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
            Severity::Unknown => 3,
        }
    }

    /// "OK", "WARNING", "CRITICAL", "UNKNOWN".
    pub(crate) fn word(self) -> &'static str {
        match self {
            Severity::Ok => "OK",
            Severity::Warning => "WARNING",
            Severity::Critical => "CRITICAL",
            Severity::Unknown => "UNKNOWN",
        }
    }

    /// How much it weighs: critical over unknown over warning over ok (a node with a
    /// critical fault is drained whatever else could not be read).
    pub(crate) fn rank(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warning => 1,
            Severity::Unknown => 2,
            Severity::Critical => 3,
        }
    }

    /// The status of several findings: the weightiest ([`rank`](Self::rank)).
    pub(crate) fn of(findings: &[Finding]) -> Severity {
        findings
            .iter()
            .map(|f| f.severity)
            .max_by_key(|s| s.rank())
            .unwrap_or(Severity::Ok)
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Finding {
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

/// Why a file under the sysfs root cannot be read, `None` when it can
/// ([`topo::Sysfs::why_unreadable`]): what an UNKNOWN finding names.
pub(crate) type Unread<'a> = &'a dyn Fn(&Path) -> Option<String>;

/// An UNKNOWN finding: `what` of `subject` is not known, for `path` could not be read (or
/// reads a value this check does not understand).
fn unreadable(subject: &str, what: &str, path: &Path, unread: Unread) -> Finding {
    let why = unread(path)
        .unwrap_or_else(|| format!("{} gives no value this check understands", path.display()));
    finding(
        Severity::Unknown,
        "UNREADABLE",
        subject,
        format!("{what} not known: {why}"),
    )
}

/// The sysfs directory of NIC `name`'s port `port`.
fn port_dir(name: &str, port: u32) -> PathBuf {
    Path::new(INFINIBAND_CLASS)
        .join(name)
        .join("ports")
        .join(port.to_string())
}

/// The sysfs directory of NIC `name`'s PCI function.
fn nic_device(name: &str) -> PathBuf {
    Path::new(INFINIBAND_CLASS).join(name).join("device")
}

/// The sysfs directory of the PCI function `bdf`.
fn pci_device(bdf: &str) -> PathBuf {
    Path::new(PCI_DEVICES).join(bdf)
}

/// A link slower or narrower than expected, down, or unreadable, as a finding about
/// `subject`, whose PCI function's directory is `dir`.
fn link_finding(
    (subject, dir): (&str, &Path),
    link: &PciLink,
    want: ExpectedLink,
    unread: Unread,
) -> Option<Finding> {
    let expected = link_text(Some(want.speed_gts), Some(want.width));
    let (Some(speed), Some(width)) = (link.speed_gts, link.width) else {
        return Some(unknown_link((subject, dir), &expected, unread));
    };
    if speed >= want.speed_gts && width >= want.width {
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
            "PCIe link runs {}, expected at least {expected}{capable}",
            link_text(link.speed_gts, link.width)
        ),
    ))
}

/// A link whose speed or width is not known: UNKNOWN when a file cannot be read, else (the
/// files read `Unknown` or a width of 0, the kernel's words for a link that is not up) down.
fn unknown_link((subject, dir): (&str, &Path), expected: &str, unread: Unread) -> Finding {
    for name in ["current_link_speed", "current_link_width"] {
        let path = dir.join(name);
        if unread(&path).is_some() {
            let what = format!("its PCIe link (expected at least {expected})");
            return unreadable(subject, &what, &path, unread);
        }
    }
    finding(
        Severity::Critical,
        "PCIE_DEGRADED",
        subject,
        format!(
            "PCIe link is down (current_link_speed Unknown or current_link_width 0), \
             expected at least {expected}"
        ),
    )
}

/// The link a healthy node has: what both its ends can do (the lesser of the function's
/// capability and the port's above it, [`PciLink::training`]); `None` where that cannot be
/// told (a capability unreadable and the link below the other), which `as_found` reports.
pub(crate) fn capable_link(link: &PciLink) -> Option<ExpectedLink> {
    Some(ExpectedLink {
        speed_gts: link.capable_speed_gts()?,
        width: link.capable_width()?,
    })
}

/// Each expected NIC present, its port ACTIVE at the rate expected, its PCIe link as fast
/// and wide as expected.
pub(crate) fn nics(topology: &Topology, expect: &Expectations, unread: Unread) -> Vec<Finding> {
    expect
        .nics
        .iter()
        .flat_map(|want| nic(topology, want, unread))
        .collect()
}

fn nic(topology: &Topology, want: &ExpectedNic, unread: Unread) -> Vec<Finding> {
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
        Some(p) if p.state.is_none() => out.push(unreadable(
            name,
            &format!("port {}'s state", want.port),
            &port_dir(name, want.port).join("state"),
            unread,
        )),
        Some(p) if !p.is_active() => out.push(finding(
            Severity::Critical,
            "PORT_DOWN",
            name,
            format!(
                "port {} is {} ({}), not ACTIVE",
                want.port,
                p.state.as_deref().unwrap_or_default(),
                p.phys_state.as_deref().unwrap_or("physical state unknown")
            ),
        )),
        Some(p) => out.extend(
            want.rate_gbps
                .and_then(|min| rate_finding(name, p, min, unread)),
        ),
    }
    if let Some(want_link) = want.pcie {
        let dir = nic_device(name);
        out.extend(match &nic.link {
            Some(link) => link_finding((name, &dir), link, want_link, unread),
            None => Some(unreadable(
                name,
                "its PCIe link",
                &dir.join("current_link_speed"),
                unread,
            )),
        });
    }
    out
}

/// An active port `p` of NIC `name` below `min` Gb/s, or whose rate cannot be read.
fn rate_finding(name: &str, p: &RdmaPort, min: f64, unread: Unread) -> Option<Finding> {
    let Some(have) = p.port_rate().map(|r| r.gbps) else {
        let path = port_dir(name, p.port).join("rate");
        let what = format!("port {}'s rate (expected at least {min} Gb/s)", p.port);
        return Some(unreadable(name, &what, &path, unread));
    };
    (have < min).then(|| {
        finding(
            Severity::Critical,
            "PORT_RATE_LOW",
            name,
            format!(
                "port {} runs at {} ({have} Gb/s), expected at least {min} Gb/s",
                p.port,
                p.rate.as_deref().unwrap_or("?")
            ),
        )
    })
}

/// Each expected GPU present, its PCIe link as expected, its nearest NIC the expected one
/// over the expected class of path.
pub(crate) fn gpus(topology: &Topology, expect: &Expectations, unread: Unread) -> Vec<Finding> {
    expect
        .gpus
        .iter()
        .flat_map(|want| gpu(topology, want, unread))
        .collect()
}

fn gpu(topology: &Topology, want: &ExpectedGpu, unread: Unread) -> Vec<Finding> {
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
        let dir = pci_device(&gpu.bdf);
        out.extend(link_finding((bdf, &dir), &gpu.link, want_link, unread));
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
pub(crate) fn gdr(must: bool, ready: Result<String, String>) -> Vec<Finding> {
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
pub(crate) fn counters(nic: &str, before: &Sample, after: &Sample, secs: f64) -> Vec<Finding> {
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

/// The UNKNOWN finding of NIC `nic` none of whose port `port`'s counters could be read:
/// nothing says its link is steady.
pub(crate) fn no_counters(nic: &str, port: u32) -> Finding {
    let dir = port_dir(nic, port);
    finding(
        Severity::Unknown,
        "UNREADABLE",
        nic,
        format!(
            "its link error counters not known: none could be read in {} or {}",
            dir.join("counters").display(),
            dir.join("hw_counters").display()
        ),
    )
}

/// The names of the NICs the findings call missing or down: no counters or bandwidth for
/// them.
pub(crate) fn gone(findings: &[Finding]) -> BTreeSet<String> {
    findings
        .iter()
        .filter(|f| f.code == "NIC_MISSING" || f.code == "PORT_DOWN")
        .map(|f| f.subject.clone())
        .collect()
}

/// The port a NIC as found is judged by: its first ACTIVE one, else its first.
fn learned_port(nic: &NicInfo) -> Option<&RdmaPort> {
    nic.ports
        .iter()
        .find(|p| p.is_active())
        .or(nic.ports.first())
}

/// What the node as found cannot be judged by (no `--expect`, or `--learn`): no RDMA device
/// at all (a node whose NIC driver failed to load), a NIC without ports, an active port's
/// rate or a PCIe link's capability that cannot be read.
pub(crate) fn as_found(topology: &Topology, unread: Unread) -> Vec<Finding> {
    if topology.nics.is_empty() {
        return vec![finding(
            Severity::Critical,
            "NIC_MISSING",
            "node",
            format!(
                "no RDMA device under {INFINIBAND_CLASS} (the NIC driver not loaded, or the \
                 devices gone from the bus)"
            ),
        )];
    }
    let mut out = Vec::new();
    for n in &topology.nics {
        match learned_port(n) {
            None => out.push(finding(
                Severity::Unknown,
                "UNREADABLE",
                &n.name,
                format!(
                    "its ports not known: no port under {INFINIBAND_CLASS}/{}/ports",
                    n.name
                ),
            )),
            Some(p) if p.is_active() && p.port_rate().is_none() => {
                let path = port_dir(&n.name, p.port).join("rate");
                let what = format!("port {}'s rate", p.port);
                out.push(unreadable(&n.name, &what, &path, unread));
            }
            Some(_) => {}
        }
        if let Some(link) = n.link.as_ref().filter(|l| capable_link(l).is_none()) {
            out.push(unknown_capability(
                &n.name,
                &nic_device(&n.name),
                link,
                unread,
            ));
        }
    }
    for g in topology
        .gpus
        .iter()
        .filter(|g| capable_link(&g.link).is_none())
    {
        out.push(unknown_capability(
            &g.bdf,
            &pci_device(&g.bdf),
            &g.link,
            unread,
        ));
    }
    out
}

/// The UNKNOWN finding of a PCI function in `dir` whose link's capability, as both ends
/// make it, cannot be told: a file of its own that cannot be read, else the port above it
/// (`dir/..`), whose capability cannot be read while the link runs below the function's.
fn unknown_capability(subject: &str, dir: &Path, link: &PciLink, unread: Unread) -> Finding {
    let names = [
        "max_link_speed",
        "max_link_width",
        "current_link_speed",
        "current_link_width",
    ];
    let own = names
        .iter()
        .map(|name| dir.join(name))
        .find(|path| unread(path).is_some());
    let peer = ["max_link_speed", "max_link_width"]
        .iter()
        .map(|name| dir.join("..").join(name))
        .find(|path| unread(path).is_some());
    match (own, peer) {
        (None, Some(path)) => {
            let what = format!(
                "the capability of the port above it (the link runs {}, below the function's {})",
                link.now_text(),
                topo::pci::gen_width(link.max_speed_gts, link.max_width)
            );
            unreadable(subject, &what, &path, unread)
        }
        (own, _) => {
            let path = own.unwrap_or_else(|| dir.join(names[0]));
            unreadable(subject, "its PCIe link's capability", &path, unread)
        }
    }
}

/// Expectations of a node as it is: its NICs with their ports' rates and their links'
/// capabilities (a link that trained down is not learned down), its GPUs with theirs and
/// their nearest NIC; GPUDirect RDMA expected where there are GPUs.
pub(crate) fn of_node(topology: &Topology) -> Expectations {
    let nics = topology
        .nics
        .iter()
        .filter_map(|n| {
            let port = learned_port(n)?;
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
pub(crate) fn bandwidth(runs: &[super::bandwidth::BandwidthRun]) -> Vec<Finding> {
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
