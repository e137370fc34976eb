//! Where a side's memory is allocated and how it is registered with the NIC: host memory
//! (on huge pages, or for on-demand paging), GPU memory through peer memory or a dma-buf
//! (mapped through PCIe, or mlx5 Data Direct), or a staged side's pinned bounce buffers.

use anyhow::{bail, Context, Result};
use verbs::{Access, Device, MemoryRegion, ProtectionDomain};

use super::buffer::{self, Footprint};
use super::{staged, GpuMemory};
use crate::memory::{DmaBufVia, GpuPath, MemMode};

/// Opens the GPU of a GPU memory mode and checks what the mode needs of it.
pub(super) fn open_gpu(mem: &MemMode) -> Result<Option<Box<dyn accel::Gpu>>> {
    let (Some(g), Some(runtime)) = (mem.gpu_mem(), mem.runtime()) else {
        return Ok(None);
    };
    let gpu = runtime.open(&g.gpu)?;
    if mem.gdr() {
        gpu.require_gpu_direct_rdma()?;
    }
    if g.path == GpuPath::DmaBuf {
        gpu.require_dma_buf()?;
    }
    Ok(Some(gpu))
}

/// What a memory mode registered: the region, the GPU memory behind it, and a staged side's
/// bounce buffers (which are the region).
pub(super) type Registered = (MemoryRegion, Option<GpuMemory>, Option<staged::Staging>);

/// Where and how memory is registered.
pub(super) struct Target<'a> {
    pub(super) pd: &'a ProtectionDomain,
    pub(super) device: &'a Device,
    pub(super) access: Access,
    /// Host memory on huge pages (`--use-hugepages`).
    pub(super) hugepages: bool,
}

/// Allocates the `footprint` (one slot per QP) where `mem` says and registers it with the NIC;
/// a staged side registers its pinned bounce buffers instead, the slots living on the GPU.
/// Every region holds what keeps this side's memory allocated (the host buffer, or guards of the
/// GPU and pinned allocations), so it is always deregistered before any of it is freed.
pub(super) fn register(
    target: &Target,
    mem: &MemMode,
    gpu: Option<&dyn accel::Gpu>,
    footprint: &Footprint,
    staging: accel::StagingConfig,
) -> Result<Registered> {
    let Target {
        pd,
        device,
        access,
        hugepages,
    } = *target;
    let len =
        usize::try_from(footprint.payload_bytes()).context("buffer too large for this machine")?;
    let what = || {
        format!(
            "registering {len} bytes of {} memory on {}",
            mem.name(),
            device.name()
        )
    };
    match (mem.gpu_mem().map(|g| g.path), gpu) {
        (None, _) => {
            let buffer = buffer::host_buffer(len, hugepages)?;
            let mr = MemoryRegion::register_host(pd, buffer, access).with_context(what)?;
            Ok((mr, None, None))
        }
        (Some(GpuPath::DmaBuf), Some(gpu)) => {
            let via = mem.gpu_mem().map(|g| g.dmabuf).unwrap_or_default();
            let (mr, buf) = register_dmabuf(target, gpu, len, via).with_context(what)?;
            Ok((mr, Some(GpuMemory { buf }), None))
        }
        (Some(GpuPath::PeerMem), Some(gpu)) => {
            let buf = gpu.alloc(len)?;
            // SAFETY: the region holds a guard of the device memory.
            let mr = unsafe {
                MemoryRegion::register_raw(pd, buf.device_ptr(), len, access, buf.guard())
            }
            .map_err(|e| peer_memory_refused(&what(), &e, mem))?;
            Ok((mr, Some(GpuMemory { buf }), None))
        }
        (Some(GpuPath::Staged), Some(gpu)) => {
            let buf = gpu.alloc(len)?;
            let s = staged::Staging::new(gpu, staging, footprint, buf.as_ref())?;
            // SAFETY: the region holds a guard of the pinned memory (and of the GPU payload, so
            // that no memory of this side is freed while it is registered); the pipeline posts a
            // bounce buffer (inline or not) only after its copy completed, and copies into it
            // only after its operations completed.
            let mr = unsafe {
                MemoryRegion::register_host_raw(
                    pd,
                    s.pinned.as_ptr() as u64,
                    s.pinned.len(),
                    access,
                    (s.pinned.guard(), buf.guard()),
                )
            }
            .with_context(|| {
                format!(
                    "registering {} bytes of pinned bounce buffers on {}",
                    s.pinned.len(),
                    device.name()
                )
            })?;
            Ok((mr, Some(GpuMemory { buf }), Some(s)))
        }
        (_, None) => bail!("--mem {}: no GPU was opened", mem.name()),
    }
}

/// `len` bytes of `gpu`'s memory exported as a dma-buf and registered, `via` saying how: mapped
/// through PCIe (CUDA 12.8+), and through the NIC's Data Direct function (checked before any GPU
/// memory is allocated).
pub(super) fn register_dmabuf(
    target: &Target,
    gpu: &dyn accel::Gpu,
    len: usize,
    via: DmaBufVia,
) -> Result<(MemoryRegion, Box<dyn accel::GpuBuffer>)> {
    if via == DmaBufVia::DataDirect {
        target.device.data_direct_path()?;
    }
    let buf = gpu.alloc(len)?;
    let dmabuf = buf.export_dmabuf_mapped(0, len, via.mapping())?;
    let (fd, offset, iova, len) = (
        dmabuf.raw_fd(),
        dmabuf.offset(),
        dmabuf.iova(),
        dmabuf.len(),
    );
    let (pd, access) = (target.pd, target.access);
    // SAFETY: the region holds the dma-buf, which holds the memory it exports.
    let mr = unsafe {
        MemoryRegion::register_dmabuf(
            pd,
            fd,
            offset,
            len,
            iova,
            access,
            via.registration(),
            dmabuf,
        )
    }?;
    Ok((mr, buf))
}

/// Why `ibv_reg_mr` of `mem`'s GPU memory failed with `e`: its runtime's peer memory, loaded
/// or not, and what to do.
pub(super) fn peer_memory_refused(
    what: &str,
    e: &verbs::VerbsError,
    mem: &MemMode,
) -> anyhow::Error {
    let Some(peer) = mem.runtime().map(|r| r.peer_memory()) else {
        return anyhow::anyhow!("{what}: {e}");
    };
    let state = if peer.loaded().is_some() {
        "loaded (so the NIC driver refused anyway)"
    } else {
        "not loaded"
    };
    anyhow::anyhow!(
        "{what}: {e}; ibv_reg_mr on GPU memory needs {}, which is {state}: {}, or use --mem {} \
         (dma-buf)",
        peer.name,
        peer.how,
        mem.with_path(GpuPath::DmaBuf)
    )
}
