//! Shared receive queues: one queue of receives that several QPs take their incoming SENDs
//! from (perftest's `--use-srq`). A QP built with [`QueuePairBuilder::srq`](crate::QueuePairBuilder::srq)
//! has no receive queue of its own: its receives are posted here, and each completion names
//! the QP that received (`Completion::qp_num`).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_post_srq_recv, ibv_srq, ibv_srq_attr, ibv_srq_init_attr,
};

use crate::error::{Result, VerbsError};
use crate::memory::MemoryRegion;
use crate::pd::ProtectionDomain;
use crate::qp::post_one_recv;

struct Inner {
    srq: NonNull<ibv_srq>,
    depth: u32,
    /// The domain the queue was created in, kept alive until after it is destroyed.
    _pd: ProtectionDomain,
}

// SAFETY: an ibv_srq may be used from any thread (the provider locks its queue), and this
// crate posts to it from one thread at a time (`post_recv` takes `&mut self`).
unsafe impl Send for Inner {}
// SAFETY: as above; shared references only read `depth`.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq; every QP that used it holds a clone of this
        // queue and is destroyed first (it drops its clone after its own handle).
        unsafe { ibv_destroy_srq(self.srq.as_ptr()) };
    }
}

/// A shared receive queue. Cloning is cheap and shares the same queue; the queue is
/// destroyed when the last clone (the QPs hold one each) is dropped.
#[derive(Clone)]
pub struct SharedReceiveQueue(Arc<Inner>);

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedReceiveQueue(depth {})", self.0.depth)
    }
}

impl SharedReceiveQueue {
    /// A queue of `depth` receives of one scatter entry each, in `pd`.
    pub fn new(pd: &ProtectionDomain, depth: u32) -> Result<Self> {
        let mut attr = ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr: depth,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is alive; attr lives on the stack through the call.
        let raw = unsafe { ibv_create_srq(pd.pd.pd().as_ptr(), &mut attr) };
        let srq = NonNull::new(raw).ok_or_else(|| {
            VerbsError::Call {
                call: "ibv_create_srq",
                reason: std::io::Error::last_os_error(),
            }
            .with_hint(format!("a shared receive queue of {depth} receives"))
        })?;
        Ok(SharedReceiveQueue(Arc::new(Inner {
            srq,
            depth,
            _pd: pd.clone(),
        })))
    }

    /// The receives it holds at most.
    pub fn depth(&self) -> u32 {
        self.0.depth
    }

    pub(crate) fn as_ptr(&self) -> NonNull<ibv_srq> {
        self.0.srq
    }

    /// Posts one receive of `len` bytes at `offset` in `mr`. Allocates nothing.
    #[inline]
    pub fn post_recv(
        &mut self,
        mr: &MemoryRegion,
        wr_id: u64,
        offset: u64,
        len: u32,
    ) -> Result<()> {
        let srq = self.0.srq.as_ptr();
        // SAFETY: the queue is alive; the request lives through the call.
        post_one_recv(
            mr,
            wr_id,
            offset,
            len,
            "ibv_post_srq_recv",
            |wr, bad| unsafe { ibv_post_srq_recv(srq, wr, bad) },
        )
    }
}
