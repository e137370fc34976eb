//! Whether an IOMMU translates DMA, and in which mode.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::sysfs::Sysfs;

const IOMMU_CLASS: &str = "/sys/class/iommu";
const IOMMU_GROUPS: &str = "/sys/kernel/iommu_groups";

/// The IOMMU as sysfs and the kernel command line show it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Iommu {
    /// IOMMU units exist (`/sys/class/iommu/*`) or devices are grouped
    /// (`/sys/kernel/iommu_groups/*`).
    pub enabled: bool,
    /// The units: "dmar0" (Intel), "ivhd0" (AMD), "smmu3.0x..." (Arm).
    pub units: Vec<String>,
    /// How many IOMMU groups there are.
    pub groups: usize,
    /// The distinct default-domain types of the groups: "DMA", "DMA-FQ" (translated),
    /// "identity" (passthrough), "unmanaged" (VFIO), "blocked".
    pub group_types: Vec<String>,
    /// The IOMMU switches on the kernel command line (`intel_iommu=on`, `iommu=pt`, ...).
    pub cmdline: Vec<String>,
}

impl Iommu {
    /// Read the IOMMU state.
    pub fn read(sysfs: &Sysfs) -> Result<Self> {
        let units = sysfs.list(Path::new(IOMMU_CLASS))?;
        let groups = sysfs.list(Path::new(IOMMU_GROUPS))?;
        let group_types: BTreeSet<String> = groups
            .iter()
            .filter_map(|g| sysfs.read_text(&Path::new(IOMMU_GROUPS).join(g).join("type")))
            .collect();
        let cmdline = sysfs
            .read_text(Path::new("/proc/cmdline"))
            .map(|line| iommu_switches(&line))
            .unwrap_or_default();
        Ok(Self {
            enabled: !units.is_empty() || !groups.is_empty(),
            units,
            groups: groups.len(),
            group_types: group_types.into_iter().collect(),
            cmdline,
        })
    }

    /// One line: "IOMMU on: dmar0, dmar1; 96 groups, domain identity; intel_iommu=on iommu=pt".
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "IOMMU off (no /sys/class/iommu units, no IOMMU groups)".to_string();
        }
        let mut text = format!(
            "IOMMU on: {}; {} groups",
            self.units.join(", "),
            self.groups
        );
        if !self.group_types.is_empty() {
            text.push_str(&format!(", domain {}", self.group_types.join("/")));
        }
        if !self.cmdline.is_empty() {
            text.push_str(&format!("; {}", self.cmdline.join(" ")));
        }
        text
    }
}

/// The words of a kernel command line that configure an IOMMU.
fn iommu_switches(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|word| {
            word.split('=')
                .next()
                .is_some_and(|key| key.contains("iommu"))
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_switches() {
        let line =
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt quiet iommu.passthrough=1";
        assert_eq!(
            iommu_switches(line),
            ["intel_iommu=on", "iommu=pt", "iommu.passthrough=1"]
        );
    }
}
