//! AMD GPU memory for rdmabench, behind the accelerator seam (`accel`): the HIP runtime
//! (libamdhip64) for devices, memory, pinned host buffers and copies, and the HSA runtime
//! (libhsa-runtime64) for the dma-buf export, both loaded at run time. Nothing links against
//! ROCm at build time; a machine without it builds, tests and runs everything else, and each
//! call here then fails with one line saying what is missing ([`RocmError::NoRuntime`]).
//!
//! # From `--mem rocm` to a registered GPU buffer
//! [`ROCM`] is the `accel::Runtime`: `probe()` loads the runtime and counts the GPUs; `open()`
//! takes an index or a PCI bus id (`--mem rocm:0000:17:00.0`); the GPU's `alloc()` gives
//! `hipMalloc` memory sized in whole 64 KiB (aligned as hipMalloc aligns it, at least 256 bytes:
//! nothing here assumes more) whose `export_dmabuf()` is `hsa_amd_portable_export_dmabuf` of the
//! range widened to host pages, the argument list of `ibv_reg_dmabuf_mr` (`--mem rocm`, perftest's
//! `--use_rocm_dmabuf`). Without dma-buf, `ibv_reg_mr` takes the device pointer through amdgpu's
//! peer memory (`--mem rocm-peermem`, perftest's `--use_rocm`); `--mem rocm-staged` moves the
//! payload through pinned host memory (`hipHostMalloc`) on a stream, as `cuda-staged` does.
//!
//! ```no_run
//! use accel::Runtime;
//! # fn main() -> Result<(), accel::AccelError> {
//! rocm::ROCM.probe()?; // Err here, never a panic, without libamdhip64
//! let gpu = rocm::ROCM.open(&"0".parse()?)?;
//! let buf = gpu.alloc(8 << 20)?;
//! let dmabuf = buf.export_dmabuf(0, buf.len())?; // ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)
//! assert_eq!(dmabuf.iova(), buf.device_ptr());
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//! [`api`] (the entry points, looked up once), [`gpu`] (devices, memory, pinned buffers, copy
//! queues), [`error`]. `tests/fake_rocm` is a fake runtime that lets every path run here.

pub mod api;
pub mod error;
pub mod gpu;

pub use error::RocmError;
pub use gpu::{device_count, Device, DeviceBuffer};

use accel::{AccelError, DeviceSelector};

/// The ROCm runtime.
#[derive(Debug)]
pub struct Rocm;

/// The one ROCm runtime, for `--mem rocm`, `rocm-peermem` and `rocm-staged`.
pub static ROCM: Rocm = Rocm;

impl accel::Runtime for Rocm {
    fn name(&self) -> &'static str {
        "ROCm"
    }

    fn library_present(&self) -> bool {
        api::library_present()
    }

    fn probe(&self) -> Result<(), AccelError> {
        device_count()?;
        Ok(())
    }

    fn open(&self, gpu: &DeviceSelector) -> Result<Box<dyn accel::Gpu>, AccelError> {
        Ok(Box::new(Device::open(gpu)?))
    }

    fn peer_memory(&self) -> accel::PeerMemory {
        accel::PeerMemory {
            name: "amdgpu PeerDirect",
            loaded_when: &["/sys/kernel/mm/memory_peers/amdkfd/version"],
            how: "install amdgpu-dkms (ROCm's kernel driver) with an ib_core that has the \
                  peer-memory API (MLNX_OFED, DOCA-OFED)",
        }
    }
}
