//! Pinned (page-locked) host memory from the CUDA driver: the bounce buffers of the staged path. The GPU's copy
//! engines DMA to and from it directly (pageable memory would be copied once more through a driver buffer), and
//! the NIC registers it like any host memory (`ibv_reg_mr`).

use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{self, cu};
use crate::error::CudaError;
use accel::AllocationGuard;

use crate::memory::check_range;

/// An owned pinned host buffer, zeroed at allocation, freed (`cuMemFreeHost`) when it and every
/// [`AllocationGuard`] taken from it are dropped. Page aligned.
///
/// Allocated `CU_MEMHOSTALLOC_PORTABLE`, so it counts as pinned for every CUDA context in the process, not only
/// the one of the device it was made with.
pub struct PinnedBuffer {
    alloc: Arc<PinnedAlloc>,
}

/// One `cuMemHostAlloc` allocation, shared by the buffer and its guards.
struct PinnedAlloc {
    device: Device,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the allocation is plain host memory; PinnedBuffer hands out access through &self / &mut self, and a
// guard gives none.
unsafe impl Send for PinnedAlloc {}
// SAFETY: as above.
unsafe impl Sync for PinnedAlloc {}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.alloc.ptr)
            .field("len", &self.alloc.len)
            .finish()
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        let _ = self.device.bind_to_thread();
        // SAFETY: the pointer came from cuMemHostAlloc and is freed once, here, when the last holder is gone.
        let _ = unsafe { (driver::api().cuMemFreeHost)(self.ptr.as_ptr().cast::<c_void>()) };
    }
}

impl PinnedBuffer {
    /// Allocates `len` bytes of pinned host memory (`cuMemHostAlloc`, portable), zeroed.
    pub fn new(device: &Device, len: usize) -> Result<PinnedBuffer, CudaError> {
        if len == 0 {
            return Err(CudaError::ZeroSize {
                what: "pinned host buffer",
            });
        }
        device.bind_to_thread()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device's context is current.
        unsafe { cu!(cuMemHostAlloc(&mut p, len, sys::CU_MEMHOSTALLOC_PORTABLE)) }
        .map_err(|e| match e {
            CudaError::Driver { code: 2, .. } => CudaError::Driver {
                call: "cuMemHostAlloc",
                code: 2,
                hint: "cannot pin that much host memory: check `ulimit -l` (locked memory) and free RAM, or use \
                       smaller staging chunks",
            },
            other => other,
        })?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(CudaError::Driver {
            call: "cuMemHostAlloc",
            code: 0,
            hint: "the driver reported success but returned a null pointer",
        })?;
        // SAFETY: `ptr` is valid for `len` bytes, owned by us; zeroing makes every byte initialised, so the
        // slices handed out below read initialised memory.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(PinnedBuffer {
            alloc: Arc::new(PinnedAlloc {
                device: device.clone(),
                ptr,
                len,
            }),
        })
    }

    /// A guard that keeps this buffer's memory allocated while it lives, even after the buffer is
    /// dropped: hand it to the memory registration.
    pub fn guard(&self) -> AllocationGuard {
        AllocationGuard::new(self.alloc.clone())
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.alloc.len
    }

    /// Never true: zero-byte buffers are refused.
    pub fn is_empty(&self) -> bool {
        self.alloc.len == 0
    }

    /// Start address, never null (what the seam's `accel::PinnedBuffer` is built from).
    pub fn as_non_null(&self) -> NonNull<u8> {
        self.alloc.ptr
    }

    /// Start address, e.g. for `ibv_reg_mr`.
    pub fn as_ptr(&self) -> *const u8 {
        self.alloc.ptr.as_ptr()
    }

    /// Start address, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.alloc.ptr.as_ptr()
    }

    /// The contents. Do not read a range while an async copy or an RDMA operation writes it.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: valid, initialised (zeroed at allocation) and owned for `len` bytes.
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.as_ptr(), self.alloc.len) }
    }

    /// The contents, writable. Do not write a range while an async copy or an RDMA operation uses it.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.as_ptr(), self.alloc.len) }
    }

    /// `len` bytes from `offset`, without touching the rest of the buffer (which copies or the NIC may be using
    /// meanwhile). Do not read it while an async copy or an RDMA operation writes it.
    pub fn range(&self, offset: usize, len: usize) -> Result<&[u8], CudaError> {
        check_range("pinned buffer range", offset, len, self.alloc.len)?;
        // SAFETY: in bounds (checked), initialised, owned; only this sub-range is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(self.alloc.ptr.as_ptr().add(offset), len) })
    }

    /// `len` bytes from `offset`, writable, without touching the rest of the buffer. Do not write it while an
    /// async copy or an RDMA operation uses it.
    pub fn range_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8], CudaError> {
        check_range("pinned buffer range", offset, len, self.alloc.len)?;
        // SAFETY: in bounds (checked), initialised, exclusively borrowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.as_ptr().add(offset), len) })
    }

    /// The device it was allocated through.
    pub fn device(&self) -> &Device {
        &self.alloc.device
    }
}
