//! Queue pairs as a type-state machine: `QueuePair<Created>` (already in INIT) becomes
//! `QueuePair<ReadyToReceive>` with the remote endpoint, then `QueuePair<ReadyToSend>`.
//! Only a ready-to-send QP can post work requests, so posting too early does not compile:
//!
//! ```compile_fail
//! # fn f(pd: &verbs::ProtectionDomain, cq: &verbs::CompletionQueue, mr: &verbs::MemoryRegion)
//! #     -> verbs::Result<()> {
//! let mut qp = verbs::QueuePairBuilder::new(pd, cq).build()?; // QueuePair<Created>
//! qp.post_send(mr, &[], false)?; // error: no method `post_send` on `QueuePair<Created>`
//! # Ok(()) }
//! ```
//!
//! One file for the QP's type states (builder, created, ready to receive, ready to send), their
//! transitions and posting, so that the one invariant (only a ready-to-send QP posts) is read
//! in one place; hence its length.

use std::fmt;
use std::marker::PhantomData;

use rdma_mummy_sys::{
    ibv_ah, ibv_ah_attr, ibv_context, ibv_create_ah, ibv_destroy_ah, ibv_global_route,
    ibv_modify_qp, ibv_post_recv, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, ibv_qp_to_qp_ex,
    ibv_recv_wr, ibv_sge, ibv_wr_set_ud_addr,
};
use serde::{Deserialize, Serialize};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair as _, QueuePairAttribute, QueuePairAttributeMask,
    QueuePairState, QueuePairType, SendOperationFlags, SetInlineData, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

use crate::cq::CompletionQueue;
use crate::device::mtu_from_bytes;
use crate::error::{Result, VerbsError};
use crate::memory::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;

/// Type-state marker: created and in INIT; its endpoint can be sent to the peer.
#[derive(Debug)]
pub struct Created;
/// Type-state marker: connected to the remote endpoint; can receive.
#[derive(Debug)]
pub struct ReadyToReceive;
/// Type-state marker: can send; work requests may be posted.
#[derive(Debug)]
pub struct ReadyToSend;

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Transport {
    /// Reliable connection: every verb.
    Rc,
    /// Unreliable connection: WRITE and SEND only.
    Uc,
    /// Unreliable datagram: SEND only, one packet per message, addressed per request.
    Ud,
}

impl Transport {
    /// The name perftest uses ("RC", "UC", "UD").
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
        }
    }
}

/// The Q_Key every rdmabench UD QP uses (perftest's).
pub const UD_QKEY: u32 = 0x1111_1111;

/// Bytes of Global Routing Header that a UD receive buffer takes before the payload.
pub const UD_GRH_BYTES: u32 = 40;

/// What one side tells the other so that both QPs can connect, and where its buffer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// First packet sequence number the QP will send.
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Port GID (all zero when the port has none).
    pub gid: [u8; 16],
    /// Active MTU of the port, in bytes.
    pub mtu: u32,
    /// Remote key of the buffer this QP works on.
    pub rkey: u32,
    /// Address of that buffer.
    pub addr: u64,
    /// Length of that buffer.
    pub len: u64,
    /// RDMA READs and atomics this QP accepts in flight as target.
    #[serde(default)]
    pub rd_atomic: u8,
}

/// How to reach the remote side from the local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConfig {
    /// Local port number.
    pub port: u8,
    /// Local GID index for the GRH; `None` sends without GRH (InfiniBand, same subnet).
    pub sgid_index: Option<u8>,
    /// Path MTU in bytes (256..4096).
    pub mtu: u32,
    /// Outstanding RDMA READ/atomics this QP accepts as target.
    pub max_dest_rd_atomic: u8,
    /// Outstanding RDMA READ/atomics this QP may issue.
    pub max_rd_atomic: u8,
    /// RC only: how long a request waits for its acknowledgement before it is sent again,
    /// 4.096 us * 2^`qp_timeout` (14: 67 ms), up to 7 times.
    pub qp_timeout: u8,
    /// The GRH's traffic class (with a GRH only): on RoCE v2 the IP header's TOS byte, DSCP
    /// in its upper six bits and ECN in the lower two.
    pub traffic_class: u8,
    /// The service level, 0..15: on InfiniBand it picks the virtual lane (through the subnet
    /// manager's SL-to-VL tables); on RoCE a ConnectX sends its low three bits as the 802.1p
    /// priority of VLAN-tagged frames, and soft-RoCE ignores it.
    pub service_level: u8,
    /// RC only: how many times a request is sent again after its acknowledgement timeout,
    /// 0..7 (7 by default, as perftest); both ways of connecting use it (the QP's RTS
    /// attribute, and the RDMA CM's connection parameters and RTS).
    pub retry_count: u8,
}

impl Default for PathConfig {
    /// Port 1 without a GRH, a 1024-byte MTU, one outstanding READ/atomic each way and
    /// perftest's acknowledgement timeout (14): a start to override field by field
    /// (`PathConfig { mtu: 4096, ..PathConfig::default() }`), so that a new attribute does
    /// not break every caller.
    fn default() -> Self {
        PathConfig {
            port: 1,
            sgid_index: None,
            mtu: 1024,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            qp_timeout: 14,
            traffic_class: 0,
            service_level: 0,
            retry_count: 7,
        }
    }
}

/// What the device granted when the QP was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

/// The operation of one send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE to `remote_addr`.
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE to `remote_addr` that also consumes a receive at the peer, whose completion
    /// carries `imm` (RC): the peer learns that the data landed.
    WriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Delivered in the peer's receive completion.
        imm: u32,
    },
    /// RDMA READ from `remote_addr`.
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// SEND into the remote receive queue.
    Send,
    /// Atomic fetch-and-add of 8 bytes at `remote_addr`.
    FetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// Atomic compare-and-swap of 8 bytes at `remote_addr`.
    CompareSwap {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

/// One send-queue work request over a slice of a local memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: Op,
    /// Offset of the local bytes in the region.
    pub local_offset: u64,
    /// Number of bytes.
    pub len: u32,
    /// Whether this request produces a completion.
    pub signaled: bool,
}

impl Default for SendRequest {
    /// An unsignaled zero-byte SEND from offset 0: a blank to fill in (post lists are
    /// allocated once, before the measured loop).
    fn default() -> Self {
        SendRequest {
            wr_id: 0,
            op: Op::Send,
            local_offset: 0,
            len: 0,
            signaled: false,
        }
    }
}

/// Sets up a QP: depths, inline size and transport, then [`QueuePairBuilder::build`].
#[derive(Debug, Clone)]
pub struct QueuePairBuilder<'a> {
    pd: &'a ProtectionDomain,
    cq: &'a CompletionQueue,
    transport: Transport,
    port: u8,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_inline_data: u32,
    pkey_index: u16,
    srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QueuePairBuilder<'a> {
    /// A builder for an RC QP on port 1 whose send and receive completions go to `cq`.
    pub fn new(pd: &'a ProtectionDomain, cq: &'a CompletionQueue) -> Self {
        QueuePairBuilder {
            pd,
            cq,
            transport: Transport::Rc,
            port: 1,
            max_send_wr: 128,
            max_recv_wr: 1,
            max_inline_data: 0,
            pkey_index: 0,
            srq: None,
        }
    }

    /// The entry of the port's P_Key table the QP uses (0 by default: the default
    /// partition's key); [`Device::pkey_table_len`](crate::Device::pkey_table_len) says how
    /// many there are.
    pub fn pkey_index(mut self, index: u16) -> Self {
        self.pkey_index = index;
        self
    }

    /// Take receives from `srq` instead of a receive queue of the QP's own (the receive
    /// depth is then the shared queue's).
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }

    /// The transport service.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// The local port.
    pub fn port(mut self, port: u8) -> Self {
        self.port = port;
        self
    }

    /// Send queue depth.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.max_send_wr = n;
        self
    }

    /// Receive queue depth.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.max_recv_wr = n;
        self
    }

    /// Largest inline payload wanted.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.max_inline_data = n;
        self
    }

    /// Creates the QP and moves it to INIT with every remote access right.
    pub fn build(self) -> Result<QueuePair<Created>> {
        let (qp_type, ops) = match self.transport {
            Transport::Rc => (
                QueuePairType::ReliableConnection,
                SendOperationFlags::Write
                    | SendOperationFlags::WriteWithImmediate
                    | SendOperationFlags::Send
                    | SendOperationFlags::Read
                    | SendOperationFlags::AtomicFetchAndAdd
                    | SendOperationFlags::AtomicCompareAndSwap,
            ),
            Transport::Uc => (
                QueuePairType::UnreliableConnection,
                SendOperationFlags::Write | SendOperationFlags::Send,
            ),
            Transport::Ud => (QueuePairType::UnreliableDatagram, SendOperationFlags::Send),
        };
        let mut builder = self.pd.pd.create_qp_builder();
        if let Some(srq) = self.srq {
            // SAFETY: the queue is of this PD and the QP keeps a clone of it, dropped after
            // its own handle.
            unsafe { builder.setup_srq(srq.as_ptr()) };
        }
        let mut qp = builder
            .setup_qp_type(qp_type)
            .setup_max_send_wr(self.max_send_wr)
            .setup_max_recv_wr(self.max_recv_wr)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(self.max_inline_data)
            .setup_send_cq(self.cq.cq.clone())
            .setup_recv_cq(self.cq.cq.clone())
            .setup_send_ops_flags(ops)
            .build_ex()
            .map_err(|e| {
                VerbsError::from_sideway("ibv_create_qp_ex", e).with_hint(format!(
                    "asked for send depth {}, receive depth {}, inline {}",
                    self.max_send_wr, self.max_recv_wr, self.max_inline_data
                ))
            })?;

        if self.transport == Transport::Ud {
            init_ud(&qp, self.port, self.pkey_index)?;
        } else {
            let mut access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
            if self.transport == Transport::Rc {
                access |= AccessFlags::RemoteRead | AccessFlags::RemoteAtomic;
            }
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::Init)
                .setup_pkey_index(self.pkey_index)
                .setup_port(self.port)
                .setup_access_flags(access);
            qp.modify(&attr)
                .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(INIT)", e))?;
        }

        let (_, init) = qp
            .query(QueuePairAttributeMask::Capabilities)
            .map_err(|e| VerbsError::from_sideway("ibv_query_qp", e))?;
        let caps = QpCaps {
            max_send_wr: init.max_send_wr(),
            max_recv_wr: init.max_recv_wr(),
            max_inline_data: init.max_inline_data(),
        };
        Ok(QueuePair {
            qp,
            srq: self.srq.cloned(),
            transport: self.transport,
            caps,
            _state: PhantomData,
        })
    }
}

/// INIT for a UD QP needs a Q_Key, which sideway's attribute builder does not set.
fn init_ud(qp: &ExtendedQueuePair, port: u8, pkey_index: u16) -> Result<()> {
    // SAFETY: ibv_qp_attr is plain data; zero is a valid value for every field.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
    attr.pkey_index = pkey_index;
    attr.port_num = port;
    attr.qkey = UD_QKEY;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
        | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
        | ibv_qp_attr_mask::IBV_QP_PORT.0
        | ibv_qp_attr_mask::IBV_QP_QKEY.0;
    // SAFETY: the QP is alive and attr is initialised.
    let rc = unsafe { ibv_modify_qp(qp.qp().as_ptr(), &mut attr, mask as i32) };
    if rc != 0 {
        return Err(VerbsError::errno("ibv_modify_qp(INIT, UD)", rc));
    }
    Ok(())
}

/// Where a UD send goes: the peer's address handle and QP number.
pub struct AddressHandle {
    ah: std::ptr::NonNull<ibv_ah>,
    remote_qpn: u32,
    // Keeps the protection domain alive while the handle exists.
    _pd: ProtectionDomain,
}

// SAFETY: an address handle is an immutable provider object; verbs allow its use from any thread.
unsafe impl Send for AddressHandle {}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AddressHandle(to QP {})", self.remote_qpn)
    }
}

impl AddressHandle {
    /// An address handle for sending to `remote` over `path` (GRH when a source GID is set).
    pub fn new(pd: &ProtectionDomain, path: &PathConfig, remote: &Endpoint) -> Result<Self> {
        // SAFETY: ibv_ah_attr is plain data; zero is valid.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.dlid = remote.lid;
        attr.port_num = path.port;
        attr.sl = path.service_level;
        if let Some(sgid) = path.sgid_index {
            attr.is_global = 1;
            attr.grh = ibv_global_route {
                dgid: Gid { raw: remote.gid }.into(),
                flow_label: 0,
                sgid_index: sgid,
                hop_limit: 64,
                traffic_class: path.traffic_class,
            };
        }
        // SAFETY: the PD is alive and attr is initialised.
        let ah = unsafe { ibv_create_ah(pd.pd.pd().as_ptr(), &mut attr) };
        let ah = std::ptr::NonNull::new(ah).ok_or_else(|| VerbsError::Call {
            call: "ibv_create_ah",
            reason: std::io::Error::last_os_error(),
        })?;
        Ok(AddressHandle {
            ah,
            remote_qpn: remote.qpn,
            _pd: pd.clone(),
        })
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah and destroyed once.
        unsafe { ibv_destroy_ah(self.ah.as_ptr()) };
    }
}

/// A queue pair in state `S` (see the module documentation).
pub struct QueuePair<S> {
    // Field order matters: the QP is destroyed before the shared receive queue it uses.
    qp: ExtendedQueuePair,
    srq: Option<SharedReceiveQueue>,
    transport: Transport,
    caps: QpCaps,
    _state: PhantomData<S>,
}

impl<S> fmt::Debug for QueuePair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qpn())
            .field("transport", &self.transport)
            .field("caps", &self.caps)
            .finish()
    }
}

impl<S> QueuePair<S> {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    /// What the device granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The transport service.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The verbs context the QP was created on (the RDMA CM checks that its route leaves
    /// through the same device).
    pub(crate) fn verbs_context(&self) -> *mut ibv_context {
        // SAFETY: the QP is alive for as long as `self`; its `context` field is set by
        // libibverbs at creation and never changes.
        unsafe { (*self.qp.qp().as_ptr()).context }
    }

    fn into_state<T>(self) -> QueuePair<T> {
        QueuePair {
            qp: self.qp,
            srq: self.srq,
            transport: self.transport,
            caps: self.caps,
            _state: PhantomData,
        }
    }
}

impl QueuePair<Created> {
    /// Connects to the remote QP (INIT -> RTR).
    pub fn ready_to_receive(
        mut self,
        remote: &Endpoint,
        path: &PathConfig,
    ) -> Result<QueuePair<ReadyToReceive>> {
        if self.transport == Transport::Ud {
            let mut attr = QueuePairAttribute::new();
            attr.setup_state(QueuePairState::ReadyToReceive);
            self.qp
                .modify(&attr)
                .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(RTR, UD)", e))?;
            return Ok(self.into_state());
        }
        let mtu = mtu_from_bytes(path.mtu.min(remote.mtu)).ok_or_else(|| {
            VerbsError::InvalidRequest(format!(
                "path MTU {} is not one of 256, 512, 1024, 2048, 4096",
                path.mtu.min(remote.mtu)
            ))
        })?;
        let mut av = AddressHandleAttribute::new();
        av.setup_port(path.port)
            .setup_dest_lid(remote.lid)
            .setup_service_level(path.service_level);
        if let Some(sgid) = path.sgid_index {
            av.setup_grh(&Gid { raw: remote.gid }, 0, sgid, 64, path.traffic_class);
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_address_vector(&av);
        if self.transport == Transport::Rc {
            attr.setup_max_dest_read_atomic(path.max_dest_rd_atomic)
                .setup_min_rnr_timer(12);
        }
        self.qp
            .modify(&attr)
            .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(RTR)", e))?;
        Ok(self.into_state())
    }
}

impl QueuePair<Created> {
    /// INIT -> RTR -> RTS with attributes computed elsewhere (the RDMA CM's
    /// `rdma_init_qp_attr`, with rdmabench's overrides already applied): each is passed to
    /// `ibv_modify_qp` as given, mask included.
    pub(crate) fn ready_to_send_with(
        mut self,
        rtr: &QueuePairAttribute,
        rts: &QueuePairAttribute,
    ) -> Result<QueuePair<ReadyToSend>> {
        self.qp
            .modify(rtr)
            .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(RTR, from the RDMA CM)", e))?;
        self.qp
            .modify(rts)
            .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(RTS, from the RDMA CM)", e))?;
        Ok(self.into_state())
    }
}

impl QueuePair<ReadyToReceive> {
    /// Starts sending with the given first PSN (RTR -> RTS).
    pub fn ready_to_send(mut self, psn: u32, path: &PathConfig) -> Result<QueuePair<ReadyToSend>> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(psn);
        if self.transport == Transport::Rc {
            attr.setup_timeout(path.qp_timeout)
                .setup_retry_cnt(path.retry_count)
                .setup_rnr_retry(7)
                .setup_max_read_atomic(path.max_rd_atomic);
        }
        self.qp
            .modify(&attr)
            .map_err(|e| VerbsError::from_sideway("ibv_modify_qp(RTS)", e))?;
        Ok(self.into_state())
    }
}

impl QueuePair<ReadyToSend> {
    /// Posts `requests` under one doorbell. With `inline`, payloads are copied into the work
    /// requests (host memory only, each at most the granted inline size). Allocates nothing.
    #[inline]
    pub fn post_send(
        &mut self,
        mr: &MemoryRegion,
        requests: &[SendRequest],
        inline: bool,
    ) -> Result<()> {
        self.post(mr, requests, inline, None)
    }

    /// [`QueuePair::post_send`] for a UD QP: every request is a SEND to `dest`.
    #[inline]
    pub fn post_send_ud(
        &mut self,
        mr: &MemoryRegion,
        requests: &[SendRequest],
        inline: bool,
        dest: &AddressHandle,
    ) -> Result<()> {
        self.post(mr, requests, inline, Some(dest))
    }

    #[inline]
    fn post(
        &mut self,
        mr: &MemoryRegion,
        requests: &[SendRequest],
        inline: bool,
        dest: Option<&AddressHandle>,
    ) -> Result<()> {
        // SAFETY: the QP is alive; the pointer is only used for ibv_wr_set_ud_addr below,
        // between the opcode and the buffer of the same work request, as the API requires.
        let qpx = unsafe { ibv_qp_to_qp_ex(self.qp.qp().as_ptr()) };
        if inline {
            self.check_inline(mr, requests)?;
        }
        let mut guard = self.qp.start_post_send();
        for r in requests {
            mr.check_range(r.local_offset, r.len)?;
            let mut flags = WorkRequestFlags::none();
            if r.signaled {
                flags |= WorkRequestFlags::Signaled;
            }
            if inline {
                flags |= WorkRequestFlags::Inline;
            }
            let wr = guard.construct_wr(r.wr_id, flags);
            let local = match r.op {
                Op::Write { remote_addr, rkey } => wr.setup_write(rkey, remote_addr),
                Op::WriteWithImm {
                    remote_addr,
                    rkey,
                    imm,
                } => wr.setup_write_imm(rkey, remote_addr, imm),
                Op::Read { remote_addr, rkey } => wr.setup_read(rkey, remote_addr),
                Op::Send => wr.setup_send(),
                Op::FetchAdd {
                    remote_addr,
                    rkey,
                    add,
                } => wr.setup_atomic_fetch_add(rkey, remote_addr, add),
                Op::CompareSwap {
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                } => wr.setup_atomic_compare_swap(rkey, remote_addr, compare, swap),
            };
            if let Some(d) = dest {
                // SAFETY: qpx is this QP's extended handle; d.ah is a live address handle.
                unsafe { ibv_wr_set_ud_addr(qpx, d.ah.as_ptr(), d.remote_qpn, UD_QKEY) };
            }
            let bytes = if inline {
                mr.cpu_bytes(r.local_offset, r.len)?
            } else {
                None
            };
            match bytes {
                Some(bytes) => local.setup_inline_data(bytes),
                // SAFETY: the range was checked against the registered region, which
                // outlives this call; the NIC reads it before the completion is reported.
                _ => unsafe { local.setup_sge(mr.lkey(), mr.addr() + r.local_offset, r.len) },
            }
        }
        guard
            .post()
            .map_err(|e| VerbsError::from_sideway("ibv_wr_complete", e))
    }

    fn check_inline(&self, mr: &MemoryRegion, requests: &[SendRequest]) -> Result<()> {
        if !mr.is_cpu_readable() {
            return Err(VerbsError::InvalidRequest(
                "inline data needs memory the CPU can read (host memory)".to_string(),
            ));
        }
        if let Some(r) = requests.iter().find(|r| r.len > self.caps.max_inline_data) {
            return Err(VerbsError::InvalidRequest(format!(
                "inline payload of {} bytes exceeds the QP's inline limit of {} bytes",
                r.len, self.caps.max_inline_data
            )));
        }
        Ok(())
    }
}

impl<S: CanReceive> QueuePair<S> {
    /// Posts one receive of `len` bytes at `offset` in `mr`. Allocates nothing.
    #[inline]
    pub fn post_recv(
        &mut self,
        mr: &MemoryRegion,
        wr_id: u64,
        offset: u64,
        len: u32,
    ) -> Result<()> {
        if self.srq.is_some() {
            return Err(VerbsError::InvalidRequest(
                "this QP takes its receives from a shared receive queue: post them there"
                    .to_string(),
            ));
        }
        // SAFETY: the QP is alive while self is; the request lives through the call.
        post_one_recv(mr, wr_id, offset, len, "ibv_post_recv", |wr, bad| unsafe {
            ibv_post_recv(self.qp.qp().as_ptr(), wr, bad)
        })
    }
}

/// Posts one receive of `len` bytes at `offset` in `mr` through `post` (a QP's or a shared
/// receive queue's post call, named `call`), with the request on the stack. Allocates nothing.
#[inline]
pub(crate) fn post_one_recv(
    mr: &MemoryRegion,
    wr_id: u64,
    offset: u64,
    len: u32,
    call: &'static str,
    post: impl FnOnce(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32,
) -> Result<()> {
    mr.check_range(offset, len)?;
    let mut sge = ibv_sge {
        addr: mr.addr() + offset,
        length: len,
        lkey: mr.lkey(),
    };
    let mut wr = ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: &mut sge,
        num_sge: 1,
    };
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    // The range lies in the registered region; wr and sge live on the stack through `post`.
    let rc = post(&mut wr, &mut bad);
    if rc != 0 {
        return Err(VerbsError::errno(call, rc));
    }
    Ok(())
}

/// The states in which receives may be posted (every state after creation).
pub trait CanReceive {}
impl CanReceive for Created {}
impl CanReceive for ReadyToReceive {}
impl CanReceive for ReadyToSend {}
