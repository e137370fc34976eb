//! AMD GPUs, their memory, pinned host buffers and copy queues, as the seam's [`accel::Gpu`],
//! [`accel::GpuBuffer`] and [`accel::CopyQueue`]. HIP keeps a current device per thread, so
//! every call first makes this GPU the calling thread's.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use accel::{AccelError, AllocationGuard, DeviceSelector, DmaBuf, PciBusId};

use crate::api::{self, api, hip_ok};
use crate::error::RocmError;

/// GPU allocations are rounded up to whole 64 KiB, the GPU page peer memory pins.
const GPU_PAGE: usize = 64 << 10;

/// An open AMD GPU.
#[derive(Debug, Clone)]
pub struct Device {
    ordinal: c_int,
    name: String,
    bus_id: PciBusId,
    total_memory: usize,
}

impl Device {
    /// Opens the GPU `selector` names: an index, or the PCI bus id of one of them.
    pub fn open(selector: &DeviceSelector) -> Result<Device, RocmError> {
        let count = device_count()?;
        match selector {
            DeviceSelector::Index(i) if (*i as usize) < count => Device::at(*i as c_int),
            DeviceSelector::Index(i) => Err(RocmError::NoSuchDevice {
                index: *i,
                count: count as u32,
            }),
            DeviceSelector::BusId(id) => {
                let all = (0..count as c_int)
                    .map(Device::at)
                    .collect::<Result<Vec<_>, _>>()?;
                let found = all.iter().find(|d| d.bus_id == *id).cloned();
                found.ok_or_else(|| RocmError::NoDeviceAtBusId {
                    bus_id: id.to_string(),
                    available: all
                        .iter()
                        .map(|d| d.bus_id.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
        }
    }

    fn at(ordinal: c_int) -> Result<Device, RocmError> {
        let hip = &api()?.hip;
        let mut name = [0 as c_char; 256];
        let mut bus = [0 as c_char; 64];
        let mut total = 0usize;
        // SAFETY: out-buffers of the lengths given; `ordinal` is below the device count.
        unsafe {
            hip_ok(
                "hipDeviceGetName",
                (hip.hipDeviceGetName)(name.as_mut_ptr(), 256, ordinal),
                "",
            )?;
            hip_ok(
                "hipDeviceGetPCIBusId",
                (hip.hipDeviceGetPCIBusId)(bus.as_mut_ptr(), 64, ordinal),
                "",
            )?;
            hip_ok(
                "hipDeviceTotalMem",
                (hip.hipDeviceTotalMem)(&mut total, ordinal),
                "",
            )?;
        }
        // The last byte stays NUL whatever the runtime wrote before it.
        (name[255], bus[63]) = (0, 0);
        let text = |b: &[c_char]| {
            // SAFETY: NUL-terminated: the buffer's last byte is 0.
            unsafe { CStr::from_ptr(b.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(Device {
            ordinal,
            name: text(&name),
            bus_id: text(&bus).parse()?,
            total_memory: total,
        })
    }

    /// Makes this GPU the calling thread's current one.
    fn bind(&self) -> Result<&'static api::Hip, RocmError> {
        let hip = &api()?.hip;
        // SAFETY: plain call with a valid ordinal.
        let code = unsafe { (hip.hipSetDevice)(self.ordinal) };
        hip_ok("hipSetDevice", code, "")?;
        Ok(hip)
    }
}

/// How many GPUs the runtime sees; none is an error naming why.
pub fn device_count() -> Result<usize, RocmError> {
    let hip = &api()?.hip;
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    let code = unsafe { (hip.hipGetDeviceCount)(&mut n) };
    if code != 0 {
        return Err(RocmError::NoDevices {
            reason: format!(
                "hipGetDeviceCount: hipError {code} ({})",
                crate::error::hip_error_name(code)
            ),
        });
    }
    if n <= 0 {
        return Err(RocmError::NoDevices {
            reason: "0 devices".to_string(),
        });
    }
    Ok(n as usize)
}

/// One allocation of GPU memory (`hipMalloc`) or of pinned host memory (`hipHostMalloc`),
/// shared by its buffer, guards and dma-bufs, freed by the call that matches.
struct Alloc {
    device: Device,
    ptr: NonNull<c_void>,
    pinned: bool,
}

// SAFETY: device memory is reached only through the runtime's calls, pinned host memory only
// through `accel::PinnedBuffer`'s &self / &mut self; a guard gives no access.
unsafe impl Send for Alloc {}
// SAFETY: as above.
unsafe impl Sync for Alloc {}

impl Alloc {
    /// `size` bytes on `device`, pinned host memory or GPU memory.
    fn new(device: &Device, size: usize, pinned: bool) -> Result<Alloc, RocmError> {
        let hip = device.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        let (call, hint, code) = if pinned {
            // SAFETY: valid out-pointer.
            let code = unsafe { (hip.hipHostMalloc)(&mut p, size, api::HOST_MALLOC_PORTABLE) };
            (
                "hipHostMalloc",
                "; cannot pin that much host memory: check `ulimit -l` and free \
                 RAM, or use smaller staging chunks",
                code,
            )
        } else {
            // SAFETY: valid out-pointer; the device is current.
            let code = unsafe { (hip.hipMalloc)(&mut p, size) };
            (
                "hipMalloc",
                "; free GPU memory or use smaller messages",
                code,
            )
        };
        hip_ok(call, code, hint)?;
        let ptr = NonNull::new(p).ok_or(RocmError::Hip {
            call,
            code: 0,
            hint: "; the runtime reported success but returned a null pointer",
        })?;
        Ok(Alloc {
            device: device.clone(),
            ptr,
            pinned,
        })
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        if let Ok(hip) = self.device.bind() {
            let free = if self.pinned {
                hip.hipHostFree
            } else {
                hip.hipFree
            };
            // SAFETY: allocated by the matching call, freed once, when the last holder is gone.
            let _ = unsafe { free(self.ptr.as_ptr()) };
        }
    }
}

/// GPU memory: `len` bytes from `hipMalloc`, its size rounded up to 64 KiB.
pub struct DeviceBuffer {
    alloc: Arc<Alloc>,
    len: usize,
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("gpu", &self.alloc.device.ordinal)
            .field("ptr", &self.alloc.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceBuffer {
    /// `len` bytes of `device`'s memory, rounded up to whole 64 KiB pages.
    pub fn new(device: &Device, len: usize) -> Result<DeviceBuffer, RocmError> {
        if len == 0 {
            return Err(RocmError::ZeroSize { what: "GPU buffer" });
        }
        let size = len.div_ceil(GPU_PAGE).saturating_mul(GPU_PAGE);
        Ok(DeviceBuffer {
            alloc: Arc::new(Alloc::new(device, size, false)?),
            len,
        })
    }

    /// A guard that keeps this buffer's memory allocated while it lives.
    fn keep(&self) -> AllocationGuard {
        AllocationGuard::new(Arc::clone(&self.alloc) as Arc<dyn Send + Sync>)
    }

    fn address(&self) -> u64 {
        self.alloc.ptr.as_ptr() as u64
    }

    /// `offset .. offset + len` as a dma-buf (`hsa_amd_portable_export_dmabuf`, which says
    /// where the range starts in the dma-buf it hands out).
    pub fn export(&self, offset: usize, len: usize) -> Result<DmaBuf, RocmError> {
        accel::check_range("dma-buf export", offset, len, self.len)?;
        if len == 0 {
            return Err(RocmError::ZeroSize {
                what: "dma-buf range",
            });
        }
        let hsa = api()?
            .hsa
            .as_ref()
            .map_err(|why| RocmError::DmaBufUnsupported { why })?;
        let iova = self.address() + offset as u64;
        let (mut fd, mut at): (c_int, u64) = (-1, 0);
        // SAFETY: a range inside the live allocation (checked above), valid out-pointers.
        let code = unsafe {
            (hsa.hsa_amd_portable_export_dmabuf)(iova as *const c_void, len, &mut fd, &mut at)
        };
        if code != 0 || fd < 0 {
            return Err(RocmError::Hsa {
                call: "hsa_amd_portable_export_dmabuf",
                code,
                hint: "; the kernel needs CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA, and amdgpu \
                       large-BAR GPU memory; try --mem rocm-peermem or --mem rocm-staged",
            });
        }
        // SAFETY: the runtime returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let start = usize::try_from(at).unwrap_or(usize::MAX);
        let page = accel::host_page_size();
        let range = accel::AlignedRange {
            base: iova.saturating_sub(at),
            len: start
                .saturating_add(len)
                .div_ceil(page)
                .saturating_mul(page),
            offset: start,
        };
        Ok(DmaBuf::new(fd, range, len, iova, self.keep()))
    }

    fn copy(
        &self,
        offset: usize,
        len: usize,
        to_host: bool,
        host: *mut c_void,
    ) -> Result<(), RocmError> {
        let what = if to_host {
            "copy from GPU buffer"
        } else {
            "copy to GPU buffer"
        };
        accel::check_range(what, offset, len, self.len)?;
        if len == 0 {
            return Ok(());
        }
        let hip = self.alloc.device.bind()?;
        // SAFETY: the GPU range is checked inside the live allocation; `host` is the caller's
        // slice of `len` bytes; hipMemcpy returns when the copy is done.
        let code = unsafe {
            let gpu = self
                .alloc
                .ptr
                .as_ptr()
                .cast::<u8>()
                .add(offset)
                .cast::<c_void>();
            if to_host {
                (hip.hipMemcpy)(host, gpu, len, api::DEVICE_TO_HOST)
            } else {
                (hip.hipMemcpy)(gpu, host, len, api::HOST_TO_DEVICE)
            }
        };
        hip_ok("hipMemcpy", code, "")
    }
}

fn pinned(device: &Device, len: usize) -> Result<accel::PinnedBuffer, RocmError> {
    if len == 0 {
        return Err(RocmError::ZeroSize {
            what: "pinned host buffer",
        });
    }
    let alloc = Alloc::new(device, len, true)?;
    let ptr = alloc.ptr.cast::<u8>();
    // SAFETY: `ptr` is valid for `len` bytes and ours; zeroing makes them initialised.
    unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
    let keep = AllocationGuard::new(Arc::new(alloc));
    // SAFETY: valid, zeroed and owned by `keep` for `len` bytes.
    Ok(unsafe { accel::PinnedBuffer::from_raw(ptr, len, keep) })
}

/// A stream and the events recorded on it as markers; synchronised on drop, before either is
/// destroyed.
struct CopyQueue {
    device: Device,
    stream: *mut c_void,
    events: Vec<*mut c_void>,
}

// SAFETY: HIP streams and events may be used from any thread of the process.
unsafe impl Send for CopyQueue {}
// SAFETY: as above.
unsafe impl Sync for CopyQueue {}

impl fmt::Debug for CopyQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyQueue")
            .field("stream", &self.stream)
            .field("markers", &self.events.len())
            .finish()
    }
}

impl Drop for CopyQueue {
    fn drop(&mut self) {
        let Ok(hip) = self.device.bind() else {
            return;
        };
        // SAFETY: live handles, each destroyed once, after the stream's queued copies are done
        // (a null stream, never created, is not HIP's default stream to wait on or destroy).
        unsafe {
            if !self.stream.is_null() {
                let _ = (hip.hipStreamSynchronize)(self.stream);
            }
            for &e in &self.events {
                let _ = (hip.hipEventDestroy)(e);
            }
            if !self.stream.is_null() {
                let _ = (hip.hipStreamDestroy)(self.stream);
            }
        }
    }
}

fn copy_queue(device: &Device, marks: usize) -> Result<CopyQueue, RocmError> {
    let hip = device.bind()?;
    let mut queue = CopyQueue {
        device: device.clone(),
        stream: std::ptr::null_mut(),
        events: Vec::with_capacity(marks),
    };
    // SAFETY: valid out-pointers; what was created is destroyed by `queue`'s Drop on failure.
    unsafe {
        let code = (hip.hipStreamCreateWithFlags)(&mut queue.stream, api::STREAM_NON_BLOCKING);
        hip_ok("hipStreamCreateWithFlags", code, "")?;
        for _ in 0..marks {
            let mut e = std::ptr::null_mut();
            hip_ok(
                "hipEventCreateWithFlags",
                (hip.hipEventCreateWithFlags)(&mut e, api::EVENT_DISABLE_TIMING),
                "",
            )?;
            queue.events.push(e);
        }
    }
    Ok(queue)
}

impl CopyQueue {
    fn event(&self, marker: usize) -> Result<*mut c_void, AccelError> {
        Ok(*accel::nth_marker(&self.events, marker)?)
    }
}

impl accel::CopyQueue for CopyQueue {
    unsafe fn queue_device_to_host(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), AccelError> {
        let hip = self.device.bind()?;
        // SAFETY: the trait's contract: both ranges live and untouched until done.
        let code = unsafe {
            (hip.hipMemcpyAsync)(
                dst.cast(),
                src as *const c_void,
                len,
                api::DEVICE_TO_HOST,
                self.stream,
            )
        };
        Ok(hip_ok("hipMemcpyAsync", code, "")?)
    }

    unsafe fn queue_host_to_device(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), AccelError> {
        let hip = self.device.bind()?;
        // SAFETY: the trait's contract.
        let code = unsafe {
            (hip.hipMemcpyAsync)(
                dst as *mut c_void,
                src.cast(),
                len,
                api::HOST_TO_DEVICE,
                self.stream,
            )
        };
        Ok(hip_ok("hipMemcpyAsync", code, "")?)
    }

    fn mark(&self, marker: usize) -> Result<(), AccelError> {
        let event = self.event(marker)?;
        let hip = self.device.bind()?;
        // SAFETY: live event and stream of this device.
        Ok(hip_ok(
            "hipEventRecord",
            unsafe { (hip.hipEventRecord)(event, self.stream) },
            "",
        )?)
    }

    fn reached(&self, marker: usize) -> Result<bool, AccelError> {
        let event = self.event(marker)?;
        let hip = &api()?.hip;
        // SAFETY: live event.
        match unsafe { (hip.hipEventQuery)(event) } {
            0 => Ok(true),
            api::NOT_READY => Ok(false),
            code => Err(RocmError::Hip {
                call: "hipEventQuery",
                code,
                hint: "",
            }
            .into()),
        }
    }

    fn synchronize(&self) -> Result<(), AccelError> {
        let hip = self.device.bind()?;
        // SAFETY: live stream.
        Ok(hip_ok(
            "hipStreamSynchronize",
            unsafe { (hip.hipStreamSynchronize)(self.stream) },
            "",
        )?)
    }
}

impl accel::Gpu for Device {
    fn ordinal(&self) -> u32 {
        self.ordinal as u32
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn pci_bus_id(&self) -> PciBusId {
        self.bus_id
    }

    fn total_memory(&self) -> usize {
        self.total_memory
    }

    fn require_gpu_direct_rdma(&self) -> Result<(), AccelError> {
        // An AMD GPU has no attribute for it: the NIC reaches its memory through amdgpu's peer
        // memory or a dma-buf, and the registration says when it cannot.
        Ok(())
    }

    fn require_dma_buf(&self) -> Result<(), AccelError> {
        let hsa = &api()?.hsa;
        match hsa {
            Ok(_) => Ok(()),
            Err(why) => Err(RocmError::DmaBufUnsupported { why }.into()),
        }
    }

    fn alloc(&self, len: usize) -> Result<Box<dyn accel::GpuBuffer>, AccelError> {
        Ok(Box::new(DeviceBuffer::new(self, len)?))
    }

    fn pinned(&self, len: usize) -> Result<accel::PinnedBuffer, AccelError> {
        Ok(pinned(self, len)?)
    }

    fn copy_queue(&self, marks: usize) -> Result<Box<dyn accel::CopyQueue>, AccelError> {
        Ok(Box::new(copy_queue(self, marks)?))
    }
}

impl accel::GpuBuffer for DeviceBuffer {
    fn device_ptr(&self) -> u64 {
        self.address()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn guard(&self) -> AllocationGuard {
        self.keep()
    }

    fn export_dmabuf(&self, offset: usize, len: usize) -> Result<DmaBuf, AccelError> {
        Ok(self.export(offset, len)?)
    }

    fn copy_from_host(&self, offset: usize, src: &[u8]) -> Result<(), AccelError> {
        Ok(self.copy(offset, src.len(), false, src.as_ptr().cast_mut().cast())?)
    }

    fn copy_nic_written_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccelError> {
        // ROCm has no call like CUDA's cuFlushGPUDirectRDMAWrites: the copy, after the
        // operations' completions, reads what the NIC wrote (as perftest's --use_rocm does).
        Ok(self.copy(offset, dst.len(), true, dst.as_mut_ptr().cast())?)
    }
}
