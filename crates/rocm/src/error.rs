//! The one error type of this crate: one line that names what is missing and what to try.

use accel::{OutOfBounds, SelectorError};

/// Everything that can go wrong in `rdmabench-rocm`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RocmError {
    /// The HIP runtime library could not be loaded.
    #[error(
        "no ROCm runtime: libamdhip64.so (.7, .6 or .5) not found on the loader's path or in \
         /opt/rocm/lib; install ROCm (it provides libamdhip64 and libhsa-runtime64) or add its \
         lib directory to LD_LIBRARY_PATH; `rocm-smi` should then list the GPUs"
    )]
    NoRuntime,

    /// A runtime library loaded but lacks an entry point this crate calls.
    #[error(
        "the ROCm runtime ({library}) lacks {symbol}: rdmabench needs ROCm 5.6 or newer; \
         update ROCm"
    )]
    RuntimeTooOld {
        /// The library.
        library: &'static str,
        /// The missing symbol.
        symbol: &'static str,
    },

    /// The runtime sees no GPU.
    #[error(
        "the ROCm runtime is loaded but sees no GPU ({reason}); check `rocm-smi`, that this user \
         may open /dev/kfd and /dev/dri (the video and render groups), and that \
         HIP_VISIBLE_DEVICES does not hide them"
    )]
    NoDevices {
        /// The runtime's code, or "0 devices".
        reason: String,
    },

    /// An index past the GPUs there are.
    #[error("no ROCm device {index}: {count} device(s) exist (indices 0 to {last})", last = count.saturating_sub(1))]
    NoSuchDevice {
        /// The index asked for.
        index: u32,
        /// How many there are.
        count: u32,
    },

    /// No GPU has that PCI bus id.
    #[error("no ROCm device at {bus_id}: the GPUs are at {available}")]
    NoDeviceAtBusId {
        /// The bus id asked for.
        bus_id: String,
        /// The bus ids there are.
        available: String,
    },

    /// A malformed GPU index or bus id.
    #[error(transparent)]
    InvalidDevice(#[from] SelectorError),

    /// The HSA runtime has no dma-buf export.
    #[error(
        "ROCm cannot export GPU memory as dma-buf here: libhsa-runtime64 {why}; use --mem \
         rocm-peermem (ibv_reg_mr through amdgpu's peer memory) or --mem rocm-staged"
    )]
    DmaBufUnsupported {
        /// Why: the library or its entry point missing.
        why: &'static str,
    },

    /// A HIP call failed.
    #[error("{call} failed: hipError {code} ({name}){hint}", name = hip_error_name(*code))]
    Hip {
        /// The call.
        call: &'static str,
        /// Its hipError_t.
        code: i32,
        /// What to try, with its leading "; ", or empty.
        hint: &'static str,
    },

    /// An HSA call failed.
    #[error("{call} failed: hsa_status {code:#x}{hint}")]
    Hsa {
        /// The call.
        call: &'static str,
        /// Its hsa_status_t.
        code: i32,
        /// What to try, with its leading "; ", or empty.
        hint: &'static str,
    },

    /// Zero bytes asked for.
    #[error("a zero-byte {what} is not possible")]
    ZeroSize {
        /// What was asked for.
        what: &'static str,
    },

    /// A range past a buffer's end.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
}

/// The names of the hipError_t codes a caller meets here; others stay numbers.
pub fn hip_error_name(code: i32) -> &'static str {
    match code {
        0 => "hipSuccess",
        1 => "hipErrorInvalidValue",
        2 => "hipErrorOutOfMemory",
        3 => "hipErrorNotInitialized",
        100 => "hipErrorNoDevice",
        101 => "hipErrorInvalidDevice",
        600 => "hipErrorNotReady",
        _ => "unnamed",
    }
}

impl From<RocmError> for accel::AccelError {
    fn from(e: RocmError) -> accel::AccelError {
        accel::AccelError::new(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_call_the_code_and_what_to_try() {
        let e = RocmError::Hip {
            call: "hipMalloc",
            code: 2,
            hint: "; free GPU memory",
        };
        assert_eq!(
            e.to_string(),
            "hipMalloc failed: hipError 2 (hipErrorOutOfMemory); free GPU memory"
        );
        let e = RocmError::NoSuchDevice { index: 3, count: 2 }.to_string();
        assert!(
            e.contains("no ROCm device 3: 2 device(s) exist (indices 0 to 1)"),
            "{e}"
        );
        assert_eq!(hip_error_name(12345), "unnamed");
        assert!(RocmError::NoRuntime.to_string().contains("LD_LIBRARY_PATH"));
    }
}
