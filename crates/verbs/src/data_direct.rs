//! mlx5's Data Direct (perftest's `--use_data_direct`): a dma-buf registered with
//! `mlx5dv_reg_dmabuf_mr(.., MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT)`, so that the NIC reaches the
//! GPU's memory through its Data Direct PCIe function, next to the GPU, instead of the path its
//! own function takes (Grace-based and ConnectX-8 systems). libmlx5 is loaded at run time, as
//! libibverbs is; a library too old for Data Direct, a device that is not an mlx5 one, or an mlx5
//! device without a Data Direct function is refused, naming which
//! ([`VerbsError::DataDirectUnavailable`]).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::OnceLock;

use rdma_mummy_sys::{ibv_context, ibv_mr, ibv_pd};

use crate::error::{Result, VerbsError};

/// `MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT` (mlx5dv.h).
const ACCESS_DATA_DIRECT: c_int = 1;

/// `mlx5dv_get_data_direct_sysfs_path(context, buf, buf_len)`: 0, or an errno.
type GetPath = unsafe extern "C" fn(*mut ibv_context, *mut c_char, usize) -> c_int;
/// `mlx5dv_reg_dmabuf_mr(pd, offset, length, iova, fd, access, mlx5_access)`.
type RegDmabuf =
    unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int, c_int) -> *mut ibv_mr;

/// libmlx5's two Data Direct entry points.
struct Mlx5 {
    get_path: GetPath,
    reg_dmabuf: RegDmabuf,
}

/// libmlx5.so.1's entry points, loaded once; why not where it or they are missing.
fn mlx5() -> std::result::Result<&'static Mlx5, &'static str> {
    static LIB: OnceLock<std::result::Result<Mlx5, &'static str>> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: dlopen and dlsym take NUL-terminated names; the library stays loaded (never
        // dlclosed), so the entry points stay valid.
        unsafe {
            let lib = libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            if lib.is_null() {
                return Err("libmlx5.so.1 (rdma-core's mlx5 provider) could not be loaded");
            }
            let sym = |name: &CStr| -> *mut c_void { libc::dlsym(lib, name.as_ptr()) };
            let (get_path, reg_dmabuf) = (
                sym(c"mlx5dv_get_data_direct_sysfs_path"),
                sym(c"mlx5dv_reg_dmabuf_mr"),
            );
            if get_path.is_null() || reg_dmabuf.is_null() {
                return Err("this libmlx5 (rdma-core before 54) lacks mlx5dv_get_data_direct_sysfs_path or \
                            mlx5dv_reg_dmabuf_mr");
            }
            Ok(Mlx5 {
                get_path: std::mem::transmute::<*mut c_void, GetPath>(get_path),
                reg_dmabuf: std::mem::transmute::<*mut c_void, RegDmabuf>(reg_dmabuf),
            })
        }
    })
    .as_ref()
    .map_err(|why| *why)
}

/// The sysfs path of `device`'s Data Direct function (`/devices/pci...`), or why it has none.
///
/// # Safety
/// `ctx` is an open device context.
pub(crate) unsafe fn sysfs_path(ctx: NonNull<ibv_context>, device: &str) -> Result<String> {
    let unavailable = |reason: String| VerbsError::DataDirectUnavailable {
        device: device.to_string(),
        reason,
    };
    let lib = mlx5().map_err(|why| unavailable(why.to_string()))?;
    let mut buf = [0 as c_char; 4096];
    // SAFETY: the caller's context; the buffer's length is passed with it.
    let rc = unsafe { (lib.get_path)(ctx.as_ptr(), buf.as_mut_ptr(), buf.len()) };
    match rc.abs() {
        0 => {
            // SAFETY: the call wrote a NUL-terminated path into the buffer (zeroed beforehand,
            // so it ends in a NUL in any case).
            let path = unsafe { CStr::from_ptr(buf.as_ptr()) };
            Ok(format!("/sys{}", path.to_string_lossy()))
        }
        libc::EOPNOTSUPP => Err(unavailable(format!(
            "{device} is not an mlx5 device (mlx5dv_get_data_direct_sysfs_path: EOPNOTSUPP)"
        ))),
        libc::ENODEV => Err(unavailable(format!(
            "{device} has no Data Direct function (mlx5dv_get_data_direct_sysfs_path: ENODEV)"
        ))),
        errno => Err(unavailable(format!(
            "mlx5dv_get_data_direct_sysfs_path: {} (errno {errno})",
            std::io::Error::from_raw_os_error(errno)
        ))),
    }
}

/// `mlx5dv_reg_dmabuf_mr` with Data Direct access: the region, or the errno's error.
///
/// # Safety
/// `pd` is a live protection domain; `fd` a dma-buf whose `offset..offset+len` stays valid
/// while the region lives.
pub(crate) unsafe fn register(
    pd: NonNull<ibv_pd>,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> std::result::Result<NonNull<ibv_mr>, std::io::Error> {
    let lib = mlx5().map_err(std::io::Error::other)?;
    // SAFETY: the caller's guarantees are the call's.
    let mr = unsafe {
        (lib.reg_dmabuf)(
            pd.as_ptr(),
            offset,
            len,
            iova,
            fd,
            access,
            ACCESS_DATA_DIRECT,
        )
    };
    NonNull::new(mr).ok_or_else(std::io::Error::last_os_error)
}
