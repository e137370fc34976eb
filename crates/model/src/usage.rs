//! The usage error: what was asked cannot run as asked. The process exits 2 on it.

/// What was asked cannot run as asked: a plan that breaks a rule here, or that a device's
/// limits refuse (raised in `engine/`), or the peer's refusal of either. The message names
/// the value and what would be valid; the process exits 2 (`exit.rs`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);
