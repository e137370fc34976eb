//! The accelerator-memory seam: what rdmabench needs of a GPU runtime, as traits, and what every
//! runtime shares. A runtime (CUDA in `crates/cuda`, ROCm in `crates/rocm`) implements [`Runtime`], [`Gpu`],
//! [`GpuBuffer`] and [`CopyQueue`]; the benchmark holds only these, and names a runtime in one
//! place, where `--mem` picks it.
//!
//! # From `--mem` to a registered GPU buffer
//! 1. [`Runtime::probe`]: is the runtime's library here, and does it see a GPU? (The error says
//!    what is missing, on one line.)
//! 2. [`Runtime::open`] with a [`DeviceSelector`] (`--mem cuda:3`, `cuda:0000:17:00.0`): a
//!    [`Gpu`], which knows its name and [`PciBusId`] (for the topology and the record) and refuses
//!    early what it cannot do ([`Gpu::require_dma_buf`], [`Gpu::require_gpu_direct_rdma`]).
//! 3. [`Gpu::alloc`]: a [`GpuBuffer`]. With dma-buf (`--mem cuda`), [`GpuBuffer::export_dmabuf`]
//!    (of a range) gives a [`DmaBuf`], the argument list of `ibv_reg_dmabuf_mr`; with a peer-memory module
//!    (`--mem cuda-peermem`), the NIC registers [`GpuBuffer::device_ptr`] as it would host memory.
//! 4. Staged (`--mem cuda-staged`, GPUDirect RDMA off): [`Gpu::pinned`] bounce buffers, which the
//!    NIC registers as host memory, and a [`CopyQueue`] that moves chunks between them and the
//!    GPU, in the order the pure scheduler in [`staging`] decides.
//!
//! ```no_run
//! # fn demo(runtime: &dyn accel::Runtime) -> Result<(), accel::AccelError> {
//! runtime.probe()?;
//! let gpu = runtime.open(&"0000:17:00.0".parse()?)?;
//! gpu.require_dma_buf()?; // else: the staged mode
//! let buf = gpu.alloc(8 << 20)?;
//! let dmabuf = buf.export_dmabuf(0, buf.len())?;
//! assert_eq!(dmabuf.iova(), buf.device_ptr());
//! // pd.reg_dmabuf_mr(dmabuf.offset(), dmabuf.len(), dmabuf.iova(), dmabuf.fd(), access)
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//! [`selector`] (which GPU), [`dmabuf`] (the exported range), [`pinned`] (bounce buffers),
//! [`staging`] (the staged path's scheduler, pure), [`pattern`] (the `--validate` bytes, pure),
//! [`error`].

pub mod dmabuf;
pub mod error;
pub mod guard;
pub mod pattern;
pub mod pinned;
pub mod selector;
pub mod staging;

use std::fmt;

pub use dmabuf::{
    align_range, dmabuf_exporter, host_page_size, AlignedRange, DmaBuf, DmaBufMapping,
    MappingUnsupported, HOST_PAGE_SIZE,
};
pub use error::{check_range, nth_marker, AccelError, OutOfBounds};
pub use guard::AllocationGuard;
pub use pinned::PinnedBuffer;
pub use selector::{DeviceSelector, PciBusId, SelectorError};
pub use staging::{Chunk, RecvPipeline, SendPipeline, StagingConfig, StagingError, StagingPlan};

/// A GPU runtime, loaded at run time: nothing links against it, and a machine without it builds,
/// tests and runs everything else.
pub trait Runtime: Sync {
    /// Its name in messages: "CUDA".
    fn name(&self) -> &'static str;

    /// Whether its driver library loads here (nothing else is checked).
    fn library_present(&self) -> bool;

    /// Loads the runtime and checks that it sees a GPU; the error says what is missing.
    fn probe(&self) -> Result<(), AccelError>;

    /// Opens the GPU `gpu` names.
    fn open(&self, gpu: &DeviceSelector) -> Result<Box<dyn Gpu>, AccelError>;

    /// What lets `ibv_reg_mr` take its GPUs' memory by address.
    fn peer_memory(&self) -> PeerMemory;
}

/// The kernel piece through which `ibv_reg_mr` registers a runtime's GPU memory by address
/// (GPUDirect RDMA without dma-buf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerMemory {
    /// Its name in messages: "nvidia-peermem".
    pub name: &'static str,
    /// Paths of which one exists while it is loaded: "/sys/module/nvidia_peermem", and the
    /// legacy module's "/sys/module/nv_peer_mem".
    pub loaded_when: &'static [&'static str],
    /// How to get it: "`modprobe nvidia-peermem` (it ships with the NVIDIA driver)".
    pub how: &'static str,
}

impl PeerMemory {
    /// The first of [`loaded_when`](Self::loaded_when) that `exists` finds: it is loaded (a
    /// sysfs snapshot's reader, or the live file system's); `None` where none is.
    pub fn loaded_by(&self, exists: impl Fn(&std::path::Path) -> bool) -> Option<&'static str> {
        self.loaded_when
            .iter()
            .copied()
            .find(|path| exists(std::path::Path::new(path)))
    }

    /// [`loaded_by`](Self::loaded_by) on this machine.
    pub fn loaded(&self) -> Option<&'static str> {
        self.loaded_by(std::path::Path::exists)
    }
}

/// An open GPU.
pub trait Gpu: Send + Sync + fmt::Debug {
    /// The runtime's ordinal of it.
    fn ordinal(&self) -> u32;

    /// Its marketing name ("NVIDIA H100 80GB HBM3").
    fn name(&self) -> &str;

    /// Its PCI address, for the PCIe tree and the record.
    fn pci_bus_id(&self) -> PciBusId;

    /// Its memory, in bytes.
    fn total_memory(&self) -> usize;

    /// Refuses, saying what to use instead, when a NIC cannot reach its memory at all.
    fn require_gpu_direct_rdma(&self) -> Result<(), AccelError>;

    /// Refuses, saying what to use instead, when its memory cannot be exported as dma-buf.
    fn require_dma_buf(&self) -> Result<(), AccelError>;

    /// `len` bytes of its memory.
    fn alloc(&self, len: usize) -> Result<Box<dyn GpuBuffer>, AccelError>;

    /// `len` bytes of pinned host memory, zeroed, for its copy engines.
    fn pinned(&self, len: usize) -> Result<PinnedBuffer, AccelError>;

    /// A queue of asynchronous copies with `marks` markers to learn when they are done.
    fn copy_queue(&self, marks: usize) -> Result<Box<dyn CopyQueue>, AccelError>;
}

/// GPU memory: freed when it and every guard and dma-buf taken from it are dropped.
pub trait GpuBuffer: Send + Sync + fmt::Debug {
    /// Its device address: the iova of a dma-buf MR over it, and what the peer addresses.
    fn device_ptr(&self) -> u64;

    /// The bytes asked for.
    fn len(&self) -> usize;

    /// Never true: runtimes refuse zero-byte buffers.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A guard that keeps the memory allocated while it lives, for a memory registration.
    fn guard(&self) -> AllocationGuard;

    /// `offset .. offset + len` of the buffer exported as a dma-buf (its iova the GPU address
    /// of byte `offset`).
    fn export_dmabuf(&self, offset: usize, len: usize) -> Result<DmaBuf, AccelError>;

    /// [`GpuBuffer::export_dmabuf`] with the GPU mapping it through `mapping`; a runtime that
    /// has only the default mapping refuses any other ([`MappingUnsupported`]).
    fn export_dmabuf_mapped(
        &self,
        offset: usize,
        len: usize,
        mapping: DmaBufMapping,
    ) -> Result<DmaBuf, AccelError> {
        match mapping {
            DmaBufMapping::Default => self.export_dmabuf(offset, len),
            DmaBufMapping::Pcie => Err(AccelError::new(MappingUnsupported)),
        }
    }

    /// Copies `src` to `offset ..`, complete when this returns.
    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<(), AccelError>;

    /// Copies `offset .. offset + dst.len()` into `dst` after the NIC wrote it, making the NIC's
    /// writes visible first where the GPU needs that (a flush), complete when this returns.
    fn copy_nic_written_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccelError>;
}

/// Asynchronous copies between a GPU's memory and pinned host memory, in the order queued, and
/// markers that tell when the copies queued before them are done.
pub trait CopyQueue: Send + Sync + fmt::Debug {
    /// Queues a copy of `len` bytes from GPU address `src` to `dst`.
    ///
    /// # Safety
    /// Both ranges are inside live allocations of this GPU and its pinned memory; until the copy
    /// is done (a later marker reached, or [`CopyQueue::synchronize`]) the destination is not
    /// touched by the CPU, the NIC or another copy, and neither allocation is freed.
    unsafe fn queue_device_to_host(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), AccelError>;

    /// Queues a copy of `len` bytes from `src` to GPU address `dst`.
    ///
    /// # Safety
    /// As [`CopyQueue::queue_device_to_host`], the source not written until the copy is done.
    unsafe fn queue_host_to_device(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), AccelError>;

    /// Sets marker `marker` after every copy queued so far.
    fn mark(&self, marker: usize) -> Result<(), AccelError>;

    /// Whether every copy queued before marker `marker` was last set is done.
    fn reached(&self, marker: usize) -> Result<bool, AccelError>;

    /// Waits until every queued copy is done.
    fn synchronize(&self) -> Result<(), AccelError>;
}

impl dyn CopyQueue {
    /// Queues a copy of `src[src_offset .. + len]` to `dst[dst_offset ..]`, both ranges checked.
    ///
    /// # Safety
    /// Until the copy is done: the destination range is not touched by the CPU, the NIC or
    /// another copy, and neither buffer is dropped.
    pub unsafe fn device_to_host(
        &self,
        dst: &PinnedBuffer,
        dst_offset: usize,
        src: &dyn GpuBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<(), AccelError> {
        let to = dst.range_ptr(dst_offset, len, "device-to-host copy (pinned destination)")?;
        check_range(
            "device-to-host copy (GPU source)",
            src_offset,
            len,
            src.len(),
        )?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges checked in bounds; the caller's contract covers the rest.
        unsafe { self.queue_device_to_host(to, src.device_ptr() + src_offset as u64, len) }
    }

    /// Queues a copy of `src[src_offset .. + len]` to `dst[dst_offset ..]`, both ranges checked.
    ///
    /// # Safety
    /// Until the copy is done: the source range is not written, the destination not used by
    /// anything else, and neither buffer is dropped.
    pub unsafe fn host_to_device(
        &self,
        dst: &dyn GpuBuffer,
        dst_offset: usize,
        src: &PinnedBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<(), AccelError> {
        check_range(
            "host-to-device copy (GPU destination)",
            dst_offset,
            len,
            dst.len(),
        )?;
        let from = src.range_ptr(src_offset, len, "host-to-device copy (pinned source)")?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges checked in bounds; the caller's contract covers the rest.
        unsafe { self.queue_host_to_device(dst.device_ptr() + dst_offset as u64, from, len) }
    }
}
