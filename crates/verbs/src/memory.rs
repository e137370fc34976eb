//! Memory regions: page-aligned host buffers registered with the NIC, or memory that lives
//! elsewhere (a GPU) registered by raw pointer.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use sideway::ibverbs::memory_region::MemoryRegion as SwMr;
use sideway::ibverbs::AccessFlags;

use crate::error::{Result, VerbsError};
use crate::pd::ProtectionDomain;

/// The alignment of host buffers: one page.
pub const PAGE_SIZE: usize = 4096;

/// A zeroed, page-aligned host buffer.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain memory owned by this value.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only hands out shared slices.
unsafe impl Sync for HostBuffer {}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostBuffer({} bytes at {:p})", self.len(), self.ptr)
    }
}

impl HostBuffer {
    /// Allocates `len` zeroed bytes aligned to a page (at least one byte).
    pub fn new(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len.max(1), PAGE_SIZE).map_err(|_| {
            VerbsError::InvalidRequest(format!("cannot allocate a host buffer of {len} bytes"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            VerbsError::InvalidRequest(format!("out of memory allocating {len} bytes"))
        })?;
        Ok(HostBuffer { ptr, layout })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// True for a zero-length buffer (never, since at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    /// Its start address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for as long as self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// What the remote side may do with a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The remote side may RDMA WRITE into it.
    pub remote_write: bool,
    /// The remote side may RDMA READ from it.
    pub remote_read: bool,
    /// The remote side may run atomics on it.
    pub remote_atomic: bool,
}

impl Access {
    /// Every remote right: what a benchmark buffer needs whichever test runs.
    pub const ALL: Access = Access {
        remote_write: true,
        remote_read: true,
        remote_atomic: true,
    };

    fn flags(self) -> AccessFlags {
        let mut flags = AccessFlags::LocalWrite;
        if self.remote_write {
            flags |= AccessFlags::RemoteWrite;
        }
        if self.remote_read {
            flags |= AccessFlags::RemoteRead;
        }
        if self.remote_atomic {
            flags |= AccessFlags::RemoteAtomic;
        }
        flags
    }
}

/// A registered memory region, host-backed or over foreign memory.
pub struct MemoryRegion {
    // Field order matters: the registration is dropped before the memory it covers.
    mr: Arc<SwMr>,
    host: Option<HostBuffer>,
    /// The CPU may read the registered bytes (host memory, owned or not).
    cpu_readable: bool,
    addr: u64,
    len: usize,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl MemoryRegion {
    /// Registers a host buffer; the region owns it from now on.
    pub fn register_host(
        pd: &ProtectionDomain,
        buffer: HostBuffer,
        access: Access,
    ) -> Result<Self> {
        let (addr, len) = (buffer.addr(), buffer.len());
        // SAFETY: the buffer is valid for len bytes and is kept alive by the region.
        let mr = unsafe { pd.pd.reg_mr(addr as usize, len, access.flags()) }
            .map_err(|e| VerbsError::from_sideway("ibv_reg_mr", e))?;
        Ok(MemoryRegion {
            mr,
            host: Some(buffer),
            cpu_readable: true,
            addr,
            len,
        })
    }

    /// Registers memory this crate does not own, such as GPU memory (`nvidia-peermem`).
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid (and mapped for the NIC) for as long as the region lives.
    pub unsafe fn register_raw(
        pd: &ProtectionDomain,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<Self> {
        // SAFETY: the caller guarantees the range.
        let mr = unsafe { pd.pd.reg_mr(addr as usize, len, access.flags()) }
            .map_err(|e| VerbsError::from_sideway("ibv_reg_mr", e))?;
        Ok(MemoryRegion {
            mr,
            host: None,
            cpu_readable: false,
            addr,
            len,
        })
    }

    /// Registers host memory this crate does not own (pinned memory from the CUDA driver, for
    /// one), which the CPU may read, so that requests on it can be posted inline.
    ///
    /// # Safety
    /// `addr..addr+len` must be host memory that stays valid while the region lives, and a
    /// range posted inline must not be written by anything else while it is posted.
    pub unsafe fn register_host_raw(
        pd: &ProtectionDomain,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<Self> {
        // SAFETY: the caller's guarantee is register_raw's, and more.
        let mut mr = unsafe { Self::register_raw(pd, addr, len, access) }?;
        mr.cpu_readable = true;
        Ok(mr)
    }

    /// Registers a dma-buf (GPU memory exported by its driver); `iova` is the address the
    /// remote side and the work requests use for it.
    ///
    /// # Safety
    /// `fd` must be a dma-buf whose `offset..offset+len` stays valid while the region lives.
    pub unsafe fn register_dmabuf(
        pd: &ProtectionDomain,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<Self> {
        // SAFETY: the caller guarantees the dma-buf.
        let mr =
            unsafe { pd.pd.reg_dmabuf_mr(offset, len, iova, fd, access.flags()) }.map_err(|e| {
                let reason = VerbsError::from_sideway("ibv_reg_dmabuf_mr", e).to_string();
                VerbsError::DmaBufUnsupported { reason }
            })?;
        Ok(MemoryRegion {
            mr,
            host: None,
            cpu_readable: false,
            addr: iova,
            len,
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// Start address (the iova for a dma-buf region).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host bytes, when the region is host memory.
    pub fn host(&self) -> Option<&[u8]> {
        self.host.as_ref().map(HostBuffer::as_slice)
    }

    /// The host bytes, writable, when the region is host memory.
    pub fn host_mut(&mut self) -> Option<&mut [u8]> {
        self.host.as_mut().map(HostBuffer::as_mut_slice)
    }

    /// `len` bytes at `offset`, read by the CPU (inline data); `None` when the region is not
    /// CPU-readable memory, an error when the range is outside it.
    #[inline]
    pub(crate) fn cpu_bytes(&self, offset: u64, len: u32) -> Result<Option<&[u8]>> {
        self.check_range(offset, len)?;
        if let Some(host) = &self.host {
            let start = offset as usize;
            return Ok(Some(&host.as_slice()[start..start + len as usize]));
        }
        if !self.cpu_readable {
            return Ok(None);
        }
        // SAFETY: the range is inside the region, which register_host_raw's caller promised is
        // host memory valid for its lifetime and not written while posted inline.
        Ok(Some(unsafe {
            std::slice::from_raw_parts((self.addr + offset) as *const u8, len as usize)
        }))
    }

    /// Whether the CPU can read the registered bytes (needed for inline data).
    pub fn is_cpu_readable(&self) -> bool {
        self.cpu_readable
    }

    /// Checks that `offset..offset+len` lies inside the region.
    #[inline]
    pub fn check_range(&self, offset: u64, len: u32) -> Result<()> {
        let end = offset.checked_add(u64::from(len));
        match end {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(VerbsError::InvalidRequest(format!(
                "range {offset}+{len} is outside the {}-byte region",
                self.len
            ))),
        }
    }
}
