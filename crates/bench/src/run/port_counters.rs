//! The port's hardware counters (sysfs `ports/N/counters` and `hw_counters`: data and
//! packets sent and received, errors, and on RoCE NICs the pause, ECN and CNP counters),
//! read before and after a run; the record keeps the deltas.
//!
//! Note that `port_xmit_data` and `port_rcv_data` count 4-byte words, as the InfiniBand
//! PMA defines them.

use std::collections::BTreeMap;
use std::path::Path;

use topo::Sysfs;

use crate::engine::Connected;

/// One reading: counter name ("counters/port_xmit_data", "hw_counters/np_cnp_sent") to value.
pub(crate) type Reading = BTreeMap<String, u64>;

/// Reads every numeric counter of `device` port `port` under `sysfs`.
pub(crate) fn read(sysfs: &Sysfs, device: &str, port: u8) -> Reading {
    let mut out = Reading::new();
    let port_dir = Path::new("/sys/class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    for group in ["counters", "hw_counters"] {
        let Ok(Some(dir)) = sysfs.resolve(&port_dir.join(group)) else {
            continue;
        };
        for name in sysfs.list(&dir).unwrap_or_default() {
            if let Some(v) = sysfs
                .read_text(&dir.join(&name))
                .and_then(|t| t.trim().parse::<u64>().ok())
            {
                out.insert(format!("{group}/{name}"), v);
            }
        }
    }
    out
}

/// The change of every counter present in both readings (a counter that wrapped or was
/// reset counts as 0).
pub(crate) fn delta(before: &Reading, after: &Reading) -> Reading {
    after
        .iter()
        .filter_map(|(k, &v)| before.get(k).map(|&b| (k.clone(), v.saturating_sub(b))))
        .collect()
}

/// The counters at the start of a run.
#[derive(Debug)]
pub(crate) struct Counters {
    before: Reading,
}

/// What changed during a run; empty when the port exposes no counters.
#[derive(Debug, Default)]
pub(crate) struct CounterDelta(Reading);

impl CounterDelta {
    /// The deltas, or `None` when there were none to read.
    pub(crate) fn into_map(self) -> Option<Reading> {
        (!self.0.is_empty()).then_some(self.0)
    }
}

impl Counters {
    /// Reads the counters of `side`'s port now.
    pub(crate) fn start(side: &Connected) -> Self {
        Counters {
            before: read(&Sysfs::system(), side.device.name(), side.port.port),
        }
    }

    /// Reads them again and returns the deltas.
    pub(crate) fn finish(self, side: &Connected) -> CounterDelta {
        let after = read(&Sysfs::system(), side.device.name(), side.port.port);
        CounterDelta(delta(&self.before, &after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_cover_counters_present_in_both_readings() {
        let before: Reading = [
            ("counters/port_xmit_packets".to_string(), 10),
            ("hw_counters/rnr".to_string(), 5),
        ]
        .into();
        let after: Reading = [
            ("counters/port_xmit_packets".to_string(), 110),
            ("hw_counters/rnr".to_string(), 3),
            ("hw_counters/new".to_string(), 1),
        ]
        .into();
        let d = delta(&before, &after);
        assert_eq!(d.get("counters/port_xmit_packets"), Some(&100));
        assert_eq!(
            d.get("hw_counters/rnr"),
            Some(&0),
            "a reset counter is not a huge delta"
        );
        assert!(!d.contains_key("hw_counters/new"));
    }

    #[test]
    fn a_fixture_port_yields_its_counters() {
        let root = format!(
            "{}/../topo/tests/fixtures/dgx-h100",
            env!("CARGO_MANIFEST_DIR")
        );
        let r = read(&Sysfs::new(root), "mlx5_0", 1);
        assert!(r.keys().any(|k| k.starts_with("hw_counters/")), "{r:?}");
        assert!(r.keys().any(|k| k.starts_with("counters/")), "{r:?}");
    }
}
