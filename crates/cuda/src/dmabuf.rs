//! Exporting CUDA memory as a dma-buf fd (`accel::DmaBuf`, for `ibv_reg_dmabuf_mr`):
//! `cuMemGetHandleForAddressRange(.., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, ..)` over the buffer's range
//! widened to host pages (`accel::align_range`); mapped through the GPU's PCIe BAR where asked
//! (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, driver 12.8 or newer: Grace-based and Data Direct
//! systems).

use std::ffi::{c_int, c_void};
use std::os::fd::{FromRawFd, OwnedFd};

use accel::{align_range, host_page_size, DmaBuf, DmaBufMapping};
use cudarc::driver::sys;

use crate::driver;
use crate::error::CudaError;
use crate::memory::{check_range, DeviceBuffer};

impl DeviceBuffer {
    /// Exports `offset .. offset + len` of the buffer as a dma-buf fd (see the module doc).
    ///
    /// Errors: `OutOfBounds`; `DmaBufUnsupported` when the GPU reports no dma-buf support; `DmaBufExport` when
    /// the driver refuses (its code and what to try).
    pub fn export_dmabuf(&self, offset: usize, len: usize) -> Result<DmaBuf, CudaError> {
        self.export_dmabuf_mapped(offset, len, DmaBufMapping::Default)
    }

    /// [`DeviceBuffer::export_dmabuf`] mapped as `mapping` says.
    ///
    /// Errors: those of [`DeviceBuffer::export_dmabuf`], and `PcieMappingUnsupported` for
    /// [`DmaBufMapping::Pcie`] on a driver older than 12.8.
    pub fn export_dmabuf_mapped(
        &self,
        offset: usize,
        len: usize,
        mapping: DmaBufMapping,
    ) -> Result<DmaBuf, CudaError> {
        check_range("dma-buf export", offset, len, self.len())?;
        if len == 0 {
            return Err(CudaError::ZeroSize {
                what: "dma-buf range",
            });
        }
        let device = self.device();
        device.require_dma_buf()?;
        let flags = mapping_flags(device.ordinal(), mapping)?;
        let iova = self.device_ptr() + offset as u64;
        let page = host_page_size();
        let range = align_range(iova, len, page).ok_or(CudaError::TooLarge {
            what: "dma-buf range",
            len,
            align: page,
        })?;
        // The allocation is 64 KiB aligned and sized, so the widened range never leaves it.
        let alloc = self.alloc();
        if range.base < alloc.ptr || range.base + range.len as u64 > alloc.ptr + alloc.size as u64 {
            return Err(CudaError::OutOfBounds(accel::OutOfBounds {
                what: "dma-buf export (page-aligned range)",
                offset: (range.base.saturating_sub(alloc.ptr)) as usize,
                len: range.len,
                size: alloc.size,
            }));
        }

        device.bind_to_thread()?;
        let mut fd: c_int = -1;
        // SAFETY: for CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD the handle is an int the driver writes; the range is
        // host-page aligned and inside a live cuMemAlloc allocation of the current context.
        let res = unsafe {
            (driver::api().cuMemGetHandleForAddressRange)(
                (&mut fd as *mut c_int).cast::<c_void>(),
                range.base,
                range.len,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD as c_int,
                flags,
            )
        };
        if res != crate::error::SUCCESS || fd < 0 {
            return Err(CudaError::DmaBufExport {
                ordinal: device.ordinal(),
                addr: range.base,
                len: range.len,
                code: res,
                hint: export_hint(res),
            });
        }
        // SAFETY: the driver returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DmaBuf::new(fd, range, len, iova, self.guard()))
    }

    /// Exports the whole buffer (`offset` 0, `iova` = [`DeviceBuffer::device_ptr`]).
    pub fn export_dmabuf_all(&self) -> Result<DmaBuf, CudaError> {
        self.export_dmabuf(0, self.len())
    }
}

/// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (cuda.h 12.8).
pub const MAPPING_TYPE_PCIE: u64 = 0x1;

/// The first CUDA driver with [`MAPPING_TYPE_PCIE`], as `cuDriverGetVersion` gives it.
pub const PCIE_MAPPING_SINCE: i32 = 12080;

/// `cuMemGetHandleForAddressRange`'s flags for `mapping`, checked against the driver's version
/// as the probe read it (an older driver refuses the flag with a bare CUDA_ERROR_INVALID_VALUE).
fn mapping_flags(ordinal: u32, mapping: DmaBufMapping) -> Result<u64, CudaError> {
    match mapping {
        DmaBufMapping::Default => Ok(0),
        DmaBufMapping::Pcie => {
            let driver = crate::probe()?;
            if driver.version < PCIE_MAPPING_SINCE {
                return Err(CudaError::PcieMappingUnsupported {
                    ordinal,
                    driver: driver.version_string(),
                });
            }
            Ok(MAPPING_TYPE_PCIE)
        }
    }
}

fn export_hint(code: i32) -> &'static str {
    match code {
        801 => {
            "the driver cannot export this memory as dma-buf: it needs the NVIDIA open kernel modules (r515 or \
             newer) and Linux 5.12 or newer; try --mem cuda-peermem or --mem cuda-staged"
        }
        1 => "the driver refused the range (invalid value); this is a bug in rdmabench-cuda, please report it",
        304 => "an operating-system call failed: is the process out of file descriptors (`ulimit -n`)?",
        _ => "try --mem cuda-peermem or --mem cuda-staged",
    }
}
