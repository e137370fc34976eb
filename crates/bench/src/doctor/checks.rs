//! The checks on the NIC, its port and its path to the GPU, and on the host (the PCIe link
//! checks are `pcie.rs`). Each takes facts already read and returns one [`Check`]; reading
//! is in `mod.rs`, `host.rs` and `counters.rs`.
//!
//! The checklist itself, one function per check; its tests are `checks/tests.rs`.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::path::Path;

use topo::ceiling::{roce_active_mtu, IB_MTUS};
use topo::{
    Iommu, Limit, LinkLayer, PairInfo, PathClass, PciLink, RdmaDevice, RdmaPort, Sysfs, Topology,
};

use super::host::{format_cpulist, GdrFacts};
use super::verdict::Check;

/// What a check on a PCIe property of a software device says.
pub(crate) const VIRTUAL: &str = "virtual device, no PCI function";

/// "4: ACTIVE" -> "ACTIVE".
fn strip_number(text: &str) -> &str {
    text.split_once(": ").map_or(text, |(_, name)| name)
}

/// The RDMA device itself, as a fact.
pub(crate) fn device(nic: &RdmaDevice) -> Check {
    let mut text = format!("{}: {}", nic.name, nic.describe_attachment());
    if let Some(fw) = nic.fw_ver.as_deref().filter(|fw| !fw.is_empty()) {
        text.push_str(&format!(", fw {fw}"));
    }
    if let Some(node) = nic.numa_node {
        text.push_str(&format!(", NUMA node {node}"));
    }
    if !nic.netdevs.is_empty() && !nic.is_virtual() {
        text.push_str(&format!(", netdev {}", nic.netdevs.join(", ")));
    }
    Check::info("RDMA device", text)
}

/// The port exists and is ACTIVE.
pub(crate) fn port_state(nic: &RdmaDevice, number: u32) -> Check {
    const NAME: &str = "port state";
    let Some(port) = nic.port(number) else {
        let ports: Vec<String> = nic.ports.iter().map(|p| p.port.to_string()).collect();
        return Check::fail(
            NAME,
            format!(
                "{} has no port {number}; ports: {}",
                nic.name,
                ports.join(", ")
            ),
        )
        .fix("-i/--ib-port picks the port");
    };
    let state = port.state.as_deref().map_or("state unknown", strip_number);
    let phys = port.phys_state.as_deref().map_or("?", strip_number);
    let layer = port.link_layer.as_deref().unwrap_or("link layer unknown");
    let text = format!("{} port {number} {state} ({phys}), {layer}", nic.name);
    if port.is_active() {
        return Check::pass(NAME, text);
    }
    let netdev = port.netdevs.first().or(nic.netdevs.first());
    let fix = match (state, port.layer()) {
        ("INIT" | "ARMED", Some(LinkLayer::InfiniBand)) => {
            "the link is up but no subnet manager configured it: run opensm on the fabric or \
             enable the switch's SM (`sminfo` finds one)"
                .to_string()
        }
        (_, Some(LinkLayer::Ethernet)) => format!(
            "no link: check the cable and the switch port; `ip link set dev {0} up`, \
             `ethtool {0}` shows the link",
            netdev.map_or("<netdev>", String::as_str)
        ),
        _ => format!(
            "no link: check the cable and the switch port; `ibstat {}` shows the physical state",
            nic.name
        ),
    };
    Check::fail(NAME, text).fix(fix)
}

/// The port's rate: what it trained at, against `--expect-rate` and the usual 4X width.
pub(crate) fn port_rate(nic: &RdmaDevice, port: &RdmaPort, expect_gbps: Option<f64>) -> Check {
    const NAME: &str = "port rate";
    let Some(text) = port.rate.as_deref() else {
        return if port.is_active() {
            Check::warn(
                NAME,
                format!("{} port {}: rate unreadable", nic.name, port.port),
            )
        } else {
            Check::skip(NAME, "port not ACTIVE")
        };
    };
    let Some(rate) = port.port_rate() else {
        return Check::warn(NAME, format!("rate {text:?} not understood"));
    };
    let layer = port.link_layer.as_deref().unwrap_or("?");
    if nic.is_virtual() {
        return Check::info(
            NAME,
            format!("{text} {layer}: a software device's rate is nominal, not a limit"),
        );
    }
    if let Some(expect) = expect_gbps {
        if rate.gbps < expect * 0.999 {
            return Check::fail(NAME, format!("{text}, expected {expect} Gb/s")).fix(
                "the link trained slower than expected: check the cable's rating and the \
                 switch port's speed; `ibstat` (InfiniBand) or `ethtool <netdev>` lists the \
                 supported speeds",
            );
        }
        return Check::pass(
            NAME,
            format!("{text} {layer}, at least the expected {expect} Gb/s"),
        );
    }
    if port.layer() == Some(LinkLayer::InfiniBand) && rate.lanes.is_some_and(|l| l < 4) {
        return Check::warn(
            NAME,
            format!(
                "{text}: InfiniBand HCA ports train 4X unless a split cable is used, so a lane \
                 may be down"
            ),
        )
        .fix(format!(
            "reseat or replace the cable; `ibstat {}` shows the width",
            nic.name
        ));
    }
    Check::pass(
        NAME,
        format!("{text} {layer} (sysfs has no maximum: --expect-rate GBPS checks it)"),
    )
}

/// The active MTU and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MtuFact {
    /// The active (path) MTU in bytes, when known.
    pub active: Option<u32>,
    /// How it was found, or why not.
    pub source: String,
    /// The netdev and its MTU, when there is one.
    pub netdev: Option<(String, u32)>,
}

/// Work out the active MTU: from verbs when it answered, else from the netdev's MTU (RoCE:
/// exactly as the kernel derives it; InfiniBand: the IPoIB datagram MTU is the IB MTU - 4).
pub(crate) fn mtu_fact(
    sysfs: &Sysfs,
    layer: Option<LinkLayer>,
    netdev: Option<&str>,
    verbs: Option<Result<u32, String>>,
) -> MtuFact {
    let netdev = netdev.and_then(|name| {
        let path = Path::new("/sys/class/net").join(name).join("mtu");
        let mtu = sysfs.read_text(&path)?.parse::<u32>().ok()?;
        Some((name.to_string(), mtu))
    });
    let verbs_note = match &verbs {
        Some(Ok(active)) => {
            let source = match &netdev {
                Some((name, mtu)) => format!("active_mtu from verbs; netdev {name} MTU {mtu}"),
                None => "active_mtu from verbs".to_string(),
            };
            return MtuFact {
                active: Some(*active),
                source,
                netdev,
            };
        }
        Some(Err(e)) => format!(" (verbs: {e})"),
        None => String::new(),
    };
    let (active, source) = match (layer, &netdev) {
        (Some(LinkLayer::Ethernet), Some((name, mtu))) => (
            roce_active_mtu(*mtu),
            format!("netdev {name} MTU {mtu}, as the kernel derives the RoCE MTU"),
        ),
        (Some(LinkLayer::InfiniBand), Some((name, mtu))) if IB_MTUS.contains(&(mtu + 4)) => (
            Some(mtu + 4),
            format!("IPoIB {name} datagram MTU {mtu} = IB MTU - 4"),
        ),
        (Some(LinkLayer::InfiniBand), _) => (
            None,
            "InfiniBand active MTU needs verbs or an IPoIB netdev in datagram mode".to_string(),
        ),
        (_, None) => (None, "no netdev MTU for this port".to_string()),
        (None, Some(_)) => (None, "link layer unknown".to_string()),
    };
    MtuFact {
        active,
        source: format!("{source}{verbs_note}"),
        netdev,
    }
}

/// The MTU against InfiniBand's 4096 or RoCE's jumbo frames.
pub(crate) fn mtu(device: &str, port: &RdmaPort, fact: &MtuFact, iwarp: bool) -> Check {
    const NAME: &str = "MTU";
    if !port.is_active() {
        return Check::skip(NAME, "port not ACTIVE");
    }
    if iwarp {
        let netdev = fact
            .netdev
            .as_ref()
            .map_or("netdev MTU unknown".to_string(), |(n, m)| {
                format!("netdev {n} MTU {m}")
            });
        return Check::info(
            NAME,
            format!("iWARP device: it runs over TCP, segments follow the {netdev}"),
        );
    }
    let Some(active) = fact.active else {
        return Check::skip(
            NAME,
            format!(
                "active MTU unknown: {}; `ibv_devinfo -d {device}` shows active_mtu",
                fact.source
            ),
        );
    };
    let evidence = format!("active MTU {active} ({})", fact.source);
    if active >= 4096 {
        return Check::pass(NAME, evidence);
    }
    match port.layer() {
        Some(LinkLayer::Ethernet) => {
            let netdev = fact
                .netdev
                .as_ref()
                .map_or("<netdev>", |(name, _)| name.as_str());
            Check::warn(NAME, format!("{evidence}: RoCE runs best at 4096")).fix(format!(
                "jumbo frames: `ip link set dev {netdev} mtu 9000` here, on the peer and on the \
                 switch ports (a RoCE MTU of 4096 needs a netdev MTU of at least 4192)"
            ))
        }
        _ => Check::warn(NAME, format!("{evidence}: InfiniBand runs best at 4096")).fix(
            "the subnet manager and the switch set it: opensm's partitions.conf (`mtu=5` is \
             4096); `ibv_devinfo` shows active_mtu",
        ),
    }
}

/// One populated GID table entry from sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gid {
    /// Its index (`-x`).
    pub index: u32,
    /// The GID as an IPv6 address.
    pub addr: Ipv6Addr,
    /// "RoCE v2", "IB/RoCE v1", when sysfs says.
    pub kind: Option<String>,
}

/// The populated GIDs of a port (`ports/N/gids/*`, `gid_attrs/types/*`), by index.
pub(crate) fn read_gids(sysfs: &Sysfs, device: &str, port: u32) -> Vec<Gid> {
    let dir = Path::new("/sys/class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let mut indices: Vec<u32> = sysfs
        .list(&dir.join("gids"))
        .unwrap_or_default()
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    indices.sort_unstable();
    indices
        .into_iter()
        .filter_map(|index| {
            let text = sysfs.read_text(&dir.join("gids").join(index.to_string()))?;
            let addr: Ipv6Addr = text.parse().ok()?;
            if addr.is_unspecified() {
                return None;
            }
            let kind = sysfs.read_text(&dir.join("gid_attrs/types").join(index.to_string()));
            Some(Gid { index, addr, kind })
        })
        .collect()
}

/// Whether the device is iWARP (node type "4: RNIC", as siw and irdma's iWARP ports are):
/// it runs over TCP, so RoCE's GIDs and MTU rules do not apply.
pub(crate) fn is_iwarp(nic: &RdmaDevice) -> bool {
    nic.node_type
        .as_deref()
        .is_some_and(|t| t.ends_with("RNIC"))
}

/// A RoCE v2 GID exists (on RoCE ports).
pub(crate) fn roce_gid(port: &RdmaPort, gids: &[Gid], netdev: Option<&str>, iwarp: bool) -> Check {
    const NAME: &str = "RoCEv2 GID";
    if iwarp {
        return Check::skip(
            NAME,
            "iWARP device (node type RNIC): RoCE GIDs do not apply",
        );
    }
    match port.layer() {
        Some(LinkLayer::Ethernet) => {}
        Some(LinkLayer::InfiniBand) => {
            return Check::skip(NAME, "InfiniBand port: RoCE GIDs do not apply")
        }
        None => return Check::skip(NAME, "link layer unknown"),
    }
    if !port.is_active() {
        return Check::skip(NAME, "port not ACTIVE");
    }
    let netdev = netdev.unwrap_or("<netdev>");
    let v2: Vec<&Gid> = gids
        .iter()
        .filter(|g| g.kind.as_deref() == Some("RoCE v2"))
        .collect();
    let Some(best) = v2
        .iter()
        .find(|g| g.addr.to_ipv4_mapped().is_some())
        .or(v2.first())
    else {
        let seen: Vec<String> = gids
            .iter()
            .map(|g| {
                format!(
                    "[{}] {} {}",
                    g.index,
                    g.addr,
                    g.kind.as_deref().unwrap_or("type ?")
                )
            })
            .collect();
        let seen = if seen.is_empty() {
            "none".to_string()
        } else {
            seen.join(", ")
        };
        return Check::fail(
            NAME,
            format!("no RoCE v2 GID on port {}; GIDs: {seen}", port.port),
        )
        .fix(format!(
            "give {netdev} an IP address and bring it up (`ip addr add 192.0.2.1/24 dev \
                 {netdev}`): each address adds a RoCE v1 and a v2 GID"
        ));
    };
    let mut text = format!(
        "GID[{}] {} RoCE v2 ({} RoCE v2 GIDs on {netdev})",
        best.index,
        best.addr,
        v2.len()
    );
    if best.addr.to_ipv4_mapped().is_none() {
        text.push_str(
            "; only link-local: rdma_cm and routed RoCE need an IP address on the netdev",
        );
    }
    Check::pass(NAME, text)
}

/// The NIC-GPU class: PIX/PXB good, PHB acceptable, NODE/SYS bad for GPUDirect.
pub(crate) fn path_class(topology: &Topology, pair: &PairInfo) -> Check {
    const NAME: &str = "NIC-GPU path";
    let class = pair.path.class;
    let via = match (&pair.path.common_ancestor, class) {
        (Some(ancestor), PathClass::Pix | PathClass::Pxb) => {
            let plural = if pair.path.switches == 1 { "" } else { "es" };
            format!(" via {ancestor}, {} switch{plural}", pair.path.switches)
        }
        (Some(ancestor), _) => format!(" via root port {ancestor}"),
        (None, _) => String::new(),
    };
    let text = format!(
        "{} <-> {}: {class}{via}, {}",
        pair.nic,
        pair.gpu,
        class.meaning()
    );
    match class {
        PathClass::Pix | PathClass::Pxb => Check::pass(NAME, text),
        PathClass::Phb => Check::warn(
            NAME,
            format!("{text}; GPUDirect crosses the CPU's root complex"),
        )
        .fix(alternatives(
            topology,
            pair,
            "a GPU below the NIC's PCIe switch (PIX) is better",
        )),
        PathClass::Node | PathClass::Sys => Check::fail(
            NAME,
            format!("{text}; GPUDirect RDMA over this path runs at a fraction of the link rate"),
        )
        .fix(alternatives(
            topology,
            pair,
            "pair the NIC with a GPU on its own PCIe switch or socket",
        )),
    }
}

/// Better partners for the pair's NIC and GPU, from the topology.
fn alternatives(topology: &Topology, pair: &PairInfo, default: &str) -> String {
    let better = |p: &&PairInfo| p.path.class < pair.path.class;
    let mut hints = Vec::new();
    let same_nic = topology.pairs.iter().filter(|p| p.nic == pair.nic);
    if let Some(p) = same_nic.filter(better).min_by_key(|p| p.path.class) {
        hints.push(format!("GPU {} is {} to {}", p.gpu, p.path.class, p.nic));
    }
    let same_gpu = topology.pairs.iter().filter(|p| p.gpu == pair.gpu);
    if let Some(p) = same_gpu.filter(better).min_by_key(|p| p.path.class) {
        hints.push(format!(
            "NIC {} is {} to GPU {}",
            p.nic, p.path.class, p.gpu
        ));
    }
    if hints.is_empty() {
        format!("{default}; no better pair on this machine (`rdmabench topo` lists them)")
    } else {
        format!("{}; `rdmabench topo` lists every pair", hints.join("; "))
    }
}

/// ACS P2P redirect off on the bridges between NIC and GPU.
pub(crate) fn acs(pair: &PairInfo) -> Check {
    const NAME: &str = "ACS on the path";
    if pair.path.class > PathClass::Pxb {
        return Check::skip(
            NAME,
            format!(
                "the path goes through the host bridge ({}): switch ACS does not change it",
                pair.path.class
            ),
        );
    }
    let bridges: Vec<&str> = pair.path.route.iter().map(|h| h.bdf.as_str()).collect();
    let redirecting: Vec<&str> = pair
        .path
        .route
        .iter()
        .filter(|h| h.acs.redirects() == Some(true))
        .map(|h| h.bdf.as_str())
        .collect();
    match pair.path.acs_redirect {
        Some(true) => Check::fail(
            NAME,
            format!(
                "P2P redirect set on {}: peer-to-peer goes up through the root complex",
                redirecting.join(", ")
            ),
        )
        .fix(format!(
            "clear ACS Request/Completion Redirect on those ports (BIOS \"ACS\" setting, or \
             `setpci -s {} ECAP_ACS+6.w=0` as root) unless the IOMMU must isolate them",
            redirecting.first().unwrap_or(&"<bdf>")
        )),
        Some(false) => Check::pass(NAME, format!("redirect off on {}", bridges.join(", "))),
        None => Check::warn(
            NAME,
            format!(
                "ACS unreadable on {} (reading config space needs root)",
                bridges.join(", ")
            ),
        )
        .fix("run doctor as root to read the ACS control registers"),
    }
}

/// GPUDirect RDMA readiness for a GPU of `kind`, from its vendor's pieces.
pub(crate) fn gpudirect_for(kind: topo::Accelerator, facts: &GdrFacts) -> Check {
    match kind {
        topo::Accelerator::Nvidia => gpudirect(facts),
        topo::Accelerator::Amd => gpudirect_amd(facts),
        other => Check::skip(GPUDIRECT, no_runtime(other)),
    }
}

const GPUDIRECT: &str = "GPUDirect RDMA";

/// Why a GPU check skips an accelerator of `kind`.
fn no_runtime(kind: topo::Accelerator) -> String {
    format!("rdmabench has no runtime for {} accelerators", kind.name())
}

/// What keeps the RDMA core from importing a dma-buf, and what could not be read: the
/// kernel's release (5.12 first imports one) and `CONFIG_DMA_SHARED_BUFFER`.
fn dma_buf_gaps(facts: &GdrFacts) -> (Vec<String>, Vec<String>) {
    let release = facts.release.as_deref().unwrap_or("unknown");
    let (mut blockers, mut unknowns) = (Vec::new(), Vec::new());
    match facts.kernel_has_dmabuf_mr() {
        Some(false) => blockers.push(format!("kernel {release} is older than 5.12")),
        None => unknowns.push("the kernel release".to_string()),
        Some(true) => {}
    }
    match facts.config.set {
        Some(false) => blockers.push(format!(
            "CONFIG_DMA_SHARED_BUFFER is not set ({})",
            facts.config.source
        )),
        None => unknowns.push(format!(
            "CONFIG_DMA_SHARED_BUFFER ({})",
            facts.config.source
        )),
        Some(true) => {}
    }
    (blockers, unknowns)
}

/// The verdict of a GPU whose peer memory `peer` is not loaded, where dma-buf is blocked
/// (`blockers`) or cannot be confirmed (`unknowns`); `None` where dma-buf is possible.
fn dma_buf_not_ready(
    peer: &str,
    (blockers, unknowns): (&[String], &[String]),
    release: &str,
    fix: &str,
) -> Option<Check> {
    if !blockers.is_empty() {
        let text = format!("{peer} not loaded and no dma-buf: {}", blockers.join("; "));
        return Some(Check::fail(GPUDIRECT, text).fix(fix));
    }
    if !unknowns.is_empty() {
        let text = format!(
            "{peer} not loaded; dma-buf could not be confirmed: unknown {} (kernel {release})",
            unknowns.join(", ")
        );
        return Some(Check::warn(GPUDIRECT, text).fix(fix));
    }
    None
}

/// nvidia-peermem loaded, or dma-buf possible (kernel, config, driver).
pub(crate) fn gpudirect(facts: &GdrFacts) -> Check {
    let driver = facts
        .driver
        .as_deref()
        .map_or(String::new(), |v| format!(", NVIDIA driver {v}"));
    if let Some(module) = &facts.peermem {
        return Check::pass(GPUDIRECT, format!("{module} loaded{driver}"));
    }
    let release = facts.release.as_deref().unwrap_or("unknown");
    let (mut blockers, unknowns) = dma_buf_gaps(facts);
    if facts.driver_major().is_some_and(|major| major < 515) {
        blockers.push("NVIDIA drivers before R515 do not export dma-buf".to_string());
    }
    if facts.open_modules == Some(false) {
        blockers.push(
            "the proprietary NVIDIA kernel modules do not export dma-buf (the open ones do)"
                .to_string(),
        );
    }
    let fix = "`modprobe nvidia-peermem` (it ships with the NVIDIA driver), or use dma-buf: a \
               kernel >= 5.12 with CONFIG_DMA_SHARED_BUFFER and the open NVIDIA kernel modules \
               (R515+)";
    if let Some(c) = dma_buf_not_ready("nvidia_peermem", (&blockers, &unknowns), release, fix) {
        return c;
    }
    Check::pass(
        GPUDIRECT,
        format!(
            "dma-buf possible: kernel {release} >= 5.12, CONFIG_DMA_SHARED_BUFFER set ({}){driver}; \
             nvidia_peermem not loaded",
            facts.config.source
        ),
    )
}

/// amdgpu's PeerDirect registered with the RDMA core, or dma-buf possible: kernel, config,
/// the amdgpu module, and `CONFIG_PCI_P2PDMA`, without which amdgpu moves an exported buffer
/// to system memory (GTT) for the NIC: it works, but the NIC reads a copy, not the GPU.
pub(crate) fn gpudirect_amd(facts: &GdrFacts) -> Check {
    use accel::Runtime as _;
    let peer = rocm::ROCM.peer_memory();
    if facts.amd.peer_direct {
        return Check::pass(
            GPUDIRECT,
            format!("{} loaded ({})", peer.name, peer.loaded_when.join(" or ")),
        );
    }
    let release = facts.release.as_deref().unwrap_or("unknown");
    let (mut blockers, mut unknowns) = dma_buf_gaps(facts);
    if !facts.amd.amdgpu {
        blockers.push("the amdgpu module is not loaded".to_string());
    }
    let fix = format!(
        "{}; or use dma-buf: a kernel >= 5.12 with CONFIG_DMA_SHARED_BUFFER, \
         CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA, amdgpu loaded",
        peer.how
    );
    let kernel = &facts.amd.kernel;
    if let (true, Some(gap)) = (blockers.is_empty(), kernel.gap()) {
        if !kernel.missing().is_empty() {
            let text = format!("dma-buf export works, but {gap}; {} not loaded", peer.name);
            return Check::warn(GPUDIRECT, text).fix(fix);
        }
    }
    unknowns.extend(kernel.unknown());
    if let Some(c) = dma_buf_not_ready(peer.name, (&blockers, &unknowns), release, &fix) {
        return c;
    }
    Check::pass(
        GPUDIRECT,
        format!(
            "dma-buf possible: kernel {release} >= 5.12, CONFIG_DMA_SHARED_BUFFER, \
             CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA set ({}), amdgpu loaded; {} not loaded",
            facts.config.source, peer.name
        ),
    )
}

/// The GPU's own dma-buf and GPUDirect RDMA attributes, asked of its runtime (`kind`'s: CUDA for
/// NVIDIA) on the live machine (`gpu_bdf`); a sysfs snapshot (`live` false) cannot be asked.
pub(crate) fn gpu_dmabuf_attribute(gpu_bdf: &str, kind: topo::Accelerator, live: bool) -> Check {
    const NAME: &str = "GPU dma-buf support";
    let Some(runtime) = crate::memory::runtime_of(kind) else {
        return Check::skip(NAME, no_runtime(kind));
    };
    let rt = runtime.name();
    if !live {
        return Check::skip(
            NAME,
            format!("a snapshot: {rt} answers for the live machine only"),
        );
    }
    let device = gpu_bdf
        .parse::<accel::DeviceSelector>()
        .map_err(accel::AccelError::from)
        .and_then(|gpu| runtime.open(&gpu));
    match device {
        Err(e) => Check::skip(NAME, format!("{rt} cannot be asked: {e}")),
        Ok(d) => {
            let said = |r: Result<(), accel::AccelError>| match r {
                Ok(()) => "supported".to_string(),
                Err(e) => e.to_string(),
            };
            let dmabuf = d.require_dma_buf();
            let ok = dmabuf.is_ok();
            let evidence = format!(
                "{} ({}): dma-buf export {}; GPUDirect RDMA {}",
                d.name(),
                d.pci_bus_id(),
                said(dmabuf),
                said(d.require_gpu_direct_rdma())
            );
            if ok {
                Check::pass(NAME, evidence)
            } else {
                let mode = rt.to_lowercase();
                Check::warn(NAME, evidence).fix(format!(
                    "without dma-buf, --mem {mode} cannot register GPU memory: use --mem \
                     {mode}-peermem ({}: {}) or --mem {mode}-staged; dma-buf needs a recent \
                     driver ({rt}'s) and a kernel with dma-buf support for it",
                    runtime.peer_memory().name,
                    runtime.peer_memory().how
                ))
            }
        }
    }
}

/// The IOMMU: off or passthrough, or translating (a cost for GPUDirect).
pub(crate) fn iommu(iommu: &Iommu, nic_group_type: Option<&str>) -> Check {
    const NAME: &str = "IOMMU";
    let described = iommu.describe();
    if !iommu.enabled {
        return Check::pass(NAME, described);
    }
    let passthrough_cmdline = iommu.cmdline.iter().any(|w| {
        matches!(
            w.as_str(),
            "iommu=pt" | "iommu.passthrough=1" | "amd_iommu=pt"
        )
    });
    let mode = nic_group_type.or(match iommu.group_types.as_slice() {
        [only] => Some(only.as_str()),
        _ => None,
    });
    let fix = "boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt) unless \
               DMA isolation is needed";
    match mode {
        Some("identity") => Check::pass(NAME, format!("passthrough: {described}")),
        None if passthrough_cmdline => Check::pass(NAME, format!("passthrough: {described}")),
        Some(kind @ ("DMA" | "DMA-FQ")) => Check::warn(
            NAME,
            format!(
                "translating (domain {kind}): every DMA goes through IOMMU page tables and \
                 GPUDirect peer-to-peer needs ATS or goes up through the root complex; {described}"
            ),
        )
        .fix(fix),
        Some(kind) => Check::warn(NAME, format!("domain {kind}: {described}")).fix(fix),
        None => Check::warn(NAME, format!("on, mode unknown: {described}"))
            .fix(format!("/sys/kernel/iommu_groups/*/type shows it; {fix}")),
    }
}

/// The CPUs the benchmark may run on, or why they are unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cpus {
    /// Known CPUs and where the list came from.
    Known(Vec<u32>, &'static str),
    /// Why they are unknown.
    Unknown(String),
}

/// The NIC's NUMA node against the CPUs the benchmark may run on.
pub(crate) fn numa(
    nic: &str,
    nic_node: Option<u32>,
    cpus: &Cpus,
    nodes: &BTreeMap<u32, Vec<u32>>,
) -> Check {
    const NAME: &str = "NUMA locality";
    let Some(node) = nic_node else {
        return Check::skip(
            NAME,
            format!("{nic} has no NUMA node (-1: a single-node machine or a VM)"),
        );
    };
    let (cpus, source) = match cpus {
        Cpus::Known(cpus, source) => (cpus, *source),
        Cpus::Unknown(why) => return Check::skip(NAME, why.clone()),
    };
    let Some(local) = nodes.get(&node) else {
        return Check::warn(
            NAME,
            format!("{nic} is on node {node}, whose CPU list is missing (/sys/devices/system/node/node{node}/cpulist)"),
        );
    };
    let on: Vec<u32> = cpus.iter().copied().filter(|c| local.contains(c)).collect();
    let others: Vec<String> = nodes
        .iter()
        .filter(|(n, list)| **n != node && cpus.iter().any(|c| list.contains(c)))
        .map(|(n, _)| n.to_string())
        .collect();
    let list = format_cpulist(cpus);
    let fix = format!(
        "run it on the NIC's node: `numactl --cpunodebind={node} --membind={node} rdmabench ...` \
         (or taskset -c {})",
        format_cpulist(local)
    );
    if on.len() == cpus.len() {
        Check::pass(
            NAME,
            format!(
                "{nic} on node {node}; all {} CPUs {source} ({list}) are on it",
                cpus.len()
            ),
        )
    } else if on.is_empty() {
        Check::fail(
            NAME,
            format!(
                "{nic} on node {node}, but the CPUs {source} ({list}) are on node {}: every \
                 byte crosses the socket interconnect",
                others.join(", ")
            ),
        )
        .fix(fix)
    } else {
        Check::warn(
            NAME,
            format!(
                "{nic} on node {node}; {} of the {} CPUs {source} ({list}) are on it, the rest \
                 on node {}: unpinned, the run may land on the wrong socket",
                on.len(),
                cpus.len(),
                others.join(", ")
            ),
        )
        .fix(fix)
    }
}

/// The cpufreq governor of the CPUs the benchmark may run on (all, when unknown).
pub(crate) fn governor(governors: &BTreeMap<u32, String>, cpus: Option<&[u32]>) -> Check {
    const NAME: &str = "CPU governor";
    let chosen: Vec<(&u32, &String)> = match cpus {
        Some(cpus) if governors.keys().any(|c| cpus.contains(c)) => {
            governors.iter().filter(|(c, _)| cpus.contains(c)).collect()
        }
        _ => governors.iter().collect(),
    };
    if chosen.is_empty() {
        return Check::skip(
            NAME,
            "no cpufreq governor in /sys/devices/system/cpu/cpu*/cpufreq (a VM, or the firmware \
             controls the frequency)",
        );
    }
    let mut by_governor: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, governor) in &chosen {
        *by_governor.entry(governor.as_str()).or_default() += 1;
    }
    let text = by_governor
        .iter()
        .map(|(g, n)| format!("{g} on {n} CPU{}", if *n == 1 { "" } else { "s" }))
        .collect::<Vec<_>>()
        .join(", ");
    if by_governor.keys().all(|g| *g == "performance") {
        Check::pass(NAME, text)
    } else {
        Check::warn(
            NAME,
            format!("{text}: clocks ramp up late, latency and small-message rates suffer"),
        )
        .fix("`cpupower frequency-set -g performance` (or `tuned-adm profile network-latency`)")
    }
}

/// The wire ceiling against the NIC's PCIe ceiling.
pub(crate) fn ceilings(port: &RdmaPort, mtu: Option<u32>, link: Option<&PciLink>) -> Check {
    const NAME: &str = "ceilings";
    let Some(link) = link else {
        return Check::skip(NAME, format!("{VIRTUAL}: no PCIe ceiling"));
    };
    let assumed = if mtu.is_none() {
        ", MTU 4096 assumed"
    } else {
        ""
    };
    let Some(wire) = port.wire(mtu.unwrap_or(4096)) else {
        return Check::skip(NAME, "port rate or link layer unknown: no wire ceiling");
    };
    let Some(pcie) = link.pcie() else {
        return Check::skip(
            NAME,
            format!("PCIe speed, width or MPS unknown ({link}): no PCIe ceiling"),
        );
    };
    let c = topo::ceilings(&wire, &pcie, None);
    let wire_text = format!(
        "wire {:.2} GB/s ({} Gb/s at MTU {}{assumed})",
        c.wire_gbps, wire.rate.gbps, wire.mtu
    );
    let pcie_text = format!("PCIe {:.2} GB/s ({pcie})", c.pcie_gbps);
    match c.limit {
        Limit::Pcie => Check::warn(
            NAME,
            format!(
                "PCIe-bound: {pcie_text} < {wire_text}; at most {:.0} % of the port's rate",
                100.0 * c.pcie_gbps / c.wire_gbps
            ),
        )
        .fix(format!(
            "a trained-down link is fixed above; otherwise the card needs a faster slot \
             (`rdmabench ceiling --nic-rate {} --pcie gen{}x{}` shows the arithmetic)",
            wire.rate.gbps, pcie.gen, pcie.width
        )),
        _ => Check::pass(NAME, format!("wire-bound: {wire_text} < {pcie_text}")),
    }
}

#[cfg(test)]
mod tests;
