//! Accelerators (GPUs and their kin): found by bus id, or listed from sysfs by PCI vendor and
//! class, for placement and ceilings: NVIDIA and AMD GPUs, Intel Gaudi and AWS Neuron
//! devices. What memory mode can use one is the caller's business (CUDA takes NVIDIA's).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::pci::{PciFunction, PCI_DEVICES};
use crate::sysfs::Sysfs;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;
/// AMD's (ATI's) PCI vendor id, which its GPUs carry (its CPUs' functions carry 0x1022).
pub const AMD_VENDOR: u16 = 0x1002;
/// Habana Labs' (Intel Gaudi's) PCI vendor id.
pub const HABANA_VENDOR: u16 = 0x1da3;
/// Amazon's PCI vendor id (its ENA NICs and NVMe carry it too).
pub const AMAZON_VENDOR: u16 = 0x1d0f;
/// AWS Neuron devices' PCI device ids: Inferentia, Trainium, Inferentia2, Trainium2.
pub const NEURON_DEVICES: [u16; 4] = [0x7064, 0x7164, 0x7264, 0x7364];

/// Whose accelerator a PCI function is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accelerator {
    /// An NVIDIA GPU (CUDA).
    Nvidia,
    /// An AMD GPU (ROCm).
    Amd,
    /// An Intel Gaudi accelerator.
    Gaudi,
    /// An AWS Inferentia or Trainium device.
    Neuron,
}

impl Accelerator {
    /// The accelerator a function with this vendor, device id and 24-bit class code is, if any:
    /// NVIDIA's VGA or 3D controllers (not its NVSwitches, 0x0680xx, nor audio functions);
    /// AMD's display controllers (VGA, 3D, other: Instinct cards are 0x0380xx) and processing
    /// accelerators (0x1200xx); Habana's processing accelerators; Amazon's Neuron device ids.
    pub fn of(vendor: u16, device: Option<u16>, class: u32) -> Option<Self> {
        let base = class >> 8;
        match vendor {
            NVIDIA_VENDOR if is_gpu_class(class) => Some(Self::Nvidia),
            AMD_VENDOR if matches!(base, 0x0300 | 0x0302 | 0x0380 | 0x1200) => Some(Self::Amd),
            HABANA_VENDOR if base == 0x1200 => Some(Self::Gaudi),
            AMAZON_VENDOR if device.is_some_and(|d| NEURON_DEVICES.contains(&d)) => {
                Some(Self::Neuron)
            }
            _ => None,
        }
    }

    /// "NVIDIA", "AMD", "Gaudi", "Neuron".
    pub fn name(self) -> &'static str {
        match self {
            Self::Nvidia => "NVIDIA",
            Self::Amd => "AMD",
            Self::Gaudi => "Gaudi",
            Self::Neuron => "Neuron",
        }
    }
}

impl fmt::Display for Accelerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// Whether a 24-bit class code is a GPU: VGA-compatible (0x0300xx) or 3D (0x0302xx)
/// controller. NVSwitches (0x0680xx) and audio functions (0x0403xx) are not.
pub fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 8, 0x0300 | 0x0302)
}

/// Whether `function` is an NVIDIA GPU.
pub fn is_nvidia_gpu(function: &PciFunction) -> bool {
    accelerator(function) == Some(Accelerator::Nvidia)
}

/// Which accelerator `function` is, if any.
pub fn accelerator(function: &PciFunction) -> Option<Accelerator> {
    Accelerator::of(function.vendor?, function.device, function.class?)
}

/// Every accelerator in sysfs ([`Accelerator::of`]) and which it is, sorted by address.
pub fn list_accelerators(sysfs: &Sysfs) -> Result<Vec<(PciFunction, Accelerator)>> {
    let mut found = Vec::new();
    for bdf in sysfs.list(Path::new(PCI_DEVICES))? {
        if looks_like_accelerator(sysfs, &bdf) {
            let function = PciFunction::read(sysfs, &bdf)?;
            if let Some(kind) = accelerator(&function) {
                found.push((function, kind));
            }
        }
    }
    Ok(found)
}

/// The GPU at `bus_id`, in any form [`crate::pci::parse_bdf`] accepts (nvidia-smi's
/// "00000000:17:00.0" included). Any vendor's function is returned as it is.
pub fn find_gpu(sysfs: &Sysfs, bus_id: &str) -> Result<PciFunction> {
    PciFunction::read(sysfs, bus_id)
}

/// A cheap look at `vendor`, `device` and `class` before reading the whole function.
fn looks_like_accelerator(sysfs: &Sysfs, bdf: &str) -> bool {
    let dir = Path::new(PCI_DEVICES).join(bdf);
    let hex = |name: &str| {
        let text = sysfs.read_text(&dir.join(name))?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
    };
    let (Some(vendor), Some(class)) = (hex("vendor"), hex("class")) else {
        return false;
    };
    let device = hex("device").and_then(|d| u16::try_from(d).ok());
    u16::try_from(vendor).is_ok_and(|v| Accelerator::of(v, device, class).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerators_are_told_by_vendor_and_class() {
        use Accelerator::*;
        let of = |v, d, c| Accelerator::of(v, Some(d), c);
        assert_eq!(of(0x10de, 0x2330, 0x030200), Some(Nvidia), "H100");
        assert_eq!(of(0x10de, 0x22a3, 0x068000), None, "an NVSwitch");
        assert_eq!(
            of(0x1002, 0x74a1, 0x038000),
            Some(Amd),
            "MI300X, a display controller"
        );
        assert_eq!(
            of(0x1002, 0x740f, 0x120000),
            Some(Amd),
            "an AMD processing accelerator"
        );
        assert_eq!(
            of(0x1022, 0x14a4, 0x060000),
            None,
            "an AMD CPU's host bridge"
        );
        assert_eq!(of(0x1da3, 0x1020, 0x120000), Some(Gaudi), "Gaudi 2");
        assert_eq!(of(0x1d0f, 0x7164, 0x088000), Some(Neuron), "Trainium");
        assert_eq!(of(0x1d0f, 0xec20, 0x020000), None, "an ENA NIC");
        assert_eq!(of(0x1a03, 0x2000, 0x030000), None, "a BMC's VGA");
    }

    #[test]
    fn gpu_classes() {
        assert!(is_gpu_class(0x030000));
        assert!(is_gpu_class(0x030200));
        assert!(!is_gpu_class(0x068000));
        assert!(!is_gpu_class(0x040300));
        assert!(!is_gpu_class(0x020700));
    }
}
