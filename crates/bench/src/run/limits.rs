//! The physical ceilings of this run, from the port (wire) and the NIC's PCIe link, read
//! through `topo` from sysfs; what the header, every row and the record compare against.

use topo::{PciFunction, PciLink, RdmaDevice, Sysfs, Training};

use crate::engine::Connected;
use crate::report::{CeilingsRecord, PcieLinkRecord, PcieRecord};

/// What is known about the run's limits, with notes for the header.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunLimits {
    /// The NIC's link and the path class.
    pub pcie: PcieRecord,
    /// The ceilings.
    pub ceilings: CeilingsRecord,
    /// Human notes: why a ceiling is missing.
    pub notes: Vec<String>,
    /// Problems the user should fix first: a PCIe link trained below its maximum.
    pub warnings: Vec<String>,
}

/// A figure a peer reports may pass the highest of the NIC's ceilings by this factor (the
/// ceilings are a model) before it is refused as no measurement.
pub(crate) const CEILING_SLACK: f64 = 1.5;

/// The most bandwidth a peer may report (GB/s) when no ceiling bounds the run: 10 TB/s, a
/// hundred times today's fastest NIC.
pub(crate) const MAX_GBPS: f64 = 10_000.0;

/// The most messages per second a peer may report, in millions: 10^10 a second, fifty times
/// today's fastest NIC.
pub(crate) const MAX_MPPS: f64 = 10_000.0;

/// The most bandwidth a peer may report for its direction of one size, and where it comes
/// from (for the refusal of a figure beyond it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReportBound {
    /// GB/s.
    pub gbps: f64,
    /// Where it comes from.
    pub why: String,
}

impl Default for ReportBound {
    /// No ceiling known: [`MAX_GBPS`].
    fn default() -> Self {
        ReportBound {
            gbps: MAX_GBPS,
            why: "no ceiling of a NIC on PCIe is known".to_string(),
        }
    }
}

impl RunLimits {
    /// The binding ceiling in GB/s, when one is known.
    pub(crate) fn limit_gbps(&self) -> Option<f64> {
        self.ceilings.limit_gbps
    }

    /// The most bandwidth a peer may report for one direction: [`CEILING_SLACK`] times the
    /// highest of the NIC's wire and PCIe ceilings when the NIC's PCIe ceiling is known (all
    /// it moves crosses its PCIe link, and a loopback run's traffic never crosses the wire),
    /// else [`MAX_GBPS`]: a virtual device's rate is its netdev's nominal one (soft-RoCE on a
    /// netdev of unknown speed says 2.5 Gb/s), and a wire alone does not bound a loopback run.
    pub(crate) fn report_bound(&self) -> ReportBound {
        let c = &self.ceilings;
        match (&self.pcie.nic, c.pcie_gbps) {
            (Some(nic), Some(pcie)) if pcie.is_finite() && pcie > 0.0 => {
                let (top, which) = match c.wire_gbps {
                    Some(w) if w > pcie => (w, "wire"),
                    _ => (pcie, "PCIe"),
                };
                ReportBound {
                    gbps: CEILING_SLACK * top,
                    why: format!(
                        "{CEILING_SLACK} x the {top:.3} GB/s {which} ceiling of NIC {}",
                        nic.bdf
                    ),
                }
            }
            _ => ReportBound::default(),
        }
    }
}

fn link_record(bdf: &str, link: &PciLink) -> PcieLinkRecord {
    PcieLinkRecord {
        bdf: bdf.to_string(),
        speed: link.speed_gts,
        width: link.width,
        max_speed: link.max_speed_gts,
        max_width: link.max_width,
        mps: link.mps,
    }
}

/// `link` of `what` ("NIC 0000:18:00.0") judged against what both its ends can do: a
/// warning when it trained down; a note when that is unknown (the port above unreadable) or
/// when the port above limits it below the function's capability.
fn judge_link(what: &str, link: &PciLink, out: &mut RunLimits) {
    match (link.training(), link.training_note()) {
        (Training::Down, Some(note)) => out.warnings.push(format!("{what} PCIe link {note}")),
        (_, Some(note)) => out.notes.push(format!("{what} PCIe link {note}")),
        (_, None) => {}
    }
}

/// Reads the ceilings of `side`'s port from sysfs (`/`), and for GPU memory the GPU's link
/// and its path class to the NIC.
pub(crate) fn run_limits(side: &Connected) -> RunLimits {
    let sysfs = Sysfs::system();
    let mut limits = limits_from(
        &sysfs,
        side.device.name(),
        side.port.port,
        side.port.active_mtu,
    );
    limits
        .warnings
        .extend(crate::kconfig::forced_mark(&side.mem, &sysfs));
    if let Some(gpu) = &side.gpu_device {
        add_gpu(
            &sysfs,
            side.device.name(),
            &gpu.pci_bus_id().to_string(),
            &mut limits,
        );
    }
    limits
}

/// Adds the GPU at `bdf`: its link, and the NIC-GPU path class.
pub(crate) fn add_gpu(sysfs: &Sysfs, nic: &str, bdf: &str, out: &mut RunLimits) {
    let gpu = match PciFunction::read(sysfs, bdf) {
        Ok(g) => g,
        Err(e) => {
            out.notes
                .push(format!("no PCIe facts for the GPU {bdf}: {e}"));
            return;
        }
    };
    out.pcie.gpu = Some(link_record(&gpu.bdf, &gpu.link));
    judge_link(&format!("GPU {}", gpu.bdf), &gpu.link, out);
    let nic_fn = RdmaDevice::read(sysfs, nic).ok().and_then(|d| d.pci);
    match nic_fn.map(|n| topo::pair_path(sysfs, &n, &gpu)) {
        Some(Ok(path)) => out.pcie.path_class = Some(path.class.to_string()),
        Some(Err(e)) => out.notes.push(format!("no NIC-GPU path: {e}")),
        None => out.notes.push(format!(
            "{nic} has no PCI function, so no NIC-GPU path class"
        )),
    }
}

/// Reads the ceilings of `device` port `port` at path MTU `mtu` under `sysfs`.
pub(crate) fn limits_from(sysfs: &Sysfs, device: &str, port: u8, mtu: u32) -> RunLimits {
    let mut out = RunLimits::default();
    let dev = match RdmaDevice::read(sysfs, device) {
        Ok(d) => d,
        Err(e) => {
            out.notes.push(format!("no topology for {device}: {e}"));
            return out;
        }
    };
    let wire = dev.port(u32::from(port)).and_then(|p| p.wire(mtu));
    let wire_gbps = wire.as_ref().map(|w| w.gbps());
    if wire.is_none() {
        out.notes.push(format!(
            "{device} port {port}: rate or link layer unknown, no wire ceiling"
        ));
    }
    let pcie = match &dev.pci {
        Some(f) => {
            out.pcie.nic = Some(link_record(&f.bdf, &f.link));
            judge_link(&format!("NIC {}", f.bdf), &f.link, &mut out);
            let pcie = f.link.pcie();
            if pcie.is_none() {
                out.notes.push(format!(
                    "NIC {} link {}: speed, width or MPS unknown (reading config space needs root), no PCIe ceiling",
                    f.bdf, f.link
                ));
            }
            pcie
        }
        None => {
            out.notes.push(format!(
                "{device}: {}, no PCIe ceiling",
                dev.describe_attachment()
            ));
            None
        }
    };
    let pcie_gbps = pcie.map(|p| p.gbps());
    out.ceilings = match (wire_gbps, pcie_gbps) {
        (Some(w), Some(p)) => {
            let c = topo::Ceilings::from_parts(w, p, None);
            CeilingsRecord {
                wire_gbps: Some(w),
                pcie_gbps: Some(p),
                staged_gbps: None,
                limit: Some(c.limit.to_string()),
                limit_gbps: Some(c.limit_gbps),
            }
        }
        (Some(w), None) => CeilingsRecord {
            wire_gbps: Some(w),
            limit: Some("wire".to_string()),
            limit_gbps: Some(w),
            ..CeilingsRecord::default()
        },
        (None, Some(p)) => CeilingsRecord {
            pcie_gbps: Some(p),
            limit: Some("pcie".to_string()),
            limit_gbps: Some(p),
            ..CeilingsRecord::default()
        },
        (None, None) => CeilingsRecord::default(),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sysroot::fixture;

    #[test]
    fn a_400g_nic_behind_gen5_is_wire_bound() {
        let l = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
        assert_eq!(l.ceilings.limit.as_deref(), Some("wire"));
        let wire = l.ceilings.wire_gbps.unwrap();
        assert!(wire > 45.0 && wire < 50.0, "{wire}");
        assert!(l.ceilings.pcie_gbps.unwrap() > wire);
        assert_eq!(l.pcie.nic.as_ref().unwrap().mps, Some(256));
    }

    #[test]
    fn a_downtrained_nic_link_is_a_warning() {
        let l = limits_from(&fixture("downtrained"), "mlx5_0", 1, 4096);
        assert!(
            l.warnings.iter().any(|w| w.contains("DOWNTRAINED")),
            "{:?}",
            l.warnings
        );
        assert_eq!(l.ceilings.limit.as_deref(), Some("pcie"));
    }

    #[test]
    fn a_gpu_link_is_judged_against_both_its_ends() {
        // GPU 0000:19:00.0 below switch port 0000:17:01.0, in a copy of the dgx-h100 tree.
        let dir = std::env::temp_dir().join(format!("rdmabench-limits-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let from = format!(
            "{}/../topo/tests/fixtures/dgx-h100",
            env!("CARGO_MANIFEST_DIR")
        );
        let status = std::process::Command::new("cp")
            .args(["-a", &from])
            .arg(dir.join("tree"))
            .status()
            .unwrap();
        assert!(status.success());
        let root = dir.join("tree");
        let port = root.join("sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0");
        let gen4 = "16.0 GT/s PCIe\n";
        std::fs::write(port.join("0000:19:00.0/current_link_speed"), gen4).unwrap();
        let limits = || {
            let mut l = limits_from(&Sysfs::new(&root), "mlx5_0", 1, 4096);
            add_gpu(&Sysfs::new(&root), "mlx5_0", "0000:19:00.0", &mut l);
            l
        };
        // Gen4 below a Gen5 port: trained down.
        let l = limits();
        assert!(
            l.warnings.iter().any(|w| w
                == "GPU 0000:19:00.0 PCIe link DOWNTRAINED: running Gen4 x16, capable of Gen5 x16"),
            "{:?}",
            l.warnings
        );
        // The port can do Gen4 only: no warning, a note that it limits the link.
        std::fs::write(port.join("max_link_speed"), gen4).unwrap();
        let l = limits();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        assert!(
            l.notes
                .iter()
                .any(|n| n.starts_with("GPU 0000:19:00.0 PCIe link limited by the other end")),
            "{:?}",
            l.notes
        );
        // The port unreadable: unknown, said as a note, not a warning.
        std::fs::remove_file(port.join("max_link_speed")).unwrap();
        let l = limits();
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        assert!(
            l.notes
                .iter()
                .any(|n| n.starts_with("GPU 0000:19:00.0 PCIe link UNKNOWN whether trained down")),
            "{:?}",
            l.notes
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_virtual_device_has_a_wire_ceiling_and_says_why_no_pcie() {
        let l = limits_from(&fixture("rxe-vm"), "rxe0", 1, 1024);
        assert_eq!(l.ceilings.limit.as_deref(), Some("wire"));
        assert!(l.pcie.nic.is_none());
        assert!(
            l.notes.iter().any(|n| n.contains("virtual")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn a_gpu_under_the_nics_switch_is_pix_with_its_link() {
        let mut l = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
        add_gpu(&fixture("dgx-h100"), "mlx5_0", "0000:19:00.0", &mut l);
        assert_eq!(l.pcie.path_class.as_deref(), Some("PIX"));
        assert_eq!(l.pcie.gpu.as_ref().unwrap().mps, Some(256));
        let mut l = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
        add_gpu(&fixture("dgx-h100"), "mlx5_0", "0000:9e:00.0", &mut l);
        assert_eq!(l.pcie.path_class.as_deref(), Some("SYS"));
    }

    #[test]
    fn a_peers_figures_are_bounded_by_a_nics_pcie_link_not_a_virtual_devices_rate() {
        // A 400G NIC behind Gen5: everything it moves crosses its PCIe link.
        let l = limits_from(&fixture("dgx-h100"), "mlx5_0", 1, 4096);
        let (wire, pcie) = (l.ceilings.wire_gbps.unwrap(), l.ceilings.pcie_gbps.unwrap());
        let b = l.report_bound();
        assert!((b.gbps - 1.5 * wire.max(pcie)).abs() < 1e-9, "{b:?}");
        assert!(b.why.contains("PCIe ceiling of NIC"), "{b:?}");
        // Soft-RoCE's nominal 2.5 Gb/s bounds nothing.
        let l = limits_from(&fixture("rxe-vm"), "rxe0", 1, 1024);
        assert!(l.ceilings.wire_gbps.is_some());
        assert_eq!(l.report_bound(), ReportBound::default());
        assert_eq!(ReportBound::default().gbps, MAX_GBPS);
    }

    #[test]
    fn an_unknown_device_gives_no_ceiling_and_a_note() {
        let l = limits_from(&fixture("dgx-h100"), "nosuch0", 1, 4096);
        assert_eq!(l.limit_gbps(), None);
        assert!(!l.notes.is_empty());
    }
}
