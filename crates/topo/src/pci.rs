//! PCI functions: addresses, sysfs attributes and links.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ceiling::{gen_from_gts, Pcie};
use crate::config::{self, Acs, PortType};
use crate::error::{Result, TopoError};
use crate::sysfs::Sysfs;

/// Where the kernel lists every PCI function.
pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// Normalise a PCI address to sysfs's form, "0000:17:00.0".
///
/// Accepts nvidia-smi's eight-digit domain ("00000000:17:00.0"), lspci's short form without
/// a domain ("17:00.0", domain 0) and any case.
pub fn parse_bdf(text: &str) -> Result<String> {
    let bad = || TopoError::BadBdf {
        value: text.to_string(),
    };
    let lower = text.trim().to_ascii_lowercase();
    let parts: Vec<&str> = lower.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [domain, bus, devfn] => (*domain, *bus, *devfn),
        [bus, devfn] => ("0", *bus, *devfn),
        _ => return Err(bad()),
    };
    let (dev, func) = devfn.split_once('.').ok_or_else(bad)?;
    let domain = hex_field(domain, 8).ok_or_else(bad)?;
    let bus = hex_field(bus, 2).ok_or_else(bad)?;
    let dev = hex_field(dev, 2).filter(|&d| d < 32).ok_or_else(bad)?;
    let func = hex_field(func, 1).filter(|&f| f < 8).ok_or_else(bad)?;
    if domain > 0xffff {
        // Intel VMD domains (10000:e0:06.0) are five digits in sysfs.
        return Ok(format!("{domain:05x}:{bus:02x}:{dev:02x}.{func}"));
    }
    Ok(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func}"))
}

/// Whether `name` is a PCI address exactly as sysfs spells it ("0000:17:00.0").
pub fn is_bdf(name: &str) -> bool {
    parse_bdf(name).is_ok_and(|bdf| bdf == name)
}

fn hex_field(text: &str, max_digits: usize) -> Option<u32> {
    if text.is_empty() || text.len() > max_digits {
        return None;
    }
    u32::from_str_radix(text, 16).ok()
}

/// The state of one PCIe link, as the function at one end reports it, with what the other
/// end can do.
///
/// Every field is `None` when sysfs does not say ("Unknown" speed, width 0, a `config` that
/// could not be read in full, no port above the function). sysfs's `max_link_*` is one
/// function's capability; the link is judged against the lesser of both ends'
/// ([`PciLink::training`], in `training.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PciLink {
    /// Current speed per lane in GT/s.
    pub speed_gts: Option<f64>,
    /// Current width in lanes.
    pub width: Option<u32>,
    /// The fastest speed this function supports, GT/s (its `max_link_speed`).
    pub max_speed_gts: Option<f64>,
    /// The widest width this function supports (its `max_link_width`).
    pub max_width: Option<u32>,
    /// The fastest speed the function at the link's other end supports: for an endpoint or
    /// a switch's upstream port, the port above it (its sysfs parent); for a root or
    /// downstream port, the function below it on the path. `None` when it cannot be read.
    #[serde(default)]
    pub peer_max_speed_gts: Option<f64>,
    /// The widest width the other end supports; `None` when it cannot be read.
    #[serde(default)]
    pub peer_max_width: Option<u32>,
    /// Max Payload Size in bytes, from `config`.
    pub mps: Option<u32>,
    /// Max Read Request Size in bytes, from `config`.
    pub mrrs: Option<u32>,
}

impl PciLink {
    /// The current generation (1..=6), from the speed.
    pub fn gen(&self) -> Option<u8> {
        gen_from_gts(self.speed_gts?)
    }

    /// The function's own maximum generation, from its maximum speed.
    pub fn max_gen(&self) -> Option<u8> {
        gen_from_gts(self.max_speed_gts?)
    }

    /// The link for the ceilings model; `None` unless speed, width and MPS are all known.
    pub fn pcie(&self) -> Option<Pcie> {
        Some(Pcie {
            gen: self.gen()?,
            width: self.width?,
            mps: self.mps?,
        })
    }
}

impl fmt::Display for PciLink {
    /// "Gen4 x16 (max Gen4 x16) MPS 256"; unknown parts are "?".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = gen_width(self.speed_gts, self.width);
        let max = gen_width(self.max_speed_gts, self.max_width);
        write!(f, "{now} (max {max}) MPS ")?;
        match self.mps {
            Some(mps) => write!(f, "{mps}"),
            None => f.write_str("?"),
        }
    }
}

/// "Gen4 x16" from a speed in GT/s and a width, with "?" for what is unknown and the raw
/// GT/s for an odd speed.
pub fn gen_width(speed_gts: Option<f64>, width: Option<u32>) -> String {
    let speed = match speed_gts {
        Some(gts) => gen_from_gts(gts).map_or(format!("{gts} GT/s"), |gen| format!("Gen{gen}")),
        None => "Gen?".to_string(),
    };
    match width {
        Some(width) => format!("{speed} x{width}"),
        None => format!("{speed} x?"),
    }
}

/// One PCI function as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciFunction {
    /// Its address, "0000:17:00.0".
    pub bdf: String,
    /// Its canonical directory inside the sysfs root
    /// (`/sys/devices/pci0000:15/0000:15:01.0/.../0000:18:00.0`).
    pub sysfs_path: PathBuf,
    /// Vendor id (0x15b3 Mellanox/NVIDIA networking, 0x10de NVIDIA).
    pub vendor: Option<u16>,
    /// Device id.
    pub device: Option<u16>,
    /// Class code, 24 bits (0x020700 InfiniBand controller, 0x030200 3D controller).
    pub class: Option<u32>,
    /// NUMA node; `None` when the kernel says -1.
    pub numa_node: Option<u32>,
    /// The bound driver's name.
    pub driver: Option<String>,
    /// The link above the function.
    pub link: PciLink,
    /// The PCI Express port type, from `config`.
    pub port_type: Option<PortType>,
    /// ACS control, from `config` (bridges have it, endpoints rarely).
    pub acs: Acs,
    /// The IOMMU group, when the IOMMU is on.
    pub iommu_group: Option<String>,
    /// That group's default domain type ("DMA-FQ", "identity", ...), when visible.
    pub iommu_type: Option<String>,
}

impl PciFunction {
    /// Read the function at `bdf` (any form [`parse_bdf`] accepts).
    pub fn read(sysfs: &Sysfs, bdf: &str) -> Result<Self> {
        let bdf = parse_bdf(bdf)?;
        let link = Path::new(PCI_DEVICES).join(&bdf);
        match sysfs.resolve(&link)? {
            Some(dir) => Self::read_dir(sysfs, &dir),
            None => Err(TopoError::NoPciFunction {
                bdf,
                dir: sysfs.host_path(Path::new(PCI_DEVICES)),
            }),
        }
    }

    /// Read the function whose canonical sysfs directory is `dir`.
    pub fn read_dir(sysfs: &Sysfs, dir: &Path) -> Result<Self> {
        let bdf = dir
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .filter(|name| is_bdf(name))
            .ok_or_else(|| TopoError::BadBdf {
                value: dir.display().to_string(),
            })?;
        let config = sysfs.read_bytes(&dir.join("config")).unwrap_or_default();
        let cap = config::pcie_capability(&config);
        let group = sysfs.link_name(&dir.join("iommu_group"));
        let iommu_type = group.as_ref().and_then(|g| {
            sysfs.read_text(&Path::new("/sys/kernel/iommu_groups").join(g).join("type"))
        });
        Ok(Self {
            bdf,
            sysfs_path: dir.to_path_buf(),
            vendor: read_hex(sysfs, dir, "vendor")?.and_then(|v| u16::try_from(v).ok()),
            device: read_hex(sysfs, dir, "device")?.and_then(|v| u16::try_from(v).ok()),
            class: read_hex(sysfs, dir, "class")?,
            numa_node: read_numa_node(sysfs, dir)?,
            driver: sysfs.link_name(&dir.join("driver")),
            link: read_link(sysfs, dir, cap.mps, cap.mrrs)?.with_peer(read_peer(sysfs, dir)?),
            port_type: cap.port_type,
            acs: config::acs(&config),
            iommu_group: group,
            iommu_type,
        })
    }

    /// Whether the class code is a PCI-to-PCI bridge (0x0604xx), as root and switch ports are.
    pub fn is_bridge(&self) -> bool {
        self.class.is_some_and(|class| class >> 8 == 0x0604)
    }
}

/// Read the link attributes; `mps` and `mrrs` come from `config`; the other end's
/// capability is left unknown.
fn read_link(sysfs: &Sysfs, dir: &Path, mps: Option<u32>, mrrs: Option<u32>) -> Result<PciLink> {
    Ok(PciLink {
        speed_gts: read_speed(sysfs, &dir.join("current_link_speed"))?,
        width: read_width(sysfs, &dir.join("current_link_width"))?,
        max_speed_gts: read_speed(sysfs, &dir.join("max_link_speed"))?,
        max_width: read_width(sysfs, &dir.join("max_link_width"))?,
        peer_max_speed_gts: None,
        peer_max_width: None,
        mps,
        mrrs,
    })
}

/// The capability (maximum speed and width) of the port above the function in `dir`: its
/// sysfs parent, when that is a PCI function (not the host bridge, `pci0000:15`). Unknown
/// parts are `None`.
fn read_peer(sysfs: &Sysfs, dir: &Path) -> Result<(Option<f64>, Option<u32>)> {
    let Some(parent) = dir.parent().filter(|p| {
        p.file_name()
            .is_some_and(|name| is_bdf(&name.to_string_lossy()))
    }) else {
        return Ok((None, None));
    };
    Ok((
        read_speed(sysfs, &parent.join("max_link_speed"))?,
        read_width(sysfs, &parent.join("max_link_width"))?,
    ))
}

/// Parse a sysfs link speed: "16.0 GT/s PCIe", "16 GT/s", "8 GT/s", "2.5 GT/s" into GT/s;
/// "Unknown" (and older kernels' "Unknown speed") into `Ok(None)`.
pub fn parse_link_speed(text: &str) -> Option<Option<f64>> {
    let text = text.trim();
    if text.starts_with("Unknown") {
        return Some(None);
    }
    let rest = text.strip_suffix("PCIe").unwrap_or(text).trim_end();
    let number = rest.strip_suffix("GT/s")?.trim();
    match number.parse::<f64>() {
        Ok(gts) if gts > 0.0 && gts.is_finite() => Some(Some(gts)),
        _ => None,
    }
}

fn read_speed(sysfs: &Sysfs, path: &Path) -> Result<Option<f64>> {
    let Some(text) = sysfs.read_text(path) else {
        return Ok(None);
    };
    parse_link_speed(&text).ok_or_else(|| TopoError::Parse {
        path: sysfs.host_path(path),
        value: text,
        expected: "a link speed such as \"16.0 GT/s PCIe\", \"8 GT/s\" or \"Unknown\"",
    })
}

/// A link width: "16" (or "x16"); 0, which a link that is down reports, is unknown.
fn read_width(sysfs: &Sysfs, path: &Path) -> Result<Option<u32>> {
    let Some(text) = sysfs.read_text(path) else {
        return Ok(None);
    };
    match text.trim_start_matches('x').parse::<u32>() {
        Ok(0) => Ok(None),
        Ok(width) => Ok(Some(width)),
        Err(_) => Err(TopoError::Parse {
            path: sysfs.host_path(path),
            value: text,
            expected: "a lane count such as 16",
        }),
    }
}

fn read_hex(sysfs: &Sysfs, dir: &Path, name: &str) -> Result<Option<u32>> {
    let path = dir.join(name);
    let Some(text) = sysfs.read_text(&path) else {
        return Ok(None);
    };
    let digits = text.strip_prefix("0x").unwrap_or(&text);
    match u32::from_str_radix(digits, 16) {
        Ok(value) => Ok(Some(value)),
        Err(_) => Err(TopoError::Parse {
            path: sysfs.host_path(&path),
            value: text,
            expected: "a hexadecimal id such as 0x15b3",
        }),
    }
}

/// `numa_node` of a device directory: -1 (no affinity) is `None`.
pub(crate) fn read_numa_node(sysfs: &Sysfs, dir: &Path) -> Result<Option<u32>> {
    let path = dir.join("numa_node");
    let Some(text) = sysfs.read_text(&path) else {
        return Ok(None);
    };
    match text.parse::<i64>() {
        Ok(node) if node < 0 => Ok(None),
        Ok(node) => Ok(u32::try_from(node).ok()),
        Err(_) => Err(TopoError::Parse {
            path: sysfs.host_path(&path),
            value: text,
            expected: "a NUMA node number or -1",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_forms() {
        assert_eq!(parse_bdf("0000:17:00.0").unwrap(), "0000:17:00.0");
        assert_eq!(parse_bdf("00000000:17:00.0").unwrap(), "0000:17:00.0");
        assert_eq!(parse_bdf("17:00.0").unwrap(), "0000:17:00.0");
        assert_eq!(parse_bdf("0000:AB:1F.7").unwrap(), "0000:ab:1f.7");
        assert_eq!(parse_bdf("10000:e0:06.0").unwrap(), "10000:e0:06.0");
        for bad in [
            "",
            "17:00",
            "0000:17:00.8",
            "0000:17:20.0",
            "gpu0",
            "0000:117:00.0",
        ] {
            let err = parse_bdf(bad).unwrap_err().to_string();
            assert!(err.contains("0000:17:00.0"), "{bad}: {err}");
        }
        assert!(is_bdf("0000:17:00.0"));
        assert!(!is_bdf("17:00.0"));
        assert!(!is_bdf("pci0000:17"));
    }

    #[test]
    fn link_speed_strings() {
        assert_eq!(parse_link_speed("16.0 GT/s PCIe"), Some(Some(16.0)));
        assert_eq!(parse_link_speed("16 GT/s"), Some(Some(16.0)));
        assert_eq!(parse_link_speed("8.0 GT/s"), Some(Some(8.0)));
        assert_eq!(parse_link_speed("8 GT/s"), Some(Some(8.0)));
        assert_eq!(parse_link_speed("2.5 GT/s"), Some(Some(2.5)));
        assert_eq!(parse_link_speed("2.5 GT/s PCIe"), Some(Some(2.5)));
        assert_eq!(parse_link_speed("Unknown"), Some(None));
        assert_eq!(parse_link_speed("Unknown speed"), Some(None));
        assert_eq!(parse_link_speed("fast"), None);
        assert_eq!(parse_link_speed("16 Gb/s"), None);
    }

    #[test]
    fn link_display_and_downtrain() {
        let link = PciLink {
            speed_gts: Some(8.0),
            width: Some(8),
            max_speed_gts: Some(16.0),
            max_width: Some(16),
            peer_max_speed_gts: Some(16.0),
            peer_max_width: Some(16),
            mps: Some(256),
            mrrs: Some(512),
        };
        assert_eq!(link.to_string(), "Gen3 x8 (max Gen4 x16) MPS 256");
        assert!(link.is_downtrained());
        assert_eq!(
            link.downtrain_note().unwrap(),
            "DOWNTRAINED: running Gen3 x8, capable of Gen4 x16"
        );
        assert_eq!(
            link.pcie(),
            Some(Pcie {
                gen: 3,
                width: 8,
                mps: 256
            })
        );
        let unknown = PciLink::default();
        assert_eq!(unknown.to_string(), "Gen? x? (max Gen? x?) MPS ?");
        assert!(!unknown.is_downtrained());
        assert_eq!(unknown.pcie(), None);
    }
}
