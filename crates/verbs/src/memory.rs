//! Memory regions: page-aligned host buffers registered with the NIC, or memory that lives
//! elsewhere (a GPU, pinned memory from the CUDA driver) registered by raw pointer.
//!
//! # Release order
//! A region owns what keeps its memory alive (the [`HostBuffer`], or the *backing* handed to
//! the raw and dma-buf registrations) and drops it only after `ibv_dereg_mr`: the memory under
//! a live registration is never freed, whatever order the caller drops things in, and a run
//! that fails half-way through setting up cannot get it wrong either.
//!
//! # Relaxed ordering
//! [`Access::relaxed_ordering`] adds `IBV_ACCESS_RELAXED_ORDERING`, as perftest does by default:
//! the NIC may then let its PCIe writes pass one another, which costs nothing on most hosts and
//! a great deal of bandwidth where PCIe ordering is expensive (some AMD hosts, PCIe switches,
//! VMs, GPU memory). It is an optional flag: rdma-core drops it where the kernel does not take
//! optional flags and providers that cannot use it ignore it; a provider that refuses it
//! instead gets the registration again without it, and [`MemoryRegion::relaxed_ordering`] says
//! which was used.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use sideway::ibverbs::memory_region::{MemoryRegion as SwMr, RegisterMemoryRegionErrorKind};
use sideway::ibverbs::AccessFlags;

use crate::error::{Result, VerbsError};
use crate::pd::ProtectionDomain;

/// The alignment of host buffers: one page.
pub const PAGE_SIZE: usize = 4096;

/// A zeroed, page-aligned host buffer, on normal or huge pages.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    pages: Pages,
}

/// How a [`HostBuffer`]'s memory was obtained, and so how it is given back.
#[derive(Debug, Clone, Copy)]
enum Pages {
    /// From the allocator, with this layout.
    Normal(Layout),
    /// A private anonymous mapping of huge pages (`MAP_HUGETLB`) of this many bytes (whole
    /// huge pages) for a buffer of `len`.
    Huge { mapped: usize, len: usize },
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
        Ok(HostBuffer {
            ptr,
            pages: Pages::Normal(layout),
        })
    }

    /// Maps `len` zeroed bytes (at least one) on huge pages of `huge_page` bytes each (the
    /// kernel's default size, `Hugepagesize` in /proc/meminfo), from the pool that
    /// `vm.nr_hugepages` reserves. Fails (ENOMEM) when the pool has too few free pages.
    pub fn huge(len: usize, huge_page: usize) -> Result<Self> {
        let len = len.max(1);
        let mapped = len
            .checked_next_multiple_of(huge_page.max(PAGE_SIZE))
            .ok_or_else(|| VerbsError::InvalidRequest(format!("{len} bytes is too large")))?;
        // SAFETY: a new private anonymous mapping; no existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(VerbsError::Call {
                call: "mmap(MAP_HUGETLB)",
                reason: std::io::Error::last_os_error(),
            });
        }
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| {
            VerbsError::InvalidRequest("mmap(MAP_HUGETLB) returned a null mapping".into())
        })?;
        Ok(HostBuffer {
            ptr,
            pages: Pages::Huge { mapped, len },
        })
    }

    /// True when the buffer is on huge pages.
    pub fn huge_pages(&self) -> bool {
        matches!(self.pages, Pages::Huge { .. })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self.pages {
            Pages::Normal(layout) => layout.size(),
            Pages::Huge { len, .. } => len,
        }
    }

    /// True for a zero-length buffer (never, since at least one byte is allocated).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        match self.pages {
            // SAFETY: allocated in `new` with this layout.
            Pages::Normal(layout) => unsafe { dealloc(self.ptr.as_ptr(), layout) },
            Pages::Huge { mapped, .. } => {
                // SAFETY: mapped in `huge` with this length, and unmapped only here.
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), mapped) };
            }
        }
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
    /// Ask for PCIe relaxed ordering (`IBV_ACCESS_RELAXED_ORDERING`, see the module doc).
    pub relaxed_ordering: bool,
    /// On-demand paging (`IBV_ACCESS_ON_DEMAND`): the pages are not pinned, the NIC faults
    /// them in as it touches them. Where the device offers it ([`crate::OdpCaps`]).
    pub on_demand: bool,
}

impl Access {
    /// Every remote right: what a benchmark buffer needs whichever test runs.
    pub const ALL: Access = Access {
        remote_write: true,
        remote_read: true,
        remote_atomic: true,
        relaxed_ordering: false,
        on_demand: false,
    };

    /// The same rights, with relaxed ordering asked for or not.
    pub const fn with_relaxed_ordering(self, on: bool) -> Access {
        Access {
            relaxed_ordering: on,
            ..self
        }
    }

    /// The same rights, on demand-paged memory or not.
    pub const fn with_on_demand(self, on: bool) -> Access {
        Access {
            on_demand: on,
            ..self
        }
    }

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
        if self.relaxed_ordering {
            flags |= AccessFlags::RelaxedOrdering;
        }
        if self.on_demand {
            flags |= AccessFlags::OnDemand;
        }
        flags
    }
}

/// Whatever keeps the memory under a raw or dma-buf registration alive (a GPU allocation, pinned
/// host memory): the region holds it until after it is deregistered.
type Backing = Box<dyn std::any::Any + Send + Sync>;

/// Registers through `reg` with `access`; when relaxed ordering was asked for and refused, once
/// more without it. Returns the registration and whether relaxed ordering is on.
fn register_with<T>(access: Access, reg: impl Fn(AccessFlags) -> Result<T>) -> Result<(T, bool)> {
    match reg(access.flags()) {
        Ok(mr) => Ok((mr, access.relaxed_ordering)),
        Err(_) if access.relaxed_ordering => {
            let plain = access.with_relaxed_ordering(false);
            Ok((reg(plain.flags())?, false))
        }
        Err(e) => Err(e),
    }
}

/// How a dma-buf is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DmaBufRegistration {
    /// `ibv_reg_dmabuf_mr`.
    #[default]
    Verbs,
    /// `mlx5dv_reg_dmabuf_mr` with `MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT`: through the mlx5
    /// NIC's Data Direct function.
    DataDirect,
}

/// A registered memory region, host-backed or over foreign memory.
pub struct MemoryRegion {
    // Field order matters: the registration is dropped before the memory it covers (`host` or
    // `backing`); the MR is this Arc's only holder, so dropping it deregisters.
    mr: Arc<SwMr>,
    host: Option<HostBuffer>,
    _backing: Option<Backing>,
    relaxed_ordering: bool,
    on_demand: bool,
    /// The CPU may read the registered bytes (host memory, owned or not).
    cpu_readable: bool,
    addr: u64,
    len: usize,
    /// The offsets a request may name: all `0..len`, but for a [part](Self::part) of another
    /// region, whose offsets are that region's.
    window: Range<u64>,
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
        let (mr, relaxed_ordering) = register_with(access, |flags| {
            // SAFETY: the buffer is valid for len bytes and is kept alive by the region.
            unsafe { pd.pd.reg_mr(addr as usize, len, flags) }
                .map_err(|e| VerbsError::from_sideway("ibv_reg_mr", e))
        })?;
        Ok(MemoryRegion {
            mr,
            host: Some(buffer),
            _backing: None,
            relaxed_ordering,
            on_demand: access.on_demand,
            cpu_readable: true,
            addr,
            len,
            window: 0..len as u64,
        })
    }

    /// Registers memory this crate does not own, such as GPU memory (`nvidia-peermem`);
    /// `backing` is what keeps it allocated, which the region drops after deregistering.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid (and mapped for the NIC) for as long as `backing` lives.
    pub unsafe fn register_raw<B: Send + Sync + 'static>(
        pd: &ProtectionDomain,
        addr: u64,
        len: usize,
        access: Access,
        backing: B,
    ) -> Result<Self> {
        let (mr, relaxed_ordering) = register_with(access, |flags| {
            // SAFETY: the caller guarantees the range while `backing` lives, and the region
            // keeps `backing` until after the registration is gone.
            unsafe { pd.pd.reg_mr(addr as usize, len, flags) }
                .map_err(|e| VerbsError::from_sideway("ibv_reg_mr", e))
        })?;
        Ok(MemoryRegion {
            mr,
            host: None,
            _backing: Some(Box::new(backing)),
            relaxed_ordering,
            on_demand: access.on_demand,
            cpu_readable: false,
            addr,
            len,
            window: 0..len as u64,
        })
    }

    /// Registers host memory this crate does not own (pinned memory from the CUDA driver, for
    /// one), which the CPU may read, so that requests on it can be posted inline.
    ///
    /// # Safety
    /// `addr..addr+len` must be host memory that stays valid while `backing` lives, and a
    /// range posted inline must not be written by anything else while it is posted.
    pub unsafe fn register_host_raw<B: Send + Sync + 'static>(
        pd: &ProtectionDomain,
        addr: u64,
        len: usize,
        access: Access,
        backing: B,
    ) -> Result<Self> {
        // SAFETY: the caller's guarantee is register_raw's, and more.
        let mut mr = unsafe { Self::register_raw(pd, addr, len, access, backing) }?;
        mr.cpu_readable = true;
        Ok(mr)
    }

    /// Registers a dma-buf (GPU memory exported by its driver) as `registration` says; `iova`
    /// is the address the remote side and the work requests use for it; `backing` (the
    /// exported memory, the fd) is dropped after the region is deregistered. Whether a device
    /// has [`DmaBufRegistration::DataDirect`]: [`Device::data_direct_path`](crate::Device::data_direct_path).
    ///
    /// # Safety
    /// `fd` must be a dma-buf whose `offset..offset+len` stays valid while `backing` lives.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn register_dmabuf<B: Send + Sync + 'static>(
        pd: &ProtectionDomain,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
        registration: DmaBufRegistration,
        backing: B,
    ) -> Result<Self> {
        let (mr, relaxed_ordering) = register_with(access, |flags| match registration {
            // SAFETY: the caller guarantees the dma-buf while `backing` lives; the region
            // keeps it.
            DmaBufRegistration::Verbs => unsafe {
                pd.pd.reg_dmabuf_mr(offset, len, iova, fd, flags)
            }
            .map_err(|e| match e.0 {
                RegisterMemoryRegionErrorKind::Ibverbs(os) => {
                    VerbsError::from_dmabuf_registration(&os, "ibv_reg_dmabuf_mr")
                }
                other => VerbsError::from_sideway("ibv_reg_dmabuf_mr", other),
            }),
            // SAFETY: the protection domain is live (held by `pd`); the caller guarantees the
            // dma-buf while `backing` lives, and the region keeps it; from_raw takes the one
            // reference to the new region.
            DmaBufRegistration::DataDirect => unsafe {
                let raw =
                    crate::data_direct::register(pd.pd.pd(), offset, len, iova, fd, flags.bits())
                        .map_err(|os| {
                        VerbsError::from_dmabuf_registration(&os, "mlx5dv_reg_dmabuf_mr")
                    })?;
                Ok(SwMr::from_raw(&pd.pd, raw))
            },
        })?;
        Ok(Self::over_dmabuf(
            mr,
            relaxed_ordering,
            access,
            iova,
            len,
            backing,
        ))
    }

    /// A region registered over a dma-buf, holding `backing`.
    fn over_dmabuf<B: Send + Sync + 'static>(
        mr: Arc<SwMr>,
        relaxed_ordering: bool,
        access: Access,
        iova: u64,
        len: usize,
        backing: B,
    ) -> Self {
        MemoryRegion {
            mr,
            host: None,
            _backing: Some(Box::new(backing)),
            relaxed_ordering,
            on_demand: access.on_demand,
            cpu_readable: false,
            addr: iova,
            len,
            window: 0..len as u64,
        }
    }

    /// Registers bytes `offset..offset + len` of this host region again, on their own (a
    /// region per QP, as perftest's `--mr_per_qp`): the part keeps this region's coordinates
    /// (its address, and offsets counted from it), so that a request names the same offset
    /// through either, and it refuses a range outside its bytes.
    ///
    /// # Safety
    /// This region must outlive the part, which does not keep its memory.
    pub unsafe fn part(
        &self,
        pd: &ProtectionDomain,
        offset: u64,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion> {
        if !self.cpu_readable {
            return Err(VerbsError::InvalidRequest(
                "a part of a region is registered over host memory only".to_string(),
            ));
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= self.len as u64);
        let Some(end) = end else {
            return Err(VerbsError::InvalidRequest(format!(
                "part {offset}+{len} is outside the {}-byte region",
                self.len
            )));
        };
        // SAFETY: the bytes are this region's, which the caller keeps alive longer; the part
        // holds no backing of its own.
        let mut part = unsafe { Self::register_raw(pd, self.addr + offset, len, access, ()) }?;
        part.cpu_readable = true;
        part.addr = self.addr;
        part.len = self.len;
        part.window = offset..end;
        Ok(part)
    }

    /// True when the region is registered for on-demand paging ([`Access::on_demand`]).
    pub fn on_demand(&self) -> bool {
        self.on_demand
    }

    /// True when the registered memory is a [`HostBuffer`] on huge pages.
    pub fn huge_pages(&self) -> bool {
        self.host.as_ref().is_some_and(HostBuffer::huge_pages)
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

    /// Whether the region was registered with PCIe relaxed ordering (asked for, and not
    /// refused by the provider).
    pub fn relaxed_ordering(&self) -> bool {
        self.relaxed_ordering
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

    /// Checks that `offset..offset+len` lies inside the region (inside its bytes, for a
    /// [part](Self::part)).
    #[inline]
    pub fn check_range(&self, offset: u64, len: u32) -> Result<()> {
        let end = offset.checked_add(u64::from(len));
        match end {
            Some(end) if offset >= self.window.start && end <= self.window.end => Ok(()),
            _ => Err(VerbsError::InvalidRequest(format!(
                "range {offset}+{len} is outside the region's bytes {}..{}",
                self.window.start, self.window.end
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuses_relaxed(flags: AccessFlags) -> Result<AccessFlags> {
        if flags.contains(AccessFlags::RelaxedOrdering) {
            Err(VerbsError::InvalidRequest("EOPNOTSUPP".into()))
        } else {
            Ok(flags)
        }
    }

    #[test]
    fn relaxed_ordering_is_asked_for_only_when_wanted() {
        let (flags, on) = register_with(Access::ALL.with_relaxed_ordering(true), Ok).unwrap();
        assert!(on && flags.contains(AccessFlags::RelaxedOrdering));
        assert!(flags.contains(AccessFlags::RemoteWrite | AccessFlags::RemoteAtomic));
        let (flags, on) = register_with(Access::ALL, Ok).unwrap();
        assert!(!on && !flags.contains(AccessFlags::RelaxedOrdering));
    }

    #[test]
    fn a_provider_that_refuses_relaxed_ordering_gets_the_registration_without_it() {
        let access = Access::ALL.with_relaxed_ordering(true);
        let (flags, on) = register_with(access, refuses_relaxed).unwrap();
        assert!(!on, "the region must say relaxed ordering is off");
        assert!(flags.contains(AccessFlags::RemoteRead));
        // A failure for another reason still fails, with the plain registration's error.
        let err = register_with(access, |_| -> Result<()> {
            Err(VerbsError::InvalidRequest("no memory".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("no memory"), "{err}");
    }
}
