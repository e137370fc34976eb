//! Choosing a GPU, whatever its runtime: by index or by PCI bus id, parsed from the forms people
//! paste (`--mem cuda:0000:17:00.0`, nvidia-smi's 8-digit domain, `lspci`'s short form).

use std::fmt;
use std::str::FromStr;

/// A string that is neither a GPU index nor a PCI bus id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid GPU {input:?}: {reason}; expected an index (0, 1, ...) or a PCI bus id such as 0000:17:00.0 \
     (`lspci -D`) or 00000000:17:00.0 (nvidia-smi)"
)]
pub struct SelectorError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A PCI address, `domain:bus:device.function`.
///
/// Parsed from the forms people paste: `0000:17:00.0` (`lspci -D`, sysfs), `00000000:17:00.0` (nvidia-smi's
/// 8-digit domain) and `17:00.0` (`lspci`, domain 0); hex digits in either case. Printed in the sysfs form
/// (`0000:17:00.0`), which is what `/sys/bus/pci/devices/` and the topology crate use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciBusId {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl fmt::Display for PciBusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

fn parse_hex(field: &str, max_digits: usize) -> Option<u32> {
    if field.is_empty() || field.len() > max_digits || !field.chars().all(|c| c.is_ascii_hexdigit())
    {
        return None;
    }
    u32::from_str_radix(field, 16).ok()
}

impl FromStr for PciBusId {
    type Err = SelectorError;

    fn from_str(input: &str) -> Result<Self, SelectorError> {
        let bad = |reason: &'static str| SelectorError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        let (head, function) = s
            .rsplit_once('.')
            .ok_or_else(|| bad("a PCI bus id ends in .FUNCTION"))?;
        let function =
            parse_hex(function, 1).ok_or_else(|| bad("the PCI function is one hex digit, 0-7"))?;
        if function > 7 {
            return Err(bad("the PCI function is one hex digit, 0-7"));
        }
        let fields: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match fields.as_slice() {
            [domain, bus, device] => (
                parse_hex(domain, 8).ok_or_else(|| bad("the PCI domain is 1 to 8 hex digits"))?,
                *bus,
                *device,
            ),
            [bus, device] => (0, *bus, *device),
            _ => {
                return Err(bad(
                    "a PCI bus id has the form [DOMAIN:]BUS:DEVICE.FUNCTION",
                ))
            }
        };
        let bus = parse_hex(bus, 2).ok_or_else(|| bad("the PCI bus is 1 or 2 hex digits"))?;
        let device = parse_hex(device, 2)
            .ok_or_else(|| bad("the PCI device is 1 or 2 hex digits, 00-1f"))?;
        if device > 0x1f {
            return Err(bad("the PCI device is 1 or 2 hex digits, 00-1f"));
        }
        Ok(PciBusId {
            domain,
            // Both fit: at most 2 hex digits, device checked against 0x1f above.
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// Which GPU: `--mem cuda:N` gives an index, `--mem cuda:0000:17:00.0` a bus id (any runtime's mode alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSelector {
    /// The runtime's device ordinal (CUDA's as `nvidia-smi -L` numbers them, modulo CUDA_VISIBLE_DEVICES and
    /// CUDA_DEVICE_ORDER).
    Index(u32),
    /// PCI bus id; stable across reboots and independent of the runtime's ordering.
    BusId(PciBusId),
}

impl Default for DeviceSelector {
    fn default() -> Self {
        DeviceSelector::Index(0)
    }
}

impl fmt::Display for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelector::Index(i) => write!(f, "{i}"),
            DeviceSelector::BusId(id) => write!(f, "{id}"),
        }
    }
}

impl FromStr for DeviceSelector {
    type Err = SelectorError;

    /// All decimal digits: an index; anything with a `:` or `.`: a PCI bus id; else an error.
    fn from_str(input: &str) -> Result<Self, SelectorError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(SelectorError {
                input: input.to_string(),
                reason: "empty",
            });
        }
        if s.chars().all(|c| c.is_ascii_digit()) {
            return s
                .parse::<u32>()
                .map(DeviceSelector::Index)
                .map_err(|_| SelectorError {
                    input: input.to_string(),
                    reason: "the index is too large",
                });
        }
        if s.contains(':') || s.contains('.') {
            return s.parse().map(DeviceSelector::BusId);
        }
        Err(SelectorError {
            input: input.to_string(),
            reason: "neither a decimal index nor a PCI bus id",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(domain: u32, bus: u8, device: u8, function: u8) -> PciBusId {
        PciBusId {
            domain,
            bus,
            device,
            function,
        }
    }

    #[test]
    fn parses_sysfs_form() {
        assert_eq!(
            "0000:17:00.0".parse::<PciBusId>().unwrap(),
            id(0, 0x17, 0, 0)
        );
        assert_eq!(
            "0000:b3:1f.7".parse::<PciBusId>().unwrap(),
            id(0, 0xb3, 0x1f, 7)
        );
    }

    #[test]
    fn parses_nvidia_smi_form_and_case() {
        assert_eq!(
            "00000000:17:00.0".parse::<PciBusId>().unwrap(),
            id(0, 0x17, 0, 0)
        );
        assert_eq!(
            "00000000:9A:00.0".parse::<PciBusId>().unwrap(),
            id(0, 0x9a, 0, 0)
        );
        assert_eq!(
            "00010000:01:00.0".parse::<PciBusId>().unwrap(),
            id(0x10000, 1, 0, 0)
        );
    }

    #[test]
    fn parses_short_form_and_whitespace() {
        assert_eq!("17:00.0".parse::<PciBusId>().unwrap(), id(0, 0x17, 0, 0));
        assert_eq!(
            " 0000:17:00.0\n".parse::<PciBusId>().unwrap(),
            id(0, 0x17, 0, 0)
        );
    }

    #[test]
    fn prints_sysfs_form() {
        assert_eq!(id(0, 0x17, 0, 0).to_string(), "0000:17:00.0");
        assert_eq!(id(0x10000, 0xb3, 0x1f, 7).to_string(), "10000:b3:1f.7");
        let round: PciBusId = "00000000:9A:00.0".parse().unwrap();
        assert_eq!(round.to_string(), "0000:9a:00.0");
    }

    #[test]
    fn rejects_malformed_bus_ids() {
        for bad in [
            "",
            "0000:17:00",
            "0000:17:00.8",
            "0000:17:20.0",
            "0000:117:00.0",
            "000000000:17:00.0",
            "0000:17:00.00",
            "zz:00.0",
            "0:0:0:0.0",
            "0000:17:.0",
            ":17:00.0",
        ] {
            let err = bad.parse::<PciBusId>().unwrap_err();
            assert!(matches!(err, SelectorError { .. }), "{bad:?}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains("0000:17:00.0"),
                "message shows an example: {msg}"
            );
        }
    }

    #[test]
    fn selector_index_or_bus_id() {
        assert_eq!(
            "0".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::Index(0)
        );
        assert_eq!(
            "7".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::Index(7)
        );
        assert_eq!(
            "00000000:17:00.0".parse::<DeviceSelector>().unwrap(),
            DeviceSelector::BusId(id(0, 0x17, 0, 0))
        );
        assert_eq!(DeviceSelector::Index(3).to_string(), "3");
        assert_eq!(
            DeviceSelector::BusId(id(0, 0x17, 0, 0)).to_string(),
            "0000:17:00.0"
        );
        assert_eq!(DeviceSelector::default(), DeviceSelector::Index(0));
    }

    #[test]
    fn selector_rejects_garbage() {
        for bad in ["x", "", "-1", "gpu0", "99999999999"] {
            let err = bad.parse::<DeviceSelector>().unwrap_err();
            assert!(matches!(err, SelectorError { .. }), "{bad:?}: {err}");
        }
    }
}
