//! A safe layer over libibverbs for rdmabench: devices, ports and GIDs, protection domains,
//! memory regions, completion queues, and queue pairs whose states are types.
//!
//! The path to a working connection: [`Device::open`] a device (by name, or the first with an
//! ACTIVE port), read its [`PortInfo`] and resolve a GID, allocate a [`ProtectionDomain`],
//! register a [`MemoryRegion`], create a [`CompletionQueue`], then build a
//! [`QueuePair<Created>`](QueuePair). Send its [`Endpoint`] to the peer (rdmabench uses its
//! TCP control channel for that), and with the peer's endpoint move it to
//! [`ReadyToReceive`] and then [`ReadyToSend`]. Only a ready-to-send QP has
//! [`QueuePair::post_send`]; completions come back in batches from [`CompletionQueue::poll`].
//! libibverbs is loaded at run time, so a machine without rdma-core gets
//! [`VerbsError::LibraryMissing`] rather than a failure to start.
//!
//! ```no_run
//! use verbs::{Access, CompletionQueue, Completion, Device, Endpoint, HostBuffer, MemoryRegion,
//!             Op, PathConfig, QueuePairBuilder, SendRequest};
//!
//! # fn main() -> Result<(), verbs::VerbsError> {
//! let device = Device::open(Some("rxe0"))?;
//! let port = device.active_port(1)?;
//! let gid = device.resolve_gid(&port, None)?;
//! let pd = device.alloc_pd()?;
//! let mr = MemoryRegion::register_host(&pd, HostBuffer::new(65536)?, Access::ALL)?;
//! let cq = CompletionQueue::new(&device, 256)?;
//! let qp = QueuePairBuilder::new(&pd, &cq).max_send_wr(128).build()?;
//! let local = Endpoint {
//!     qpn: qp.qpn(), psn: 0x1234, lid: port.lid, gid: gid.map(|g| g.gid).unwrap_or_default(),
//!     mtu: port.active_mtu, rkey: mr.rkey(), addr: mr.addr(), len: mr.len() as u64, rd_atomic: 16,
//! };
//! let remote: Endpoint = local; // in real life: exchanged with the peer
//! let path = PathConfig { sgid_index: gid.map(|g| g.index as u8), mtu: port.active_mtu,
//!                         max_dest_rd_atomic: 16, max_rd_atomic: 16, ..PathConfig::default() };
//! let mut qp = qp.ready_to_receive(&remote, &path)?.ready_to_send(local.psn, &path)?;
//! let write = SendRequest { wr_id: 1, op: Op::Write { remote_addr: remote.addr, rkey: remote.rkey },
//!                           local_offset: 0, len: 4096, signaled: true };
//! qp.post_send(&mr, &[write], false)?;
//! let mut done = [Completion::default(); 16];
//! while cq.poll(&mut done)? == 0 {}
//! done[0].check()?;
//! # Ok(())
//! # }
//! ```

mod cm;
mod cq;
mod data_direct;
mod device;
mod error;
mod gid;
mod memory;
mod pd;
mod qp;
mod srq;

pub use cm::{cm_connect, CmConnection, CmListener};
pub use cq::{Completion, CompletionQueue};
pub use device::{
    list_devices, mtu_bytes, mtu_from_bytes, Device, DeviceFacts, DeviceSummary, LinkLayer,
    OdpCaps, PortInfo,
};
pub use error::{Result, VerbsError};
pub use gid::{choose_gid_index, format_gid, GidEntry, GidKind};
pub use memory::{Access, DmaBufRegistration, HostBuffer, MemoryRegion, PAGE_SIZE};
pub use pd::ProtectionDomain;
pub use qp::{
    AddressHandle, CanReceive, Created, Endpoint, Op, PathConfig, QpCaps, QueuePair,
    QueuePairBuilder, ReadyToReceive, ReadyToSend, SendRequest, Transport, UD_GRH_BYTES, UD_QKEY,
};
pub use srq::SharedReceiveQueue;
