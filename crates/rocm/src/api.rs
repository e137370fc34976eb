//! The runtime's entry points, looked up once per process with `dlopen`: HIP's from
//! libamdhip64 (every one required), and the HSA runtime's dma-buf export from libhsa-runtime64
//! (optional: without it the dma-buf mode is refused and the others run). Every entry point
//! returns its status as a plain `c_int`, read as a number whatever its value.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::RocmError;

/// The HIP runtime's sonames, newest first (the unversioned name is a development symlink, which
/// a runtime-only install lacks).
const HIP_LIBRARIES: &[&str] = &[
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];
/// The HSA runtime's.
const HSA_LIBRARIES: &[&str] = &["libhsa-runtime64.so.1", "libhsa-runtime64.so"];
/// Where ROCm installs itself when it is not on the loader's path: `$ROCM_PATH` (ROCm's own
/// variable for its prefix, where absolute), then `/opt/rocm`; the libraries are in its `lib/`.
const ROCM_PREFIX: &str = "/opt/rocm";

/// Every name to try for a library of `sonames`: each on the loader's path, then each in the
/// `lib/` of `rocm_path` (where absolute) and of [`ROCM_PREFIX`].
fn candidates(sonames: &[&str], rocm_path: Option<&std::ffi::OsStr>) -> Vec<std::ffi::OsString> {
    let prefixes = rocm_path
        .map(std::path::Path::new)
        .filter(|p| p.is_absolute())
        .into_iter()
        .chain([std::path::Path::new(ROCM_PREFIX)]);
    let installed = prefixes.flat_map(|prefix| {
        sonames
            .iter()
            .map(move |name| prefix.join("lib").join(name).into_os_string())
    });
    sonames.iter().map(Into::into).chain(installed).collect()
}

/// `hipMemcpyHostToDevice`.
pub const HOST_TO_DEVICE: c_int = 1;
/// `hipMemcpyDeviceToHost`.
pub const DEVICE_TO_HOST: c_int = 2;
/// `hipHostMallocPortable`: pinned for every device of the process.
pub const HOST_MALLOC_PORTABLE: c_uint = 1;
/// `hipStreamNonBlocking`.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `hipEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;
/// `hipErrorNotReady`: an event not yet reached.
pub const NOT_READY: c_int = 600;

macro_rules! entry_points {
    ($lib:literal, $table:ident { $($name:ident: fn($($arg:ty),*);)* }) => {
        /// Entry points of one library, and the library that keeps them valid.
        #[allow(non_snake_case)]
        pub struct $table {
            _lib: Library,
            $(pub $name: unsafe extern "C" fn($($arg),*) -> c_int,)*
        }

        impl std::fmt::Debug for $table {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(stringify!($table))
            }
        }

        impl $table {
            #[allow(non_snake_case)]
            fn load(lib: Library) -> Result<$table, RocmError> {
                $(
                    // SAFETY: the symbol is looked up with the C signature ROCm's headers give it,
                    // and kept only as long as `_lib`, which is stored beside it.
                    let $name = unsafe {
                        *lib.get::<unsafe extern "C" fn($($arg),*) -> c_int>(
                            concat!(stringify!($name), "\0").as_bytes(),
                        )
                        .map_err(|_| RocmError::RuntimeTooOld {
                            library: $lib,
                            symbol: stringify!($name),
                        })?
                    };
                )*
                Ok($table { _lib: lib, $($name,)* })
            }
        }
    };
}

entry_points!("libamdhip64", Hip {
    hipGetDeviceCount: fn(*mut c_int);
    hipSetDevice: fn(c_int);
    hipDeviceGetName: fn(*mut c_char, c_int, c_int);
    hipDeviceGetPCIBusId: fn(*mut c_char, c_int, c_int);
    hipDeviceTotalMem: fn(*mut usize, c_int);
    hipMalloc: fn(*mut *mut c_void, usize);
    hipFree: fn(*mut c_void);
    hipHostMalloc: fn(*mut *mut c_void, usize, c_uint);
    hipHostFree: fn(*mut c_void);
    hipMemcpy: fn(*mut c_void, *const c_void, usize, c_int);
    hipMemcpyAsync: fn(*mut c_void, *const c_void, usize, c_int, *mut c_void);
    hipStreamCreateWithFlags: fn(*mut *mut c_void, c_uint);
    hipStreamDestroy: fn(*mut c_void);
    hipStreamSynchronize: fn(*mut c_void);
    hipEventCreateWithFlags: fn(*mut *mut c_void, c_uint);
    hipEventDestroy: fn(*mut c_void);
    hipEventRecord: fn(*mut c_void, *mut c_void);
    hipEventQuery: fn(*mut c_void);
});

entry_points!("libhsa-runtime64", Hsa {
    hsa_init: fn();
    hsa_amd_portable_export_dmabuf: fn(*const c_void, usize, *mut c_int, *mut u64);
});

/// The loaded runtime: HIP, and HSA's export where the library has it (else why not).
#[derive(Debug)]
pub struct Api {
    /// HIP's entry points.
    pub hip: Hip,
    /// HSA's, or why dma-buf export is not possible.
    pub hsa: Result<Hsa, &'static str>,
}

/// The first of `sonames` that loads, from the loader's path or a ROCm install ([`candidates`]).
fn open_first(sonames: &[&str]) -> Option<Library> {
    let rocm_path = std::env::var_os("ROCM_PATH");
    candidates(sonames, rocm_path.as_deref())
        .into_iter()
        .find_map(|name| {
            // SAFETY: loading ROCm's own libraries runs their initialisers, which is what
            // linking against them would do.
            unsafe { Library::new(name) }.ok()
        })
}

fn load() -> Result<Api, RocmError> {
    let hip = Hip::load(open_first(HIP_LIBRARIES).ok_or(RocmError::NoRuntime)?)?;
    let hsa = match open_first(HSA_LIBRARIES) {
        None => Err("is not installed"),
        Some(lib) => Hsa::load(lib)
            .map_err(|_| "lacks hsa_amd_portable_export_dmabuf (ROCm < 5.6)")
            .and_then(initialised),
    };
    Ok(Api { hip, hsa })
}

/// `hsa` once `hsa_init` accepted it (HIP initialises the HSA runtime too; the count is shared).
fn initialised(hsa: Hsa) -> Result<Hsa, &'static str> {
    // SAFETY: hsa_init takes no arguments and may be called more than once.
    match unsafe { (hsa.hsa_init)() } {
        0 => Ok(hsa),
        _ => Err("could not be initialised (hsa_init failed)"),
    }
}

/// The runtime, loaded on first use; the same outcome for every caller of the process.
pub fn api() -> Result<&'static Api, RocmError> {
    static API: OnceLock<Result<Api, RocmError>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Whether libamdhip64 loads here (nothing else is checked).
pub fn library_present() -> bool {
    api().is_ok() || open_first(HIP_LIBRARIES).is_some()
}

/// `Ok` for hipSuccess, else the call's error with `hint`.
pub fn hip_ok(call: &'static str, code: c_int, hint: &'static str) -> Result<(), RocmError> {
    if code == 0 {
        Ok(())
    } else {
        Err(RocmError::Hip { call, code, hint })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_only_install_is_found_by_its_versioned_names_under_rocm_path_and_opt_rocm() {
        let names = candidates(HIP_LIBRARIES, Some("/srv/rocm-6.4".as_ref()));
        let names: Vec<_> = names.iter().map(|n| n.to_str().unwrap()).collect();
        assert_eq!(names[..4], HIP_LIBRARIES[..]);
        for want in [
            "/srv/rocm-6.4/lib/libamdhip64.so.6",
            "/opt/rocm/lib/libamdhip64.so.6",
            "/opt/rocm/lib/libamdhip64.so.7",
        ] {
            assert!(names.contains(&want), "{want}: {names:?}");
        }
        let hsa = candidates(HSA_LIBRARIES, Some("relative/rocm".as_ref()));
        let hsa: Vec<_> = hsa.iter().map(|n| n.to_str().unwrap()).collect();
        assert!(
            hsa.contains(&"/opt/rocm/lib/libhsa-runtime64.so.1"),
            "{hsa:?}"
        );
        assert!(!hsa.iter().any(|n| n.starts_with("relative")), "{hsa:?}");
    }
}
