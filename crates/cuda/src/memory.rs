//! Device memory: owned, rounded up to (and aligned on) the GPU page, freed on drop; filled, pattern-written and
//! read back with synchronous copies for setup and `--validate`.
//!
//! # Why 64 KiB
//! GPUDirect RDMA maps GPU memory for a peer device (the NIC) through the GPU's BAR1 aperture in **64 KiB GPU
//! pages**, both with dma-buf and with nvidia-peermem: the smallest unit the NIC can be given is a whole GPU page.
//! `cuMemAlloc` only aligns to 256 B and packs small allocations together, so an allocation that does not start
//! on, and fill up to, a 64 KiB boundary shares its first or last GPU page with other allocations: registering
//! it would expose (and pin) a neighbour's memory, and some driver versions refuse such ranges. Rounding every
//! allocation up to a multiple of 64 KiB and aligning its start to 64 KiB (as perftest does with its
//! `ACCEL_PAGE_SIZE`) gives each buffer pages of its own.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{self, cu, cu_optional};
use crate::error::CudaError;
use accel::{pattern, AllocationGuard};

/// The GPU page: the granularity at which GPUDirect RDMA maps GPU memory for a NIC.
pub const GPU_PAGE_SIZE: usize = 64 << 10;

/// Size of the host bounce chunk used by the synchronous helpers (fill pattern, verify).
const SYNC_CHUNK: usize = 4 << 20;

/// `len` rounded up to a multiple of `align`; `None` on overflow or a zero `align`.
pub fn round_up(len: usize, align: usize) -> Option<usize> {
    if align == 0 {
        return None;
    }
    len.checked_next_multiple_of(align)
}

/// `addr` rounded up to a multiple of `align`; `None` on overflow or a zero `align`.
pub fn align_up_u64(addr: u64, align: u64) -> Option<u64> {
    if align == 0 {
        return None;
    }
    addr.checked_next_multiple_of(align)
}

/// The bytes actually allocated for a request of `len`: `len` rounded up to [`GPU_PAGE_SIZE`].
pub fn gpu_alloc_len(len: usize) -> Result<usize, CudaError> {
    if len == 0 {
        return Err(CudaError::ZeroSize { what: "GPU buffer" });
    }
    round_up(len, GPU_PAGE_SIZE).ok_or(CudaError::TooLarge {
        what: "GPU buffer",
        len,
        align: GPU_PAGE_SIZE,
    })
}

/// `Err(OutOfBounds)` unless `offset .. offset + len` lies within `size` bytes.
pub(crate) fn check_range(
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<(), CudaError> {
    Ok(accel::check_range(what, offset, len, size)?)
}

/// One `cuMemAlloc` allocation; shared by the buffer and any dma-buf exported from it, so the memory stays
/// allocated while either lives.
pub(crate) struct DeviceAlloc {
    pub(crate) device: Device,
    /// What cuMemAlloc returned (freed on drop).
    base: sys::CUdeviceptr,
    /// The 64 KiB aligned start handed out.
    pub(crate) ptr: sys::CUdeviceptr,
    /// Usable bytes from `ptr`: a multiple of 64 KiB.
    pub(crate) size: usize,
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; a failure here means the context is already gone, and with it
        // the memory.
        let _ = self.device.bind_to_thread();
        // SAFETY: `base` came from cuMemAlloc_v2 and is freed once, here; every user holds the Arc.
        let _ = unsafe { (driver::api().cuMemFree_v2)(self.base) };
    }
}

impl DeviceAlloc {
    fn new(device: &Device, size: usize) -> Result<DeviceAlloc, CudaError> {
        device.bind_to_thread()?;
        let first = raw_alloc(device, size)?;
        if first.base % GPU_PAGE_SIZE as u64 == 0 {
            return Ok(first);
        }
        // Rare (cuMemAlloc hands out 64 KiB multiples from 2 MiB pages): pad by one GPU page and align inside.
        drop(first);
        let padded = size.checked_add(GPU_PAGE_SIZE).ok_or(CudaError::TooLarge {
            what: "GPU buffer",
            len: size,
            align: GPU_PAGE_SIZE,
        })?;
        let mut alloc = raw_alloc(device, padded)?;
        alloc.ptr = align_up_u64(alloc.base, GPU_PAGE_SIZE as u64).ok_or(CudaError::TooLarge {
            what: "GPU buffer",
            len: size,
            align: GPU_PAGE_SIZE,
        })?;
        alloc.size = size;
        Ok(alloc)
    }
}

fn raw_alloc(device: &Device, size: usize) -> Result<DeviceAlloc, CudaError> {
    let mut base: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; the device's context is current (bound by the caller).
    unsafe { cu!(cuMemAlloc_v2(&mut base, size)) }?;
    let alloc = DeviceAlloc {
        device: device.clone(),
        base,
        ptr: base,
        size,
    };
    // Synchronous memory operations on this allocation (cuMemcpy, cuMemset) then complete before they return,
    // so data written by the CPU side is in GPU memory before the NIC reads it, and data the NIC wrote is seen by
    // a following copy. NVIDIA's GPUDirect RDMA guide asks for it; perftest and NCCL set it.
    let one: u32 = 1;
    // SAFETY: the attribute takes a pointer to an unsigned int; `base` is a live allocation of this context.
    unsafe {
        cu!(cuPointerSetAttribute(
            (&one as *const u32).cast::<c_void>(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as c_int,
            base,
        ))
    }?;
    Ok(alloc)
}

/// An owned GPU buffer: `len` bytes at a 64 KiB aligned device address, backed by `allocated_len()` bytes (a
/// multiple of 64 KiB). Freed on drop, once any [`crate::DmaBuf`] exported from it and any
/// [`AllocationGuard`] taken from it are dropped too.
pub struct DeviceBuffer {
    alloc: Arc<DeviceAlloc>,
    len: usize,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("gpu", &self.alloc.device.ordinal())
            .field("ptr", &format_args!("0x{:x}", self.alloc.ptr))
            .field("len", &self.len)
            .field("allocated_len", &self.alloc.size)
            .finish()
    }
}

impl DeviceBuffer {
    /// Allocates `len` bytes (rounded up to 64 KiB, see the module doc) on `device`. The contents are
    /// unspecified until written ([`DeviceBuffer::fill`], [`DeviceBuffer::write_pattern`]).
    pub fn new(device: &Device, len: usize) -> Result<DeviceBuffer, CudaError> {
        let size = gpu_alloc_len(len)?;
        Ok(DeviceBuffer {
            alloc: Arc::new(DeviceAlloc::new(device, size)?),
            len,
        })
    }

    pub(crate) fn alloc(&self) -> &Arc<DeviceAlloc> {
        &self.alloc
    }

    /// A guard that keeps this buffer's memory allocated while it lives, even after the buffer is
    /// dropped: hand it to the memory registration (or anything else that must not outlive the
    /// memory).
    pub fn guard(&self) -> AllocationGuard {
        AllocationGuard::new(self.alloc.clone())
    }

    /// The GPU it lives on.
    pub fn device(&self) -> &Device {
        &self.alloc.device
    }

    /// Its device (unified virtual) address: 64 KiB aligned. The `iova` of a dma-buf MR over the whole buffer,
    /// and the address the peer writes to or reads from.
    pub fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-byte buffers are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the driver's allocation did not start on a 64 KiB boundary, so it was made one GPU page
    /// larger and the buffer starts inside it (see [`DeviceBuffer::new`]).
    pub fn is_padded(&self) -> bool {
        self.alloc.base != self.alloc.ptr
    }

    /// The bytes backing it: `len()` rounded up to 64 KiB.
    pub fn allocated_len(&self) -> usize {
        self.alloc.size
    }

    /// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` as the driver reports it for this buffer: set at allocation, so that
    /// synchronous copies complete before they return (see [`DeviceBuffer::new`]'s allocation).
    pub fn sync_memops(&self) -> Result<bool, CudaError> {
        self.device().bind_to_thread()?;
        let mut value: u32 = 0;
        // SAFETY: the attribute writes an unsigned int through the pointer; the address is a live allocation
        // of the current context.
        unsafe {
            cu_optional!(cuPointerGetAttribute(
                (&mut value as *mut u32).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as c_int,
                self.alloc.ptr,
            ))
        }?;
        Ok(value != 0)
    }

    /// Sets all `len()` bytes to `byte`; returns once done.
    pub fn fill(&self, byte: u8) -> Result<(), CudaError> {
        self.device().bind_to_thread()?;
        // SAFETY: the range lies within the allocation; the context is current.
        unsafe { cu!(cuMemsetD8_v2(self.alloc.ptr, byte, self.len)) }?;
        // cuMemset may return before the device is done; wait on the legacy stream it was issued to.
        // SAFETY: the null stream is always valid in a current context.
        unsafe { cu!(cuStreamSynchronize(std::ptr::null_mut())) }
    }

    /// Copies `src` to `offset ..` of the buffer; returns once the data is in GPU memory.
    pub fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<(), CudaError> {
        check_range("copy to GPU buffer", offset, src.len(), self.len)?;
        if src.is_empty() {
            return Ok(());
        }
        self.device().bind_to_thread()?;
        // SAFETY: the device range is checked above; `src` is valid for its length; the copy is synchronous
        // (and the allocation has SYNC_MEMOPS), so `src` is not used after the call returns.
        unsafe {
            cu!(cuMemcpyHtoD_v2(
                self.alloc.ptr + offset as u64,
                src.as_ptr().cast::<c_void>(),
                src.len(),
            ))
        }
    }

    /// [`copy_to_host`](Self::copy_to_host) of bytes a NIC wrote (GPUDirect RDMA): flushes those writes first
    /// where the GPU asks for it ([`Device::flush_nic_writes`]), so the copy cannot see stale bytes.
    pub fn copy_nic_written_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        self.device().flush_nic_writes()?;
        self.copy_to_host(offset, dst)
    }

    /// Copies `offset .. offset + dst.len()` of the buffer into `dst`; returns once done.
    pub fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        check_range("copy from GPU buffer", offset, dst.len(), self.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.device().bind_to_thread()?;
        // SAFETY: the device range is checked above; `dst` is valid and exclusively borrowed for its length; the
        // copy is synchronous.
        unsafe {
            cu!(cuMemcpyDtoH_v2(
                dst.as_mut_ptr().cast::<c_void>(),
                self.alloc.ptr + offset as u64,
                dst.len(),
            ))
        }
    }

    /// Writes the `--validate` pattern ([`crate::pattern`]) with `seed` over the whole buffer, through host
    /// copies (setup, not the measured loop).
    pub fn write_pattern(&self, seed: u64) -> Result<(), CudaError> {
        let mut host = vec![0u8; SYNC_CHUNK.min(self.len)];
        let mut offset = 0;
        while offset < self.len {
            let n = host.len().min(self.len - offset);
            pattern::fill(seed, offset as u64, &mut host[..n]);
            self.copy_from_host(offset, &host[..n])?;
            offset += n;
        }
        Ok(())
    }

    /// Reads the whole buffer back and checks it against the pattern with `seed`:
    /// `Err(PatternMismatch)` at the first differing byte.
    pub fn verify_pattern(&self, seed: u64) -> Result<(), CudaError> {
        let mut host = vec![0u8; SYNC_CHUNK.min(self.len)];
        let mut offset = 0;
        while offset < self.len {
            let n = host.len().min(self.len - offset);
            self.copy_to_host(offset, &mut host[..n])?;
            if let Some((i, expected, found)) =
                pattern::first_mismatch(seed, offset as u64, &host[..n])
            {
                return Err(CudaError::PatternMismatch {
                    seed,
                    offset: offset + i,
                    expected,
                    found,
                });
            }
            offset += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_gpu_pages() {
        assert_eq!(gpu_alloc_len(1).unwrap(), 65536);
        assert_eq!(gpu_alloc_len(65535).unwrap(), 65536);
        assert_eq!(gpu_alloc_len(65536).unwrap(), 65536);
        assert_eq!(gpu_alloc_len(65537).unwrap(), 131072);
        assert_eq!(gpu_alloc_len(8 << 20).unwrap(), 8 << 20);
        assert_eq!(
            gpu_alloc_len(0),
            Err(CudaError::ZeroSize { what: "GPU buffer" })
        );
        assert!(matches!(
            gpu_alloc_len(usize::MAX),
            Err(CudaError::TooLarge { .. })
        ));
        assert!(gpu_alloc_len(usize::MAX - 65534)
            .unwrap_err()
            .to_string()
            .contains("too large"));
    }

    #[test]
    fn round_and_align_helpers() {
        assert_eq!(round_up(0, 4096), Some(0));
        assert_eq!(round_up(4097, 4096), Some(8192));
        assert_eq!(round_up(5, 0), None);
        assert_eq!(round_up(usize::MAX, 2), None);
        assert_eq!(
            align_up_u64(0x7f00_0001_0100, 65536),
            Some(0x7f00_0002_0000)
        );
        assert_eq!(
            align_up_u64(0x7f00_0001_0000, 65536),
            Some(0x7f00_0001_0000)
        );
        assert_eq!(align_up_u64(u64::MAX, 65536), None);
        assert_eq!(align_up_u64(1, 0), None);
    }

    #[test]
    fn range_checks() {
        assert!(check_range("x", 0, 10, 10).is_ok());
        assert!(check_range("x", 10, 0, 10).is_ok());
        assert!(check_range("x", 5, 6, 10).is_err());
        assert!(check_range("x", usize::MAX, 2, 10).is_err());
        let e = check_range("copy", 8, 4, 10).unwrap_err().to_string();
        assert!(
            e.contains("4 bytes at offset 8 do not fit a buffer of 10 bytes"),
            "{e}"
        );
    }
}
