//! CUDA behind the accelerator seam: [`CUDA`] is this crate as an [`accel::Runtime`], its GPUs,
//! buffers and streams as the seam's [`accel::Gpu`], [`accel::GpuBuffer`] and
//! [`accel::CopyQueue`]. Every call is one of this crate's own; nothing here decides anything.

use std::sync::Arc;

use accel::{AccelError, AllocationGuard, DeviceSelector, DmaBuf, PciBusId};

use crate::{CudaError, Device, DeviceBuffer, Event, PinnedBuffer, Stream};

impl From<CudaError> for AccelError {
    fn from(e: CudaError) -> AccelError {
        AccelError::new(e)
    }
}

/// The CUDA runtime (the driver API, loaded at run time).
#[derive(Debug)]
pub struct Cuda;

/// The one CUDA runtime, for `--mem cuda`, `cuda-peermem` and `cuda-staged`.
pub static CUDA: Cuda = Cuda;

impl accel::Runtime for Cuda {
    fn name(&self) -> &'static str {
        "CUDA"
    }

    fn library_present(&self) -> bool {
        crate::driver_library_present()
    }

    fn probe(&self) -> Result<(), AccelError> {
        crate::probe()?;
        Ok(())
    }

    fn open(&self, gpu: &DeviceSelector) -> Result<Box<dyn accel::Gpu>, AccelError> {
        Ok(Box::new(Device::open(gpu)?))
    }

    fn peer_memory(&self) -> accel::PeerMemory {
        accel::PeerMemory {
            name: "nvidia-peermem",
            // nv_peer_mem: the module Mellanox shipped before the driver's own (R465).
            loaded_when: &["/sys/module/nvidia_peermem", "/sys/module/nv_peer_mem"],
            how: "`modprobe nvidia-peermem` (it ships with the NVIDIA driver)",
        }
    }
}

impl accel::Gpu for Device {
    fn ordinal(&self) -> u32 {
        Device::ordinal(self)
    }

    fn name(&self) -> &str {
        Device::name(self)
    }

    fn pci_bus_id(&self) -> PciBusId {
        Device::pci_bus_id(self)
    }

    fn total_memory(&self) -> usize {
        Device::total_memory(self)
    }

    fn require_gpu_direct_rdma(&self) -> Result<(), AccelError> {
        Ok(Device::require_gpu_direct_rdma(self)?)
    }

    fn require_dma_buf(&self) -> Result<(), AccelError> {
        Ok(Device::require_dma_buf(self)?)
    }

    fn alloc(&self, len: usize) -> Result<Box<dyn accel::GpuBuffer>, AccelError> {
        Ok(Box::new(DeviceBuffer::new(self, len)?))
    }

    fn pinned(&self, len: usize) -> Result<accel::PinnedBuffer, AccelError> {
        let pinned = PinnedBuffer::new(self, len)?;
        let ptr = pinned.as_non_null();
        let keep = AllocationGuard::new(Arc::new(pinned));
        // SAFETY: `ptr` is the pinned buffer's, valid and zeroed for `len` bytes while `keep`
        // (which owns the buffer) lives.
        Ok(unsafe { accel::PinnedBuffer::from_raw(ptr, len, keep) })
    }

    fn copy_queue(&self, marks: usize) -> Result<Box<dyn accel::CopyQueue>, AccelError> {
        let events = (0..marks)
            .map(|_| Event::new(self))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(CopyQueue {
            stream: Stream::new(self)?,
            events,
        }))
    }
}

impl accel::GpuBuffer for DeviceBuffer {
    fn device_ptr(&self) -> u64 {
        DeviceBuffer::device_ptr(self)
    }

    fn len(&self) -> usize {
        DeviceBuffer::len(self)
    }

    fn guard(&self) -> AllocationGuard {
        DeviceBuffer::guard(self)
    }

    fn export_dmabuf(&self, offset: usize, len: usize) -> Result<DmaBuf, AccelError> {
        Ok(DeviceBuffer::export_dmabuf(self, offset, len)?)
    }

    fn export_dmabuf_mapped(
        &self,
        offset: usize,
        len: usize,
        mapping: accel::DmaBufMapping,
    ) -> Result<DmaBuf, AccelError> {
        Ok(DeviceBuffer::export_dmabuf_mapped(
            self, offset, len, mapping,
        )?)
    }

    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<(), AccelError> {
        Ok(DeviceBuffer::copy_from_host(self, offset, src)?)
    }

    fn copy_nic_written_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccelError> {
        Ok(DeviceBuffer::copy_nic_written_to_host(self, offset, dst)?)
    }
}

/// A stream and the events recorded on it as markers.
///
/// Release order: the stream is synchronised on drop, before the events and the stream are
/// destroyed (fields drop in declaration order).
#[derive(Debug)]
struct CopyQueue {
    stream: Stream,
    events: Vec<Event>,
}

impl Drop for CopyQueue {
    fn drop(&mut self) {
        // Copies still queued (a loop that failed half-way) would use memory about to be freed;
        // nothing can be reported from here, and a failure means the context is gone.
        let _ = self.stream.synchronize();
    }
}

impl CopyQueue {
    fn event(&self, marker: usize) -> Result<&Event, AccelError> {
        Ok(accel::nth_marker(&self.events, marker)?)
    }
}

impl accel::CopyQueue for CopyQueue {
    unsafe fn queue_device_to_host(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), AccelError> {
        // SAFETY: the trait's contract is the stream's.
        Ok(unsafe { self.stream.queue_device_to_host(dst, src, len) }?)
    }

    unsafe fn queue_host_to_device(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), AccelError> {
        // SAFETY: the trait's contract is the stream's.
        Ok(unsafe { self.stream.queue_host_to_device(dst, src, len) }?)
    }

    fn mark(&self, marker: usize) -> Result<(), AccelError> {
        Ok(self.stream.record(self.event(marker)?)?)
    }

    fn reached(&self, marker: usize) -> Result<bool, AccelError> {
        Ok(self.event(marker)?.is_complete()?)
    }

    fn synchronize(&self) -> Result<(), AccelError> {
        Ok(self.stream.synchronize()?)
    }
}

#[cfg(test)]
mod tests {
    use accel::Runtime as _;

    #[test]
    fn peer_memory_is_the_driver_s_nvidia_peermem_or_the_legacy_nv_peer_mem() {
        let peer = crate::CUDA.peer_memory();
        for module in ["nvidia_peermem", "nv_peer_mem"] {
            let path = format!("/sys/module/{module}");
            assert_eq!(
                peer.loaded_by(|p| p == std::path::Path::new(&path)),
                Some(path.as_str()),
                "{module}"
            );
        }
        assert_eq!(peer.loaded_by(|_| false), None);
    }
}
