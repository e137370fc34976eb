//! The ceilings model: the most payload a link can carry, in GB/s (10^9 bytes/s).
//!
//! Three ceilings bound a run, and the smallest is the one that binds ([`Limit`]):
//!
//! - **Wire**: the port's data rate times the payload share of each packet at the active
//!   MTU. Every packet of an RDMA message carries MTU bytes of payload (the last may carry
//!   less; for the large messages where ceilings matter that is negligible) plus a fixed
//!   header ([`Wire::header_bytes`]). The RETH (16 B) that only the first packet of a
//!   WRITE carries, and the AETH of READ responses' first and last packets, are left out:
//!   for a 1 MiB WRITE at MTU 4096 the RETH costs 16 B in 1 MiB, under 0.002 %.
//! - **PCIe**: lanes x transfer rate x line encoding, times the TLP efficiency at the Max
//!   Payload Size, times a data-link overhead factor for ACK and flow-control DLLPs and
//!   SKP ordered sets ([`dllp_factor`]); the model of pcie-bench (Neugebauer et al.,
//!   "Understanding PCIe performance for end host networking", SIGCOMM 2018).
//! - **Staged** (GPUDirect off): each byte crosses the GPU's link device-to-host and then
//!   the NIC's link host-to-device ([`staged_gbps`]).
//!
//! All functions here are pure: they take numbers, not sysfs.
//!
//! Long because the ceilings model (encodings, TLP/DLLP overheads, RoCE/IB payload efficiency,
//! the staged path) is one calculation, with about 230 lines of tests against worked examples.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TopoError};
use crate::rate::RateUnit;

/// InfiniBand per-packet bytes besides payload: LRH 8 + BTH 12 + ICRC 4 + VCRC 2.
pub const IB_HEADER_BYTES: u32 = 8 + 12 + 4 + 2;
/// The InfiniBand Global Route Header, present only on routed (inter-subnet) traffic.
pub const IB_GRH_BYTES: u32 = 40;
/// RoCEv2 per-packet bytes on the wire besides payload: Ethernet header 14 + FCS 4 +
/// preamble and start delimiter 8 + inter-frame gap 12 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4.
/// Untagged frames and IPv4 are assumed: a VLAN tag adds 4 B, IPv6 adds 20 B.
pub const ROCE_HEADER_BYTES: u32 = 14 + 4 + 8 + 12 + 20 + 8 + 12 + 4;
/// Bytes a memory-write TLP costs on the link besides its payload: a 16 B header (4 DW,
/// 64-bit address), 2 B sequence number, 4 B LCRC and 2 B of framing; no ECRC. Kept for
/// Gen6 too, although flit mode moves sequence numbers and CRC into the flit: there it errs
/// low by about 3 % at MPS 256.
pub const TLP_OVERHEAD_BYTES: u32 = 16 + 2 + 4 + 2;
/// The Max Payload Size assumed by [`parse_pcie`] when the planner gives none.
pub const DEFAULT_MPS: u32 = 256;
/// The InfiniBand MTUs (RoCE uses the same ones).
pub const IB_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];
/// The Max Payload Size values the PCIe specification defines.
pub const MPS_VALUES: [u32; 6] = [128, 256, 512, 1024, 2048, 4096];

/// Bytes of one ACK or flow-control DLLP on the link: 6 B DLLP plus 2 B framing.
const DLLP_BYTES: f64 = 8.0;
/// SKP ordered sets: 4 symbols every 1538 (clock compensation), Gen1 to Gen5.
const SKP_SHARE: f64 = 4.0 / 1538.0;
/// Gen6 flit: of the 242 non-FEC, non-CRC bytes of a 256 B flit, 6 carry DLLPs.
const FLIT_DLP_FACTOR: f64 = 236.0 / 242.0;

/// Link widths of the rows of [`DLLP_INTERVALS`].
const DLLP_WIDTHS: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Bytes between ACK (and, equally, flow-control update) DLLPs, from the PCIe Base
/// Specification's Ack latency and UpdateFC tables as pcie-bench uses them: per generation
/// group (2.5 GT/s, 5 GT/s, 8 GT/s and faster), per width row, per MPS column (128..4096).
const DLLP_INTERVALS: [[[u32; 6]; 6]; 3] = [
    [
        [237, 416, 559, 1071, 2095, 4143],
        [128, 217, 289, 545, 1057, 2081],
        [73, 118, 154, 282, 538, 1050],
        [67, 107, 86, 150, 278, 534],
        [48, 72, 86, 150, 278, 534],
        [33, 45, 52, 84, 148, 276],
    ],
    [
        [288, 467, 610, 1122, 2146, 4194],
        [179, 268, 340, 596, 1108, 2132],
        [124, 169, 205, 333, 589, 1101],
        [118, 158, 137, 201, 329, 585],
        [99, 123, 137, 201, 329, 585],
        [84, 96, 103, 135, 199, 327],
    ],
    [
        [333, 512, 655, 1167, 2191, 4239],
        [224, 313, 385, 641, 1153, 2177],
        [169, 214, 250, 378, 634, 1146],
        [163, 203, 182, 246, 374, 630],
        [144, 168, 182, 246, 374, 630],
        [129, 141, 148, 180, 244, 372],
    ],
];

/// The link layer of an RDMA port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCEv2).
    Ethernet,
}

impl LinkLayer {
    /// From sysfs `ports/N/link_layer` ("InfiniBand", "Ethernet").
    pub fn from_sysfs(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl FromStr for LinkLayer {
    type Err = TopoError;

    /// Accepts `ib`, `infiniband`, `eth`, `ethernet`, `roce`, `rocev2`, any case.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ib" | "infiniband" => Ok(Self::InfiniBand),
            "eth" | "ethernet" | "roce" | "rocev2" => Ok(Self::Ethernet),
            _ => Err(TopoError::BadValue {
                what: "link layer",
                value: s.to_string(),
                reason: "not a link layer".to_string(),
                valid: "ib, infiniband, eth, ethernet, roce",
            }),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::InfiniBand => "InfiniBand",
            Self::Ethernet => "Ethernet",
        })
    }
}

/// A port rate as sysfs `ports/N/rate` gives it: "400 Gb/sec (4X NDR)".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortRate {
    /// The number the kernel prints, in Gb/s.
    pub gbps: f64,
    /// The lane count ("4X" gives 4), when given.
    pub lanes: Option<u32>,
    /// The InfiniBand speed name ("NDR"), when given.
    pub speed: Option<String>,
}

impl PortRate {
    /// A bare rate in Gb/s, no width or speed name.
    pub fn from_gbps(gbps: f64) -> Self {
        Self {
            gbps,
            lanes: None,
            speed: None,
        }
    }

    /// Parse sysfs's "400 Gb/sec (4X NDR)", or a planner's "400", "400G", "400 Gb/s".
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: &str| TopoError::BadValue {
            what: "port rate",
            value: text.to_string(),
            reason: reason.to_string(),
            valid: "a rate such as 400 (Gb/s), 400G, 400Gb/s, 50GB/s or \"400 Gb/sec (4X NDR)\"",
        };
        let (head, paren) = match text.split_once('(') {
            Some((head, rest)) => (head, Some(rest.trim_end().trim_end_matches(')'))),
            None => (text, None),
        };
        let gbps = crate::rate::parse_rate(head, RateUnit::Gbits)
            .map_err(|_| bad("not a number above zero with a known unit (b bits, B bytes)"))?
            * 8.0;
        let (lanes, speed) = paren.map(parse_width_speed).unwrap_or((None, None));
        Ok(Self { gbps, lanes, speed })
    }

    /// The share of the printed rate that carries packets, from the link's line encoding.
    ///
    /// The kernel prints the InfiniBand signalling rate for SDR, DDR and QDR (8b/10b: x0.8)
    /// and the nominal 14 Gb/s lane for FDR (64b/66b: x64/66); for FDR10, EDR, HDR, NDR
    /// and XDR it prints the data rate after 64b/66b and FEC ("400 Gb/sec (4X NDR)" is 400
    /// Gb/s of packets), so the factor is 1, as it is for a rate without a speed name. An
    /// Ethernet port's rate is its MAC rate, whatever name it is printed with: factor 1.
    pub fn encoding_factor(&self, layer: LinkLayer) -> f64 {
        if layer == LinkLayer::Ethernet {
            return 1.0;
        }
        match self
            .speed
            .as_deref()
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            Some("SDR" | "DDR" | "QDR") => 0.8,
            Some("FDR") => 64.0 / 66.0,
            _ => 1.0,
        }
    }

    /// Gb/s of packets (headers included) the port carries.
    pub fn data_gbps(&self, layer: LinkLayer) -> f64 {
        self.gbps * self.encoding_factor(layer)
    }
}

impl fmt::Display for PortRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} Gb/s", self.gbps)?;
        match (self.lanes, &self.speed) {
            (Some(lanes), Some(speed)) => write!(f, " ({lanes}X {speed})"),
            (None, Some(speed)) => write!(f, " ({speed})"),
            _ => Ok(()),
        }
    }
}

/// "4X NDR" into (4, "NDR").
fn parse_width_speed(text: &str) -> (Option<u32>, Option<String>) {
    let mut lanes = None;
    let mut speed = None;
    for word in text.split_whitespace() {
        let digits = word.trim_end_matches(['X', 'x']);
        match digits.parse::<u32>() {
            Ok(n) if digits.len() < word.len() => lanes = Some(n),
            _ => speed = Some(word.to_string()),
        }
    }
    (lanes, speed)
}

/// One port's wire: what the wire ceiling needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wire {
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// The port rate.
    pub rate: PortRate,
    /// The active (path) MTU in bytes: 256 .. 4096.
    pub mtu: u32,
    /// InfiniBand only: packets carry a GRH (routed between subnets).
    pub grh: bool,
}

impl Wire {
    /// Bytes per packet besides payload: [`IB_HEADER_BYTES`] (+ [`IB_GRH_BYTES`] when
    /// routed) or [`ROCE_HEADER_BYTES`].
    pub fn header_bytes(&self) -> u32 {
        match self.link_layer {
            LinkLayer::InfiniBand if self.grh => IB_HEADER_BYTES + IB_GRH_BYTES,
            LinkLayer::InfiniBand => IB_HEADER_BYTES,
            LinkLayer::Ethernet => ROCE_HEADER_BYTES,
        }
    }

    /// Payload share of a full packet: MTU / (MTU + headers).
    pub fn efficiency(&self) -> f64 {
        let mtu = f64::from(self.mtu);
        mtu / (mtu + f64::from(self.header_bytes()))
    }

    /// The wire ceiling in GB/s of payload.
    pub fn gbps(&self) -> f64 {
        self.rate.data_gbps(self.link_layer) * self.efficiency() / 8.0
    }
}

/// One PCIe link: what the PCIe ceiling needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pcie {
    /// Generation, 1 ..= 6.
    pub gen: u8,
    /// Lanes.
    pub width: u32,
    /// Max Payload Size in bytes.
    pub mps: u32,
}

impl Pcie {
    /// Transfer rate per lane in GT/s (2.5, 5, 8, 16, 32, 64).
    pub fn rate_gts(&self) -> f64 {
        gen_rate_gts(self.gen).unwrap_or(0.0)
    }

    /// Line encoding: 8b/10b (Gen1-2), 128b/130b (Gen3-5), 242/256 flit (Gen6).
    pub fn encoding(&self) -> f64 {
        match self.gen {
            1 | 2 => 0.8,
            3..=5 => 128.0 / 130.0,
            _ => 242.0 / 256.0,
        }
    }

    /// The encoding as text, for [`explain`].
    pub fn encoding_name(&self) -> &'static str {
        match self.gen {
            1 | 2 => "8b/10b",
            3..=5 => "128b/130b",
            _ => "242/256 (flit)",
        }
    }

    /// GB/s after line encoding, before TLP and DLLP overheads.
    pub fn raw_gbps(&self) -> f64 {
        f64::from(self.width) * self.rate_gts() * self.encoding() / 8.0
    }

    /// TLP efficiency for long transfers: MPS / (MPS + [`TLP_OVERHEAD_BYTES`]).
    pub fn tlp_efficiency(&self) -> f64 {
        let mps = f64::from(self.mps);
        mps / (mps + f64::from(TLP_OVERHEAD_BYTES))
    }

    /// The data-link overhead factor, see [`dllp_factor`].
    pub fn dllp_factor(&self) -> f64 {
        dllp_factor(self.gen, self.width, self.mps)
    }

    /// The PCIe ceiling in GB/s of payload, for long transfers.
    pub fn gbps(&self) -> f64 {
        self.raw_gbps() * self.tlp_efficiency() * self.dllp_factor()
    }

    /// The PCIe ceiling for transfers of `size` bytes: [`tlp_efficiency`] at that size.
    pub fn gbps_for_size(&self, size: u64) -> f64 {
        self.raw_gbps() * tlp_efficiency(size, self.mps) * self.dllp_factor()
    }
}

impl fmt::Display for Pcie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gen{} x{} MPS {}", self.gen, self.width, self.mps)
    }
}

/// Transfer rate per lane of a generation: Gen1 2.5 .. Gen6 64 GT/s.
pub fn gen_rate_gts(gen: u8) -> Option<f64> {
    match gen {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        _ => None,
    }
}

/// The generation whose per-lane rate is `gts` (sysfs's 16.0 GT/s gives 4).
pub fn gen_from_gts(gts: f64) -> Option<u8> {
    (1..=6).find(|&gen| gen_rate_gts(gen).is_some_and(|rate| (rate - gts).abs() < 0.01))
}

/// Payload share of a transfer of `size` bytes split into TLPs of at most `mps` bytes:
/// size / (size + ceil(size / MPS) x [`TLP_OVERHEAD_BYTES`]).
pub fn tlp_efficiency(size: u64, mps: u32) -> f64 {
    if size == 0 {
        return 0.0;
    }
    let tlps = size.div_ceil(u64::from(mps.max(1)));
    let overhead = tlps * u64::from(TLP_OVERHEAD_BYTES);
    size as f64 / (size + overhead) as f64
}

/// The share of the link left to TLPs after ACK and flow-control DLLPs and SKP ordered sets.
///
/// pcie-bench's model: one 8 B ACK DLLP and one 8 B flow-control update every N bytes,
/// where N comes from the PCIe Base Specification's Ack latency and UpdateFC tables
/// (embedded here) for the generation, width and MPS, plus 4 SKP symbols in 1538. Gen3+
/// x16 at MPS 256: N = 168, so 1 - (8/168 + 8/168 + 4/1538) = 0.902. A width between table rows (x12) uses the narrower
/// row, an MPS off the table the next smaller column. Gen6 runs in flit mode, where ACKs
/// and flow-control updates ride in 6 dedicated bytes of every flit: the factor is the
/// constant 236/242.
pub fn dllp_factor(gen: u8, width: u32, mps: u32) -> f64 {
    if gen >= 6 {
        return FLIT_DLP_FACTOR;
    }
    let group = match gen {
        0 | 1 => 0,
        2 => 1,
        _ => 2,
    };
    let row = DLLP_WIDTHS.iter().rposition(|&w| w <= width).unwrap_or(0);
    let column = MPS_VALUES.iter().rposition(|&m| m <= mps).unwrap_or(0);
    let interval = f64::from(DLLP_INTERVALS[group][row][column]);
    1.0 - (2.0 * DLLP_BYTES / interval + SKP_SHARE)
}

/// The staged (GPUDirect off) ceiling in GB/s.
///
/// Each byte crosses the GPU's link (device-to-host for a send) and the NIC's link
/// (host-to-device), so the slower of the two bounds the pipeline. `shared_gbps` is the
/// ceiling of a link that carries every byte twice *in the same direction*, which then
/// bounds it at half its ceiling. Note that a link above both devices (a switch's uplink)
/// carries the staging copy and the NIC's DMA in opposite directions in a one-way run, and
/// PCIe is full duplex, so pass it only for bidirectional runs, where each direction
/// carries both streams.
pub fn staged_gbps(gpu_gbps: f64, nic_gbps: f64, shared_gbps: Option<f64>) -> f64 {
    let independent = gpu_gbps.min(nic_gbps);
    match shared_gbps {
        Some(shared) => independent.min(shared / 2.0),
        None => independent,
    }
}

/// The links a staged run crosses besides the NIC's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The GPU's link.
    pub gpu: Pcie,
    /// A link that carries every byte twice in the same direction (see [`staged_gbps`]).
    pub shared: Option<Pcie>,
}

/// Which ceiling binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// The network port.
    Wire,
    /// The NIC's PCIe link.
    Pcie,
    /// The staged copy through host memory (GPUDirect off).
    Staged,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Wire => "wire",
            Self::Pcie => "pcie",
            Self::Staged => "staged",
        })
    }
}

/// The ceilings of one run and the one that binds, all in GB/s of payload.
///
/// Serialised as the result record's `ceilings` object.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// The wire ceiling.
    pub wire_gbps: f64,
    /// The NIC's PCIe ceiling.
    pub pcie_gbps: f64,
    /// The staged ceiling, for GPUDirect-off runs only.
    pub staged_gbps: Option<f64>,
    /// The binding ceiling.
    pub limit: Limit,
    /// Its value.
    pub limit_gbps: f64,
}

impl Ceilings {
    /// Gather three ceilings and pick the binding (smallest) one; on a tie the earlier of
    /// wire, PCIe, staged is named.
    pub fn from_parts(wire_gbps: f64, pcie_gbps: f64, staged_gbps: Option<f64>) -> Self {
        let (mut limit, mut limit_gbps) = (Limit::Wire, wire_gbps);
        if pcie_gbps < limit_gbps {
            (limit, limit_gbps) = (Limit::Pcie, pcie_gbps);
        }
        if let Some(staged) = staged_gbps.filter(|&staged| staged < limit_gbps) {
            (limit, limit_gbps) = (Limit::Staged, staged);
        }
        Self {
            wire_gbps,
            pcie_gbps,
            staged_gbps,
            limit,
            limit_gbps,
        }
    }

    /// `achieved_gbps` as a percentage of the binding ceiling.
    pub fn percent_of_limit(&self, achieved_gbps: f64) -> f64 {
        100.0 * achieved_gbps / self.limit_gbps
    }
}

/// The ceilings of a run over `wire` through the NIC link `nic`, staged through `staged`
/// when GPUDirect is off.
pub fn ceilings(wire: &Wire, nic: &Pcie, staged: Option<&Staged>) -> Ceilings {
    let pcie = nic.gbps();
    let staged = staged.map(|s| staged_gbps(s.gpu.gbps(), pcie, s.shared.map(|l| l.gbps())));
    Ceilings::from_parts(wire.gbps(), pcie, staged)
}

/// The arithmetic behind [`ceilings`], one line each, for `rdmabench ceiling`.
pub fn explain(wire: &Wire, nic: &Pcie, staged: Option<&Staged>) -> Vec<String> {
    let mut lines = explain_wire(wire);
    lines.extend(explain_pcie("PCIe (NIC)", nic));
    if let Some(staged) = staged {
        lines.extend(explain_staged(staged, nic));
    }
    let result = ceilings(wire, nic, staged);
    lines.push(format!(
        "binding: {} at {:.2} GB/s",
        result.limit, result.limit_gbps
    ));
    lines
}

fn explain_wire(wire: &Wire) -> Vec<String> {
    let factor = wire.rate.encoding_factor(wire.link_layer);
    let headers = match wire.link_layer {
        LinkLayer::InfiniBand if wire.grh => "LRH 8 + GRH 40 + BTH 12 + ICRC 4 + VCRC 2",
        LinkLayer::InfiniBand => "LRH 8 + BTH 12 + ICRC 4 + VCRC 2",
        LinkLayer::Ethernet => {
            "Ethernet 14 + FCS 4 + preamble 8 + IFG 12 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4"
        }
    };
    let mut lines = vec![format!("wire: {} {}", wire.link_layer, wire.rate)];
    if factor < 1.0 {
        lines.push(format!(
            "  line encoding x{factor:.4}: {:.2} Gb/s of packets",
            wire.rate.data_gbps(wire.link_layer)
        ));
    }
    lines.push(format!(
        "  MTU {} B, headers {} B per packet ({headers})",
        wire.mtu,
        wire.header_bytes()
    ));
    lines.push(format!(
        "  efficiency {} / {} = {:.4}",
        wire.mtu,
        wire.mtu + wire.header_bytes(),
        wire.efficiency()
    ));
    lines.push(format!(
        "  wire ceiling {:.2} Gb/s x {:.4} / 8 = {:.2} GB/s",
        wire.rate.data_gbps(wire.link_layer),
        wire.efficiency(),
        wire.gbps()
    ));
    lines
}

fn explain_pcie(name: &str, link: &Pcie) -> Vec<String> {
    vec![
        format!(
            "{name}: Gen{} x{}, MPS {} B",
            link.gen, link.width, link.mps
        ),
        format!(
            "  {} lanes x {} GT/s x {} = {:.2} GB/s",
            link.width,
            link.rate_gts(),
            link.encoding_name(),
            link.raw_gbps()
        ),
        format!(
            "  TLP efficiency at MPS {}: {} / ({} + {}) = {:.4}",
            link.mps,
            link.mps,
            link.mps,
            TLP_OVERHEAD_BYTES,
            link.tlp_efficiency()
        ),
        format!(
            "  DLLP factor (ACK, flow control, SKP) {:.4}",
            link.dllp_factor()
        ),
        format!(
            "  ceiling {:.2} x {:.4} x {:.4} = {:.2} GB/s",
            link.raw_gbps(),
            link.tlp_efficiency(),
            link.dllp_factor(),
            link.gbps()
        ),
    ]
}

fn explain_staged(staged: &Staged, nic: &Pcie) -> Vec<String> {
    let mut lines = explain_pcie("PCIe (GPU)", &staged.gpu);
    let mut terms = format!("GPU {:.2}, NIC {:.2}", staged.gpu.gbps(), nic.gbps());
    if let Some(shared) = &staged.shared {
        lines.push(format!(
            "  shared link {shared} = {:.2} GB/s carries each byte twice: {:.2} GB/s",
            shared.gbps(),
            shared.gbps() / 2.0
        ));
        terms.push_str(&format!(", shared {:.2}", shared.gbps() / 2.0));
    }
    let value = staged_gbps(
        staged.gpu.gbps(),
        nic.gbps(),
        staged.shared.map(|l| l.gbps()),
    );
    lines.push(format!(
        "staged (GPUDirect off): min({terms}) = {value:.2} GB/s"
    ));
    lines
}

/// Parse a planner's PCIe link, "gen5x16" (any case): gen1..gen6, x1, x2, x4, x8, x12,
/// x16 or x32. The MPS is [`DEFAULT_MPS`]; set the field for another.
pub fn parse_pcie(text: &str) -> Result<Pcie> {
    let bad = |reason: String| TopoError::BadValue {
        what: "PCIe link",
        value: text.to_string(),
        reason,
        valid: "gen<1-6>x<1|2|4|8|12|16|32>, e.g. gen4x16 or Gen5x8",
    };
    let lower = text.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("gen")
        .ok_or_else(|| bad("it does not start with \"gen\"".to_string()))?;
    let (gen, width) = rest
        .split_once('x')
        .ok_or_else(|| bad("no \"x\" before the width".to_string()))?;
    let gen: u8 = match gen.parse() {
        Ok(gen @ 1..=6) => gen,
        _ => return Err(bad(format!("generation {gen:?} is not 1 to 6"))),
    };
    let width: u32 = match width.parse() {
        Ok(width @ (1 | 2 | 4 | 8 | 12 | 16 | 32)) => width,
        _ => return Err(bad(format!("width {width:?} is not a PCIe link width"))),
    };
    Ok(Pcie {
        gen,
        width,
        mps: DEFAULT_MPS,
    })
}

/// Parse a Max Payload Size: 128, 256, 512, 1024, 2048 or 4096.
pub fn parse_mps(text: &str) -> Result<u32> {
    parse_one_of(
        text,
        &MPS_VALUES,
        "Max Payload Size",
        "128, 256, 512, 1024, 2048, 4096",
    )
}

/// Parse an InfiniBand/RoCE MTU: 256, 512, 1024, 2048 or 4096.
pub fn parse_mtu(text: &str) -> Result<u32> {
    parse_one_of(text, &IB_MTUS, "MTU", "256, 512, 1024, 2048, 4096")
}

fn parse_one_of(
    text: &str,
    values: &[u32],
    what: &'static str,
    valid: &'static str,
) -> Result<u32> {
    match text.trim().parse::<u32>() {
        Ok(value) if values.contains(&value) => Ok(value),
        _ => Err(TopoError::BadValue {
            what,
            value: text.to_string(),
            reason: "not one of the defined sizes".to_string(),
            valid,
        }),
    }
}

/// The RoCE active MTU the kernel derives from a netdev MTU: the largest IB MTU that fits
/// after 96 B of headroom (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28, ICRC 4), as
/// `iboe_get_mtu` does. `None` below 352 B.
pub fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(96)?;
    IB_MTUS.iter().rev().copied().find(|&mtu| mtu <= room)
}

/// The active MTU soft-RoCE (rxe) sets from its netdev's MTU, which differs from
/// [`roce_active_mtu`]: the largest IB MTU that fits after rxe's 80 B of headroom
/// (`RXE_MAX_HDR_LENGTH`), and 256 when none does (`rxe_set_mtu`, through
/// `eth_mtu_int_to_enum`). 1500 gives 1024, 9000 gives 4096, 4176 already 4096.
pub fn rxe_active_mtu(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(80);
    IB_MTUS
        .iter()
        .rev()
        .copied()
        .find(|&mtu| mtu <= room)
        .unwrap_or(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ib(gbps: f64, mtu: u32) -> Wire {
        Wire {
            link_layer: LinkLayer::InfiniBand,
            rate: PortRate::from_gbps(gbps),
            mtu,
            grh: false,
        }
    }

    fn roce(gbps: f64, mtu: u32) -> Wire {
        Wire {
            link_layer: LinkLayer::Ethernet,
            ..ib(gbps, mtu)
        }
    }

    fn pcie(gen: u8, width: u32, mps: u32) -> Pcie {
        Pcie { gen, width, mps }
    }

    #[test]
    fn gen4_x16_mps256_is_about_26_gbytes() {
        let value = pcie(4, 16, 256).gbps();
        assert!((25.5..=26.5).contains(&value), "{value}");
    }

    #[test]
    fn gen5_x16_mps256_is_about_52_gbytes() {
        let value = pcie(5, 16, 256).gbps();
        assert!((51.0..=53.0).contains(&value), "{value}");
    }

    #[test]
    fn nic_400g_is_pcie_bound_on_gen4_and_wire_bound_on_gen5() {
        for wire in [ib(400.0, 4096), roce(400.0, 4096)] {
            let gen4 = ceilings(&wire, &pcie(4, 16, 256), None);
            assert_eq!(gen4.limit, Limit::Pcie, "{wire:?}");
            let gen5 = ceilings(&wire, &pcie(5, 16, 256), None);
            assert_eq!(gen5.limit, Limit::Wire, "{wire:?}");
            assert_eq!(gen5.limit_gbps, gen5.wire_gbps);
        }
    }

    #[test]
    fn wire_headers_and_efficiency() {
        assert_eq!(IB_HEADER_BYTES, 26);
        assert_eq!(ROCE_HEADER_BYTES, 82);
        let ndr = ib(400.0, 4096);
        assert!((ndr.gbps() - 400.0 / 8.0 * 4096.0 / 4122.0).abs() < 1e-9);
        assert!((roce(400.0, 4096).gbps() - 50.0 * 4096.0 / 4178.0).abs() < 1e-9);
        let routed = Wire { grh: true, ..ndr };
        assert_eq!(routed.header_bytes(), 66);
        assert!(ib(100.0, 1024).gbps() < ib(100.0, 4096).gbps());
    }

    #[test]
    fn old_ib_rates_are_signalling_rates() {
        let qdr = PortRate::parse("40 Gb/sec (4X QDR)").unwrap();
        assert_eq!(qdr.data_gbps(LinkLayer::InfiniBand), 32.0);
        // 40GbE is printed with the QDR name too, but is a MAC rate.
        assert_eq!(qdr.data_gbps(LinkLayer::Ethernet), 40.0);
        let fdr = PortRate::parse("56 Gb/sec (4X FDR)").unwrap();
        assert!((fdr.data_gbps(LinkLayer::InfiniBand) - 56.0 * 64.0 / 66.0).abs() < 1e-9);
        let ndr = PortRate::parse("400 Gb/sec (4X NDR)").unwrap();
        assert_eq!(ndr.data_gbps(LinkLayer::InfiniBand), 400.0);
    }

    #[test]
    fn port_rate_forms() {
        let rate = PortRate::parse("400 Gb/sec (4X NDR)").unwrap();
        assert_eq!(rate.gbps, 400.0);
        assert_eq!(rate.lanes, Some(4));
        assert_eq!(rate.speed.as_deref(), Some("NDR"));
        assert_eq!(rate.to_string(), "400 Gb/s (4X NDR)");
        assert_eq!(PortRate::parse("2.5 Gb/sec (1X SDR)").unwrap().gbps, 2.5);
        for text in ["400", "400G", "400 Gb/s", "400gbps"] {
            assert_eq!(
                PortRate::parse(text).unwrap(),
                PortRate::from_gbps(400.0),
                "{text}"
            );
        }
        assert_eq!(
            PortRate::parse("50GB/s").unwrap(),
            PortRate::from_gbps(400.0)
        );
        for text in ["", "fast", "0", "400 MB/h", "-5"] {
            let err = PortRate::parse(text).unwrap_err().to_string();
            assert!(err.contains("400Gb/s"), "{text}: {err}");
        }
    }

    #[test]
    fn tlp_efficiency_by_size() {
        assert_eq!(tlp_efficiency(256, 256), 256.0 / 280.0);
        assert_eq!(tlp_efficiency(257, 256), 257.0 / (257.0 + 48.0));
        assert_eq!(tlp_efficiency(64, 256), 64.0 / 88.0);
        assert_eq!(tlp_efficiency(0, 256), 0.0);
        let link = pcie(4, 16, 256);
        assert!((link.gbps_for_size(1 << 20) - link.gbps()).abs() < 1e-9);
        assert!(link.gbps_for_size(64) < link.gbps());
    }

    #[test]
    fn dllp_factor_model() {
        let expected = 1.0 - (16.0 / 168.0 + 4.0 / 1538.0);
        assert!((dllp_factor(4, 16, 256) - expected).abs() < 1e-12);
        assert_eq!(dllp_factor(3, 12, 256), dllp_factor(3, 8, 256));
        assert_eq!(dllp_factor(5, 16, 300), dllp_factor(5, 16, 256));
        assert_eq!(dllp_factor(6, 16, 256), 236.0 / 242.0);
        for gen in 1..=6 {
            for width in DLLP_WIDTHS {
                for mps in MPS_VALUES {
                    let f = dllp_factor(gen, width, mps);
                    assert!(f > 0.5 && f < 1.0, "gen{gen} x{width} {mps}: {f}");
                }
            }
        }
    }

    #[test]
    fn encodings() {
        assert_eq!(pcie(1, 1, 128).raw_gbps(), 2.5 * 0.8 / 8.0);
        assert_eq!(pcie(3, 8, 256).raw_gbps(), 8.0 * 8.0 * 128.0 / 130.0 / 8.0);
        assert_eq!(
            pcie(6, 16, 256).raw_gbps(),
            16.0 * 64.0 * 242.0 / 256.0 / 8.0
        );
        assert_eq!(gen_from_gts(16.0), Some(4));
        assert_eq!(gen_from_gts(2.5), Some(1));
        assert_eq!(gen_from_gts(3.0), None);
    }

    #[test]
    fn staged_takes_the_slower_link_and_halves_a_shared_one() {
        assert_eq!(staged_gbps(52.0, 26.0, None), 26.0);
        assert_eq!(staged_gbps(26.0, 52.0, None), 26.0);
        assert_eq!(staged_gbps(52.0, 52.0, Some(52.0)), 26.0);
        assert_eq!(staged_gbps(20.0, 52.0, Some(52.0)), 20.0);
        let wire = ib(400.0, 4096);
        let nic = pcie(5, 16, 256);
        let slow_gpu = Staged {
            gpu: pcie(4, 16, 256),
            shared: None,
        };
        let c = ceilings(&wire, &nic, Some(&slow_gpu));
        assert_eq!(c.limit, Limit::Staged);
        assert_eq!(c.staged_gbps, Some(pcie(4, 16, 256).gbps()));
        // A staged ceiling equal to the NIC's link names the NIC's link.
        let same = Staged {
            gpu: nic,
            shared: None,
        };
        let c = ceilings(&ib(800.0, 4096), &pcie(4, 16, 256), Some(&same));
        assert_eq!(c.limit, Limit::Pcie);
    }

    #[test]
    fn ceilings_serialise_with_lowercase_limit() {
        let c = Ceilings::from_parts(49.0, 26.0, None);
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(json["limit"], "pcie");
        assert_eq!(json["limit_gbps"], 26.0);
        assert!(json["staged_gbps"].is_null());
        let back: Ceilings = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
        let staged = Ceilings::from_parts(49.0, 26.0, Some(13.0));
        assert_eq!(serde_json::to_value(staged).unwrap()["limit"], "staged");
        assert_eq!(Ceilings::from_parts(20.0, 26.0, None).limit, Limit::Wire);
        assert_eq!(c.percent_of_limit(13.0), 50.0);
    }

    #[test]
    fn parse_pcie_forms_and_errors() {
        assert_eq!(parse_pcie("gen5x16").unwrap(), pcie(5, 16, DEFAULT_MPS));
        assert_eq!(parse_pcie("GEN3X8").unwrap(), pcie(3, 8, DEFAULT_MPS));
        assert_eq!(parse_pcie(" Gen1x1 ").unwrap(), pcie(1, 1, DEFAULT_MPS));
        for bad in [
            "gen7x16", "gen4x3", "gen4", "pcie4x16", "gen0x16", "gen4x64", "",
        ] {
            let err = parse_pcie(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
            assert!(err.contains("gen<1-6>x<1|2|4|8|12|16|32>"), "{err}");
        }
        let err = parse_pcie("gen7x16").unwrap_err().to_string();
        assert!(err.contains("generation \"7\""), "{err}");
    }

    #[test]
    fn parse_small_values() {
        assert_eq!(parse_mtu("4096").unwrap(), 4096);
        assert!(parse_mtu("9000").unwrap_err().to_string().contains("9000"));
        assert_eq!(parse_mps("512").unwrap(), 512);
        assert!(parse_mps("300").is_err());
        assert_eq!("RoCE".parse::<LinkLayer>().unwrap(), LinkLayer::Ethernet);
        assert_eq!("IB".parse::<LinkLayer>().unwrap(), LinkLayer::InfiniBand);
        assert!("fc".parse::<LinkLayer>().is_err());
        assert_eq!(
            LinkLayer::from_sysfs("InfiniBand"),
            Some(LinkLayer::InfiniBand)
        );
    }

    #[test]
    fn roce_mtu_from_netdev_mtu() {
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(100), None);
        // rxe keeps 80 B, not 96, and never goes below 256.
        assert_eq!(rxe_active_mtu(1500), 1024);
        assert_eq!(rxe_active_mtu(9000), 4096);
        assert_eq!(rxe_active_mtu(4176), 4096);
        assert_eq!(roce_active_mtu(4176), Some(2048));
        assert_eq!(rxe_active_mtu(4175), 2048);
        assert_eq!(rxe_active_mtu(1104), 1024);
        assert_eq!(rxe_active_mtu(1103), 512);
        assert_eq!(rxe_active_mtu(100), 256);
    }

    #[test]
    fn explain_shows_the_arithmetic() {
        let wire = ib(400.0, 4096);
        let staged = Staged {
            gpu: pcie(5, 16, 256),
            shared: Some(pcie(5, 16, 256)),
        };
        let text = explain(&wire, &pcie(4, 16, 256), Some(&staged)).join("\n");
        for needle in [
            "MTU 4096 B, headers 26 B",
            "4096 / 4122",
            "16 lanes x 16 GT/s x 128b/130b",
            "256 / (256 + 24)",
            "DLLP factor (ACK, flow control, SKP) 0.9022",
            "carries each byte twice",
            "binding: pcie at 25.99 GB/s",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}
