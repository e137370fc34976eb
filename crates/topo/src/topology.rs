//! The whole machine at once: what `rdmabench topo` shows and `topo --json` writes.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::gpu::{list_accelerators, Accelerator};
use crate::iommu::Iommu;
use crate::path::{classify, PairPath, PciPath};
use crate::pci::{parse_bdf, PciFunction, PciLink};
use crate::rdma::{read_rdma_devices, RdmaDevice, RdmaPort};
use crate::sysfs::Sysfs;

/// One RDMA device in the topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicInfo {
    /// "mlx5_0".
    pub name: String,
    /// The PCI function; `None` for a virtual device.
    pub bdf: Option<String>,
    /// A software device without a PCI function (rxe, siw).
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
    /// "PCI 0000:18:00.0" or "virtual, no PCI function (...)".
    pub attachment: String,
    /// NUMA node, `None` when unknown.
    pub numa_node: Option<u32>,
    /// Netdevs.
    pub netdevs: Vec<String>,
    /// Firmware version.
    pub fw_ver: Option<String>,
    /// Ports.
    pub ports: Vec<RdmaPort>,
    /// The PCIe link; `None` for a virtual device.
    pub link: Option<PciLink>,
    /// The path up to the root port; `None` for a virtual device.
    pub path: Option<PciPath>,
}

/// One GPU in the topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// "0000:19:00.0".
    pub bdf: String,
    /// Whose accelerator it is.
    pub kind: Accelerator,
    /// Vendor id.
    pub vendor: Option<u16>,
    /// Device id (0x2330 H100 SXM5, ...).
    pub device: Option<u16>,
    /// NUMA node, `None` when unknown.
    pub numa_node: Option<u32>,
    /// The PCIe link.
    pub link: PciLink,
    /// The path up to the root port.
    pub path: PciPath,
}

/// One NIC-GPU pair and the path between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairInfo {
    /// The NIC's name.
    pub nic: String,
    /// The GPU's address.
    pub gpu: String,
    /// Class, common ancestor, route and ACS (flattened into this object).
    #[serde(flatten)]
    pub path: PairPath,
}

/// Every RDMA device and accelerator, every NIC-accelerator pair, and the IOMMU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// RDMA devices, by name; virtual ones included.
    pub nics: Vec<NicInfo>,
    /// Accelerators (NVIDIA and AMD GPUs, Gaudi, Neuron: [`Accelerator`]), by address.
    pub gpus: Vec<GpuInfo>,
    /// Every PCI NIC with every GPU.
    pub pairs: Vec<PairInfo>,
    /// The IOMMU.
    pub iommu: Iommu,
}

impl Topology {
    /// Read the machine below `sysfs`'s root.
    pub fn scan(sysfs: &Sysfs) -> Result<Self> {
        let nics = read_rdma_devices(sysfs)?
            .into_iter()
            .map(|dev| nic_info(sysfs, dev))
            .collect::<Result<Vec<_>>>()?;
        let gpus = list_accelerators(sysfs)?
            .into_iter()
            .map(|(f, kind)| gpu_info(sysfs, f, kind))
            .collect::<Result<Vec<_>>>()?;
        let pairs = pairs(&nics, &gpus);
        Ok(Self {
            nics,
            gpus,
            pairs,
            iommu: Iommu::read(sysfs)?,
        })
    }

    /// The RDMA device `name`.
    pub fn nic(&self, name: &str) -> Option<&NicInfo> {
        self.nics.iter().find(|nic| nic.name == name)
    }

    /// The GPU at `bus_id` (nvidia-smi's form accepted).
    pub fn gpu(&self, bus_id: &str) -> Option<&GpuInfo> {
        let bdf = parse_bdf(bus_id).ok()?;
        self.gpus.iter().find(|gpu| gpu.bdf == bdf)
    }

    /// NIC `nic`'s pairs with the accelerators of kind `kind` (CUDA memory takes NVIDIA's).
    pub fn pairs_with<'a>(
        &'a self,
        nic: &'a str,
        kind: Accelerator,
    ) -> impl Iterator<Item = &'a PairInfo> + 'a {
        self.pairs.iter().filter(move |p| {
            p.nic == nic && self.gpus.iter().any(|g| g.bdf == p.gpu && g.kind == kind)
        })
    }

    /// The NIC nearest GPU `bdf` (the first of the lowest class of path), with their path.
    pub fn nearest_nic(&self, bdf: &str) -> Option<&PairInfo> {
        self.pairs
            .iter()
            .filter(|p| p.gpu == bdf)
            .min_by_key(|p| p.path.class)
    }

    /// The pair of NIC `nic` and GPU `gpu_bus_id`.
    pub fn pair(&self, nic: &str, gpu_bus_id: &str) -> Option<&PairInfo> {
        let bdf = parse_bdf(gpu_bus_id).ok()?;
        self.pairs.iter().find(|p| p.nic == nic && p.gpu == bdf)
    }
}

/// The path between a NIC and a GPU, read fresh (for a run that names both).
pub fn pair_path(sysfs: &Sysfs, nic: &PciFunction, gpu: &PciFunction) -> Result<PairPath> {
    let nic_path = PciPath::read(sysfs, nic)?;
    let gpu_path = PciPath::read(sysfs, gpu)?;
    Ok(classify(&nic_path, nic.numa_node, &gpu_path, gpu.numa_node))
}

fn nic_info(sysfs: &Sysfs, dev: RdmaDevice) -> Result<NicInfo> {
    let path = match &dev.pci {
        Some(pci) => Some(PciPath::read(sysfs, pci)?),
        None => None,
    };
    Ok(NicInfo {
        bdf: dev.bdf().map(str::to_string),
        is_virtual: dev.is_virtual(),
        attachment: dev.describe_attachment(),
        link: dev.pci.as_ref().map(|pci| pci.link),
        name: dev.name,
        numa_node: dev.numa_node,
        netdevs: dev.netdevs,
        fw_ver: dev.fw_ver,
        ports: dev.ports,
        path,
    })
}

fn gpu_info(sysfs: &Sysfs, gpu: PciFunction, kind: Accelerator) -> Result<GpuInfo> {
    let path = PciPath::read(sysfs, &gpu)?;
    Ok(GpuInfo {
        bdf: gpu.bdf,
        kind,
        vendor: gpu.vendor,
        device: gpu.device,
        numa_node: gpu.numa_node,
        link: gpu.link,
        path,
    })
}

fn pairs(nics: &[NicInfo], gpus: &[GpuInfo]) -> Vec<PairInfo> {
    let mut pairs = Vec::new();
    for nic in nics {
        let Some(nic_path) = &nic.path else { continue };
        for gpu in gpus {
            pairs.push(PairInfo {
                nic: nic.name.clone(),
                gpu: gpu.bdf.clone(),
                path: classify(nic_path, nic.numa_node, &gpu.path, gpu.numa_node),
            });
        }
    }
    pairs
}
