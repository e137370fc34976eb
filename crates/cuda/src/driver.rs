//! The driver's entry points, looked up in `libcuda.so.1` with C signatures that return the raw `CUresult`
//! integer.
//!
//! cudarc's own wrappers (`cudarc::driver::sys::cu*`) return its `CUresult`, a Rust enum of the codes the
//! bindings know (driver API 12.2 here). A newer driver that returns a code they lack would put a value in that
//! enum that none of its variants has: undefined behaviour, before any code of ours could look at it. So this
//! crate never calls them: [`Api`] holds the same entry points declared with a `c_int` result, read with
//! [`crate::error::check`], which names the codes it knows ([`crate::result_codes::code_name`]) and keeps
//! any other as its number. cudarc still finds and loads the library ([`cudarc::driver::sys::culib`]).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUevent, CUstream};

use crate::error::CudaError;

/// A `CUresult` as the driver returns it: 0 is success, anything else an error code, known or not.
pub type RawResult = c_int;

/// Declares [`Api`] (one C function pointer per required entry point, an `Option` of one per optional entry
/// point), [`REQUIRED_SYMBOLS`], [`OPTIONAL_SYMBOLS`] and the loader from two lists.
macro_rules! driver_api {
    (
        required { $($name:ident($($arg:ty),*);)* }
        optional { $($opt:ident($($oarg:ty),*);)* }
    ) => {
        /// Every driver entry point this crate calls, each returning the raw result.
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> RawResult,)*
            $(pub(crate) $opt: Option<unsafe extern "C" fn($($oarg),*) -> RawResult>,)*
        }

        /// Every driver entry point rdmabench's memory modes call: all must be exported by the loaded library,
        /// else [`CudaError::DriverTooOld`] names the first one missing.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        /// Entry points a driver may lack without failing the probe: those only the GPU check calls, and those
        /// called only where the GPU asks for them. A call to one that is missing fails that call alone, with
        /// [`CudaError::DriverTooOld`] naming it.
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($opt)),*];

        /// What [`api`] answers before a successful probe: every entry point returns
        /// `CUDA_ERROR_NOT_INITIALIZED` (unreachable in practice: only a probed driver yields a [`crate::Device`]).
        static UNLOADED: Api = Api {
            $($name: {
                unsafe extern "C" fn not_loaded($(_: $arg),*) -> RawResult {
                    NOT_INITIALIZED
                }
                not_loaded
            },)*
            $($opt: None,)*
        };

        impl Api {
            /// Looks every entry point up in the library cudarc loaded.
            fn load() -> Result<Api, CudaError> {
                // SAFETY: only called once the library was found loadable (see probe), so culib() does not take
                // its panicking branch.
                let lib = unsafe { sys::culib() };
                Ok(Api {
                    $($name: {
                        type F = unsafe extern "C" fn($($arg),*) -> RawResult;
                        // SAFETY: the symbol is the driver's entry point of that name, whose C signature
                        // (cuda.h) is F's; the library stays loaded for the life of the process.
                        let symbol = unsafe { lib.get::<F>(stringify!($name).as_bytes()) };
                        *symbol.map_err(|_| CudaError::DriverTooOld { symbol: stringify!($name) })?
                    },)*
                    $($opt: {
                        type F = unsafe extern "C" fn($($oarg),*) -> RawResult;
                        // SAFETY: as above.
                        let symbol = unsafe { lib.get::<F>(stringify!($opt).as_bytes()) };
                        symbol.ok().map(|s| *s)
                    },)*
                })
            }
        }
    };
}

driver_api! {
    required {
        cuInit(c_uint);
        cuDriverGetVersion(*mut c_int);
        cuDeviceGetCount(*mut c_int);
        cuDeviceGet(*mut CUdevice, c_int);
        cuDeviceGetName(*mut c_char, c_int, CUdevice);
        cuDeviceGetAttribute(*mut c_int, c_int, CUdevice);
        cuDeviceGetPCIBusId(*mut c_char, c_int, CUdevice);
        cuDeviceTotalMem_v2(*mut usize, CUdevice);
        cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
        cuDevicePrimaryCtxRelease_v2(CUdevice);
        cuCtxSetCurrent(CUcontext);
        cuMemAlloc_v2(*mut CUdeviceptr, usize);
        cuMemFree_v2(CUdeviceptr);
        cuPointerSetAttribute(*const c_void, c_int, CUdeviceptr);
        cuMemsetD8_v2(CUdeviceptr, u8, usize);
        cuMemcpyHtoD_v2(CUdeviceptr, *const c_void, usize);
        cuMemcpyDtoH_v2(*mut c_void, CUdeviceptr, usize);
        cuMemGetHandleForAddressRange(*mut c_void, CUdeviceptr, usize, c_int, c_ulonglong);
        cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
        cuMemFreeHost(*mut c_void);
        cuStreamCreate(*mut CUstream, c_uint);
        cuStreamDestroy_v2(CUstream);
        cuStreamSynchronize(CUstream);
        cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
        cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
        cuEventCreate(*mut CUevent, c_uint);
        cuEventDestroy_v2(CUevent);
        cuEventRecord(CUevent, CUstream);
        cuEventQuery(CUevent);
        cuEventSynchronize(CUevent);
    }
    optional {
        // The GPU check's: SYNC_MEMOPS read back, copy timing.
        cuPointerGetAttribute(*mut c_void, c_int, CUdeviceptr);
        cuEventElapsedTime(*mut f32, CUevent, CUevent);
        // Before reading back what a NIC wrote, on a GPU whose GPUDirect RDMA writes are not ordered (driver
        // API 11.3 and newer).
        cuFlushGPUDirectRDMAWrites(c_int, c_int);
    }
}

/// `CUDA_ERROR_NOT_INITIALIZED`.
const NOT_INITIALIZED: RawResult = 3;

static API: OnceLock<Result<Api, CudaError>> = OnceLock::new();

/// Looks the entry points up (once per process); the library must have been found loadable first
/// ([`crate::probe::driver_library_present`]). `Err(DriverTooOld)` names the first one missing.
pub(crate) fn load() -> Result<&'static Api, CudaError> {
    API.get_or_init(Api::load).as_ref().map_err(Clone::clone)
}

/// The entry points. Every type that calls them is made from a [`crate::Device`], which exists only after a
/// successful probe, so this is the loaded table; before that, a table whose every entry point fails.
pub(crate) fn api() -> &'static Api {
    match API.get() {
        Some(Ok(api)) => api,
        _ => &UNLOADED,
    }
}

/// Calls driver entry point `name` and checks its raw result: `Ok(())`, or [`CudaError::Driver`] naming the
/// call. Used inside an `unsafe` block, whose SAFETY comment covers the call's arguments.
macro_rules! cu {
    ($name:ident($($arg:expr),* $(,)?)) => {
        $crate::error::check(($crate::driver::api().$name)($($arg),*), stringify!($name))
    };
}
pub(crate) use cu;

/// [`cu!`] for an optional entry point: [`CudaError::DriverTooOld`] naming it when the driver lacks it.
macro_rules! cu_optional {
    ($name:ident($($arg:expr),* $(,)?)) => {
        match $crate::driver::api().$name {
            Some(f) => $crate::error::check(f($($arg),*), stringify!($name)),
            None => Err($crate::error::CudaError::DriverTooOld { symbol: stringify!($name) }),
        }
    };
}
pub(crate) use cu_optional;
