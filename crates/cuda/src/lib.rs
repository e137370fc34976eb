//! GPU memory for rdmabench, through [cudarc]'s driver API loaded at run time (`dynamic-loading`): nothing links
//! against `libcuda` at build time, and a machine without the NVIDIA driver builds, tests and runs everything
//! else; every entry point then returns [`CudaError::NoDriver`] ("no CUDA driver: libcuda.so.1 not found; ...").
//! cudarc itself panics when the library or one of its symbols is missing, so [`probe()`] checks both before the
//! first real call, and every constructor here goes through it.
//!
//! # From nothing to a registered GPU buffer (GPUDirect RDMA on, `--mem cuda`)
//! 1. [`probe()`]: is there a driver, which version, how many GPUs. (Optional: every constructor probes.)
//! 2. [`Device::open`] with a [`DeviceSelector`] parsed from `--mem cuda:N` or `cuda:0000:17:00.0`. The
//!    [`Device`] knows its name and [`PciBusId`] (for the topology: which NIC is closest) and its two
//!    attributes; [`Device::require_gpu_direct_rdma`] and [`Device::require_dma_buf`] refuse early, saying
//!    what to use instead.
//! 3. [`DeviceBuffer::new`]: device memory, rounded up to the 64 KiB GPU page (see [`memory`] for why).
//!    [`DeviceBuffer::write_pattern`] / [`DeviceBuffer::verify_pattern`] serve `--validate`.
//! 4. [`DeviceBuffer::export_dmabuf`]: a [`DmaBuf`] — an owned dma-buf fd plus the offset, length and iova
//!    (the GPU address) that `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)` takes.
//! 5. The verbs layer registers it; the peer is told `iova` and the rkey.
//!
//! ```no_run
//! use cuda::{Device, DeviceBuffer, DeviceSelector};
//!
//! # fn main() -> Result<(), cuda::CudaError> {
//! let driver = cuda::probe()?; // Err(NoDriver) here, never a panic, without libcuda.so.1
//! println!("CUDA driver {} with {} GPU(s)", driver.version_string(), driver.device_count);
//!
//! let selector: DeviceSelector = "0000:17:00.0".parse()?; // or "0", or nvidia-smi's "00000000:17:00.0"
//! let gpu = Device::open(&selector)?;
//! gpu.require_gpu_direct_rdma()?; // else: use --mem cuda-staged
//! gpu.require_dma_buf()?; // else: --mem cuda-peermem or cuda-staged
//! println!("{} at {}", gpu.name(), gpu.pci_bus_id());
//!
//! let buf = DeviceBuffer::new(&gpu, 8 << 20)?; // 8 MiB, 64 KiB aligned
//! buf.write_pattern(1)?; // --validate: the sender's payload
//!
//! let dmabuf = buf.export_dmabuf(0, buf.len())?;
//! assert_eq!(dmabuf.iova(), buf.device_ptr());
//! // let mr = pd.reg_dmabuf_mr(dmabuf.offset(), dmabuf.len(), dmabuf.iova(), dmabuf.fd(), access)?;
//! // Keep `buf` (and `dmabuf`, or at least the MR) alive for as long as the MR is used.
//! # Ok(())
//! # }
//! ```
//!
//! # The staged path (GPUDirect RDMA off, `--mem cuda-staged`)
//! The payload stays in a [`DeviceBuffer`] and moves through K pinned bounce buffers ([`PinnedBuffer`], one
//! allocation of `chunk * K` bytes, registered with plain `ibv_reg_mr`) by async copies on a [`Stream`], each
//! followed by an [`Event`] the engine polls. The order of copies, posts, completions and buffer reuse is
//! decided by the pure scheduler in [`staging`] ([`staging::SendPipeline`], [`staging::RecvPipeline`]).
//!
//! # Behind the seam
//! [`CUDA`] is this crate as an `accel::Runtime` ([`runtime`]): the benchmark reaches CUDA only
//! through it. The pure pieces every runtime shares (GPU selection, the staged path's scheduler
//! in `accel::staging`, the `--validate` pattern, the dma-buf range) live in `rdmabench-accel`
//! and are re-exported here.
//!
//! # Modules
//! [`mod@probe`] (driver present?), [`driver`] (the entry points, with raw integer results: see there why),
//! [`result_codes`] (their names), [`device`] (selection, attributes), [`memory`] (device buffers), [`dmabuf`]
//! (export), [`pinned`] (host bounce buffers), [`stream`] (async copies, events), [`runtime`] (the seam's
//! traits for all of these), [`error`].

pub mod device;
pub mod dmabuf;
pub mod driver;
pub mod error;
pub mod memory;
pub mod pinned;
pub mod probe;
pub mod result_codes;
pub mod runtime;
pub mod stream;

// What every runtime shares lives in the seam's crate; these are its names here too.
pub use accel::{
    align_range, dmabuf_exporter, host_page_size, pattern, staging, AlignedRange, AllocationGuard,
    Chunk, DeviceSelector, DmaBuf, PciBusId, RecvPipeline, SendPipeline, StagingConfig,
    StagingError, StagingPlan, HOST_PAGE_SIZE,
};
pub use device::{device_count, list_devices, Device, DeviceInfo, NicWritesFlush};
pub use error::CudaError;
pub use memory::{gpu_alloc_len, DeviceBuffer, GPU_PAGE_SIZE};
pub use pinned::PinnedBuffer;
pub use probe::{driver_library_present, probe, DriverInfo};
pub use runtime::CUDA;
pub use stream::{Event, Stream};
