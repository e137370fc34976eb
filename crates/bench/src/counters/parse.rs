//! A counter dump read into numbers: `ethtool -S DEV`'s lines after its `NIC statistics:`
//! header (`     rx_prio3_pause: 1234`), and an RDMA port's `counters/` and `hw_counters/`
//! files as `grep -r . DIR` prints them (`.../ports/1/hw_counters/np_cnp_sent:42`), in one
//! file or both concatenated. Lines of neither form are skipped and counted, never an error;
//! a dump of two NICs (two `ethtool -S` headers, or the files of two RDMA ports) is refused,
//! since their counters would be added up as one port's.
//!
//! [`Dump`] is also what a caller that samples counters itself builds ([`Dump::insert`]), so
//! the same reading ([`super::read`]) judges them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a counter comes from: its name means something different in each (ethtool's
/// `rx_out_of_buffer` counts the Ethernet queues' misses, hw_counters' `out_of_buffer` the
/// RDMA queues').
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    /// `ethtool -S`: the netdev's, the vport's and the physical port's counters.
    Ethtool,
    /// The RDMA port's `counters/`: the InfiniBand PMA's (data in 4-byte words).
    Counters,
    /// The RDMA port's `hw_counters/`: the driver's (CNPs, ECN marks, retransmissions).
    HwCounters,
}

impl Source {
    /// How a name from it is shown: ethtool's bare, the port's with its folder.
    pub(crate) fn label(self, name: &str) -> String {
        match self {
            Source::Ethtool => name.to_string(),
            Source::Counters => format!("counters/{name}"),
            Source::HwCounters => format!("hw_counters/{name}"),
        }
    }
}

/// A counter: its source and name.
pub(crate) type Key = (Source, String);

/// The longest counter name read (mlx5's longest is about 40 characters); a longer "name" is
/// no counter, and its line is skipped.
pub(crate) const MAX_NAME: usize = 128;

/// One dump: its counters, what it was taken from, and the lines that were not counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Dump {
    /// Every counter read, by source and name.
    pub counters: BTreeMap<Key, u64>,
    /// The RDMA port the `counters/` and `hw_counters/` lines came from, as the paths name it
    /// ("mlx5_0 port 1"), when they did.
    pub port: Option<String>,
    /// Whether an `ethtool -S` header was read.
    pub ethtool: bool,
    /// Lines that were neither (blank lines, other files of a `grep -r`, text around).
    pub skipped: usize,
}

/// Why a dump cannot be read as one NIC's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotOneNic(pub String);

impl Dump {
    /// Adds a counter a caller read itself; a second value of the same counter replaces the
    /// first.
    pub(crate) fn insert(&mut self, source: Source, name: &str, value: u64) {
        self.counters.insert((source, name.to_string()), value);
    }

    /// The value of `name` from `source`, if the dump has it.
    #[cfg(test)]
    pub(crate) fn get(&self, source: Source, name: &str) -> Option<u64> {
        self.counters.get(&(source, name.to_string())).copied()
    }

    /// How many counters of each kind: "812 ethtool counters, 36 of mlx5_0 port 1".
    pub(crate) fn describe(&self) -> String {
        let ethtool = self
            .counters
            .keys()
            .filter(|(s, _)| *s == Source::Ethtool)
            .count();
        let port = self.counters.len() - ethtool;
        let mut parts = Vec::new();
        if self.ethtool {
            parts.push(format!("{ethtool} ethtool -S counters"));
        }
        if port > 0 {
            let of = self.port.as_deref().unwrap_or("the RDMA port");
            parts.push(format!("{port} of {of} (counters/, hw_counters/)"));
        }
        parts.join(" and ")
    }
}

/// Reads `text`, a dump of one NIC.
pub(crate) fn parse(text: &str) -> Result<Dump, NotOneNic> {
    let mut dump = Dump::default();
    let mut in_ethtool = false;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line == "NIC statistics:" {
            if dump.ethtool {
                return Err(NotOneNic(format!(
                    "line {}: a second `ethtool -S` output (each NIC's counters are read \
                     alone)",
                    n + 1
                )));
            }
            dump.ethtool = true;
            in_ethtool = true;
            continue;
        }
        if let Some((source, port, name, value)) = port_line(line) {
            in_ethtool = false;
            same_port(&mut dump.port, port, n)?;
            dump.insert(source, name, value);
        } else if let Some((name, value)) = in_ethtool.then(|| ethtool_line(line)).flatten() {
            dump.insert(Source::Ethtool, name, value);
        } else {
            dump.skipped += 1;
        }
    }
    Ok(dump)
}

/// Keeps the first port a dump's paths name; a second one is refused.
fn same_port(seen: &mut Option<String>, port: String, n: usize) -> Result<(), NotOneNic> {
    match seen {
        Some(first) if *first != port => Err(NotOneNic(format!(
            "line {}: counters of {} after those of {first} (each port's counters are read \
             alone)",
            n + 1,
            crate::text::printable_within(&port, 80)
        ))),
        Some(_) => Ok(()),
        None => {
            *seen = Some(port);
            Ok(())
        }
    }
}

/// `     rx_prio3_pause: 1234`: the name and the value.
fn ethtool_line(line: &str) -> Option<(&str, u64)> {
    if !line.starts_with([' ', '\t']) {
        return None;
    }
    let (name, value) = line.trim_start().rsplit_once(':')?;
    Some((counter_name(name.trim_end())?, value.trim().parse().ok()?))
}

/// `PATH/counters/NAME:VALUE` or `PATH/hw_counters/NAME:VALUE`: the source, the port PATH
/// names, the name and the value. `hw_counters/lifespan` (how long the driver caches them,
/// in ms) is no counter.
fn port_line(line: &str) -> Option<(Source, String, &str, u64)> {
    let (path, value) = line.rsplit_once(':')?;
    let value: u64 = value.trim().parse().ok()?;
    let (folder, name) = path.rsplit_once('/')?;
    let (above, folder) = folder.rsplit_once('/').unwrap_or(("", folder));
    let source = match folder {
        "counters" => Source::Counters,
        "hw_counters" => Source::HwCounters,
        _ => return None,
    };
    if name == "lifespan" {
        return None;
    }
    Some((source, port_of(above), counter_name(name)?, value))
}

/// "mlx5_0 port 1" from `/sys/class/infiniband/mlx5_0/ports/1`, else the folder as given.
fn port_of(above: &str) -> String {
    let parts: Vec<&str> = above.rsplit('/').take(3).collect();
    match parts.as_slice() {
        [port, "ports", device] if !device.is_empty() => format!("{device} port {port}"),
        _ if above.is_empty() => "the RDMA port".to_string(),
        _ => above.to_string(),
    }
}

/// A counter's name: at most [`MAX_NAME`] characters, none of them blank or a control
/// character.
fn counter_name(name: &str) -> Option<&str> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.chars().any(|c| c.is_whitespace() || c.is_control());
    ok.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETHTOOL: &str = "NIC statistics:\n     rx_packets: 100\n     rx_prio3_pause: 7\n\
                           \x20    tx_pause_storm_warning_events: 0\n";

    #[test]
    fn ethtool_lines_after_the_header_are_counters() {
        let dump = parse(ETHTOOL).unwrap();
        assert!(dump.ethtool);
        assert_eq!(dump.get(Source::Ethtool, "rx_prio3_pause"), Some(7));
        assert_eq!(dump.get(Source::Ethtool, "rx_packets"), Some(100));
        assert_eq!(dump.counters.len(), 3);
        // Before the header, an indented line is not taken for a counter.
        let dump = parse("     rx_packets: 100\n").unwrap();
        assert!(dump.counters.is_empty() && !dump.ethtool);
        assert_eq!(dump.skipped, 1);
    }

    #[test]
    fn grep_lines_of_counters_and_hw_counters_name_their_port() {
        let text = "/sys/class/infiniband/mlx5_0/ports/1/counters/port_rcv_data:12345\n\
                    /sys/class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent:42\n\
                    /sys/class/infiniband/mlx5_0/ports/1/hw_counters/lifespan:10\n\
                    /sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n";
        let dump = parse(text).unwrap();
        assert_eq!(dump.get(Source::Counters, "port_rcv_data"), Some(12345));
        assert_eq!(dump.get(Source::HwCounters, "np_cnp_sent"), Some(42));
        assert_eq!(
            dump.counters.len(),
            2,
            "lifespan and state are not counters"
        );
        assert_eq!(dump.port.as_deref(), Some("mlx5_0 port 1"));
        assert_eq!(dump.skipped, 2);
        // grep run inside the port's folder.
        let dump = parse("hw_counters/out_of_buffer:3\n").unwrap();
        assert_eq!(dump.get(Source::HwCounters, "out_of_buffer"), Some(3));
        assert_eq!(dump.port.as_deref(), Some("the RDMA port"));
    }

    #[test]
    fn both_dumps_concatenated_read_as_one_nic() {
        let text =
            format!("{ETHTOOL}/sys/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer:9\n");
        let dump = parse(&text).unwrap();
        assert_eq!(dump.get(Source::Ethtool, "rx_prio3_pause"), Some(7));
        assert_eq!(dump.get(Source::HwCounters, "out_of_buffer"), Some(9));
        assert_eq!(
            dump.describe(),
            "3 ethtool -S counters and 1 of mlx5_0 port 1 (counters/, hw_counters/)"
        );
    }

    #[test]
    fn two_nics_in_one_dump_are_refused_naming_the_line() {
        let e = parse(&format!("{ETHTOOL}{ETHTOOL}")).unwrap_err();
        assert!(
            e.0.starts_with("line 5: a second `ethtool -S` output"),
            "{e:?}"
        );
        let text = "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0\n\
                    /sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error:0\n";
        let e = parse(text).unwrap_err();
        assert!(
            e.0.contains("counters of mlx5_1 port 1 after those of mlx5_0 port 1"),
            "{e:?}"
        );
    }

    #[test]
    fn lines_that_are_no_counter_are_skipped() {
        let long = "x".repeat(MAX_NAME + 1);
        let text = format!(
            "NIC statistics:\n     {long}: 1\n     rx\x1b[2J: 1\n     rx_bytes: -1\n     \
             rx_bytes: 12a\n     ok: 18446744073709551615\n     over: 18446744073709551616\n"
        );
        let dump = parse(&text).unwrap();
        assert_eq!(dump.counters.len(), 1, "{dump:?}");
        assert_eq!(dump.get(Source::Ethtool, "ok"), Some(u64::MAX));
        assert_eq!(dump.skipped, 5);
    }
}
