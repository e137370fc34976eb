//! The test engine: one side's verbs resources (device, port, GID, buffers, CQ, QPs), their
//! connection to the peer's endpoints, and the measured loops: `bw/` (operations kept in
//! flight) and `lat.rs` (ping-pong). [`Connected::params`] says what the loops ran with;
//! `validate.rs` checks what landed.
//!
//! Every QP owns one slot of the registered buffer, split in two halves: the *receive* half
//! (offset 0) is where the peer's WRITEs, SENDs and atomics land, the *send* half is what
//! this side WRITEs, SENDs, or lets the peer READ. Data always flows from one side's send
//! half to the other side's receive half.

pub mod buffer;
pub mod bw;
mod checks;
pub(crate) mod cm;
pub(crate) mod lat;
mod register;
pub(crate) mod staged;
pub(crate) mod validate;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use verbs::{
    Access, AddressHandle, Completion, CompletionQueue, Created, Device, Endpoint, GidEntry,
    LinkLayer, MemoryRegion, PathConfig, PortInfo, ProtectionDomain, QueuePair, QueuePairBuilder,
    ReadyToSend, SharedReceiveQueue, Transport, UD_GRH_BYTES,
};

use crate::memory::MemMode;
use crate::plan::{
    Connection, Mode, PlanError, Role, TestPlan, Verb, DEFAULT_QP_TIMEOUT, SOFTWARE_QP_TIMEOUT,
};
use buffer::{remote_access, Footprint};
use checks::{check_device_limits, check_tclass, check_ud_size};
pub(crate) use checks::{check_loopback_memory, check_memory_mode};
use model::record::ParamsRecord;
use register::{open_gpu, register, Target};

/// What one side was told about its own hardware.
#[derive(Debug, Clone, Default)]
pub struct SideConfig {
    /// `-d`: device name; `None` takes the first device with an ACTIVE port.
    pub device: Option<String>,
    /// `-i`: port number.
    pub port: u8,
    /// `-x`: GID index; `None` lets rdmabench choose as perftest does.
    pub gid_index: Option<u32>,
    /// `--mem`: where this side's buffer lives.
    pub mem: MemMode,
    /// `--staging-chunk`, `--staging-depth`: the bounce buffers of `--mem cuda-staged`.
    pub staging: accel::StagingConfig,
    /// Register with PCIe relaxed ordering (off with `--disable-pcie-relaxed`).
    pub relaxed_ordering: bool,
    /// `--use-hugepages`: the host buffer on huge pages.
    pub hugepages: bool,
    /// `--odp`: the buffer registered for on-demand paging.
    pub odp: bool,
    /// `--mem cuda*` named no GPU, on one device: take the GPU nearest the NIC on the PCIe
    /// tree (GPU 0 where the tree has none), as rails do.
    pub nearest_gpu: bool,
    /// `--force-rocm-dmabuf`: `--mem rocm` on a kernel that may move the buffer to host memory.
    pub force_rocm_dmabuf: bool,
}

/// GPU memory behind the registered buffer. The registration holds its own guard of the memory
/// (`accel::AllocationGuard`; with `--mem cuda` the dma-buf it was registered through, which
/// holds one), so the memory outlives the registration whatever is dropped first.
#[derive(Debug)]
pub(crate) struct GpuMemory {
    /// The device memory.
    pub buf: Box<dyn accel::GpuBuffer>,
}

/// The device and port opened and checked, the GID resolved: nothing created yet.
#[derive(Debug)]
pub(crate) struct Local {
    device: Device,
    port: PortInfo,
    gid: Option<GidEntry>,
    gid_given: bool,
    mem: MemMode,
    staging: accel::StagingConfig,
    relaxed_ordering: bool,
    hugepages: bool,
    odp: bool,
    gpu: Option<Box<dyn accel::Gpu>>,
    gpu_chosen: Option<String>,
}

/// Resources created, QPs in INIT, endpoints ready to send to the peer.
#[derive(Debug)]
pub(crate) struct Prepared {
    device: Device,
    port: PortInfo,
    gid: Option<GidEntry>,
    gid_given: bool,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    /// Before `mr`, so that they are deregistered first: see [`Connected::parts`].
    parts: Vec<MemoryRegion>,
    mr: MemoryRegion,
    staging: Option<staged::Staging>,
    gpu: Option<GpuMemory>,
    mem: MemMode,
    gpu_device: Option<Box<dyn accel::Gpu>>,
    gpu_chosen: Option<String>,
    qps: Vec<QueuePair<Created>>,
    psns: Vec<u32>,
    slot: u64,
    stride: u64,
    peer_slot: u64,
    transport: Transport,
    mtu: Option<u32>,
    posts_receives: bool,
    /// The staged bandwidth loop posts its own receives, into bounce buffers.
    loop_posts_receives: bool,
    role: Role,
    /// `-R`: how the QPs meet their peers' through the RDMA CM, and the time each may take.
    cm: Option<(cm::CmSide, Duration)>,
    /// `--srq`: the receiving side's shared receive queue.
    srq: Option<SharedReceiveQueue>,
}

/// Connected to the peer: every QP ready to send.
#[derive(Debug)]
pub(crate) struct Connected {
    /// The open device.
    pub device: Device,
    /// The port in use.
    pub port: PortInfo,
    /// The GID in use.
    pub gid: Option<GidEntry>,
    /// The one CQ all QPs complete into.
    pub cq: CompletionQueue,
    /// Each QP's own region over its slot of `mr`, in `mr`'s coordinates, where the plan
    /// registers a region per QP; empty otherwise. Declared before `mr`, which holds their
    /// memory, so that they are deregistered first. [`region`] picks a QP's.
    pub parts: Vec<MemoryRegion>,
    /// The registered region: one slot per QP (the bounce buffers, for `--mem cuda-staged`).
    pub mr: MemoryRegion,
    /// `--mem cuda-staged`: the bounce buffers behind `mr`, their stream and events.
    pub staging: Option<staged::Staging>,
    /// The GPU memory behind `mr`, for the GPU memory modes.
    pub gpu: Option<GpuMemory>,
    /// Where the buffer lives.
    pub mem: MemMode,
    /// The GPU, for the GPU memory modes.
    pub gpu_device: Option<Box<dyn accel::Gpu>>,
    /// How the GPU was chosen where `--mem` named none ([`crate::memory::nearest_gpu`]).
    pub gpu_chosen: Option<String>,
    /// The QPs.
    pub qps: Vec<QueuePair<ReadyToSend>>,
    /// The peer's endpoint for each QP.
    pub remote: Vec<Endpoint>,
    /// UD only: the address handle of each QP's peer.
    pub ah: Vec<AddressHandle>,
    /// Bytes per slot (both halves).
    pub slot: u64,
    /// The transport.
    pub transport: Transport,
    /// `-R`: the RDMA CM's connections, held for the run (dropping one disconnects it):
    /// never read, only kept until the `Connected` is dropped.
    _cm_links: Vec<verbs::CmConnection>,
    /// `--srq`: each QP's number and index, sorted by number (empty without a shared
    /// receive queue).
    srq_qpns: Vec<(u32, usize)>,
    /// `--srq`: the shared receive queue this side's QPs take their receives from. After
    /// the QPs, so that it is destroyed after them.
    srq: Option<SharedReceiveQueue>,
    /// The record's parameters as this side runs them: the plan's, with what the devices,
    /// the peer and the registration settled written over them (the path MTU, the
    /// READs/atomics in flight, the acknowledgement timeout: `-u` or [`qp_timeout_for`], the
    /// traffic class, the registration's flags). The run adds what its side found.
    pub params: ParamsRecord,
    /// The peer's bounce buffers when its memory is staged (a staged WRITE target).
    pub peer_bounce: Option<staged::BounceLayout>,
}

/// `--mr-per-qp`: each QP's slot of the host buffer `whole`, registered on its own (as
/// perftest's `--mr_per_qp`); none otherwise.
fn register_parts(
    plan: &TestPlan,
    pd: &ProtectionDomain,
    whole: &MemoryRegion,
    slot: u64,
    access: verbs::Access,
) -> Result<Vec<MemoryRegion>> {
    if !plan.mr_per_qp {
        return Ok(Vec::new());
    }
    let len = usize::try_from(slot).context("a QP's slot is too large for this machine")?;
    (0..u64::from(plan.qps))
        .map(|q| {
            // SAFETY: `Prepared` and `Connected` declare the parts before the whole region,
            // so they are deregistered before its memory goes (and an error here drops them
            // first, bound after it).
            unsafe { whole.part(pd, q * slot, len, access) }
                .with_context(|| format!("registering QP {q}'s region of {slot} bytes"))
        })
        .collect()
}

/// The region QP `q`'s requests name: its own among `parts` where there is one, else the
/// `whole` buffer's.
#[inline]
pub(crate) fn region<'a>(
    parts: &'a [MemoryRegion],
    whole: &'a MemoryRegion,
    q: usize,
) -> &'a MemoryRegion {
    parts.get(q).unwrap_or(whole)
}

fn first_psn(index: usize) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = (u64::from(nanos) ^ (u64::from(std::process::id()) << 7))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (index as u64).wrapping_mul(0x85eb_ca6b);
    (mixed >> 40) as u32 & 0x00ff_ffff
}

/// The verbs transport of a plan's connection.
pub(crate) fn transport(c: Connection) -> Transport {
    match c {
        Connection::Rc => Transport::Rc,
        Connection::Uc => Transport::Uc,
        Connection::Ud => Transport::Ud,
    }
}

/// Bytes a receive needs for a message of `size` (UD adds the GRH).
pub(crate) fn recv_len(transport: Transport, size: u64) -> u64 {
    if transport == Transport::Ud {
        size + u64::from(UD_GRH_BYTES)
    } else {
        size
    }
}

impl Local {
    /// The RDMA device's name, e.g. "mlx5_0".
    pub(crate) fn device_name(&self) -> &str {
        self.device.name()
    }

    /// What `plan`'s buffers take on this side (what [`Local::prepare`] would allocate).
    pub(crate) fn footprint(&self, plan: &TestPlan) -> Result<Footprint> {
        Footprint::new(plan, &self.mem, self.staging)
    }

    /// Where this side's buffers live: its memory mode.
    pub(crate) fn mem(&self) -> &MemMode {
        &self.mem
    }

    /// How a staged memory mode bounces through host memory.
    pub(crate) fn staging(&self) -> accel::StagingConfig {
        self.staging
    }

    /// The GPU's memory in bytes, for the GPU memory modes.
    pub(crate) fn gpu_memory(&self) -> Option<u64> {
        self.gpu.as_ref().map(|g| g.total_memory() as u64)
    }

    /// The largest inline size up to `want` that this device creates `plan`'s QPs with (verbs
    /// has no query for it: QPs are created until one fits).
    pub(crate) fn inline_limit(&self, plan: &TestPlan, want: u32) -> Result<u32> {
        let pd = self.device.alloc_pd()?;
        let cq = CompletionQueue::new(&self.device, plan.tx_depth + 1)?;
        let creates = |n: u32| {
            n <= want
                && QueuePairBuilder::new(&pd, &cq)
                    .transport(transport(plan.connection))
                    .port(self.port.port)
                    .max_send_wr(plan.tx_depth)
                    .max_recv_wr(1)
                    .max_inline_data(n)
                    .build()
                    .is_ok()
        };
        if creates(want) {
            return Ok(want);
        }
        max_inline(creates).with_context(|| {
            format!(
                "creating a {} QP on {}",
                plan.connection.name(),
                self.device.name()
            )
        })
    }

    /// Opens the device and its port (which must be ACTIVE) and resolves the GID, so that a
    /// missing device fails the run before any peer is waited for.
    pub(crate) fn open(cfg: &SideConfig) -> Result<Self> {
        // The runtime first: without its driver a GPU run fails at once, naming it.
        if let Some(runtime) = cfg.mem.runtime() {
            runtime
                .probe()
                .with_context(|| format!("--mem {}", cfg.mem.name()))?;
        }
        crate::kconfig::admit(&cfg.mem, cfg.force_rocm_dmabuf)
            .with_context(|| format!("--mem {}", cfg.mem.name()))?;
        let device = Device::open(cfg.device.as_deref())?;
        let port = device.active_port(cfg.port)?;
        let gid = device.resolve_gid(&port, cfg.gid_index)?;
        let (mem, gpu_chosen) = if cfg.nearest_gpu && cfg.mem != MemMode::Host {
            let tree = topo::Topology::scan(&topo::Sysfs::system()).ok();
            let (mem, why) = crate::memory::nearest_gpu(&cfg.mem, device.name(), tree.as_ref());
            (mem, Some(why))
        } else {
            (cfg.mem.clone(), None)
        };
        let gpu = open_gpu(&mem).with_context(|| format!("--mem {}", cfg.mem.name()))?;
        Ok(Local {
            device,
            port,
            gid,
            gid_given: cfg.gid_index.is_some(),
            mem,
            staging: cfg.staging,
            relaxed_ordering: cfg.relaxed_ordering,
            hugepages: cfg.hugepages,
            odp: cfg.odp,
            gpu,
            gpu_chosen,
        })
    }

    /// Creates the buffer, CQ and QPs for `plan`; the `role` decides who receives SENDs.
    pub(crate) fn prepare(self, plan: &TestPlan, role: Role) -> Result<Prepared> {
        let Local {
            device,
            port,
            gid,
            gid_given,
            mem,
            staging,
            relaxed_ordering,
            hugepages,
            odp,
            gpu: gpu_device,
            gpu_chosen,
        } = self;
        let staged = mem.is_staged();
        check_memory_mode("--mem", &mem, plan, role)?;
        let transport = transport(plan.connection);
        let footprint = Footprint::new(plan, &mem, staging)?;
        let (slot, peer_slot) = (footprint.slot, footprint.peer_slot);
        check_device_limits(&device, &port, plan, slot)?;
        check_tclass(plan, sends_grh(&port, gid_given))?;

        let pd = device.alloc_pd()?;
        let access = access_for(plan, role, &device, &mem, (relaxed_ordering, odp))?;
        let target = Target {
            pd: &pd,
            device: &device,
            access,
            hugepages,
        };
        // Dropped in any order (an error below drops these bindings last to first) the region goes
        // first: it holds guards of the memory under it, and Staging quiesces its copies itself.
        let (mr, gpu, staging) =
            register(&target, &mem, gpu_device.as_deref(), &footprint, staging)?;
        let stride = staging.as_ref().map_or(slot, |s| s.stride);
        let parts = register_parts(plan, &pd, &mr, slot, access)?;
        let posts_receives = plan.receives(role);
        let rx_depth = match (posts_receives, &staging) {
            (true, _) => plan.rx_depth,
            // Credits, or a WRITE target's landings: one receive per bounce buffer at most.
            (false, Some(s)) => s.config.depth as u32,
            (false, None) => 1,
        };
        let cq = CompletionQueue::new(&device, plan.qps * (plan.tx_depth + rx_depth))?;
        // --srq: one queue of rx-depth receives that every QP of a receiving side takes from.
        let srq = match (plan.srq && posts_receives, &staging) {
            (true, None) => Some(SharedReceiveQueue::new(&pd, rx_depth)?),
            _ => None,
        };
        let qps = create_qps(plan, &device, (&pd, &cq, srq.as_ref()), port.port, rx_depth)?;
        let psns = (0..qps.len()).map(first_psn).collect();
        Ok(Prepared {
            device,
            port,
            gid,
            gid_given,
            pd,
            cq,
            parts,
            mr,
            staging,
            gpu,
            mem,
            gpu_device,
            gpu_chosen,
            qps,
            psns,
            slot,
            stride,
            peer_slot,
            transport,
            mtu: plan.path_mtu,
            posts_receives,
            loop_posts_receives: staged && plan.test.mode == Mode::Bw,
            role,
            cm: None,
            srq,
        })
    }
}

/// What the peer may do with this side's memory for `plan`, registered with relaxed ordering
/// and on-demand paging as asked and allowed; on-demand paging the device cannot give is
/// refused naming why.
fn access_for(
    plan: &TestPlan,
    role: Role,
    device: &Device,
    mem: &MemMode,
    (relaxed_ordering, odp): (bool, bool),
) -> Result<Access> {
    if let Some(why) = odp
        .then(|| buffer::odp_refusal(device.name(), device.facts().odp, plan))
        .flatten()
    {
        return Err(PlanError::Device(why).into());
    }
    Ok(remote_access(plan, role)
        .with_relaxed_ordering(buffer::relaxed_ordering(relaxed_ordering, plan, mem))
        .with_on_demand(odp))
}

/// Creates `plan`'s QPs on `pd` and `cq` (taking receives from `srq` when given), each with
/// the inline size the plan asks for: a device that cannot give it is refused naming the
/// most it can (verbs has no query for it: QPs are created until one fits).
fn create_qps(
    plan: &TestPlan,
    device: &Device,
    (pd, cq, srq): (
        &ProtectionDomain,
        &CompletionQueue,
        Option<&SharedReceiveQueue>,
    ),
    port: u8,
    rx_depth: u32,
) -> Result<Vec<QueuePair<Created>>> {
    let builder = || {
        let b = QueuePairBuilder::new(pd, cq)
            .transport(transport(plan.connection))
            .port(port)
            .pkey_index(plan.pkey_index)
            .max_send_wr(plan.tx_depth)
            .max_recv_wr(rx_depth);
        match srq {
            Some(srq) => b.srq(srq),
            None => b,
        }
    };
    let what = || {
        format!(
            "creating a {} QP on {}",
            plan.connection.name(),
            device.name()
        )
    };
    let mut qps = Vec::with_capacity(plan.qps as usize);
    for _ in 0..plan.qps {
        let qp = match builder().max_inline_data(plan.inline).build() {
            Ok(qp) => qp,
            Err(e) if qps.is_empty() && plan.inline > 0 => {
                return Err(
                    match max_inline(|n| builder().max_inline_data(n).build().is_ok()) {
                        Some(max) => inline_refusal(plan, device, max).into(),
                        None => anyhow::Error::new(e).context(what()),
                    },
                );
            }
            Err(e) => return Err(anyhow::Error::new(e).context(what())),
        };
        if qp.caps().max_inline_data < plan.inline {
            return Err(inline_refusal(plan, device, qp.caps().max_inline_data).into());
        }
        qps.push(qp);
    }
    Ok(qps)
}

/// `-I` above what the device creates QPs with.
fn inline_refusal(plan: &TestPlan, device: &Device, max: u32) -> PlanError {
    PlanError::Device(format!(
        "--inline-size {} exceeds {}'s inline limit of {max} bytes for a {} QP: give -I {max} or \
         less",
        plan.inline,
        device.name(),
        plan.connection.name()
    ))
}

/// True when this side's QPs send a GRH: always on RoCE, on InfiniBand when `-x` named a GID.
fn sends_grh(port: &PortInfo, gid_given: bool) -> bool {
    port.link_layer == LinkLayer::Ethernet || gid_given
}

/// The READs/atomics a QP accepts outstanding as a responder: what the device allows, or
/// `-o` (perftest sets both ends of the QP from it).
fn responder_rd_atomic(f: &verbs::DeviceFacts, plan: &TestPlan) -> u32 {
    f.max_qp_rd_atom
        .clamp(1, 255)
        .min(plan.outs.unwrap_or(u32::MAX))
}

/// The largest inline size for which `creates` succeeds (verbs has no query for it), found
/// by bisection; `None` when even 0 fails (the failure is not about inline data).
fn max_inline(creates: impl Fn(u32) -> bool) -> Option<u32> {
    if !creates(0) {
        return None;
    }
    let (mut ok, mut bad) = (0u32, 1u32 << 16);
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        if creates(mid) {
            ok = mid;
        } else {
            bad = mid;
        }
    }
    Some(ok)
}

impl Prepared {
    /// `-R`: the QPs will connect through the RDMA CM as `side` says, each within `timeout`
    /// (the server's side listens from now on: before it sends its endpoints).
    pub(crate) fn use_cm(&mut self, side: cm::CmSide, timeout: Duration) {
        self.cm = Some((side, timeout));
    }

    /// The server's CM side for this side's GID, listening at `port`.
    pub(crate) fn cm_listener(&self, port: u16) -> Result<cm::CmSide> {
        cm::CmSide::listen(self.gid.as_ref(), port)
    }

    /// The bounce buffers, when this side is staged, to tell the peer.
    pub(crate) fn bounce(&self) -> Option<staged::BounceLayout> {
        self.staging.as_ref().map(staged::Staging::layout)
    }

    /// The endpoint of each QP, to send to the peer (with the READs/atomics it accepts
    /// outstanding as a responder: what the device allows, or `-o`).
    pub(crate) fn endpoints(&self, plan: &TestPlan) -> Vec<Endpoint> {
        let rd_atomic = responder_rd_atomic(self.device.facts(), plan) as u8;
        self.qps
            .iter()
            .zip(&self.psns)
            .enumerate()
            .map(|(i, (qp, &psn))| Endpoint {
                qpn: qp.qpn(),
                psn,
                lid: self.port.lid,
                gid: self.gid.map(|g| g.gid).unwrap_or_default(),
                mtu: self
                    .mtu
                    .unwrap_or(self.port.active_mtu)
                    .min(self.port.active_mtu),
                rkey: region(&self.parts, &self.mr, i).rkey(),
                addr: self.mr.addr() + i as u64 * self.stride,
                len: self.slot,
                rd_atomic,
            })
            .collect()
    }

    /// Checks the peer's endpoints (and, between two staged ends, its bounce buffers), posts
    /// every QP's receives (SEND tests), then moves every QP to ready-to-send against them.
    pub(crate) fn connect(
        mut self,
        remote: Vec<Endpoint>,
        peer_bounce: Option<staged::BounceLayout>,
        plan: &TestPlan,
    ) -> Result<Connected> {
        staged::check_peer(plan, self.role, self.bounce(), peer_bounce)?;
        self.check_remote(&remote, plan)?;
        let use_grh = sends_grh(&self.port, self.gid_given);
        let (path, rd_atomic) = self.path_config(&remote, plan, use_grh)?;
        // A staged receiver posts its receives into bounce buffers as its pipeline frees them.
        if self.posts_receives && !self.loop_posts_receives {
            self.post_first_receives(plan.rx_depth)?;
        }
        let mut ah = Vec::new();
        if self.transport == Transport::Ud {
            for peer in &remote {
                ah.push(AddressHandle::new(&self.pd, &path, peer)?);
            }
        }
        let (qps, cm_links) = self.connect_qps(&remote, &path)?;
        // The CM's path may be narrower than the ports' (it follows the netdev's MTU).
        let path_mtu = cm_links
            .iter()
            .map(verbs::CmConnection::path_mtu)
            .fold(path.mtu, u32::min);
        let mut params = ParamsRecord::planned(plan);
        params.path_mtu = Some(path_mtu);
        params.outs = params.outs.map(|_| rd_atomic);
        params.qp_timeout = (self.transport == Transport::Rc).then_some(path.qp_timeout);
        params.tclass = use_grh.then_some(path.traffic_class);
        params.relaxed_ordering = self.mr.relaxed_ordering();
        params.hugepages = self.mr.huge_pages();
        params.odp = self.mr.on_demand();
        let srq_qpns = srq_numbers(&qps, self.srq.is_some());
        Ok(Connected {
            device: self.device,
            port: self.port,
            gid: self.gid,
            cq: self.cq,
            parts: self.parts,
            mr: self.mr,
            staging: self.staging,
            gpu: self.gpu,
            mem: self.mem,
            gpu_device: self.gpu_device,
            gpu_chosen: self.gpu_chosen,
            qps,
            remote,
            ah,
            slot: self.slot,
            transport: self.transport,
            params,
            peer_bounce,
            _cm_links: cm_links,
            srq_qpns,
            srq: self.srq,
        })
    }

    /// Refuses a peer whose endpoints do not fit this side's plan: a way to connect not set
    /// up for it, another number of QPs, or a buffer smaller than the plan needs.
    fn check_remote(&self, remote: &[Endpoint], plan: &TestPlan) -> Result<()> {
        if plan.rdma_cm != self.cm.is_some() {
            bail!("-R: the QPs' way to connect was not set up for this plan");
        }
        if remote.len() != self.qps.len() {
            bail!(
                "the peer sent {} endpoints for {} QPs; both sides must run the same plan",
                remote.len(),
                self.qps.len()
            );
        }
        if let Some((i, e)) = remote
            .iter()
            .enumerate()
            .find(|(_, e)| e.len < self.peer_slot)
        {
            bail!(
                "the peer's buffer for QP {i} is {} bytes, smaller than the {} this plan needs",
                e.len,
                self.peer_slot
            );
        }
        Ok(())
    }

    /// The path both ends allow (MTU, outstanding READs/atomics, timeout, class, level) and
    /// the READs/atomics this side's QPs may have in flight.
    fn path_config(
        &self,
        remote: &[Endpoint],
        plan: &TestPlan,
        use_grh: bool,
    ) -> Result<(PathConfig, u32)> {
        let f = self.device.facts();
        let local_mtu = self
            .mtu
            .unwrap_or(self.port.active_mtu)
            .min(self.port.active_mtu);
        let path_mtu = remote.iter().map(|e| e.mtu).fold(local_mtu, u32::min);
        if self.transport == Transport::Ud {
            check_ud_size(plan, path_mtu, "what the peer's port allows")?;
        }
        let peer_rd = remote
            .iter()
            .map(|e| u32::from(e.rd_atomic))
            .min()
            .unwrap_or(1)
            .max(1);
        let rd_atomic = f
            .max_qp_init_rd_atom
            .clamp(1, 255)
            .min(peer_rd)
            .min(plan.outs.unwrap_or(u32::MAX));
        let path = PathConfig {
            port: self.port.port,
            sgid_index: if use_grh {
                self.gid.map(|g| g.index as u8)
            } else {
                None
            },
            mtu: path_mtu,
            max_dest_rd_atomic: responder_rd_atomic(f, plan) as u8,
            max_rd_atomic: rd_atomic as u8,
            qp_timeout: qp_timeout_for(plan, &self.device),
            traffic_class: plan.tclass.unwrap_or(0),
            service_level: plan.sl.unwrap_or(0),
            retry_count: plan.retry_count,
        };
        Ok((path, rd_atomic))
    }

    /// Posts `rx_depth` receives per QP into the QPs' receive halves, or with a shared
    /// receive queue `rx_depth` in all, spread over them.
    fn post_first_receives(&mut self, rx_depth: u32) -> Result<()> {
        let half = self.slot / 2;
        match self.srq.as_mut() {
            Some(srq) => {
                for i in 0..rx_depth as usize {
                    let q = i % self.qps.len().max(1);
                    let offset = q as u64 * self.slot;
                    srq.post_recv(&self.mr, bw::recv_wr_id(q), offset, half as u32)?;
                }
            }
            None => {
                for (q, qp) in self.qps.iter_mut().enumerate() {
                    for _ in 0..rx_depth {
                        let offset = q as u64 * self.slot;
                        let mr = region(&self.parts, &self.mr, q);
                        qp.post_recv(mr, bw::recv_wr_id(q), offset, half as u32)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Brings every QP to ready-to-send against its peer's, through the RDMA CM (`-R`) or
    /// directly; the CM's connections are kept for the run.
    fn connect_qps(
        &mut self,
        remote: &[Endpoint],
        path: &PathConfig,
    ) -> Result<(Vec<QueuePair<ReadyToSend>>, Vec<verbs::CmConnection>)> {
        let mut qps = Vec::with_capacity(self.qps.len());
        let mut cm_links = Vec::new();
        let created = std::mem::take(&mut self.qps);
        for ((qp, peer), psn) in created.into_iter().zip(remote).zip(&self.psns) {
            let qp = match self.cm.as_mut() {
                Some((side, timeout)) => {
                    let (qp, link) = side.connect(qp, peer, self.gid.as_ref(), path, *timeout)?;
                    cm_links.push(link);
                    qp
                }
                None => qp
                    .ready_to_receive(peer, path)
                    .with_context(|| format!("connecting to the peer's QP {}", peer.qpn))?
                    .ready_to_send(*psn, path)?,
            };
            qps.push(qp);
        }
        Ok((qps, cm_links))
    }
}

/// With a shared receive queue a completion names its QP by number only: each QP's number
/// and index, sorted by number; empty without one.
fn srq_numbers(qps: &[QueuePair<ReadyToSend>], srq: bool) -> Vec<(u32, usize)> {
    if !srq {
        return Vec::new();
    }
    let mut numbers: Vec<(u32, usize)> = qps
        .iter()
        .enumerate()
        .map(|(q, qp)| (qp.qpn(), q))
        .collect();
    numbers.sort_unstable();
    numbers
}

/// The RC acknowledgement timeout `plan` runs with on `device`: `-u`, else perftest's 14 (67 ms
/// a try) on a NIC and [`SOFTWARE_QP_TIMEOUT`] on a software device, whose acknowledgements are
/// as late as its host's CPUs are busy: there a retransmission is usually spurious, and Linux
/// 6.1's rxe answers some spurious retransmissions of multi-packet WRITEs with "remote invalid
/// request", failing the run. READs keep perftest's 14 there too: a retransmitted READ is
/// answered again, and rxe sends a READ's whole response at once, so one of more packets than
/// the requester's host queues (1,000) loses its tail every time and waits for this timer: a
/// 4 MiB READ took 4.5 s at 18 and 0.9 s at 14 in the two-node guest.
pub(crate) fn qp_timeout_for(plan: &TestPlan, device: &Device) -> u8 {
    let software = device.is_software() && plan.test.verb != Verb::Read;
    plan.qp_timeout.unwrap_or(if software {
        SOFTWARE_QP_TIMEOUT
    } else {
        DEFAULT_QP_TIMEOUT
    })
}

impl Connected {
    /// Bytes per slot half.
    pub(crate) fn half(&self) -> u64 {
        self.slot / 2
    }

    /// Offset of QP `q`'s receive half in the buffer.
    pub(crate) fn recv_offset(&self, q: usize) -> u64 {
        q as u64 * self.slot
    }

    /// Offset of QP `q`'s send half in the buffer.
    pub(crate) fn send_offset(&self, q: usize) -> u64 {
        q as u64 * self.slot + self.half()
    }

    /// The peer's receive half for QP `q`.
    pub(crate) fn remote_recv(&self, q: usize) -> u64 {
        self.remote[q].addr
    }

    /// The peer's send half for QP `q`.
    pub(crate) fn remote_send(&self, q: usize) -> u64 {
        self.remote[q].addr + self.remote[q].len / 2
    }

    /// `len` bytes at `offset`, wherever the buffer lives (GPU memory is copied out, after the
    /// NIC's writes into it are flushed where the GPU asks for that).
    pub(crate) fn read(&self, offset: u64, len: u64) -> Result<std::borrow::Cow<'_, [u8]>> {
        match &self.gpu {
            None => Ok(std::borrow::Cow::Borrowed(self.bytes(offset, len)?)),
            Some(g) => {
                let mut out = vec![0u8; len as usize];
                g.buf.copy_nic_written_to_host(offset as usize, &mut out)?;
                Ok(std::borrow::Cow::Owned(out))
            }
        }
    }

    /// Writes `data` at `offset`, wherever the buffer lives.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        match &self.gpu {
            None => {
                self.bytes_mut(offset, data.len() as u64)?
                    .copy_from_slice(data);
                Ok(())
            }
            Some(g) => Ok(g.buf.copy_from_host(offset as usize, data)?),
        }
    }

    /// `len` bytes at `offset` in the buffer.
    pub(crate) fn bytes(&self, offset: u64, len: u64) -> Result<&[u8]> {
        let host = self.mr.host().context("the buffer is not host memory")?;
        host.get(offset as usize..(offset + len) as usize)
            .with_context(|| format!("{len} bytes at {offset} are outside the buffer"))
    }

    /// `len` bytes at `offset` in the buffer, writable.
    pub(crate) fn bytes_mut(&mut self, offset: u64, len: u64) -> Result<&mut [u8]> {
        let host = self
            .mr
            .host_mut()
            .context("the buffer is not host memory")?;
        host.get_mut(offset as usize..(offset + len) as usize)
            .with_context(|| format!("{len} bytes at {offset} are outside the buffer"))
    }

    /// Posts one receive into QP `q`'s receive half (into the shared receive queue with
    /// `--srq`, where whichever QP receives next takes it).
    #[inline]
    pub(crate) fn post_recv(&mut self, q: usize, wr_id: u64) -> Result<()> {
        let (offset, len) = (self.recv_offset(q), self.half() as u32);
        match self.srq.as_mut() {
            Some(srq) => srq.post_recv(&self.mr, wr_id, offset, len)?,
            None => self.qps[q].post_recv(region(&self.parts, &self.mr, q), wr_id, offset, len)?,
        }
        Ok(())
    }

    /// The index of the QP that received `wc`: the receive's own QP (`q`, from its work
    /// request id), or with `--srq` the one the completion names.
    #[inline]
    pub(crate) fn receiver(&self, wc: &Completion, q: usize) -> usize {
        if self.srq_qpns.is_empty() {
            return q;
        }
        match self
            .srq_qpns
            .binary_search_by_key(&wc.qp_num(), |&(qpn, _)| qpn)
        {
            Ok(i) => self.srq_qpns[i].1,
            Err(_) => q,
        }
    }

    /// Address of the byte at `offset` in the buffer (for volatile polling).
    pub(crate) fn byte_ptr(&self, offset: u64) -> Result<*mut u8> {
        if !self.mr.is_cpu_readable() {
            bail!("the buffer is not host memory");
        }
        if offset >= self.mr.len() as u64 {
            bail!(
                "offset {offset} is outside the {}-byte buffer",
                self.mr.len()
            );
        }
        Ok((self.mr.addr() + offset) as *mut u8)
    }
}

#[cfg(test)]
mod tests;
