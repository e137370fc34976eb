//! RDMA devices (`/sys/class/infiniband/*`): their PCI function, netdevs and ports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ceiling::{LinkLayer, PortRate, Wire};
use crate::error::{Result, TopoError};
use crate::pci::{is_bdf, read_numa_node, PciFunction};
use crate::sysfs::Sysfs;

/// Where the kernel lists RDMA devices.
pub const INFINIBAND_CLASS: &str = "/sys/class/infiniband";

/// Name prefixes the kernel's software RDMA drivers use by default.
const SOFTWARE_PREFIXES: [&str; 2] = ["rxe", "siw"];

/// One port of an RDMA device, as sysfs `ports/N/` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// Port number, from 1.
    pub port: u32,
    /// "400 Gb/sec (4X NDR)".
    pub rate: Option<String>,
    /// "InfiniBand" or "Ethernet".
    pub link_layer: Option<String>,
    /// "4: ACTIVE".
    pub state: Option<String>,
    /// "5: LinkUp".
    pub phys_state: Option<String>,
    /// Netdevs behind the port's GIDs (`gid_attrs/ndevs/*`), RoCE only.
    pub netdevs: Vec<String>,
}

impl RdmaPort {
    /// The parsed rate, when sysfs gave one that parses.
    pub fn port_rate(&self) -> Option<PortRate> {
        PortRate::parse(self.rate.as_deref()?).ok()
    }

    /// The parsed link layer.
    pub fn layer(&self) -> Option<LinkLayer> {
        LinkLayer::from_sysfs(self.link_layer.as_deref()?)
    }

    /// Whether the port state is ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state.as_deref().is_some_and(|s| s.ends_with("ACTIVE"))
    }

    /// The wire for the ceilings model at active MTU `mtu` (which only verbs can tell for
    /// InfiniBand; see [`crate::ceiling::roce_active_mtu`] for RoCE), no GRH.
    pub fn wire(&self, mtu: u32) -> Option<Wire> {
        Some(Wire {
            link_layer: self.layer()?,
            rate: self.port_rate()?,
            mtu,
            grh: false,
        })
    }
}

/// How an RDMA device is attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attachment {
    /// A hardware device on a PCI function.
    Pci {
        /// The function's address.
        bdf: String,
    },
    /// A software device (rxe, siw) or one on a non-PCI bus: no PCI function to describe.
    Virtual {
        /// How that was decided.
        reason: String,
    },
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RdmaDevice {
    /// "mlx5_0".
    pub name: String,
    /// PCI or virtual.
    pub attachment: Attachment,
    /// The PCI function, for a PCI attachment.
    pub pci: Option<PciFunction>,
    /// Netdevs: the function's `net/*`, the ports' GID netdevs and rxe's `parent`.
    pub netdevs: Vec<String>,
    /// NUMA node of the PCI function; `None` for virtual devices or when -1.
    pub numa_node: Option<u32>,
    /// "1: CA", "4: RNIC".
    pub node_type: Option<String>,
    /// Firmware version, when the driver exports it.
    pub fw_ver: Option<String>,
    /// The ports, by number.
    pub ports: Vec<RdmaPort>,
}

impl RdmaDevice {
    /// Read the RDMA device `name`; a software device is reported as
    /// [`Attachment::Virtual`], not as an error.
    pub fn read(sysfs: &Sysfs, name: &str) -> Result<Self> {
        let class_dir = Path::new(INFINIBAND_CLASS).join(name);
        let Some(dir) = sysfs.resolve(&class_dir)? else {
            return Err(no_such_device(sysfs, name));
        };
        let device = sysfs.resolve(&dir.join("device"))?;
        let parent = sysfs.read_text(&dir.join("parent"));
        let attachment = attachment(name, device.as_deref(), parent.is_some());
        let pci = match (&attachment, &device) {
            (Attachment::Pci { .. }, Some(device)) => Some(PciFunction::read_dir(sysfs, device)?),
            _ => None,
        };
        let ports = read_ports(sysfs, &dir)?;
        let netdevs = collect_netdevs(sysfs, device.as_deref(), &ports, parent)?;
        let numa_node = match (&pci, &device) {
            (Some(pci), _) => pci.numa_node,
            (None, Some(device)) => read_numa_node(sysfs, device)?,
            (None, None) => None,
        };
        Ok(Self {
            name: name.to_string(),
            attachment,
            pci,
            netdevs,
            numa_node,
            node_type: sysfs.read_text(&dir.join("node_type")),
            fw_ver: sysfs.read_text(&dir.join("fw_ver")),
            ports,
        })
    }

    /// Whether the device has no PCI function (rxe, siw).
    pub fn is_virtual(&self) -> bool {
        matches!(self.attachment, Attachment::Virtual { .. })
    }

    /// The PCI function's address, for a PCI device.
    pub fn bdf(&self) -> Option<&str> {
        match &self.attachment {
            Attachment::Pci { bdf } => Some(bdf),
            Attachment::Virtual { .. } => None,
        }
    }

    /// Port `number`, when it exists.
    pub fn port(&self, number: u32) -> Option<&RdmaPort> {
        self.ports.iter().find(|p| p.port == number)
    }

    /// "PCI 0000:18:00.0" or "virtual, no PCI function (over eth0; `reason`)".
    pub fn describe_attachment(&self) -> String {
        match &self.attachment {
            Attachment::Pci { bdf } => format!("PCI {bdf}"),
            Attachment::Virtual { reason } if self.netdevs.is_empty() => {
                format!("virtual, no PCI function ({reason})")
            }
            Attachment::Virtual { reason } => format!(
                "virtual, no PCI function (over {}; {reason})",
                self.netdevs.join(", ")
            ),
        }
    }
}

/// The names of all RDMA devices, sorted; empty when there are none.
pub fn list_rdma_devices(sysfs: &Sysfs) -> Result<Vec<String>> {
    sysfs.list(Path::new(INFINIBAND_CLASS))
}

/// Read every RDMA device.
pub fn read_rdma_devices(sysfs: &Sysfs) -> Result<Vec<RdmaDevice>> {
    list_rdma_devices(sysfs)?
        .iter()
        .map(|name| RdmaDevice::read(sysfs, name))
        .collect()
}

fn no_such_device(sysfs: &Sysfs, name: &str) -> TopoError {
    let present = list_rdma_devices(sysfs).unwrap_or_default();
    TopoError::NoRdmaDevice {
        name: name.to_string(),
        dir: sysfs.host_path(Path::new(INFINIBAND_CLASS)),
        present: if present.is_empty() {
            "none".to_string()
        } else {
            present.join(", ")
        },
    }
}

/// Decide PCI or virtual from where `device` points, rxe's `parent` and the name.
fn attachment(name: &str, device: Option<&Path>, has_parent: bool) -> Attachment {
    let Some(device) = device else {
        return Attachment::Virtual {
            reason: "no device link, so a software device such as rxe or siw".to_string(),
        };
    };
    let Some(bdf) = pci_function_name(device) else {
        return Attachment::Virtual {
            reason: format!(
                "device link points to {}, not a PCI function",
                device.display()
            ),
        };
    };
    let software_name = SOFTWARE_PREFIXES.iter().any(|p| name.starts_with(p));
    if has_parent || software_name {
        return Attachment::Virtual {
            reason: format!("a software device such as rxe or siw, on a netdev of {bdf}"),
        };
    }
    Attachment::Pci { bdf }
}

/// The address of a PCI function directory below a `/sys/devices/pci*` host bridge.
fn pci_function_name(path: &Path) -> Option<String> {
    if !path.starts_with("/sys/devices") {
        return None;
    }
    let name = path.file_name()?.to_string_lossy().into_owned();
    let under_bridge = path
        .components()
        .any(|c| c.as_os_str().to_string_lossy().starts_with("pci"));
    (is_bdf(&name) && under_bridge).then_some(name)
}

fn read_ports(sysfs: &Sysfs, dir: &Path) -> Result<Vec<RdmaPort>> {
    let ports_dir = dir.join("ports");
    let mut numbers: Vec<u32> = sysfs
        .list(&ports_dir)?
        .iter()
        .filter_map(|name| name.parse().ok())
        .collect();
    numbers.sort_unstable();
    numbers
        .into_iter()
        .map(|port| read_port(sysfs, &ports_dir.join(port.to_string()), port))
        .collect()
}

fn read_port(sysfs: &Sysfs, dir: &Path, port: u32) -> Result<RdmaPort> {
    let ndevs_dir = dir.join("gid_attrs/ndevs");
    let mut netdevs = BTreeSet::new();
    for entry in sysfs.list(&ndevs_dir)? {
        // Unused GID slots fail to read or read empty.
        if let Some(ndev) = sysfs.read_text(&ndevs_dir.join(entry)) {
            if !ndev.is_empty() {
                netdevs.insert(ndev);
            }
        }
    }
    Ok(RdmaPort {
        port,
        rate: sysfs.read_text(&dir.join("rate")),
        link_layer: sysfs.read_text(&dir.join("link_layer")),
        state: sysfs.read_text(&dir.join("state")),
        phys_state: sysfs.read_text(&dir.join("phys_state")),
        netdevs: netdevs.into_iter().collect(),
    })
}

fn collect_netdevs(
    sysfs: &Sysfs,
    device: Option<&Path>,
    ports: &[RdmaPort],
    parent: Option<String>,
) -> Result<Vec<String>> {
    let mut netdevs = BTreeSet::new();
    if let Some(device) = device {
        netdevs.extend(sysfs.list(&PathBuf::from(device).join("net"))?);
    }
    for port in ports {
        netdevs.extend(port.netdevs.iter().cloned());
    }
    netdevs.extend(parent.filter(|p| !p.is_empty()));
    Ok(netdevs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_rules() {
        let pci = Path::new("/sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0");
        assert_eq!(
            attachment("mlx5_0", Some(pci), false),
            Attachment::Pci {
                bdf: "0000:18:00.0".to_string()
            }
        );
        assert!(matches!(
            attachment("rxe0", None, false),
            Attachment::Virtual { .. }
        ));
        let virtio = Path::new("/sys/devices/pci0000:00/0000:00:03.0/virtio0");
        let Attachment::Virtual { reason } = attachment("siw0", Some(virtio), false) else {
            panic!("virtio0 taken for a PCI function");
        };
        assert!(reason.contains("virtio0"), "{reason}");
        assert!(matches!(
            attachment("roce0", Some(pci), true),
            Attachment::Virtual { .. }
        ));
        assert!(matches!(
            attachment("rxe_eth0", Some(pci), false),
            Attachment::Virtual { .. }
        ));
    }
}
