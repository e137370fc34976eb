//! The binary PCI configuration space (`/sys/bus/pci/devices/*/config`).
//!
//! Only what the kernel does not already export as text is read here: the PCI Express
//! capability (port type, Max Payload Size, Max Read Request Size) and the ACS extended
//! capability. A `config` file read without root privileges holds only the first 64 bytes;
//! then every value here is unknown (`None`), never guessed.

use serde::{Deserialize, Serialize};

/// Offset of the capabilities pointer in the standard header.
const CAP_POINTER: usize = 0x34;
/// Status register; bit 4 says a capability list exists.
const STATUS: usize = 0x06;
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Capability id of PCI Express.
const CAP_ID_PCIE: u8 = 0x10;
/// Where the extended capability list starts.
const EXT_CAP_START: usize = 0x100;
/// Extended capability id of Access Control Services.
const EXT_CAP_ID_ACS: u16 = 0x000d;
/// The smallest `config` that holds the PCIe capability (the standard 256 bytes).
const STANDARD_SIZE: usize = 256;

/// The device/port type field of the PCI Express Capabilities register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortType {
    /// A PCI Express endpoint (a NIC or GPU function).
    Endpoint,
    /// A legacy PCI Express endpoint.
    LegacyEndpoint,
    /// A root port of a root complex.
    RootPort,
    /// The upstream port of a switch.
    SwitchUpstream,
    /// A downstream port of a switch.
    SwitchDownstream,
    /// A PCI Express to PCI/PCI-X bridge.
    PcieToPciBridge,
    /// A PCI/PCI-X to PCI Express bridge.
    PciToPcieBridge,
    /// An endpoint integrated in the root complex.
    RootComplexEndpoint,
    /// A root complex event collector.
    RootComplexEventCollector,
    /// A value the specification reserves.
    Reserved,
}

impl PortType {
    fn from_field(value: u16) -> Self {
        match value {
            0x0 => Self::Endpoint,
            0x1 => Self::LegacyEndpoint,
            0x4 => Self::RootPort,
            0x5 => Self::SwitchUpstream,
            0x6 => Self::SwitchDownstream,
            0x7 => Self::PcieToPciBridge,
            0x8 => Self::PciToPcieBridge,
            0x9 => Self::RootComplexEndpoint,
            0xa => Self::RootComplexEventCollector,
            _ => Self::Reserved,
        }
    }
}

/// The ACS Control register of one port, bit by bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcsControl {
    /// The register as read.
    pub raw: u16,
    /// Bit 0: Source Validation.
    pub source_validation: bool,
    /// Bit 1: Translation Blocking.
    pub translation_blocking: bool,
    /// Bit 2: P2P Request Redirect: peer-to-peer requests go up to the root complex.
    pub request_redirect: bool,
    /// Bit 3: P2P Completion Redirect.
    pub completion_redirect: bool,
    /// Bit 4: Upstream Forwarding.
    pub upstream_forwarding: bool,
    /// Bit 5: P2P Egress Control.
    pub egress_control: bool,
    /// Bit 6: Direct Translated P2P.
    pub direct_translated: bool,
}

impl AcsControl {
    /// Decode the register.
    pub fn from_raw(raw: u16) -> Self {
        let bit = |n: u16| raw & (1 << n) != 0;
        Self {
            raw,
            source_validation: bit(0),
            translation_blocking: bit(1),
            request_redirect: bit(2),
            completion_redirect: bit(3),
            upstream_forwarding: bit(4),
            egress_control: bit(5),
            direct_translated: bit(6),
        }
    }

    /// Whether peer-to-peer traffic through this port is sent up to the root complex
    /// (Request or Completion Redirect set), which defeats a switch-local GPUDirect path.
    pub fn redirects(&self) -> bool {
        self.request_redirect || self.completion_redirect
    }
}

/// What is known of a port's ACS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Acs {
    /// The extended configuration space could not be read (run as root to see it).
    Unreadable,
    /// The function has no ACS capability.
    NotSupported,
    /// The ACS Control register.
    Control(AcsControl),
}

impl Acs {
    /// `Some(true)` when the port redirects peer-to-peer traffic, `None` when unknown.
    pub fn redirects(&self) -> Option<bool> {
        match self {
            Acs::Unreadable => None,
            Acs::NotSupported => Some(false),
            Acs::Control(control) => Some(control.redirects()),
        }
    }
}

/// What the PCI Express capability says, each `None` when it cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcieCapability {
    /// The device/port type.
    pub port_type: Option<PortType>,
    /// Max Payload Size in bytes (Device Control bits 7:5, 128 << value).
    pub mps: Option<u32>,
    /// Max Read Request Size in bytes (Device Control bits 14:12, 128 << value).
    pub mrrs: Option<u32>,
}

/// Read the PCI Express capability from a `config` dump.
///
/// A dump shorter than 256 bytes (an unprivileged read) gives all `None`.
pub fn pcie_capability(config: &[u8]) -> PcieCapability {
    let Some(cap) = find_capability(config, CAP_ID_PCIE) else {
        return PcieCapability::default();
    };
    let port_type = read_u16(config, cap + 2).map(|v| PortType::from_field((v >> 4) & 0xf));
    let control = read_u16(config, cap + 8);
    PcieCapability {
        port_type,
        mps: control.and_then(|v| size_field((v >> 5) & 0x7)),
        mrrs: control.and_then(|v| size_field((v >> 12) & 0x7)),
    }
}

/// Read the ACS Control register from a `config` dump.
pub fn acs(config: &[u8]) -> Acs {
    if config.len() < EXT_CAP_START + 8 {
        return Acs::Unreadable;
    }
    match find_ext_capability(config, EXT_CAP_ID_ACS) {
        Some(at) => match read_u16(config, at + 6) {
            Some(raw) => Acs::Control(AcsControl::from_raw(raw)),
            None => Acs::Unreadable,
        },
        None => Acs::NotSupported,
    }
}

/// The offset of the standard capability `id`, walking the list from 0x34.
pub fn find_capability(config: &[u8], id: u8) -> Option<usize> {
    if config.len() < STANDARD_SIZE {
        return None;
    }
    if read_u16(config, STATUS)? & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = usize::from(*config.get(CAP_POINTER)? & 0xfc);
    // 48 capabilities of 4 bytes fill the 192 bytes after the header: more means a loop.
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        if *config.get(at)? == id {
            return Some(at);
        }
        at = usize::from(*config.get(at + 1)? & 0xfc);
    }
    None
}

/// The offset of the extended capability `id`, walking the list from 0x100.
pub fn find_ext_capability(config: &[u8], id: u16) -> Option<usize> {
    let mut at = EXT_CAP_START;
    // (4096 - 256) / 4 headers at most: more means a loop.
    for _ in 0..960 {
        let header = read_u32(config, at)?;
        if header == 0 || header == u32::MAX {
            return None;
        }
        if (header & 0xffff) as u16 == id {
            return Some(at);
        }
        at = (header >> 20) as usize & 0xffc;
        if at < EXT_CAP_START {
            return None;
        }
    }
    None
}

/// 128 << value for the defined encodings 0..=5 (128 .. 4096 bytes).
fn size_field(value: u16) -> Option<u32> {
    (value <= 5).then(|| 128u32 << value)
}

fn read_u16(config: &[u8], at: usize) -> Option<u16> {
    let bytes = config.get(at..at + 2)?;
    Some(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn read_u32(config: &[u8], at: usize) -> Option<u32> {
    let bytes = config.get(at..at + 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4 KiB config with a PM capability at 0x40 chained to PCIe at 0x60, and
    /// AER at 0x100 chained to ACS at 0x148.
    fn config(port_type: u16, devctl: u16, acs_control: Option<u16>) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[STATUS] = 0x10;
        c[CAP_POINTER] = 0x40;
        c[0x40] = 0x01;
        c[0x41] = 0x60;
        c[0x60] = CAP_ID_PCIE;
        c[0x62..0x64].copy_from_slice(&(2 | (port_type << 4)).to_le_bytes());
        c[0x68..0x6a].copy_from_slice(&devctl.to_le_bytes());
        let next = if acs_control.is_some() { 0x148u32 } else { 0 };
        c[0x100..0x104].copy_from_slice(&(0x0001 | (2 << 16) | (next << 20)).to_le_bytes());
        if let Some(control) = acs_control {
            c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
            c[0x14e..0x150].copy_from_slice(&control.to_le_bytes());
        }
        c
    }

    #[test]
    fn mps_and_mrrs_from_device_control() {
        // MPS 256 (1 << 5), MRRS 4096 (5 << 12).
        let cap = pcie_capability(&config(0, (1 << 5) | (5 << 12), None));
        assert_eq!(cap.mps, Some(256));
        assert_eq!(cap.mrrs, Some(4096));
        assert_eq!(cap.port_type, Some(PortType::Endpoint));
        let cap = pcie_capability(&config(6, 0, None));
        assert_eq!((cap.mps, cap.mrrs), (Some(128), Some(128)));
        assert_eq!(cap.port_type, Some(PortType::SwitchDownstream));
    }

    #[test]
    fn short_config_is_unknown_not_guessed() {
        let full = config(0, 1 << 5, Some(0x1d));
        for len in [0, 64, 255] {
            let cap = pcie_capability(&full[..len]);
            assert_eq!(cap, PcieCapability::default(), "len {len}");
        }
        assert_eq!(acs(&full[..256]), Acs::Unreadable);
    }

    #[test]
    fn reserved_payload_encodings_are_unknown() {
        let cap = pcie_capability(&config(0, (6 << 5) | (7 << 12), None));
        assert_eq!((cap.mps, cap.mrrs), (None, None));
    }

    #[test]
    fn acs_control_bits() {
        let Acs::Control(c) = acs(&config(6, 0, Some(0x1d))) else {
            panic!("no ACS found");
        };
        assert!(c.source_validation && c.request_redirect && c.completion_redirect);
        assert!(c.upstream_forwarding && !c.translation_blocking && !c.egress_control);
        assert!(c.redirects());
        assert_eq!(acs(&config(6, 0, None)), Acs::NotSupported);
        assert_eq!(acs(&config(6, 0, Some(0))).redirects(), Some(false));
    }

    #[test]
    fn capability_loops_end() {
        let mut c = config(0, 0, None);
        c[0x41] = 0x40; // PM points at itself and PCIe is never reached
        assert_eq!(find_capability(&c, CAP_ID_PCIE), None);
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
        assert_eq!(find_ext_capability(&c, EXT_CAP_ID_ACS), None);
    }
}
