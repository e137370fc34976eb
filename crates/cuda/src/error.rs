//! The one error type of this crate: every failure, from "no driver" to a refused dma-buf export, says what is
//! missing and what to try, on one line.

use accel::{OutOfBounds, PciBusId, SelectorError, StagingError};

use crate::driver::RawResult;
use crate::result_codes::describe;

/// Everything that can go wrong in `rdmabench-cuda`.
///
/// Messages are one line, name the value that failed and say what to try, so the binary can print them as they
/// are (`rdmabench: <message>`). The type is `Clone` because the driver probe's outcome is computed once per
/// process and handed out to every caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// `libcuda.so.1` could not be loaded: no NVIDIA driver on this machine (or not on the loader's path).
    #[error(
        "no CUDA driver: libcuda.so.1 not found; install the NVIDIA driver (it provides libcuda.so.1) or add its \
         directory to LD_LIBRARY_PATH; `nvidia-smi` should then list the GPUs"
    )]
    NoDriver,

    /// The driver library loaded but lacks an entry point this crate calls.
    #[error(
        "the CUDA driver (libcuda.so.1) lacks {symbol}: rdmabench needs CUDA driver API 12.2 or newer \
         (NVIDIA driver 535 or newer); update the driver (`nvidia-smi` shows its version)"
    )]
    DriverTooOld {
        /// The missing symbol.
        symbol: &'static str,
    },

    /// The driver loaded and initialised but sees no GPU.
    #[error(
        "the CUDA driver is loaded but sees no GPU ({reason}); check `nvidia-smi -L`, and that \
         CUDA_VISIBLE_DEVICES does not hide them"
    )]
    NoDevices {
        /// Why: the driver's code, or "0 devices".
        reason: String,
    },

    /// A GPU index beyond the devices present.
    #[error(
        "no CUDA device {index}: {count} device(s) exist (indices 0 to {last}); `nvidia-smi -L` lists them",
        last = count.saturating_sub(1)
    )]
    NoSuchDevice {
        /// The index asked for.
        index: u32,
        /// How many devices the driver reports.
        count: usize,
    },

    /// No GPU at the PCI bus id asked for.
    #[error(
        "no CUDA device at PCI bus id {bus_id}: the GPUs are at {available}; \
         `nvidia-smi --query-gpu=index,pci.bus_id --format=csv` lists them (CUDA_VISIBLE_DEVICES may hide some)"
    )]
    NoSuchBusId {
        /// The bus id asked for.
        bus_id: PciBusId,
        /// The bus ids present, comma separated.
        available: String,
    },

    /// A string that is neither a GPU index nor a PCI bus id.
    #[error(transparent)]
    InvalidDevice(#[from] SelectorError),

    /// The GPU cannot export its memory as dma-buf (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED` is 0).
    #[error(
        "GPU {ordinal} ({name}, {bus_id}) lacks dma-buf support (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0): \
         exporting GPU memory as dma-buf needs the NVIDIA open kernel modules (r515 or newer) and Linux 5.12 or \
         newer; try --mem cuda-peermem (needs the nvidia-peermem module) or --mem cuda-staged"
    )]
    DmaBufUnsupported {
        /// The GPU's index.
        ordinal: u32,
        /// Its name.
        name: String,
        /// Its PCI bus id.
        bus_id: PciBusId,
    },

    /// The GPU does not support GPUDirect RDMA (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED` is 0).
    #[error(
        "GPU {ordinal} ({name}, {bus_id}) does not support GPUDirect RDMA \
         (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 0): consumer GPUs and some virtualised setups lack it; \
         use --mem cuda-staged (GPU memory staged through pinned host memory)"
    )]
    GpuDirectRdmaUnsupported {
        /// The GPU's index.
        ordinal: u32,
        /// Its name.
        name: String,
        /// Its PCI bus id.
        bus_id: PciBusId,
    },

    /// A dma-buf mapped through PCIe (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`) asked of a driver
    /// older than 12.8, which lacks the flag.
    #[error(
        "GPU {ordinal}: the CUDA driver is {driver}, and a dma-buf mapped through PCIe \
         (CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE, --mem cuda-pcie or cuda-data-direct) needs 12.8 or newer; \
         update the driver, or use --mem cuda (the driver's own mapping)"
    )]
    PcieMappingUnsupported {
        /// The GPU's index.
        ordinal: u32,
        /// The driver's CUDA version, "12.4" ([`crate::DriverInfo::version_string`]).
        driver: String,
    },

    /// `cuMemGetHandleForAddressRange` refused to export a range as a dma-buf fd.
    #[error(
        "exporting GPU {ordinal} memory 0x{addr:x}+{len} as a dma-buf fd failed: cuMemGetHandleForAddressRange \
         returned {}; {hint}", describe(*code)
    )]
    DmaBufExport {
        /// The GPU's index.
        ordinal: u32,
        /// Start of the (host-page aligned) range.
        addr: u64,
        /// Length of the range.
        len: usize,
        /// The driver's result code, e.g. 801 (`CUDA_ERROR_NOT_SUPPORTED`).
        code: i32,
        /// What to try.
        hint: &'static str,
    },

    /// Any other driver call that failed.
    #[error("{call} failed: {}{sep}{hint}", describe(*code), sep = if hint.is_empty() { "" } else { "; " })]
    Driver {
        /// The driver entry point, e.g. `cuMemAlloc_v2`.
        call: &'static str,
        /// The raw `CUresult`, e.g. 2 (`CUDA_ERROR_OUT_OF_MEMORY`); possibly one these bindings do not know.
        code: i32,
        /// What to try, empty when there is nothing useful to say.
        hint: &'static str,
    },

    /// `Event::elapsed_ms` on events made without timing.
    #[error("Event::elapsed_ms needs two events made with Event::with_timing; Event::new makes events without timing")]
    TimingDisabled,

    /// A zero-byte allocation was asked for.
    #[error("cannot allocate a zero-byte {what}: the size must be at least 1 byte")]
    ZeroSize {
        /// What was being allocated.
        what: &'static str,
    },

    /// A size so large that rounding it up overflows.
    #[error("{what} of {len} bytes is too large: rounding it up to {align} bytes overflows")]
    TooLarge {
        /// What was being sized.
        what: &'static str,
        /// The size asked for.
        len: usize,
        /// The alignment it is rounded to.
        align: usize,
    },

    /// A range past a buffer's end.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),

    /// `--validate` found a byte that differs from the pattern.
    #[error(
        "GPU buffer content differs from the pattern (seed {seed}) at byte {offset}: expected 0x{expected:02x}, \
         found 0x{found:02x}; the transfer moved the wrong bytes"
    )]
    PatternMismatch {
        /// The pattern's seed.
        seed: u64,
        /// First differing byte.
        offset: usize,
        /// The byte the pattern has there.
        expected: u8,
        /// The byte found.
        found: u8,
    },

    /// A staging configuration that cannot work.
    #[error(transparent)]
    Staging(#[from] StagingError),
}

impl CudaError {
    /// Whether the user gave a bad value (a malformed GPU index or bus id, an impossible staging configuration):
    /// exit status 2. Everything else is a missing or failing piece: exit status 1.
    pub fn is_usage_error(&self) -> bool {
        match self {
            CudaError::InvalidDevice(_) => true,
            CudaError::Staging(e) => e.is_usage_error(),
            _ => false,
        }
    }
}

/// `CUDA_SUCCESS`.
pub(crate) const SUCCESS: RawResult = 0;
/// `CUDA_ERROR_NOT_READY`: an event or stream query's "not yet".
pub(crate) const NOT_READY: RawResult = 600;

/// Turns a raw `CUresult` into `Ok` or a [`CudaError::Driver`] naming `call`.
pub(crate) fn check(res: RawResult, call: &'static str) -> Result<(), CudaError> {
    if res == SUCCESS {
        Ok(())
    } else {
        Err(driver_error(res, call))
    }
}

/// The [`CudaError::Driver`] for a failed `call`.
pub(crate) fn driver_error(code: RawResult, call: &'static str) -> CudaError {
    CudaError::Driver {
        call,
        code,
        hint: hint_for(code),
    }
}

/// What to try for the driver's common failures (codes from `cuda.h`, stable across releases).
pub(crate) fn hint_for(code: i32) -> &'static str {
    match code {
        2 => "the GPU is out of memory: use a smaller --size, or free GPU memory (`nvidia-smi` shows who holds it)",
        3 => "the driver is not initialised; this is a bug in rdmabench-cuda (probe() initialises it)",
        34 => {
            "the libcuda.so found is the CUDA toolkit's stub (…/lib64/stubs): put the NVIDIA driver's \
             libcuda.so.1 first on LD_LIBRARY_PATH"
        }
        46 => "the GPU is in exclusive-process mode and busy, or unavailable: check `nvidia-smi -q -d COMPUTE`",
        100 => "no GPU visible: check `nvidia-smi -L` and CUDA_VISIBLE_DEVICES",
        101 => "invalid device index: `nvidia-smi -L` lists the GPUs",
        201 => "no valid CUDA context on this thread: call Device::bind_to_thread()",
        304 => "an operating-system call inside the driver failed: check `dmesg` for NVRM messages",
        801 => "not supported by this GPU, driver or kernel",
        803 => {
            "libcuda.so.1 and the loaded nvidia kernel module differ in version: reload the module or reboot, \
             or fix the container's driver mounts"
        }
        804 => "forward compatibility is not supported on this GPU: use the driver the system ships",
        999 => "unknown driver error: check `dmesg` for NVRM/Xid messages",
        c if crate::result_codes::code_name(c).is_none() => {
            "a code newer than these bindings (CUDA 12.2): look it up in the driver's cuda.h"
        }
        _ => "",
    }
}
