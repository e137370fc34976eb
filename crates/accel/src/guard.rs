//! What keeps an allocation alive under a memory registration.

use std::sync::Arc;

/// Keeps one GPU or pinned host allocation allocated, and gives no access to it: what a memory
/// registration holds ([`crate::GpuBuffer::guard`], [`crate::PinnedBuffer::guard`]), so that the
/// memory under a registration is freed only after the registration is gone, whichever of the
/// buffer and the registration is dropped first.
#[derive(Clone)]
pub struct AllocationGuard {
    _alloc: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for AllocationGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AllocationGuard")
    }
}

impl AllocationGuard {
    /// A guard of `alloc`: the allocation is freed when its last owner, this guard or another,
    /// is dropped.
    pub fn new(alloc: Arc<dyn Send + Sync>) -> AllocationGuard {
        AllocationGuard { _alloc: alloc }
    }
}
