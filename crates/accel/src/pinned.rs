//! Pinned (page-locked) host memory from a runtime: the staged path's bounce buffers. The GPU's
//! copy engines DMA to and from it directly, and the NIC registers it like any host memory.

use std::fmt;
use std::ptr::NonNull;

use crate::error::{check_range, OutOfBounds};
use crate::AllocationGuard;

/// A pinned host buffer a runtime allocated ([`crate::Gpu::pinned`]): zeroed, page aligned, freed
/// when it and every guard taken from it are dropped.
pub struct PinnedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    keep: AllocationGuard,
}

// SAFETY: plain host memory; access goes through &self / &mut self, and a guard gives none.
unsafe impl Send for PinnedBuffer {}
// SAFETY: as above.
unsafe impl Sync for PinnedBuffer {}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl PinnedBuffer {
    /// The runtime's allocation of `len` bytes at `ptr`, kept allocated by `keep`.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` initialised bytes for as long as `keep` (or a
    /// clone of it) lives, and nothing else writes them except through this buffer or copies the
    /// caller of [`crate::CopyQueue`] orders.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize, keep: AllocationGuard) -> PinnedBuffer {
        PinnedBuffer { ptr, len, keep }
    }

    /// A guard that keeps this buffer's memory allocated while it lives: hand it to the memory
    /// registration.
    pub fn guard(&self) -> AllocationGuard {
        self.keep.clone()
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: runtimes refuse zero-byte buffers.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its first byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The whole buffer.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: valid and initialised for `len` bytes while `keep` lives (from_raw's contract).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The address of `offset .. offset + len`, checked to lie inside the buffer.
    pub(crate) fn range_ptr(
        &self,
        offset: usize,
        len: usize,
        what: &'static str,
    ) -> Result<*mut u8, OutOfBounds> {
        check_range(what, offset, len, self.len)?;
        // SAFETY: offset <= len (checked), so the pointer stays inside the allocation.
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }
}
