//! Async copies between GPU memory and pinned host memory on a stream, and events to learn when they are done.
//!
//! This is the staged path's copy half. Nothing here allocates: a copy is one driver call (`cuMemcpyDtoHAsync` /
//! `cuMemcpyHtoDAsync`) plus one `cuCtxSetCurrent`, an event record or query is one driver call. The engine makes
//! its streams and events once, before the measured loop, and polls events in it:
//!
//! ```no_run
//! # fn demo(gpu: &cuda::Device, payload: &cuda::DeviceBuffer, bounce: &cuda::PinnedBuffer)
//! #     -> Result<(), cuda::CudaError> {
//! let stream = cuda::Stream::new(gpu)?;
//! let done = cuda::Event::new(gpu)?;
//! // SAFETY: `bounce[0..4096]` is not touched until `done` completes; both buffers outlive the copy.
//! unsafe { stream.copy_device_to_host(bounce, 0, payload, 0, 4096)? };
//! stream.record(&done)?;
//! while !done.is_complete()? { /* poll the CQ meanwhile */ }
//! # Ok(()) }
//! ```

use std::ffi::c_void;
use std::fmt;

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{self, cu, cu_optional};
use crate::error::{driver_error, CudaError};
use crate::memory::{check_range, DeviceBuffer};
use crate::pinned::PinnedBuffer;

/// A non-blocking CUDA stream (no implicit synchronisation with the legacy default stream). Copies issued to one
/// stream run, and complete, in issue order.
pub struct Stream {
    device: Device,
    raw: sys::CUstream,
}

// SAFETY: a CUstream may be used from any thread whose current context is its own (every method binds it).
unsafe impl Send for Stream {}
// SAFETY: stream operations are thread-safe in the driver.
unsafe impl Sync for Stream {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("gpu", &self.device.ordinal())
            .field("raw", &self.raw)
            .finish()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.device.bind_to_thread();
        // SAFETY: created by cuStreamCreate, destroyed once; the driver lets queued work finish first.
        let _ = unsafe { (driver::api().cuStreamDestroy_v2)(self.raw) };
    }
}

impl Stream {
    /// A new non-blocking stream on `device`.
    pub fn new(device: &Device) -> Result<Stream, CudaError> {
        device.bind_to_thread()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context current.
        unsafe {
            cu!(cuStreamCreate(
                &mut raw,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
            ))
        }?;
        Ok(Stream {
            device: device.clone(),
            raw,
        })
    }

    /// Queues a copy of `src[src_offset .. src_offset + len]` (GPU) to `dst[dst_offset ..]` (pinned host).
    /// Returns once queued; record an event after it to learn when it is done.
    ///
    /// # Safety
    /// Until the copy has completed (an event recorded after it reports complete, or the stream was
    /// synchronised): the destination range must not be read or written by the CPU, the NIC or another copy,
    /// and neither buffer may be dropped.
    pub unsafe fn copy_device_to_host(
        &self,
        dst: &PinnedBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        check_range(
            "device-to-host copy (pinned destination)",
            dst_offset,
            len,
            dst.len(),
        )?;
        check_range(
            "device-to-host copy (GPU source)",
            src_offset,
            len,
            src.len(),
        )?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are in bounds (checked above); the caller keeps them alive and untouched until
        // the copy completes.
        unsafe {
            self.queue_device_to_host(
                dst.as_ptr().add(dst_offset).cast_mut(),
                src.device_ptr() + src_offset as u64,
                len,
            )
        }
    }

    /// Queues a copy of `len` bytes from GPU address `src` to host address `dst`.
    ///
    /// # Safety
    /// Both ranges lie in live allocations (`dst` pinned host memory, `src` this device's memory), and stay
    /// alive and untouched as [`Stream::copy_device_to_host`] says.
    pub unsafe fn queue_device_to_host(
        &self,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> Result<(), CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: the caller's contract.
        unsafe {
            cu!(cuMemcpyDtoHAsync_v2(
                dst.cast::<c_void>(),
                src,
                len,
                self.raw
            ))
        }
    }

    /// Queues a copy of `src[src_offset .. src_offset + len]` (pinned host) to `dst[dst_offset ..]` (GPU).
    ///
    /// # Safety
    /// Until the copy has completed: the source range must not be written by the CPU, the NIC or another copy,
    /// the destination range must not be used by anything else, and neither buffer may be dropped.
    pub unsafe fn copy_host_to_device(
        &self,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &PinnedBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<(), CudaError> {
        check_range(
            "host-to-device copy (GPU destination)",
            dst_offset,
            len,
            dst.len(),
        )?;
        check_range(
            "host-to-device copy (pinned source)",
            src_offset,
            len,
            src.len(),
        )?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are in bounds; the caller keeps them alive and unchanged until the copy completes.
        unsafe {
            self.queue_host_to_device(
                dst.device_ptr() + dst_offset as u64,
                src.as_ptr().add(src_offset),
                len,
            )
        }
    }

    /// Queues a copy of `len` bytes from host address `src` to GPU address `dst`.
    ///
    /// # Safety
    /// Both ranges lie in live allocations, and stay alive and unchanged as
    /// [`Stream::copy_host_to_device`] says.
    pub unsafe fn queue_host_to_device(
        &self,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: the caller's contract.
        unsafe {
            cu!(cuMemcpyHtoDAsync_v2(
                dst,
                src.cast::<c_void>(),
                len,
                self.raw
            ))
        }
    }

    /// Records `event` on this stream: it completes when all work queued before it has.
    pub fn record(&self, event: &Event) -> Result<(), CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: both handles are live and belong to the same context.
        unsafe { cu!(cuEventRecord(event.raw, self.raw)) }
    }

    /// Waits until all work queued on this stream is done.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: live stream.
        unsafe { cu!(cuStreamSynchronize(self.raw)) }
    }

    /// The raw handle, for driver calls this crate does not wrap.
    pub fn as_raw(&self) -> sys::CUstream {
        self.raw
    }
}

/// A CUDA event: a marker recorded on a stream, complete once the work queued before it is.
pub struct Event {
    device: Device,
    raw: sys::CUevent,
    timing: bool,
}

// SAFETY: as for Stream.
unsafe impl Send for Event {}
// SAFETY: as for Stream.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("gpu", &self.device.ordinal())
            .field("raw", &self.raw)
            .field("timing", &self.timing)
            .finish()
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.device.bind_to_thread();
        // SAFETY: created by cuEventCreate, destroyed once.
        let _ = unsafe { (driver::api().cuEventDestroy_v2)(self.raw) };
    }
}

impl Event {
    /// An event for completion tracking only (`CU_EVENT_DISABLE_TIMING`: the cheapest kind to record and query).
    pub fn new(device: &Device) -> Result<Event, CudaError> {
        Event::create(device, false)
    }

    /// An event that also records a GPU timestamp, for [`Event::elapsed_ms`].
    pub fn with_timing(device: &Device) -> Result<Event, CudaError> {
        Event::create(device, true)
    }

    fn create(device: &Device, timing: bool) -> Result<Event, CudaError> {
        device.bind_to_thread()?;
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context current.
        unsafe { cu!(cuEventCreate(&mut raw, flags as u32)) }?;
        Ok(Event {
            device: device.clone(),
            raw,
            timing,
        })
    }

    /// Records this event on `stream` (same as [`Stream::record`]).
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        stream.record(self)
    }

    /// Whether the work before the last record is done (`cuEventQuery`; does not block). An event never
    /// recorded counts as complete.
    pub fn is_complete(&self) -> Result<bool, CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: live event.
        let res = unsafe { (driver::api().cuEventQuery)(self.raw) };
        match res {
            crate::error::SUCCESS => Ok(true),
            crate::error::NOT_READY => Ok(false),
            other => Err(driver_error(other, "cuEventQuery")),
        }
    }

    /// Blocks until the work before the last record is done.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.device.bind_to_thread()?;
        // SAFETY: live event.
        unsafe { cu!(cuEventSynchronize(self.raw)) }
    }

    /// Milliseconds of GPU time between `start` and `end` (both made [`Event::with_timing`], recorded and
    /// complete); resolution about 0.5 µs.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32, CudaError> {
        if !start.timing || !end.timing {
            return Err(CudaError::TimingDisabled);
        }
        start.device.bind_to_thread()?;
        let mut ms: f32 = 0.0;
        // SAFETY: live events; valid out-pointer.
        unsafe { cu_optional!(cuEventElapsedTime(&mut ms, start.raw, end.raw)) }?;
        Ok(ms)
    }

    /// The raw handle, for driver calls this crate does not wrap.
    pub fn as_raw(&self) -> sys::CUevent {
        self.raw
    }
}
