//! Protection domains: the scope that memory regions and queue pairs share.

use std::fmt;
use std::sync::Arc;

use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain as SwPd;

use crate::error::{Result, VerbsError};

/// A protection domain. Cloning is cheap and shares the same domain.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) pd: Arc<SwPd>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProtectionDomain")
    }
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: &Arc<DeviceContext>) -> Result<Self> {
        let pd = ctx
            .alloc_pd()
            .map_err(|e| VerbsError::from_sideway("ibv_alloc_pd", e))?;
        Ok(ProtectionDomain { pd })
    }
}
