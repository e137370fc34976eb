//! Commands that show facts without running traffic: `topo` (the PCIe tree from sysfs) and
//! `ceiling` (the ceilings arithmetic for a planned NIC and link).

pub mod ceiling;
pub mod topology;

pub(crate) use ceiling::CeilingArgs;
pub(crate) use topology::TopoArgs;
