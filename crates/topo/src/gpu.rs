//! GPUs: found by bus id, or listed from sysfs.

use std::path::Path;

use crate::error::Result;
use crate::pci::{PciFunction, PCI_DEVICES};
use crate::sysfs::Sysfs;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// Whether a 24-bit class code is a GPU: VGA-compatible (0x0300xx) or 3D (0x0302xx)
/// controller. NVSwitches (0x0680xx) and audio functions (0x0403xx) are not.
pub fn is_gpu_class(class: u32) -> bool {
    matches!(class >> 8, 0x0300 | 0x0302)
}

/// Whether `function` is an NVIDIA GPU.
pub fn is_nvidia_gpu(function: &PciFunction) -> bool {
    function.vendor == Some(NVIDIA_VENDOR) && function.class.is_some_and(is_gpu_class)
}

/// Every NVIDIA GPU in sysfs, sorted by address.
pub fn list_gpus(sysfs: &Sysfs) -> Result<Vec<PciFunction>> {
    let mut gpus = Vec::new();
    for bdf in sysfs.list(Path::new(PCI_DEVICES))? {
        if looks_like_nvidia_gpu(sysfs, &bdf) {
            gpus.push(PciFunction::read(sysfs, &bdf)?);
        }
    }
    Ok(gpus)
}

/// The GPU at `bus_id`, in any form [`crate::pci::parse_bdf`] accepts (nvidia-smi's
/// "00000000:17:00.0" included). Any vendor's function is returned as it is.
pub fn find_gpu(sysfs: &Sysfs, bus_id: &str) -> Result<PciFunction> {
    PciFunction::read(sysfs, bus_id)
}

/// A cheap look at `vendor` and `class` before reading the whole function.
fn looks_like_nvidia_gpu(sysfs: &Sysfs, bdf: &str) -> bool {
    let dir = Path::new(PCI_DEVICES).join(bdf);
    let hex = |name: &str| {
        let text = sysfs.read_text(&dir.join(name))?;
        u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
    };
    hex("vendor") == Some(u32::from(NVIDIA_VENDOR)) && hex("class").is_some_and(is_gpu_class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_classes() {
        assert!(is_gpu_class(0x030000));
        assert!(is_gpu_class(0x030200));
        assert!(!is_gpu_class(0x068000));
        assert!(!is_gpu_class(0x040300));
        assert!(!is_gpu_class(0x020700));
    }
}
