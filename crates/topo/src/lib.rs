//! PCIe and NIC facts from sysfs, and the ceilings model.
