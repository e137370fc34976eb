//! The text tree `rdmabench topo` prints: host bridges down to NICs and GPUs, then the
//! NIC-GPU classes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::gpu::Accelerator;
use crate::path::{Hop, PathClass, PciPath, PortRole};
use crate::pci::PciLink;
use crate::rdma::RdmaPort;
use crate::topology::{GpuInfo, NicInfo, PairInfo, Topology};
use crate::training::Training;

/// One line of the tree and what hangs below it, by address.
#[derive(Debug, Default)]
struct Node {
    label: String,
    children: BTreeMap<String, Node>,
}

/// What a line holding text read from sysfs (names, versions, states, addresses) becomes
/// on the screen: every line the report draws goes through it once. [`render`] shows the
/// text as read; `rdmabench topo` passes its one escaping of control characters, so that a
/// copy of sysfs with an escape sequence or a newline in a name cannot drive the terminal.
pub type Shown = fn(&str) -> String;

/// The whole report, text as read: see [`render_with`].
pub fn render(topo: &Topology) -> String {
    render_with(topo, str::to_string)
}

/// The whole report: tree, virtual devices, NIC-GPU classes with a legend, IOMMU; each line
/// through `shown`.
pub fn render_with(topo: &Topology, shown: Shown) -> String {
    let mut out = render_tree(topo, shown);
    let virtuals: Vec<&NicInfo> = topo.nics.iter().filter(|n| n.is_virtual).collect();
    if !virtuals.is_empty() {
        out.push_str("\nvirtual RDMA devices:\n");
        for nic in virtuals {
            let line = format!("  {}  {}  {}", nic.name, nic.attachment, ports(&nic.ports));
            let _ = writeln!(out, "{}", shown(&line));
        }
    }
    if topo.nics.is_empty() {
        out.push_str("\nno RDMA devices found (is rdma-core installed? `rdma link` lists them)\n");
    }
    if topo.gpus.is_empty() {
        out.push_str("\nno GPUs or other accelerators found\n");
    }
    out.push_str(&render_pairs(&topo.pairs, shown));
    let _ = writeln!(out, "\n{}", shown(&topo.iommu.describe()));
    out
}

/// The tree alone: one block per host bridge, each line through `shown`.
pub fn render_tree(topo: &Topology, shown: Shown) -> String {
    let mut roots: BTreeMap<String, Node> = BTreeMap::new();
    let mut numa: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for nic in &topo.nics {
        if let Some(path) = &nic.path {
            insert(&mut roots, path, nic_label(nic));
            numa_of(&mut numa, path, nic.numa_node);
        }
    }
    for gpu in &topo.gpus {
        insert(&mut roots, &gpu.path, gpu_label(gpu));
        numa_of(&mut numa, &gpu.path, gpu.numa_node);
    }
    let mut out = String::new();
    for (bridge, node) in &roots {
        let nodes = numa
            .get(bridge)
            .map(|s| s.iter().cloned().collect::<Vec<_>>());
        let line = format!(
            "{bridge} (host bridge, NUMA {})",
            nodes.map_or("?".to_string(), |n| n.join("/"))
        );
        let _ = writeln!(out, "{}", shown(&line));
        draw_children(node, "", (shown, &mut out));
    }
    out
}

/// The NIC-GPU table with the legend of the classes that appear, each row through `shown`.
pub fn render_pairs(pairs: &[PairInfo], shown: Shown) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let width = pairs
        .iter()
        .map(|p| shown(&p.nic).chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::from("\nNIC <-> GPU:\n");
    for pair in pairs {
        // The NIC's column as shown: an escaped name is wider than the name.
        let pad = width.saturating_sub(shown(&pair.nic).chars().count());
        let line = format!(
            "  {}{:pad$}  {}  {:4}  {}",
            pair.nic,
            "",
            pair.gpu,
            pair.path.class,
            pair_note(pair)
        );
        let _ = writeln!(out, "{}", shown(line.trim_end()));
    }
    let classes: BTreeSet<PathClass> = pairs.iter().map(|p| p.path.class).collect();
    for class in classes {
        let _ = writeln!(out, "  {class:4} = {}", class.meaning());
    }
    out
}

fn pair_note(pair: &PairInfo) -> String {
    let path = &pair.path;
    let mut note = match &path.common_ancestor {
        Some(ancestor) if path.class <= PathClass::Pxb => {
            let plural = if path.switches == 1 { "" } else { "es" };
            format!("via {ancestor}, {} switch{plural}", path.switches)
        }
        Some(ancestor) => format!("via root port {ancestor}"),
        None => String::new(),
    };
    // Beyond PXB the traffic crosses the root complex anyway: ACS changes nothing there.
    let acs = match path.acs_redirect {
        _ if path.class > PathClass::Pxb => "",
        Some(true) => "ACS redirects P2P up through the root complex",
        Some(false) => "",
        None => "ACS unknown (run as root to read config space)",
    };
    if !acs.is_empty() {
        if !note.is_empty() {
            note.push_str("; ");
        }
        note.push_str(acs);
    }
    note
}

fn insert(roots: &mut BTreeMap<String, Node>, path: &PciPath, leaf: String) {
    let mut node = roots.entry(path.host_bridge.clone()).or_default();
    for hop in path.bridges() {
        node = node
            .children
            .entry(hop.bdf.clone())
            .or_insert_with(|| Node {
                label: bridge_label(hop),
                children: BTreeMap::new(),
            });
    }
    if let Some(device) = path.device() {
        let entry = node.children.entry(device.bdf.clone()).or_default();
        if entry.label.is_empty() {
            entry.label = leaf;
        } else {
            entry.label.push_str(" | ");
            entry.label.push_str(&leaf);
        }
    }
}

fn numa_of(numa: &mut BTreeMap<String, BTreeSet<String>>, path: &PciPath, node: Option<u32>) {
    let text = node.map_or("?".to_string(), |n| n.to_string());
    numa.entry(path.host_bridge.clone())
        .or_default()
        .insert(text);
}

fn draw_children(node: &Node, prefix: &str, (shown, out): (Shown, &mut String)) {
    let count = node.children.len();
    for (index, child) in node.children.values().enumerate() {
        let last = index + 1 == count;
        let (branch, indent) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        let _ = writeln!(out, "{prefix}{branch}{}", shown(&child.label));
        draw_children(child, &format!("{prefix}{indent}"), (shown, &mut *out));
    }
}

fn bridge_label(hop: &Hop) -> String {
    let mut label = format!("{} {}  {}", hop.bdf, hop.role, link_text(&hop.link));
    if hop.role != PortRole::Endpoint && hop.acs.redirects() == Some(true) {
        label.push_str("  [ACS P2P redirect]");
    }
    label
}

fn nic_label(nic: &NicInfo) -> String {
    let bdf = nic.bdf.as_deref().unwrap_or("?");
    let netdevs = if nic.netdevs.is_empty() {
        String::new()
    } else {
        format!(" ({})", nic.netdevs.join(", "))
    };
    let link = nic.link.as_ref().map(link_text).unwrap_or_default();
    format!(
        "{bdf} NIC {}{netdevs}  {}  {link}",
        nic.name,
        ports(&nic.ports)
    )
}

fn gpu_label(gpu: &GpuInfo) -> String {
    let id = match (gpu.vendor, gpu.device) {
        (Some(vendor), Some(device)) => format!(" {vendor:04x}:{device:04x}"),
        _ => String::new(),
    };
    let kind = match gpu.kind {
        Accelerator::Nvidia => "GPU",
        Accelerator::Amd => "GPU (AMD)",
        other => other.name(),
    };
    format!("{} {kind}{id}  {}", gpu.bdf, link_text(&gpu.link))
}

/// "Gen4 x16 (max Gen4 x16) MPS 256", marked when trained down or when that is unknown,
/// and saying so when the other end limits it ([`PciLink::training_note`]).
fn link_text(link: &PciLink) -> String {
    match (link.training(), link.training_note()) {
        (Training::Full, Some(note)) => format!("{link}  ({note})"),
        (_, Some(note)) => format!("{link}  <-- {note}"),
        (_, None) => link.to_string(),
    }
}

/// "port 1: 400 Gb/sec (4X NDR) InfiniBand ACTIVE".
fn ports(ports: &[RdmaPort]) -> String {
    let strip = |s: &Option<String>| {
        s.as_deref()
            .map(|s| s.split_once(": ").map_or(s, |(_, name)| name).to_string())
            .unwrap_or_else(|| "?".to_string())
    };
    ports
        .iter()
        .map(|p| {
            format!(
                "port {}: {} {} {}",
                p.port,
                p.rate.as_deref().unwrap_or("rate ?"),
                p.link_layer.as_deref().unwrap_or("?"),
                strip(&p.state)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}
