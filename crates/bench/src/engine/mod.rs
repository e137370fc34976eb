//! The test engine: one side's verbs resources (device, port, GID, buffers, CQ, QPs), their
//! connection to the peer's endpoints, and the measured loops (`bw.rs`).

pub mod bw;

use anyhow::{bail, Context, Result};
use verbs::{
    Access, CompletionQueue, Created, Device, Endpoint, GidEntry, HostBuffer, LinkLayer,
    MemoryRegion, PathConfig, PortInfo, QueuePair, QueuePairBuilder, ReadyToSend,
};

use crate::memory::slot_len;
use crate::plan::TestPlan;

/// What one side was told about its own hardware.
#[derive(Debug, Clone, Default)]
pub struct SideConfig {
    /// `-d`: device name; `None` takes the first device with an ACTIVE port.
    pub device: Option<String>,
    /// `-i`: port number.
    pub port: u8,
    /// `-x`: GID index; `None` lets rdmabench choose as perftest does.
    pub gid_index: Option<u32>,
}

/// The device and port opened and checked, the GID resolved: nothing created yet.
#[derive(Debug)]
pub struct Local {
    device: Device,
    port: PortInfo,
    gid: Option<GidEntry>,
    gid_given: bool,
}

/// Resources created, QPs in INIT, endpoints ready to send to the peer.
#[derive(Debug)]
pub struct Prepared {
    device: Device,
    port: PortInfo,
    gid: Option<GidEntry>,
    gid_given: bool,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qps: Vec<QueuePair<Created>>,
    psns: Vec<u32>,
    slot: u64,
}

/// Connected to the peer: every QP ready to send.
#[derive(Debug)]
pub struct Connected {
    /// The open device.
    pub device: Device,
    /// The port in use.
    pub port: PortInfo,
    /// The GID in use.
    pub gid: Option<GidEntry>,
    /// The one CQ all QPs complete into.
    pub cq: CompletionQueue,
    /// The buffer: one slot per QP.
    pub mr: MemoryRegion,
    /// The QPs.
    pub qps: Vec<QueuePair<ReadyToSend>>,
    /// The peer's endpoint for each QP.
    pub remote: Vec<Endpoint>,
    /// Bytes per slot.
    pub slot: u64,
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

/// Checks the plan against what this device can do, before anything is created.
fn check_device_limits(device: &Device, plan: &TestPlan, slot: u64) -> Result<()> {
    let f = device.facts();
    if plan.tx_depth > f.max_qp_wr {
        bail!(
            "--tx-depth {} exceeds {}'s limit of {} work requests per queue",
            plan.tx_depth,
            f.name,
            f.max_qp_wr
        );
    }
    let cqe = u64::from(plan.qps) * u64::from(plan.tx_depth);
    if cqe > u64::from(f.max_cqe) {
        bail!(
            "--qps {} x --tx-depth {} needs a CQ of {cqe} entries; {} allows {}: lower one of them",
            plan.qps,
            plan.tx_depth,
            f.name,
            f.max_cqe
        );
    }
    let total = slot * u64::from(plan.qps);
    if f.max_mr_size > 0 && total > f.max_mr_size {
        bail!(
            "{} QPs x {} bytes = {total} bytes exceeds {}'s largest memory region ({} bytes)",
            plan.qps,
            slot,
            f.name,
            f.max_mr_size
        );
    }
    Ok(())
}

impl Local {
    /// Opens the device and its port (which must be ACTIVE) and resolves the GID, so that a
    /// missing device fails the run before any peer is waited for.
    pub fn open(cfg: &SideConfig) -> Result<Self> {
        let device = Device::open(cfg.device.as_deref())?;
        let port = device.active_port(cfg.port)?;
        let gid = device.resolve_gid(&port, cfg.gid_index)?;
        Ok(Local {
            device,
            port,
            gid,
            gid_given: cfg.gid_index.is_some(),
        })
    }

    /// Creates the buffer, CQ and QPs for `plan`.
    pub fn prepare(self, plan: &TestPlan) -> Result<Prepared> {
        let Local {
            device,
            port,
            gid,
            gid_given,
        } = self;
        let slot = slot_len(plan.max_size());
        check_device_limits(&device, plan, slot)?;

        let pd = device.alloc_pd()?;
        let len = usize::try_from(slot * u64::from(plan.qps))
            .context("buffer too large for this machine")?;
        let buffer = HostBuffer::new(len)?;
        let mr = MemoryRegion::register_host(&pd, buffer, Access::ALL).with_context(|| {
            format!(
                "registering {len} bytes of host memory on {}",
                device.name()
            )
        })?;
        let cq = CompletionQueue::new(&device, plan.qps * plan.tx_depth)?;
        let mut qps = Vec::with_capacity(plan.qps as usize);
        for _ in 0..plan.qps {
            let qp = QueuePairBuilder::new(&pd, &cq)
                .port(port.port)
                .max_send_wr(plan.tx_depth)
                .max_recv_wr(1)
                .max_inline_data(plan.inline)
                .build()?;
            if qp.caps().max_inline_data < plan.inline {
                bail!(
                    "--inline-size {} exceeds {}'s inline limit of {} bytes",
                    plan.inline,
                    device.name(),
                    qp.caps().max_inline_data
                );
            }
            qps.push(qp);
        }
        let psns = (0..qps.len()).map(first_psn).collect();
        Ok(Prepared {
            device,
            port,
            gid,
            gid_given,
            cq,
            mr,
            qps,
            psns,
            slot,
        })
    }
}

impl Prepared {
    /// The endpoint of each QP, to send to the peer.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.qps
            .iter()
            .zip(&self.psns)
            .enumerate()
            .map(|(i, (qp, &psn))| Endpoint {
                qpn: qp.qpn(),
                psn,
                lid: self.port.lid,
                gid: self.gid.map(|g| g.gid).unwrap_or_default(),
                mtu: self.port.active_mtu,
                rkey: self.mr.rkey(),
                addr: self.mr.addr() + i as u64 * self.slot,
                len: self.slot,
            })
            .collect()
    }

    /// Moves every QP to ready-to-send against the peer's endpoints.
    pub fn connect(self, remote: Vec<Endpoint>) -> Result<Connected> {
        if remote.len() != self.qps.len() {
            bail!(
                "the peer sent {} endpoints for {} QPs; both sides must run the same plan",
                remote.len(),
                self.qps.len()
            );
        }
        if let Some((i, e)) = remote.iter().enumerate().find(|(_, e)| e.len < self.slot) {
            bail!(
                "the peer's buffer for QP {i} is {} bytes, smaller than this side's {}",
                e.len,
                self.slot
            );
        }
        let f = self.device.facts();
        let use_grh = self.port.link_layer == LinkLayer::Ethernet || self.gid_given;
        let path = PathConfig {
            port: self.port.port,
            sgid_index: if use_grh {
                self.gid.map(|g| g.index as u8)
            } else {
                None
            },
            mtu: self.port.active_mtu,
            max_dest_rd_atomic: f.max_qp_rd_atom.clamp(1, 16) as u8,
            max_rd_atomic: f.max_qp_init_rd_atom.clamp(1, 16) as u8,
        };
        let mut qps = Vec::with_capacity(self.qps.len());
        for ((qp, peer), psn) in self.qps.into_iter().zip(&remote).zip(&self.psns) {
            let qp = qp
                .ready_to_receive(peer, &path)
                .with_context(|| format!("connecting to the peer's QP {}", peer.qpn))?
                .ready_to_send(*psn, &path)?;
            qps.push(qp);
        }
        Ok(Connected {
            device: self.device,
            port: self.port,
            gid: self.gid,
            cq: self.cq,
            mr: self.mr,
            qps,
            remote,
            slot: self.slot,
        })
    }
}

impl Connected {
    /// The bytes of QP `qp`'s slot, `len` long (host memory).
    pub fn slot_bytes(&self, qp: usize, len: u64) -> Result<&[u8]> {
        let start = qp as u64 * self.slot;
        let host = self.mr.host().context("the buffer is not host memory")?;
        host.get(start as usize..(start + len) as usize)
            .with_context(|| format!("slot {qp} of {len} bytes is outside the buffer"))
    }

    /// The bytes of QP `qp`'s slot, writable.
    pub fn slot_bytes_mut(&mut self, qp: usize, len: u64) -> Result<&mut [u8]> {
        let start = qp as u64 * self.slot;
        let host = self
            .mr
            .host_mut()
            .context("the buffer is not host memory")?;
        host.get_mut(start as usize..(start + len) as usize)
            .with_context(|| format!("slot {qp} of {len} bytes is outside the buffer"))
    }
}
