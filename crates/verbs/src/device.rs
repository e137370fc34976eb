//! Devices and ports: listing them, opening one, and the facts a report needs.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sideway::ibverbs::device::{DeviceInfo, DeviceList, GetDeviceListErrorKind};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer as SwLinkLayer, Mtu, PortState};

use crate::error::{Result, VerbsError};
use crate::gid::{choose_gid_index, GidEntry, GidKind};
use crate::pd::ProtectionDomain;

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID, GRH optional.
    InfiniBand,
    /// Ethernet (RoCE): addressed by GID, GRH always.
    Ethernet,
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        })
    }
}

/// On-demand paging a device offers (`ibv_query_device_ex`'s `odp_caps`): for each transport,
/// the operations ([`OdpCaps::SEND`] and the rest, rdma-core's `IBV_ODP_SUPPORT_*` bits) whose
/// memory may be registered with `IBV_ACCESS_ON_DEMAND`. All empty where the device has no
/// on-demand paging at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OdpCaps {
    /// Over RC.
    pub rc: u32,
    /// Over UC.
    pub uc: u32,
    /// Over UD.
    pub ud: u32,
}

impl OdpCaps {
    /// SEND from on-demand memory.
    pub const SEND: u32 = 1;
    /// RECV into on-demand memory.
    pub const RECV: u32 = 1 << 1;
    /// RDMA WRITE (as requester or target).
    pub const WRITE: u32 = 1 << 2;
    /// RDMA READ.
    pub const READ: u32 = 1 << 3;
    /// Atomics.
    pub const ATOMIC: u32 = 1 << 4;

    /// The operations offered over `transport`.
    pub fn over(&self, transport: crate::Transport) -> u32 {
        match transport {
            crate::Transport::Rc => self.rc,
            crate::Transport::Uc => self.uc,
            crate::Transport::Ud => self.ud,
        }
    }

    /// The names of the operations in `bits`: "SEND, RECV".
    pub fn names(bits: u32) -> String {
        let all = [
            (Self::SEND, "SEND"),
            (Self::RECV, "RECV"),
            (Self::WRITE, "WRITE"),
            (Self::READ, "READ"),
            (Self::ATOMIC, "ATOMIC"),
        ];
        let named: Vec<&str> = all
            .iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|&(_, name)| name)
            .collect();
        named.join(", ")
    }
}

/// What a device says about itself (`ibv_query_device`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// Device name, e.g. `mlx5_0` or `rxe0`.
    pub name: String,
    /// Firmware version string.
    pub fw_ver: String,
    /// PCI vendor id (IEEE OUI for some providers).
    pub vendor_id: u32,
    /// Vendor part id.
    pub part_id: u32,
    /// Number of physical ports.
    pub port_count: u8,
    /// Largest number of outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// Largest CQ.
    pub max_cqe: u32,
    /// Outstanding RDMA READ/atomic operations a QP may have as target.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READ/atomic operations a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// On-demand paging, per transport (none in older listings).
    #[serde(default)]
    pub odp: OdpCaps,
}

/// What a port says about itself (`ibv_query_port`, its GID table and sysfs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Port number, from 1.
    pub port: u8,
    /// Logical state, e.g. "ACTIVE".
    pub state: String,
    /// True when the port can carry traffic.
    pub active: bool,
    /// InfiniBand or Ethernet.
    pub link_layer: LinkLayer,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU the port supports, in bytes.
    pub max_mtu: u32,
    /// Local identifier (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The rate string from sysfs, e.g. "400 Gb/sec (4X NDR)"; `None` when sysfs lacks it.
    pub rate: Option<String>,
    /// The populated GID entries.
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// The GID index to use when none is given.
    pub fn default_gid_index(&self) -> Option<u32> {
        choose_gid_index(&self.gids)
    }

    /// Checks a GID index given by the user and returns its entry.
    pub fn gid(&self, device: &str, index: u32) -> Result<GidEntry> {
        let valid = || {
            let list: Vec<String> = self.gids.iter().map(|g| g.index.to_string()).collect();
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            }
        };
        self.gids
            .iter()
            .find(|g| g.index == index)
            .copied()
            .ok_or_else(|| VerbsError::BadGidIndex {
                device: device.to_string(),
                port: self.port,
                index,
                reason: "the entry is empty or beyond the table".to_string(),
                valid: valid(),
            })
    }
}

/// A device with its ports, as `rdmabench devices` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// Device facts.
    pub facts: DeviceFacts,
    /// Every port.
    pub ports: Vec<PortInfo>,
}

/// An open device: the starting point for a protection domain and everything below it.
pub struct Device {
    ctx: Arc<DeviceContext>,
    facts: DeviceFacts,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("facts", &self.facts)
            .finish()
    }
}

fn device_list() -> Result<DeviceList> {
    let list = DeviceList::new().map_err(|e| {
        let errno = match &e.0 {
            GetDeviceListErrorKind::Ibverbs(io) => io.raw_os_error(),
            _ => None,
        };
        // rdma-mummy-sys answers EOPNOTSUPP when it could not dlopen libibverbs.so.1;
        // ENOSYS and friends mean the kernel has no RDMA support at all.
        if errno == Some(libc::EOPNOTSUPP) {
            VerbsError::LibraryMissing
        } else {
            VerbsError::NoDevice
        }
    })?;
    if list.is_empty() {
        return Err(VerbsError::NoDevice);
    }
    Ok(list)
}

/// Lists every device with its ports.
pub fn list_devices() -> Result<Vec<DeviceSummary>> {
    let list = device_list()?;
    let mut out = Vec::with_capacity(list.len());
    for dev in list.iter() {
        let ctx = dev
            .open()
            .map_err(|e| VerbsError::from_sideway("ibv_open_device", e))?;
        let device = Device::from_context(ctx, dev.name())?;
        out.push(device.summary()?);
    }
    Ok(out)
}

/// The ODP caps of `caps`, empty unless the device offers on-demand paging at all.
fn odp_caps(caps: &rdma_mummy_sys::ibv_odp_caps) -> OdpCaps {
    let general = rdma_mummy_sys::ibv_odp_general_caps::IBV_ODP_SUPPORT.0 as u64;
    if caps.general_caps & general == 0 {
        return OdpCaps::default();
    }
    let t = &caps.per_transport_caps;
    OdpCaps {
        rc: t.rc_odp_caps,
        uc: t.uc_odp_caps,
        ud: t.ud_odp_caps,
    }
}

impl Device {
    /// Opens the device called `name`, or, with `None`, the first device with an ACTIVE port.
    pub fn open(name: Option<&str>) -> Result<Device> {
        let list = device_list()?;
        let mut seen = Vec::new();
        for dev in list.iter() {
            let dev_name = dev.name();
            if let Some(wanted) = name {
                if wanted != dev_name {
                    seen.push(dev_name);
                    continue;
                }
            }
            let ctx = dev
                .open()
                .map_err(|e| VerbsError::from_sideway("ibv_open_device", e))?;
            let device = Device::from_context(ctx, dev_name.clone())?;
            if name.is_some() || device.first_active_port().is_some() {
                return Ok(device);
            }
            seen.push(format!("{dev_name} (no ACTIVE port)"));
        }
        match name {
            Some(wanted) => Err(VerbsError::DeviceNotFound {
                name: wanted.to_string(),
                available: seen.join(", "),
            }),
            None => Err(VerbsError::NoActivePort {
                found: seen.join(", "),
            }),
        }
    }

    fn from_context(ctx: Arc<DeviceContext>, name: String) -> Result<Device> {
        let attr = ctx
            .query_device()
            .map_err(|e| VerbsError::from_sideway("ibv_query_device", e))?;
        let facts = DeviceFacts {
            name,
            fw_ver: attr.firmware_version(),
            vendor_id: attr.vendor_id(),
            part_id: attr.vendor_part_id(),
            port_count: attr.phys_port_cnt(),
            max_qp_wr: non_negative(attr.max_qp_wr()),
            max_cqe: non_negative(attr.max_cqe()),
            max_qp_rd_atom: non_negative(attr.max_qp_rd_atom()),
            max_qp_init_rd_atom: non_negative(attr.max_qp_init_rd_atom()),
            max_mr_size: attr.max_mr_size(),
            odp: odp_caps(&attr.attr.odp_caps),
        };
        Ok(Device { ctx, facts })
    }

    /// The device's facts.
    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.facts.name
    }

    /// True for a software RDMA device (rxe, siw) that a host CPU runs, whose acknowledgements
    /// come as late as that CPU is busy: known by its vendor id (the kernel's `RXE_VENDOR_ID`,
    /// `SIW_VENDOR_ID`; older kernels give rxe a `device` link to the NIC under it), or by a
    /// sysfs entry with no bus device under it.
    pub fn is_software(&self) -> bool {
        const RXE_VENDOR_ID: u32 = 0xFF_FFFF;
        const SIW_VENDOR_ID: u32 = 0x62_6d74;
        if matches!(self.facts.vendor_id, RXE_VENDOR_ID | SIW_VENDOR_ID) {
            return true;
        }
        let dir = std::path::Path::new("/sys/class/infiniband").join(self.name());
        dir.is_dir() && !dir.join("device").exists()
    }

    fn first_active_port(&self) -> Option<u8> {
        (1..=self.facts.port_count).find(|&p| {
            self.ctx
                .query_port(p)
                .is_ok_and(|a| a.port_state() == PortState::Active)
        })
    }

    /// How many entries the P_Key table of `port` has: a QP's P_Key index is below it.
    pub fn pkey_table_len(&self, port: u8) -> Result<u16> {
        let attr = self
            .ctx
            .query_port(port)
            .map_err(|e| VerbsError::from_sideway("ibv_query_port", e))?;
        Ok(attr.attr.pkey_tbl_len)
    }

    /// Queries one port (validating its number) with its GID table and sysfs rate.
    pub fn port(&self, port: u8) -> Result<PortInfo> {
        if port == 0 || port > self.facts.port_count {
            return Err(VerbsError::BadPort {
                device: self.facts.name.clone(),
                port,
                count: self.facts.port_count,
            });
        }
        let attr = self
            .ctx
            .query_port(port)
            .map_err(|e| VerbsError::from_sideway("ibv_query_port", e))?;
        let state = attr.port_state();
        Ok(PortInfo {
            port,
            state: port_state_name(state).to_string(),
            active: state == PortState::Active,
            link_layer: match attr.link_layer() {
                SwLinkLayer::Ethernet => LinkLayer::Ethernet,
                _ => LinkLayer::InfiniBand,
            },
            active_mtu: mtu_bytes(attr.active_mtu()),
            max_mtu: mtu_bytes(attr.max_mtu()),
            lid: attr.lid(),
            rate: read_port_rate(&self.facts.name, port),
            gids: self.gid_table(port),
        })
    }

    /// Opens a port for traffic: it must exist and be ACTIVE.
    pub fn active_port(&self, port: u8) -> Result<PortInfo> {
        let info = self.port(port)?;
        if !info.active {
            return Err(VerbsError::PortNotActive {
                device: self.facts.name.clone(),
                port,
                state: info.state,
            });
        }
        Ok(info)
    }

    /// Resolves the GID to use on `port`: the given index, checked, or perftest's choice.
    pub fn resolve_gid(&self, port: &PortInfo, index: Option<u32>) -> Result<Option<GidEntry>> {
        match index {
            Some(i) => port.gid(&self.facts.name, i).map(Some),
            None => match port.default_gid_index() {
                Some(i) => port.gid(&self.facts.name, i).map(Some),
                None if port.link_layer == LinkLayer::Ethernet => Err(VerbsError::NoGid {
                    device: self.facts.name.clone(),
                    port: port.port,
                }),
                None => Ok(None),
            },
        }
    }

    fn gid_table(&self, port: u8) -> Vec<GidEntry> {
        let Ok(table) = self.ctx.query_gid_table() else {
            return Vec::new();
        };
        table
            .iter()
            .filter(|e| e.port_num() == u32::from(port) && !e.gid().is_zero())
            .map(|e| GidEntry {
                index: e.gid_index(),
                gid: e.gid().raw,
                kind: match e.gid_type() {
                    sideway::ibverbs::address::GidType::RoceV2 => GidKind::RoceV2,
                    sideway::ibverbs::address::GidType::RoceV1 => GidKind::RoceV1,
                    sideway::ibverbs::address::GidType::InfiniBand => GidKind::Ib,
                },
            })
            .collect()
    }

    /// The device and all its ports.
    pub fn summary(&self) -> Result<DeviceSummary> {
        let ports = (1..=self.facts.port_count)
            .map(|p| self.port(p))
            .collect::<Result<Vec<_>>>()?;
        Ok(DeviceSummary {
            facts: self.facts.clone(),
            ports,
        })
    }

    /// Allocates a protection domain on this device.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::new(&self.ctx)
    }

    /// The sysfs path of this device's mlx5 Data Direct function (`/sys/devices/pci...`), for
    /// [`MemoryRegion::register_dmabuf`](crate::MemoryRegion::register_dmabuf) with
    /// [`DmaBufRegistration::DataDirect`](crate::DmaBufRegistration);
    /// [`VerbsError::DataDirectUnavailable`] naming why where it has none (not an mlx5 device, no
    /// such function, a libmlx5 without Data Direct).
    pub fn data_direct_path(&self) -> Result<String> {
        // SAFETY: the context is open while `self` lives.
        unsafe { crate::data_direct::sysfs_path(self.ctx.context(), self.name()) }
    }

    pub(crate) fn context(&self) -> &Arc<DeviceContext> {
        &self.ctx
    }
}

fn non_negative(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn port_state_name(state: PortState) -> &'static str {
    match state {
        PortState::Nop => "NOP",
        PortState::Down => "DOWN",
        PortState::Initializing => "INIT",
        PortState::Armed => "ARMED",
        PortState::Active => "ACTIVE",
        PortState::ActiveDefer => "ACTIVE_DEFER",
    }
}

/// The MTU in bytes.
pub fn mtu_bytes(mtu: Mtu) -> u32 {
    match mtu {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// The verbs MTU enum for a size in bytes; `None` unless it is 256, 512, 1024, 2048 or 4096.
pub fn mtu_from_bytes(bytes: u32) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// The rate string from `/sys/class/infiniband/<dev>/ports/<port>/rate`.
fn read_port_rate(device: &str, port: u8) -> Option<String> {
    let path = format!("/sys/class/infiniband/{device}/ports/{port}/rate");
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
