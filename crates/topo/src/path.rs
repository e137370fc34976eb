//! The PCIe path from a device up to its root port, and between two devices.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ceiling::{Pcie, Staged};
use crate::config::{Acs, PortType};
use crate::error::{Result, TopoError};
use crate::pci::{is_bdf, PciFunction, PciLink};
use crate::sysfs::Sysfs;

/// What a function on a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortRole {
    /// A root port of the host bridge.
    RootPort,
    /// A switch's upstream port.
    SwitchUpstream,
    /// A switch's downstream port.
    SwitchDownstream,
    /// Another kind of bridge (PCIe to PCI).
    Bridge,
    /// The device at the end of the path.
    Endpoint,
}

impl fmt::Display for PortRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::RootPort => "root port",
            Self::SwitchUpstream => "switch upstream port",
            Self::SwitchDownstream => "switch downstream port",
            Self::Bridge => "bridge",
            Self::Endpoint => "endpoint",
        })
    }
}

/// One function on a path, with its link and ACS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// Its address.
    pub bdf: String,
    /// Root port, switch port or the endpoint itself.
    pub role: PortRole,
    /// The link as this function reports it (for a root or downstream port: the link
    /// below it, its other end the next hop; for an upstream port or an endpoint: the link
    /// above it, its other end the hop before).
    pub link: PciLink,
    /// ACS control.
    pub acs: Acs,
}

/// The chain from a host bridge down to one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciPath {
    /// The host bridge, "pci0000:15".
    pub host_bridge: String,
    /// The root port first, the device last.
    pub hops: Vec<Hop>,
}

impl PciPath {
    /// The path of `function`, from its canonical sysfs directory
    /// (`/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/.../0000:18:00.0`).
    ///
    /// Each bridge's role comes from its PCI Express capability when `config` can be read;
    /// otherwise from its place: the first is the root port, then upstream and downstream
    /// switch ports alternate.
    pub fn read(sysfs: &Sysfs, function: &PciFunction) -> Result<Self> {
        let (host_bridge, dirs) =
            split_device_path(&function.sysfs_path).ok_or_else(|| TopoError::NotInPciTree {
                bdf: function.bdf.clone(),
                path: function.sysfs_path.clone(),
            })?;
        let last = dirs.len().saturating_sub(1);
        let mut hops = Vec::with_capacity(dirs.len());
        for (index, dir) in dirs.iter().enumerate() {
            let read;
            let this = if index == last {
                function
            } else {
                read = PciFunction::read_dir(sysfs, dir)?;
                &read
            };
            hops.push(Hop {
                bdf: this.bdf.clone(),
                role: role(index, last, this.port_type),
                link: this.link,
                acs: this.acs,
            });
        }
        link_ports_to_what_is_below(&mut hops);
        Ok(Self { host_bridge, hops })
    }

    /// The device at the end.
    pub fn device(&self) -> Option<&Hop> {
        self.hops.last()
    }

    /// The bridges above the device, root port first.
    pub fn bridges(&self) -> &[Hop] {
        &self.hops[..self.hops.len().saturating_sub(1)]
    }
}

/// A root or downstream port reports the link below it, whose other end is the next function
/// on the path, not the one above it that [`PciFunction::read_dir`] took for its peer.
fn link_ports_to_what_is_below(hops: &mut [Hop]) {
    for i in 0..hops.len().saturating_sub(1) {
        if matches!(
            hops[i].role,
            PortRole::RootPort | PortRole::SwitchDownstream
        ) {
            let below = hops[i + 1].link;
            hops[i].link = hops[i]
                .link
                .with_peer((below.max_speed_gts, below.max_width));
        }
    }
}

/// The host bridge ("pci0000:15") and the directories of the functions below it.
///
/// The last `pci*` component is the host bridge, so a device behind an Intel VMD domain
/// (`.../pci10000:e0/10000:e0:06.0/...`) is placed under the VMD's own bridge.
fn split_device_path(path: &Path) -> Option<(String, Vec<PathBuf>)> {
    let names: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let bridge_at = names
        .iter()
        .rposition(|n| n.starts_with("pci") && !is_bdf(n))?;
    let mut dir = PathBuf::new();
    for name in &names[..=bridge_at] {
        dir.push(name);
    }
    let mut dirs = Vec::new();
    for name in &names[bridge_at + 1..] {
        dir.push(name);
        if is_bdf(name) {
            dirs.push(dir.clone());
        }
    }
    (!dirs.is_empty()).then(|| (names[bridge_at].clone(), dirs))
}

fn role(index: usize, last: usize, port_type: Option<PortType>) -> PortRole {
    if index == last {
        return PortRole::Endpoint;
    }
    match port_type {
        Some(PortType::RootPort) => PortRole::RootPort,
        Some(PortType::SwitchUpstream) => PortRole::SwitchUpstream,
        Some(PortType::SwitchDownstream) => PortRole::SwitchDownstream,
        Some(_) => PortRole::Bridge,
        None if index == 0 => PortRole::RootPort,
        None if index % 2 == 1 => PortRole::SwitchUpstream,
        None => PortRole::SwitchDownstream,
    }
}

/// How two devices connect, as `nvidia-smi topo -m` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PathClass {
    /// Through at most one PCIe switch, without the host bridge.
    Pix,
    /// Through several PCIe switches, without the host bridge.
    Pxb,
    /// Through one PCIe host bridge (the CPU's root complex).
    Phb,
    /// Between host bridges of one NUMA node.
    Node,
    /// Across the interconnect between NUMA nodes (UPI, Infinity Fabric).
    Sys,
}

impl PathClass {
    /// nvidia-smi's legend for the class.
    pub fn meaning(&self) -> &'static str {
        match self {
            Self::Pix => "at most one PCIe switch, not through the host bridge",
            Self::Pxb => "several PCIe switches, not through the host bridge",
            Self::Phb => "through a PCIe host bridge (the CPU)",
            Self::Node => "between PCIe host bridges within one NUMA node",
            Self::Sys => "across the interconnect between NUMA nodes",
        }
    }
}

impl fmt::Display for PathClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Pix => "PIX",
            Self::Pxb => "PXB",
            Self::Phb => "PHB",
            Self::Node => "NODE",
            Self::Sys => "SYS",
        })
    }
}

/// The path between two devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairPath {
    /// The nvidia-smi class.
    pub class: PathClass,
    /// The deepest function both paths go through, when they share a host bridge and one.
    pub common_ancestor: Option<String>,
    /// PCIe switches traversed between the two.
    pub switches: usize,
    /// The bridges traffic from the first to the second crosses, in order.
    pub route: Vec<Hop>,
    /// The functions whose links lie above the common ancestor (from the root port's
    /// child down to it): links both devices' traffic shares.
    pub shared: Vec<Hop>,
    /// Whether a bridge on the route has ACS P2P Request or Completion Redirect set
    /// (peer-to-peer then goes up through the root complex); `None` when some bridge's
    /// ACS cannot be read and none is known to redirect.
    pub acs_redirect: Option<bool>,
}

impl PairPath {
    /// The slowest shared link as a ceilings-model link (the one a staged, bidirectional
    /// run crosses twice in each direction); `None` when nothing is shared or no shared
    /// link's speed, width and MPS are all known.
    pub fn shared_pcie(&self) -> Option<Pcie> {
        self.shared
            .iter()
            .filter_map(|hop| hop.link.pcie())
            .min_by(|a, b| a.gbps().total_cmp(&b.gbps()))
    }

    /// The links a staged (GPUDirect off) run crosses besides the NIC's: the GPU's link,
    /// and the shared link as carrying every byte twice only when `bidirectional` (one-way
    /// runs use the shared link's two directions, once each; see
    /// [`crate::ceiling::staged_gbps`]). `None` when the GPU's speed, width or MPS is unknown.
    pub fn staged(&self, gpu_link: &PciLink, bidirectional: bool) -> Option<Staged> {
        Some(Staged {
            gpu: gpu_link.pcie()?,
            shared: if bidirectional {
                self.shared_pcie()
            } else {
                None
            },
        })
    }
}

/// Classify the path between two devices, given each one's path and NUMA node.
///
/// Different host bridges: NODE when the NUMA nodes are equal (both unknown counts as
/// equal, as on single-socket machines that report -1), else SYS. Same host bridge: PHB when
/// the deepest common function is the root port or there is none (different root ports);
/// otherwise the switches on the route are counted (an upstream port below the common
/// ancestor is one switch, and the common ancestor, a switch port, one more): one is PIX,
/// more is PXB.
pub fn classify(a: &PciPath, a_numa: Option<u32>, b: &PciPath, b_numa: Option<u32>) -> PairPath {
    let common = if a.host_bridge == b.host_bridge {
        common_prefix(&a.hops, &b.hops)
    } else {
        0
    };
    let below = |p: &PciPath| {
        let end = p.hops.len().saturating_sub(1);
        p.hops.get(common..end).unwrap_or(&[]).to_vec()
    };
    let (a_below, b_below) = (below(a), below(b));
    let ancestor = common.checked_sub(1).and_then(|i| a.hops.get(i));
    let mut route: Vec<Hop> = a_below.iter().rev().cloned().collect();
    route.extend(ancestor.cloned());
    route.extend(b_below.iter().cloned());
    let switches = count_switches(ancestor, &a_below, &b_below);
    let class = if a.host_bridge != b.host_bridge {
        if a_numa == b_numa {
            PathClass::Node
        } else {
            PathClass::Sys
        }
    } else if ancestor.is_none_or(|hop| hop.role == PortRole::RootPort) {
        PathClass::Phb
    } else if switches <= 1 {
        PathClass::Pix
    } else {
        PathClass::Pxb
    };
    PairPath {
        class,
        common_ancestor: ancestor.map(|hop| hop.bdf.clone()),
        switches,
        acs_redirect: acs_redirect(&route),
        shared: a.hops.get(1..common).unwrap_or(&[]).to_vec(),
        route,
    }
}

fn common_prefix(a: &[Hop], b: &[Hop]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x.bdf == y.bdf).count()
}

fn count_switches(ancestor: Option<&Hop>, a_below: &[Hop], b_below: &[Hop]) -> usize {
    let is_switch = |hop: &Hop| matches!(hop.role, PortRole::SwitchUpstream | PortRole::Bridge);
    let at_ancestor = ancestor.is_some_and(|hop| {
        matches!(
            hop.role,
            PortRole::SwitchUpstream | PortRole::SwitchDownstream | PortRole::Bridge
        )
    });
    let below = a_below
        .iter()
        .chain(b_below)
        .filter(|h| is_switch(h))
        .count();
    below + usize::from(at_ancestor)
}

fn acs_redirect(route: &[Hop]) -> Option<bool> {
    let states: Vec<Option<bool>> = route.iter().map(|hop| hop.acs.redirects()).collect();
    if states.contains(&Some(true)) {
        Some(true)
    } else if states.contains(&None) {
        None
    } else {
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(bdf: &str, role: PortRole) -> Hop {
        Hop {
            bdf: bdf.to_string(),
            role,
            link: PciLink::default(),
            acs: Acs::NotSupported,
        }
    }

    fn path(bridge: &str, hops: &[(&str, PortRole)]) -> PciPath {
        PciPath {
            host_bridge: bridge.to_string(),
            hops: hops.iter().map(|(b, r)| hop(b, *r)).collect(),
        }
    }

    use PortRole::{Endpoint as E, RootPort as R, SwitchDownstream as D, SwitchUpstream as U};

    #[test]
    fn one_switch_is_pix() {
        let nic = path(
            "pci0000:15",
            &[("0:1", R), ("0:2", U), ("0:3", D), ("nic", E)],
        );
        let gpu = path(
            "pci0000:15",
            &[("0:1", R), ("0:2", U), ("0:4", D), ("gpu", E)],
        );
        let pair = classify(&nic, Some(0), &gpu, Some(0));
        assert_eq!(pair.class, PathClass::Pix);
        assert_eq!(pair.common_ancestor.as_deref(), Some("0:2"));
        assert_eq!(pair.switches, 1);
        let route: Vec<&str> = pair.route.iter().map(|h| h.bdf.as_str()).collect();
        assert_eq!(route, ["0:3", "0:2", "0:4"]);
        let shared: Vec<&str> = pair.shared.iter().map(|h| h.bdf.as_str()).collect();
        assert_eq!(shared, ["0:2"]);
        assert_eq!(pair.acs_redirect, Some(false));
    }

    #[test]
    fn cascaded_switches_are_pxb() {
        let gpu = path(
            "pci0000:00",
            &[
                ("r", R),
                ("u1", U),
                ("d1a", D),
                ("u2", U),
                ("d2", D),
                ("gpu", E),
            ],
        );
        let nic = path("pci0000:00", &[("r", R), ("u1", U), ("d1b", D), ("nic", E)]);
        let pair = classify(&nic, None, &gpu, None);
        assert_eq!(pair.class, PathClass::Pxb);
        assert_eq!(pair.switches, 2);
    }

    #[test]
    fn host_bridge_and_numa_classes() {
        let a = path("pci0000:17", &[("r1", R), ("nic", E)]);
        let b = path("pci0000:17", &[("r2", R), ("gpu", E)]);
        assert_eq!(classify(&a, Some(0), &b, Some(0)).class, PathClass::Phb);
        let c = path("pci0000:4a", &[("r3", R), ("gpu", E)]);
        assert_eq!(classify(&a, Some(0), &c, Some(0)).class, PathClass::Node);
        assert_eq!(classify(&a, Some(0), &c, Some(1)).class, PathClass::Sys);
        assert_eq!(classify(&a, None, &c, None).class, PathClass::Node);
        // Two functions of one device below one root port go through the root port.
        let f0 = path("pci0000:17", &[("r1", R), ("f0", E)]);
        let f1 = path("pci0000:17", &[("r1", R), ("f1", E)]);
        assert_eq!(classify(&f0, Some(0), &f1, Some(0)).class, PathClass::Phb);
    }

    #[test]
    fn acs_redirect_on_the_route() {
        let mut gpu = path(
            "pci0000:15",
            &[("0:1", R), ("0:2", U), ("0:4", D), ("gpu", E)],
        );
        let nic = path(
            "pci0000:15",
            &[("0:1", R), ("0:2", U), ("0:3", D), ("nic", E)],
        );
        gpu.hops[2].acs = Acs::Control(crate::config::AcsControl::from_raw(0x1d));
        assert_eq!(classify(&nic, None, &gpu, None).acs_redirect, Some(true));
        gpu.hops[2].acs = Acs::Unreadable;
        assert_eq!(classify(&nic, None, &gpu, None).acs_redirect, None);
    }

    #[test]
    fn device_paths_split_at_the_last_host_bridge() {
        let (bridge, dirs) = split_device_path(Path::new(
            "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0",
        ))
        .unwrap();
        assert_eq!(bridge, "pci0000:15");
        assert_eq!(dirs.len(), 2);
        assert_eq!(
            dirs[1],
            Path::new("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0")
        );
        let (bridge, dirs) = split_device_path(Path::new(
            "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
        ))
        .unwrap();
        assert_eq!(bridge, "pci10000:e0");
        assert_eq!(dirs.len(), 2);
        assert!(split_device_path(Path::new("/sys/devices/virtual/net/lo")).is_none());
    }

    #[test]
    fn roles_from_position_without_config() {
        assert_eq!(role(0, 3, None), PortRole::RootPort);
        assert_eq!(role(1, 3, None), PortRole::SwitchUpstream);
        assert_eq!(role(2, 3, None), PortRole::SwitchDownstream);
        assert_eq!(role(3, 3, None), PortRole::Endpoint);
        assert_eq!(role(0, 0, None), PortRole::Endpoint);
        assert_eq!(
            role(1, 3, Some(PortType::SwitchDownstream)),
            PortRole::SwitchDownstream
        );
    }
}
