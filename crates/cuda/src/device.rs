//! Choosing a GPU: by index or by PCI bus id; its name, bus id (for topology) and the two attributes that decide
//! whether the NIC can reach its memory directly.

use std::ffi::{c_char, c_int};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

use accel::{DeviceSelector, PciBusId};

use crate::driver::{self, cu, cu_optional};
use crate::error::CudaError;
use crate::probe::probe;

/// `CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE`: a NIC's writes need a flush before the GPU's work sees them.
const WRITES_ORDERING_NONE: i32 = 0;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST`: the bit of FLUSH_WRITES_OPTIONS that says the GPU takes
/// `cuFlushGPUDirectRDMAWrites`.
const FLUSH_OPTION_HOST: i32 = 1;

/// What [`Device::flush_nic_writes`] did before a read-back of a NIC's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicWritesFlush {
    /// The GPU orders a NIC's writes for its own work (or the driver does not say): nothing to do.
    NotNeeded,
    /// `cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER)` was called (writes ordering NONE).
    Flushed,
    /// Writes ordering NONE, but the GPU's FLUSH_WRITES_OPTIONS (this value; `None`: the driver does not
    /// know the attribute) lack the host bit, so `cuFlushGPUDirectRDMAWrites` is not supported there and
    /// was not called: the read-back goes ahead unflushed (a stale byte fails `--validate`, it never passes).
    Unavailable(Option<i32>),
}
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX`.
const FLUSH_TARGET_CURRENT_CTX: c_int = 0;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER`: visible to the owning GPU's work (its copies).
const FLUSH_TO_OWNER: c_int = 100;

/// What the driver says about one GPU. Plain data, for reports and `rdmabench devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// CUDA device ordinal.
    pub ordinal: u32,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// PCI address, for the topology (NIC <-> GPU path) and the result record.
    pub pci_bus_id: PciBusId,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`: its memory can be exported as dma-buf (`--mem cuda`).
    pub dma_buf_supported: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`: a NIC can read and write its memory directly.
    pub gpu_direct_rdma_supported: bool,
}

impl DeviceInfo {
    /// `Err(DmaBufUnsupported)` unless the GPU can export dma-buf fds.
    pub fn require_dma_buf(&self) -> Result<(), CudaError> {
        if self.dma_buf_supported {
            Ok(())
        } else {
            Err(CudaError::DmaBufUnsupported {
                ordinal: self.ordinal,
                name: self.name.clone(),
                bus_id: self.pci_bus_id,
            })
        }
    }

    /// `Err(GpuDirectRdmaUnsupported)` unless the GPU supports GPUDirect RDMA.
    pub fn require_gpu_direct_rdma(&self) -> Result<(), CudaError> {
        if self.gpu_direct_rdma_supported {
            Ok(())
        } else {
            Err(CudaError::GpuDirectRdmaUnsupported {
                ordinal: self.ordinal,
                name: self.name.clone(),
                bus_id: self.pci_bus_id,
            })
        }
    }
}

/// How many GPUs the driver sees. `Err(NoDriver)` etc. from the probe.
pub fn device_count() -> Result<usize, CudaError> {
    Ok(probe()?.device_count)
}

/// Every GPU the driver sees, without creating contexts.
pub fn list_devices() -> Result<Vec<DeviceInfo>, CudaError> {
    let count = device_count()?;
    (0..count)
        .map(|i| {
            let ordinal = u32::try_from(i).map_err(|_| CudaError::NoSuchDevice {
                index: u32::MAX,
                count,
            })?;
            query_info(ordinal, count).map(|(_, info)| info)
        })
        .collect()
}

fn get_attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<c_int, CudaError> {
    let mut value: c_int = 0;
    // SAFETY: `dev` came from cuDeviceGet; valid out-pointer.
    unsafe { cu!(cuDeviceGetAttribute(&mut value, attr as c_int, dev)) }?;
    Ok(value)
}

/// A yes/no attribute; one the driver does not know (CUDA_ERROR_INVALID_VALUE) counts as "no".
fn capability(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<bool, CudaError> {
    match get_attribute(dev, attr) {
        Ok(v) => Ok(v != 0),
        Err(CudaError::Driver { code: 1, .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The device handle and its facts; the probe must have succeeded.
fn query_info(ordinal: u32, count: usize) -> Result<(sys::CUdevice, DeviceInfo), CudaError> {
    if ordinal as usize >= count {
        return Err(CudaError::NoSuchDevice {
            index: ordinal,
            count,
        });
    }
    let mut dev: sys::CUdevice = 0;
    let index = c_int::try_from(ordinal).map_err(|_| CudaError::NoSuchDevice {
        index: ordinal,
        count,
    })?;
    // SAFETY: valid out-pointer; the ordinal is below the device count.
    unsafe { cu!(cuDeviceGet(&mut dev, index)) }?;

    let mut name_buf = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 chars and the driver NUL-terminates within `len`.
    unsafe {
        cu!(cuDeviceGetName(
            name_buf.as_mut_ptr(),
            name_buf.len() as c_int,
            dev
        ))
    }?;
    let name = c_buf_to_string(&name_buf);

    let mut total_memory: usize = 0;
    // SAFETY: valid out-pointer, valid device.
    unsafe { cu!(cuDeviceTotalMem_v2(&mut total_memory, dev)) }?;

    use sys::CUdevice_attribute as A;
    let domain = get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    let bus = get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let device = get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    // The attributes carry no PCI function; cuDeviceGetPCIBusId's string does (non-zero for SR-IOV virtual
    // functions). Take it from there when it parses and agrees with the attributes.
    let mut pci_bus_id = PciBusId {
        domain: domain as u32,
        bus: bus as u8,
        device: device as u8,
        function: 0,
    };
    let mut id_buf = [0 as c_char; 32];
    // SAFETY: the buffer holds 32 chars (the driver needs 13); NUL-terminated by the driver.
    let res = unsafe {
        (driver::api().cuDeviceGetPCIBusId)(id_buf.as_mut_ptr(), id_buf.len() as c_int, dev)
    };
    if res == crate::error::SUCCESS {
        if let Ok(parsed) = c_buf_to_string(&id_buf).parse::<PciBusId>() {
            if (parsed.domain, parsed.bus, parsed.device)
                == (pci_bus_id.domain, pci_bus_id.bus, pci_bus_id.device)
            {
                pci_bus_id.function = parsed.function;
            }
        }
    }

    let dma_buf_supported = capability(dev, A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)?;
    let gpu_direct_rdma_supported =
        capability(dev, A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED)?;
    Ok((
        dev,
        DeviceInfo {
            ordinal,
            name,
            pci_bus_id,
            total_memory,
            dma_buf_supported,
            gpu_direct_rdma_supported,
        },
    ))
}

fn c_buf_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An opened GPU: its facts and its (retained) primary context. Cheap to clone (shared); every buffer, stream
/// and event made from it holds a clone, so the context outlives them all and is released with the last one.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    info: DeviceInfo,
}

// SAFETY: the driver API is thread-safe, and a context may be made current on (and used from) any thread;
// DeviceInner is immutable after construction.
unsafe impl Send for DeviceInner {}
// SAFETY: as above.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: balanced with the cuDevicePrimaryCtxRetain in Device::open_index; nothing made from this
        // device is left (they all hold the Arc). Errors cannot be reported from drop; the driver frees the
        // context at process exit in any case.
        let _ = unsafe { (driver::api().cuDevicePrimaryCtxRelease_v2)(self.dev) };
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("info", &self.inner.info)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Opens the GPU `selector` names.
    pub fn open(selector: &DeviceSelector) -> Result<Device, CudaError> {
        match selector {
            DeviceSelector::Index(i) => Device::open_index(*i),
            DeviceSelector::BusId(id) => Device::open_bus_id(id),
        }
    }

    /// Opens GPU `ordinal`: `Err(NoSuchDevice)` naming how many exist when it is out of range.
    pub fn open_index(ordinal: u32) -> Result<Device, CudaError> {
        let count = probe()?.device_count;
        let (dev, info) = query_info(ordinal, count)?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `dev` is a valid device; valid out-pointer. Released in DeviceInner::drop.
        unsafe { cu!(cuDevicePrimaryCtxRetain(&mut ctx, dev)) }?;
        let device = Device {
            inner: Arc::new(DeviceInner { dev, ctx, info }),
        };
        device.bind_to_thread()?;
        Ok(device)
    }

    /// Opens the GPU at `bus_id`: `Err(NoSuchBusId)` listing the bus ids present when none matches.
    pub fn open_bus_id(bus_id: &PciBusId) -> Result<Device, CudaError> {
        let devices = list_devices()?;
        match devices.iter().find(|d| d.pci_bus_id == *bus_id) {
            Some(d) => Device::open_index(d.ordinal),
            None => Err(CudaError::NoSuchBusId {
                bus_id: *bus_id,
                available: devices
                    .iter()
                    .map(|d| format!("{} (GPU {})", d.pci_bus_id, d.ordinal))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Makes this GPU's primary context current on the calling thread. Every method of this crate does it
    /// itself before it calls the driver, so callers need it only for their own raw driver calls.
    pub fn bind_to_thread(&self) -> Result<(), CudaError> {
        // SAFETY: the context is retained for as long as `self` lives.
        unsafe { cu!(cuCtxSetCurrent(self.inner.ctx)) }
    }

    /// The facts: name, bus id, memory, attributes.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// CUDA device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.inner.info.ordinal
    }

    /// Marketing name, e.g. "NVIDIA H200".
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// PCI address, for the topology and the result record.
    pub fn pci_bus_id(&self) -> PciBusId {
        self.inner.info.pci_bus_id
    }

    /// Device memory in bytes.
    pub fn total_memory(&self) -> usize {
        self.inner.info.total_memory
    }

    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub fn dma_buf_supported(&self) -> bool {
        self.inner.info.dma_buf_supported
    }

    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub fn gpu_direct_rdma_supported(&self) -> bool {
        self.inner.info.gpu_direct_rdma_supported
    }

    /// `Err(DmaBufUnsupported)` unless the GPU can export dma-buf fds (`--mem cuda`).
    pub fn require_dma_buf(&self) -> Result<(), CudaError> {
        self.inner.info.require_dma_buf()
    }

    /// `Err(GpuDirectRdmaUnsupported)` unless the GPU supports GPUDirect RDMA (`--mem cuda`, `cuda-peermem`).
    pub fn require_gpu_direct_rdma(&self) -> Result<(), CudaError> {
        self.inner.info.require_gpu_direct_rdma()
    }

    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING`: 0 (`..._NONE`: a NIC's writes to GPU memory need
    /// a flush before the GPU's own work sees them in order), 100 (`..._OWNER`: ordered for this GPU's work) or
    /// 200 (`..._ALL_DEVICES`); `None` where the driver does not know the attribute.
    pub fn gpu_direct_rdma_writes_ordering(&self) -> Result<Option<i32>, CudaError> {
        self.optional_attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
        )
    }

    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS`: a bit mask of the ways to flush a NIC's
    /// writes, 1 (`CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST`: `cuFlushGPUDirectRDMAWrites`) and 2
    /// (`..._MEMOPS`: stream memory operations); `None` where the driver does not know the attribute.
    pub fn gpu_direct_rdma_flush_writes_options(&self) -> Result<Option<i32>, CudaError> {
        self.optional_attribute(
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
        )
    }

    /// Makes what a NIC wrote into this GPU's memory (GPUDirect RDMA) visible to the copies that read it next,
    /// where the GPU does not order such writes itself: its writes-ordering attribute is NONE (0; GPUs before
    /// Hopper) and its flush-writes options have the host bit, so this calls
    /// `cuFlushGPUDirectRDMAWrites(CURRENT_CTX, TO_OWNER)`. A GPU that orders them (or a driver that does not
    /// say) needs nothing; one without the host bit cannot take the call. Says which.
    pub fn flush_nic_writes(&self) -> Result<NicWritesFlush, CudaError> {
        if self.gpu_direct_rdma_writes_ordering()? != Some(WRITES_ORDERING_NONE) {
            return Ok(NicWritesFlush::NotNeeded);
        }
        let options = self.gpu_direct_rdma_flush_writes_options()?;
        if options.is_none_or(|o| o & FLUSH_OPTION_HOST == 0) {
            return Ok(NicWritesFlush::Unavailable(options));
        }
        self.bind_to_thread()?;
        // SAFETY: plain enum arguments; the device's context is current on this thread.
        unsafe {
            cu_optional!(cuFlushGPUDirectRDMAWrites(
                FLUSH_TARGET_CURRENT_CTX,
                FLUSH_TO_OWNER
            ))
        }?;
        Ok(NicWritesFlush::Flushed)
    }

    fn optional_attribute(&self, attr: sys::CUdevice_attribute) -> Result<Option<i32>, CudaError> {
        match get_attribute(self.inner.dev, attr) {
            Ok(v) => Ok(Some(v)),
            Err(CudaError::Driver { code: 1, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_attributes_name_the_attribute() {
        let mut info = DeviceInfo {
            ordinal: 1,
            name: "NVIDIA H200".into(),
            pci_bus_id: "0000:17:00.0".parse().unwrap(),
            total_memory: 1 << 30,
            dma_buf_supported: false,
            gpu_direct_rdma_supported: false,
        };
        let e = info.require_dma_buf().unwrap_err().to_string();
        assert!(e.contains("GPU 1 (NVIDIA H200, 0000:17:00.0)"), "{e}");
        assert!(e.contains("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED"), "{e}");
        assert!(e.contains("cuda-staged"), "{e}");
        let e = info.require_gpu_direct_rdma().unwrap_err().to_string();
        assert!(
            e.contains("CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED"),
            "{e}"
        );
        info.dma_buf_supported = true;
        info.gpu_direct_rdma_supported = true;
        assert!(info.require_dma_buf().is_ok());
        assert!(info.require_gpu_direct_rdma().is_ok());
    }

    #[test]
    fn no_such_device_names_the_count() {
        let e = CudaError::NoSuchDevice { index: 3, count: 2 }.to_string();
        assert!(
            e.contains("no CUDA device 3: 2 device(s) exist (indices 0 to 1)"),
            "{e}"
        );
    }
}
