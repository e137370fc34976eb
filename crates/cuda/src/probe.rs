//! Is there a CUDA driver, and which? Probed once per process, before any other driver call.
//!
//! cudarc loads `libcuda.so.1` lazily and **panics** when it is missing, or when an entry point is missing from
//! an older driver. So before the first real call this module checks, in order: that the library loads
//! ([`cudarc::driver::sys::is_culib_present`]), that every entry point rdmabench's memory modes call is exported
//! by it ([`REQUIRED_SYMBOLS`], looked up with raw-integer results: see [`crate::driver`]; the
//! [`OPTIONAL_SYMBOLS`] may be missing, failing only their own calls), that `cuInit` succeeds,
//! and how many devices there are. Each failure becomes a
//! [`CudaError`]; nothing here or after it panics for want of a driver. Every public entry point of the crate
//! that touches the driver goes through [`probe`] first (types that need a driver can only be built from a
//! [`crate::Device`], which is only built after a successful probe).

use std::ffi::c_int;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::driver::{self, cu};
use crate::error::CudaError;

pub use crate::driver::{OPTIONAL_SYMBOLS, REQUIRED_SYMBOLS};

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
    let api = driver::load()?;

    // SAFETY: cuInit and the queries below take plain values/out-pointers.
    let res = unsafe { (api.cuInit)(0) };
    if res == 100 {
        return Err(CudaError::NoDevices {
            reason: "cuInit returned CUDA_ERROR_NO_DEVICE".into(),
        });
    }
    crate::error::check(res, "cuInit")?;

    let mut version: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { cu!(cuDriverGetVersion(&mut version)) }?;

    let mut count: c_int = 0;
    // SAFETY: valid out-pointer; the driver is initialised.
    unsafe { cu!(cuDeviceGetCount(&mut count)) }?;
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

    /// No source of this crate calls cudarc's own driver wrappers (`sys::cu*(...)`), whose enum result is
    /// undefined behaviour for a code the bindings lack; and every entry point the probe requires is called.
    #[test]
    fn every_driver_call_goes_through_the_raw_table() {
        let sources = [
            include_str!("probe.rs"),
            include_str!("device.rs"),
            include_str!("memory.rs"),
            include_str!("dmabuf.rs"),
            include_str!("pinned.rs"),
            include_str!("stream.rs"),
            include_str!("error.rs"),
            include_str!("runtime.rs"),
            include_str!("lib.rs"),
        ];
        let all = sources.concat();
        let mut rest = all.as_str();
        while let Some(pos) = rest.find("sys::cu") {
            let tail = &rest[pos + "sys::".len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            assert!(
                tail[..end].starts_with("culib") || !tail[end..].starts_with('('),
                "{} is called through cudarc's enum-returning wrapper",
                &tail[..end]
            );
            rest = &tail[end..];
        }
        for sym in REQUIRED_SYMBOLS.iter().chain(OPTIONAL_SYMBOLS) {
            let called = all.contains(&format!("{sym}(")) || all.contains(&format!(".{sym})("));
            assert!(called, "{sym} is looked up but never called");
        }
    }
}
