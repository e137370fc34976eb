//! GPU memory exported as a dma-buf fd, for `ibv_reg_dmabuf_mr` (GPUDirect RDMA without a peer-memory
//! module), whatever runtime exported it.
//!
//! CUDA exports a range whose start and length are multiples of the **host** page size (4 KiB;
//! [`host_page_size`] reads the running kernel's): a request for an arbitrary `addr .. addr + len` is
//! widened to the enclosing host-page-aligned range ([`align_range`]), and the position of `addr`
//! inside it is kept as the MR's offset. ROCm's export says itself where `addr` lies in the dma-buf
//! it hands out. Either way the result is exactly the argument list of
//!
//! ```text
//! ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)
//!                       |       |       |     '- DmaBuf::fd()
//!                       |       |       '------- DmaBuf::iova():   the GPU address of the first byte
//!                       |       '--------------- DmaBuf::len():    the bytes asked for
//!                       '----------------------- DmaBuf::offset(): where they start inside the dma-buf
//! ```
//!
//! With `iova` = the GPU virtual address, the peer addresses the MR with GPU addresses (as with host memory,
//! where the iova is the host virtual address), so the remote address in the endpoint exchange is
//! [`DmaBuf::iova`].

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::AllocationGuard;

/// The usual host page size: 4 KiB on x86-64 and most aarch64 kernels. CUDA's export uses
/// [`host_page_size`], the running kernel's, which is 64 KiB on some aarch64 systems (e.g. Grace);
/// CUDA's buffers are 64 KiB aligned and sized, so the widened range stays inside the allocation
/// either way.
pub const HOST_PAGE_SIZE: usize = 4096;

/// The running kernel's page size (`sysconf(_SC_PAGESIZE)`), [`HOST_PAGE_SIZE`] if that fails.
pub fn host_page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match usize::try_from(page) {
        Ok(p) if p.is_power_of_two() => p,
        _ => HOST_PAGE_SIZE,
    }
}

/// A range widened to page boundaries: `base .. base + len` covers the request, which starts `offset` bytes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlignedRange {
    /// Page-aligned start (≤ the requested address).
    pub base: u64,
    /// Page-multiple length, covering the request.
    pub len: usize,
    /// The requested address minus `base`.
    pub offset: usize,
}

/// Widens `addr .. addr + len` to `page` boundaries. `None` if `len` is 0, `page` is not a power of two, or the
/// end overflows.
pub fn align_range(addr: u64, len: usize, page: usize) -> Option<AlignedRange> {
    if len == 0 || !page.is_power_of_two() {
        return None;
    }
    let mask = page as u64 - 1;
    let base = addr & !mask;
    let end = addr.checked_add(len as u64)?.checked_add(mask)? & !mask;
    Some(AlignedRange {
        base,
        len: usize::try_from(end - base).ok()?,
        offset: usize::try_from(addr - base).ok()?,
    })
}

/// How the GPU maps the memory a dma-buf exports for the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DmaBufMapping {
    /// The driver's choice.
    #[default]
    Default,
    /// Through the GPU's PCIe BAR (CUDA's `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, driver
    /// 12.8 or newer): what Grace-based (C2C) and Data Direct systems need for the NIC to reach
    /// GPU memory over PCIe (perftest's `--use_cuda_pcie_mapping`).
    Pcie,
}

/// A runtime that cannot export a dma-buf with the mapping asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "only CUDA (driver 12.8 or newer) exports a dma-buf mapped through PCIe; this GPU's runtime \
     exports with its own mapping"
)]
pub struct MappingUnsupported;

/// A GPU memory range exported as a dma-buf: the owned fd plus what `ibv_reg_dmabuf_mr` needs. Keeps the GPU
/// allocation alive while it lives; dropping it closes the fd (an MR registered from it holds its own
/// reference in the kernel, so deregister the MR before freeing the buffer in any case).
pub struct DmaBuf {
    fd: OwnedFd,
    offset: u64,
    len: usize,
    iova: u64,
    exported: AlignedRange,
    _alloc: AllocationGuard,
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuf")
            .field("fd", &self.fd.as_raw_fd())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("iova", &format_args!("0x{:x}", self.iova))
            .field("exported", &self.exported)
            .finish()
    }
}

impl DmaBuf {
    /// The runtime's export: `fd`, owned from now on; `exported`, the page-aligned range it covers,
    /// whose `offset` is where the `len` bytes asked for start (at GPU address `iova`); `keep`, a
    /// guard of the allocation, held as long as the dma-buf is.
    pub fn new(
        fd: OwnedFd,
        exported: AlignedRange,
        len: usize,
        iova: u64,
        keep: AllocationGuard,
    ) -> DmaBuf {
        DmaBuf {
            fd,
            offset: exported.offset as u64,
            len,
            iova,
            exported,
            _alloc: keep,
        }
    }

    /// The dma-buf fd (`ibv_reg_dmabuf_mr`'s `fd`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The fd as a raw number, for C APIs.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Where the requested range starts inside the dma-buf (`ibv_reg_dmabuf_mr`'s `offset`).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The requested length (`ibv_reg_dmabuf_mr`'s `length`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: empty ranges are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The GPU virtual address of the first requested byte (`ibv_reg_dmabuf_mr`'s `iova`).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The host-page-aligned range actually exported.
    pub fn exported_range(&self) -> AlignedRange {
        self.exported
    }

    /// The exporter's name from `/proc/self/fdinfo` (see [`dmabuf_exporter`]): `Some` proves the fd is a
    /// dma-buf.
    pub fn exporter(&self) -> io::Result<Option<String>> {
        dmabuf_exporter(self.fd())
    }
}

/// The `exp_name:` line of a `/proc/<pid>/fdinfo/<fd>` text: present only for dma-buf fds.
pub fn parse_fdinfo_exp_name(fdinfo: &str) -> Option<&str> {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("exp_name:"))
        .map(str::trim)
}

/// Whether `fd` is a dma-buf, and whose: the exporter's name from `/proc/self/fdinfo/<fd>` (e.g. `nvidia`), or
/// `None` for any other kind of fd.
pub fn dmabuf_exporter(fd: BorrowedFd<'_>) -> io::Result<Option<String>> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    Ok(parse_fdinfo_exp_name(&text).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_request_is_unchanged() {
        let r = align_range(0x7f00_0000_0000, 8192, 4096).unwrap();
        assert_eq!(
            r,
            AlignedRange {
                base: 0x7f00_0000_0000,
                len: 8192,
                offset: 0
            }
        );
    }

    #[test]
    fn unaligned_start_keeps_its_offset() {
        let addr = 0x7f00_0001_0000 + 100;
        let r = align_range(addr, 50, 4096).unwrap();
        assert_eq!(r.base, 0x7f00_0001_0000);
        assert_eq!(r.offset, 100);
        assert_eq!(r.len, 4096);
        assert_eq!(r.base + r.offset as u64, addr);
    }

    #[test]
    fn range_straddling_pages_covers_both() {
        let addr = 0x10_0000 + 4000;
        let r = align_range(addr, 200, 4096).unwrap();
        assert_eq!(r.base, 0x10_0000);
        assert_eq!(r.len, 8192);
        assert_eq!(r.offset, 4000);
        // Covers the request.
        assert!(r.base + r.len as u64 >= addr + 200);
    }

    #[test]
    fn exact_end_on_boundary_adds_no_page() {
        let r = align_range(0x10_0000 + 4096 - 10, 10, 4096).unwrap();
        assert_eq!(r.len, 4096);
        assert_eq!(r.offset, 4086);
    }

    #[test]
    fn covering_property_over_many_inputs() {
        for base in [0u64, 0x7f12_3456_0000] {
            for off in [0u64, 1, 4095, 4096, 4097, 65535, 65536, 123_457] {
                for len in [1usize, 2, 4095, 4096, 4097, 1 << 20, (1 << 20) + 3] {
                    let addr = base + off;
                    let r = align_range(addr, len, 4096).unwrap();
                    assert_eq!(r.base % 4096, 0);
                    assert_eq!(r.len % 4096, 0);
                    assert_eq!(r.base + r.offset as u64, addr);
                    assert!(r.offset < 4096);
                    assert!(r.base + r.len as u64 >= addr + len as u64);
                    // Minimal: one page less would not cover it.
                    assert!(r.base + r.len as u64 - 4096 < addr + len as u64);
                }
            }
        }
    }

    #[test]
    fn rejects_degenerate_input() {
        assert_eq!(align_range(0, 0, 4096), None);
        assert_eq!(align_range(0, 10, 3000), None);
        assert_eq!(align_range(0, 10, 0), None);
        assert_eq!(align_range(u64::MAX - 10, 100, 4096), None);
    }

    #[test]
    fn parses_exp_name() {
        let dmabuf =
            "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1045\nsize:\t2097152\ncount:\t2\n\
                      exp_name:\tnvidia\nname:\t\n";
        assert_eq!(parse_fdinfo_exp_name(dmabuf), Some("nvidia"));
        let file = "pos:\t0\nflags:\t02100000\nmnt_id:\t27\nino:\t393\n";
        assert_eq!(parse_fdinfo_exp_name(file), None);
    }

    #[test]
    fn host_page_size_is_a_sane_power_of_two() {
        let p = host_page_size();
        assert!(p.is_power_of_two() && (4096..=65536).contains(&p), "{p}");
    }

    #[test]
    fn a_plain_file_is_not_a_dmabuf() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(dmabuf_exporter(f.as_fd()).unwrap(), None);
    }
}
