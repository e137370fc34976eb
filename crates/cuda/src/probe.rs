//! Is there a CUDA driver, and which? Probed once per process, before any other driver call.
//!
//! cudarc loads `libcuda.so.1` lazily and **panics** when it is missing, or when an entry point is missing from
//! an older driver. So before the first real call this module checks, in order: that the library loads
//! ([`cudarc::driver::sys::is_culib_present`]), that every entry point this crate calls is exported by it
//! ([`REQUIRED_SYMBOLS`]), that `cuInit` succeeds, and how many devices there are. Each failure becomes a
//! [`CudaError`]; nothing here or after it panics for want of a driver. Every public entry point of the crate
//! that touches the driver goes through [`probe`] first (types that need a driver can only be built from a
//! [`crate::Device`], which is only built after a successful probe).

use std::ffi::c_int;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{driver_error, CudaError};

/// Every driver entry point this crate calls. Checked once against the loaded library, so that an old driver
/// yields [`CudaError::DriverTooOld`] instead of cudarc's panic on the first call of a missing symbol.
/// (A unit test keeps this list in step with the `sys::cu*` calls in the sources.)
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceGetPCIBusId",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuPointerSetAttribute",
    "cuMemsetD8_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemGetHandleForAddressRange",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
];

/// What the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverInfo {
    /// The driver's CUDA version as `cuDriverGetVersion` reports it, e.g. 12040 for 12.4.
    pub version: i32,
    /// How many GPUs the driver sees (after CUDA_VISIBLE_DEVICES); at least 1.
    pub device_count: usize,
}

impl DriverInfo {
    /// The driver's CUDA version as "major.minor", e.g. "12.4".
    pub fn version_string(&self) -> String {
        format!("{}.{}", self.version / 1000, (self.version % 1000) / 10)
    }
}

/// Whether `libcuda.so.1` (or another name cudarc searches for) can be loaded. Does not initialise the driver.
pub fn driver_library_present() -> bool {
    // SAFETY: is_culib_present only tries dlopen on cudarc's list of candidate names and drops what it opened;
    // running a library's initialisers is inherent to loading it and is what every CUDA program does.
    unsafe { sys::is_culib_present() }
}

/// Probes the driver (once per process; later calls return the cached outcome): library present, entry points
/// present, `cuInit` succeeds, at least one device. Every other entry point of this crate calls it first.
pub fn probe() -> Result<DriverInfo, CudaError> {
    static PROBE: OnceLock<Result<DriverInfo, CudaError>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> Result<DriverInfo, CudaError> {
    if !driver_library_present() {
        return Err(CudaError::NoDriver);
    }
    // SAFETY: the library was just found loadable, so culib() finds it too and does not take its panicking
    // branch (only a library deleted in between could make it).
    let lib = unsafe { sys::culib() };
    for &symbol in REQUIRED_SYMBOLS {
        // SAFETY: the symbol is only looked up, never called through this (dummy) signature.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok();
        if !found {
            return Err(CudaError::DriverTooOld { symbol });
        }
    }

    // SAFETY: cuInit and the queries below are present (checked above) and take plain values/out-pointers.
    let res = unsafe { sys::cuInit(0) };
    if res == sys::CUresult::CUDA_ERROR_NO_DEVICE {
        return Err(CudaError::NoDevices {
            reason: "cuInit returned CUDA_ERROR_NO_DEVICE".into(),
        });
    }
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(driver_error(res, "cuInit"));
    }

    let mut version: c_int = 0;
    // SAFETY: valid out-pointer.
    let res = unsafe { sys::cuDriverGetVersion(&mut version) };
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(driver_error(res, "cuDriverGetVersion"));
    }

    let mut count: c_int = 0;
    // SAFETY: valid out-pointer; the driver is initialised.
    let res = unsafe { sys::cuDeviceGetCount(&mut count) };
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(driver_error(res, "cuDeviceGetCount"));
    }
    let device_count = usize::try_from(count).unwrap_or(0);
    if device_count == 0 {
        return Err(CudaError::NoDevices {
            reason: "cuDeviceGetCount reports 0 devices".into(),
        });
    }
    Ok(DriverInfo {
        version,
        device_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_string() {
        let info = DriverInfo {
            version: 12040,
            device_count: 1,
        };
        assert_eq!(info.version_string(), "12.4");
        let info = DriverInfo {
            version: 13000,
            device_count: 8,
        };
        assert_eq!(info.version_string(), "13.0");
    }

    /// Every `sys::cu*` call in this crate's sources is in REQUIRED_SYMBOLS, so the probe rules out cudarc's
    /// panic on a missing symbol for all of them.
    #[test]
    fn required_symbols_cover_every_call() {
        let sources = [
            include_str!("probe.rs"),
            include_str!("device.rs"),
            include_str!("memory.rs"),
            include_str!("dmabuf.rs"),
            include_str!("pinned.rs"),
            include_str!("stream.rs"),
            include_str!("error.rs"),
            include_str!("pattern.rs"),
            include_str!("staging.rs"),
            include_str!("lib.rs"),
        ];
        let mut calls = Vec::new();
        for src in sources {
            let mut rest = src;
            while let Some(pos) = rest.find("sys::cu") {
                let tail = &rest[pos + "sys::".len()..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                // `sys::culib` is the loader itself, not a driver entry point.
                if name != "culib" && tail[end..].starts_with('(') {
                    calls.push(name.to_string());
                }
                rest = &tail[end..];
            }
        }
        assert!(calls.len() > 20, "found only {calls:?}");
        for call in &calls {
            assert!(
                REQUIRED_SYMBOLS.contains(&call.as_str()),
                "{call} is called but not in REQUIRED_SYMBOLS"
            );
        }
        for sym in REQUIRED_SYMBOLS {
            assert!(
                calls.iter().any(|c| c == sym),
                "{sym} is required but never called"
            );
        }
    }
}
