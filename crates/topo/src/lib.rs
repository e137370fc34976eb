//! PCIe and NIC facts from sysfs, and the ceilings model.
//!
//! Everything starts from a [`Sysfs`] reader rooted at `/` on a live machine
//! ([`Sysfs::system`]) or at a fixture tree in tests ([`Sysfs::new`]). From it,
//! [`RdmaDevice::read`] resolves an RDMA device's `device` link to its [`PciFunction`]
//! (a software rxe/siw device comes back as [`Attachment::Virtual`], not as an error), whose
//! [`PciLink`] holds the trained speed and width, the maximum ones of both its ends and the
//! Max Payload Size read from the binary `config` space; [`PciLink::training`] judges it
//! against what both ends can do ([`Training`]). [`PciPath::read`] walks a function's sysfs
//! directory up to its root port, and [`classify`] (or [`pair_path`]) compares a NIC's path with a
//! GPU's ([`find_gpu`], [`list_accelerators`]) to give the `nvidia-smi topo -m` class (PIX, PXB,
//! PHB, NODE, SYS) and whether ACS redirects peer-to-peer traffic. The verdict comes from
//! the pure [`ceiling`] module: a port's rate and active MTU make a [`Wire`], the NIC's link
//! a [`Pcie`], and [`ceilings`] returns the wire, PCIe and (GPUDirect off) staged ceilings
//! with the one that binds; [`explain`] shows the arithmetic. [`Topology::scan`] gathers
//! the whole machine for `rdmabench topo` ([`render_with()`] for text, serde for `--json`).
//!
//! ```
//! use topo::{ceilings, Limit, RdmaDevice, Sysfs};
//!
//! // A fixture tree here; `Sysfs::system()` on a real host.
//! let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dgx-h100");
//! let sysfs = Sysfs::new(root);
//! let nic = RdmaDevice::read(&sysfs, "mlx5_0")?;
//! let port = nic.port(1).ok_or("no port 1")?;
//! let wire = port.wire(4096).ok_or("port rate or link layer unknown")?; // MTU from verbs
//! let link = nic.pci.as_ref().ok_or("virtual device")?.link;
//! let pcie = link.pcie().ok_or("MPS unknown: config space needs root")?;
//! let verdict = ceilings(&wire, &pcie, None);
//! assert_eq!(verdict.limit, Limit::Wire); // 400 Gb/s NDR behind Gen5 x16
//! println!("{link}: binding {} at {:.1} GB/s", verdict.limit, verdict.limit_gbps);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod ceiling;
pub mod config;
pub mod error;
pub mod gpu;
pub mod iommu;
pub mod path;
pub mod pci;
pub mod rate;
pub mod rdma;
pub mod render;
pub mod sysfs;
pub mod topology;
pub mod training;

pub use ceiling::{
    ceilings, explain, parse_mps, parse_mtu, parse_pcie, Ceilings, Limit, LinkLayer, Pcie,
    PortRate, Staged, Wire,
};
pub use config::{Acs, AcsControl, PortType};
pub use error::{Result, TopoError};
pub use gpu::{accelerator, find_gpu, list_accelerators, Accelerator};
pub use iommu::Iommu;
pub use path::{classify, Hop, PairPath, PathClass, PciPath, PortRole};
pub use pci::{parse_bdf, PciFunction, PciLink};
pub use rate::{parse_rate, RateUnit, RATE_FORMS};
pub use rdma::{list_rdma_devices, read_rdma_devices, Attachment, RdmaDevice, RdmaPort};
pub use render::{render, render_with};
pub use sysfs::Sysfs;
pub use topology::{pair_path, GpuInfo, NicInfo, PairInfo, Topology};
pub use training::Training;
