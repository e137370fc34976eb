//! Completion queues, polled in batches without allocation.
//!
//! sideway's extended-CQ iterator consumes one completion too many on rdma-core before v55
//! (soft-RoCE on Debian 12 stalls), so completions are taken with `ibv_poll_cq` on the raw
//! handle into a caller-owned array instead.

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_modify_cq, ibv_modify_cq_attr, ibv_poll_cq, ibv_wc, ibv_wc_status_str};
use sideway::ibverbs::completion::{CompletionQueue as _, ExtendedCompletionQueue};

use crate::device::Device;
use crate::error::{Result, VerbsError};

/// A completion queue. Cloning shares the same queue.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) cq: Arc<ExtendedCompletionQueue>,
    depth: u32,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompletionQueue(depth {})", self.depth)
    }
}

/// One work completion, as the NIC reported it.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Completion(ibv_wc);

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Completion")
            .field("wr_id", &self.0.wr_id)
            .field("status", &self.0.status)
            .field("byte_len", &self.0.byte_len)
            .finish()
    }
}

impl Default for Completion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain integers (and a union of integers); all-zero is valid.
        Completion(unsafe { std::mem::MaybeUninit::<ibv_wc>::zeroed().assume_init() })
    }
}

impl Completion {
    /// A successful completion of work request `wr_id`, as a provider would report it: for
    /// tests and simulations of completion handling without a device.
    pub fn success(wr_id: u64) -> Completion {
        let mut wc = Completion::default();
        wc.0.wr_id = wr_id;
        wc
    }

    /// The id the work request was posted with.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// Bytes received (receive completions only).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The immediate data of a WRITE with immediate (or SEND with immediate) that consumed
    /// this receive; `None` when the completion carries none.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        /// `IBV_WC_WITH_IMM` in `wc_flags`.
        const WITH_IMM: u32 = 1 << 1;
        // SAFETY: both union members are a u32; the flag says which one the provider wrote.
        let value = unsafe { self.0.imm_data_invalidated_rkey_union.imm_data };
        (self.0.wc_flags & WITH_IMM != 0).then_some(value)
    }

    /// The local QP number it belongs to.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }

    /// True when the operation succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.0.status == 0
    }

    /// Ok for success, otherwise the error naming the status as libibverbs does.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.is_success() {
            return Ok(());
        }
        Err(self.error())
    }

    #[cold]
    fn error(&self) -> VerbsError {
        // SAFETY: ibv_wc_status_str returns a static string (or NULL without libibverbs).
        let text = unsafe {
            let p = ibv_wc_status_str(self.0.status);
            if p.is_null() {
                format!("status {}", self.0.status)
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        VerbsError::WorkCompletion {
            wr_id: self.0.wr_id,
            qp_num: self.0.qp_num,
            status: text,
            code: self.0.status,
            vendor_err: self.0.vendor_err,
        }
    }
}

impl CompletionQueue {
    /// Creates a completion queue with room for at least `depth` completions.
    pub fn new(device: &Device, depth: u32) -> Result<Self> {
        let cq = device
            .context()
            .create_cq_builder()
            .setup_cqe(depth)
            .build_ex()
            .map_err(|e| VerbsError::from_sideway("ibv_create_cq_ex", e))?;
        Ok(CompletionQueue { cq, depth })
    }

    /// The depth asked for.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Takes up to `out.len()` completions; returns how many were written.
    #[inline]
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
        let want = i32::try_from(out.len()).unwrap_or(i32::MAX);
        // SAFETY: the CQ is alive; `Completion` is a transparent `ibv_wc` and `out` has room
        // for `want` of them.
        let n = unsafe { ibv_poll_cq(self.cq.cq().as_ptr(), want, out.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(VerbsError::errno("ibv_poll_cq", -n));
        }
        Ok(n as usize)
    }

    /// Asks the NIC to moderate completion events (`ibv_modify_cq`): at most one event per
    /// `count` completions or `period_us` microseconds. Only event-driven waits notice this.
    pub fn set_moderation(&self, count: u16, period_us: u16) -> Result<()> {
        // SAFETY: a zeroed attr is valid; the fields set below are the documented ones.
        let mut attr: ibv_modify_cq_attr = unsafe { std::mem::zeroed() };
        attr.attr_mask = 1; // IBV_CQ_ATTR_MODERATE
        attr.moderate.cq_count = count;
        attr.moderate.cq_period = period_us;
        // SAFETY: the CQ is alive and attr is initialised.
        let rc = unsafe { ibv_modify_cq(self.cq.cq().as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(VerbsError::errno("ibv_modify_cq", rc));
        }
        Ok(())
    }
}
