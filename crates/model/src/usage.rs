//! The usage error: what was asked cannot run as asked. The process exits 2 on each kind.

use std::fmt;

/// What was asked cannot run as asked; the message names the value and what would be valid.
/// Each kind exits 2 (`exit.rs`); the kind says whose word it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// A value, or a combination of values, of the command line or of a file it names.
    Value(String),
    /// A limit of this side's device refuses the plan (raised in the engine).
    Device(String),
    /// Another process refused the plan: the peer (for its own rule or device), a server's
    /// admission limits, or rank 0 of a sweep.
    Refused(String),
}

impl PlanError {
    /// The message, whatever the kind.
    pub fn message(&self) -> &str {
        match self {
            PlanError::Value(m) | PlanError::Device(m) | PlanError::Refused(m) => m,
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for PlanError {}
