//! What every layer of rdmabench shares, and nothing that touches a device: the parameter
//! catalogue, the plan and its kinds, the run record and its figures, units, atomic files
//! and the usage error. It depends on no verbs or GPU crate, so the compiler refuses an
//! import from the engine into it; the bench crate re-exports its modules under their old
//! names (`crate::plan`, `crate::units`, ...).

#![forbid(unsafe_code)]

pub mod catalogue;
mod declare;
pub mod figures;
pub mod files;
pub mod intervals;
pub mod kinds;
pub mod limits;
pub mod plan;
pub mod record;
pub mod stats;
pub mod text;
pub mod units;
pub mod usage;
