//! Two dumps into rates: each counter's change over the interval, what kind of counter it is
//! (the order it is shown in: what matters to a job first), and the counters that went
//! backwards (a reset or a wrap between the dumps: said, never turned into a rate).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::parse::{Dump, Key, Source};

/// What a counter measures, in the order they matter to a job (the table's order).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Class {
    /// The physical link: symbol and CRC errors, link downs.
    Link,
    /// Packets dropped: discards, no receive buffer, pause storms.
    Drop,
    /// Pause (PFC) frames and the time paused.
    Pause,
    /// ECN marks, CNPs, full buffers, transmit waits.
    Ecn,
    /// Retransmissions and sequence errors.
    Retry,
    /// Bytes and packets.
    Traffic,
    /// The rest.
    Other,
}

impl Class {
    /// Its word in the table.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Class::Link => "link",
            Class::Drop => "drop",
            Class::Pause => "pause",
            Class::Ecn => "ecn",
            Class::Retry => "retry",
            Class::Traffic => "traffic",
            Class::Other => "other",
        }
    }
}

/// Name fragments of each class, checked in this order; within a class, the earlier a
/// counter's fragment, the more it tells (a link down before a corrected bit).
const CLASSES: &[(Class, &[&str])] = &[
    (
        Class::Link,
        &[
            "link_down",
            "link_error_recovery",
            "crc_err",
            "symbol_err",
            "port_rcv_errors",
            "local_link_integrity",
            "port_rcv_remote_physical",
            "pci_signal_integrity",
            "module_",
            "rx_err_lane",
            "rx_corrected_bits",
        ],
    ),
    (
        Class::Drop,
        &[
            "pause_storm",
            "discard",
            "out_of_buffer",
            "buffer_overrun",
            "dropped",
            "pci_buffer_overflow",
        ],
    ),
    (Class::Pause, &["pause"]),
    (
        Class::Ecn,
        &[
            "cnp",
            "ecn",
            "passed_thres",
            "xmit_wait",
            "marked",
            "stalled",
        ],
    ),
    (
        Class::Retry,
        &[
            "seq_err",
            "out_of_sequence",
            "ack_timeout",
            "retry",
            "duplicate_request",
            "retrans",
            "slow_restart",
            "cqe_err",
        ],
    ),
    (
        Class::Traffic,
        &[
            "bytes",
            "packets",
            "_data",
            "requests",
            "multicast",
            "broadcast",
        ],
    ),
];

/// The class of a counter called `name`.
pub(crate) fn classify(name: &str) -> Class {
    rank(name).0
}

/// The class of `name` and the place of its fragment in the class's list.
fn rank(name: &str) -> (Class, usize) {
    CLASSES
        .iter()
        .find_map(|(class, frags)| Some((*class, frags.iter().position(|f| name.contains(f))?)))
        .unwrap_or((Class::Other, 0))
}

/// Whether `name` is one queue's or channel's (`rx12_packets`, `ch3_poll`, `ptp_tx0_bytes`):
/// the port's counters add them up, so the table leaves them out.
pub(crate) fn per_queue(name: &str) -> bool {
    let name = name.strip_prefix("ptp_").unwrap_or(name);
    ["rx", "tx", "ch", "xsk", "qos_tx", "cq"]
        .iter()
        .filter_map(|p| name.strip_prefix(p))
        .any(|rest| {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with('_')
        })
}

/// How a change reads per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Unit {
    /// Events (frames, packets, errors) per second.
    PerSecond,
    /// Bytes: shown in Gb/s (`counters/port_*_data` count 4-byte words, made bytes).
    Bytes,
    /// Microseconds paused (`*_pause_duration`): shown as the share of the interval.
    Micros,
}

/// How `name` from `source` is counted.
pub(crate) fn unit_of(source: Source, name: &str) -> Unit {
    if name.ends_with("pause_duration") {
        Unit::Micros
    } else if (source == Source::Counters && name.ends_with("_data"))
        || name.ends_with("_bytes")
        || name.ends_with("bytes_phy")
    {
        Unit::Bytes
    } else {
        Unit::PerSecond
    }
}

/// A counter that changed between the dumps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    /// Its source and name.
    pub key: Key,
    /// Its value in each dump.
    pub before: u64,
    pub after: u64,
    /// What it measures.
    pub class: Class,
    /// How its rate reads.
    pub unit: Unit,
    /// One queue's (left out of the table).
    pub per_queue: bool,
}

impl Change {
    /// How much it rose.
    pub(crate) fn rise(&self) -> u64 {
        self.after - self.before
    }

    /// Its rise per second over `secs`, in its unit's base (bytes for data in words).
    pub(crate) fn per_second(&self, secs: f64) -> f64 {
        let scale = if self.key.0 == Source::Counters && self.unit == Unit::Bytes {
            4.0
        } else {
            1.0
        };
        self.rise() as f64 * scale / secs
    }

    /// Its rate as a person reads it: "5.7/s", "98.4 Gb/s", "23.4% of the time".
    pub(crate) fn shown_rate(&self, secs: f64) -> String {
        let v = self.per_second(secs);
        match self.unit {
            Unit::PerSecond => format!("{}/s", compact(v)),
            Unit::Bytes => format!("{} Gb/s", crate::units::four_digits(v * 8.0 / 1e9)),
            Unit::Micros => format!("{:.1}% of the time", (v / 1e4).min(100.0)),
        }
    }
}

/// A count per second to three significant figures with a k/M/G suffix: "5.7", "1.23k".
pub(crate) fn compact(v: f64) -> String {
    let (v, suffix) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    let decimals = if v >= 100.0 || v == v.trunc() && suffix.is_empty() {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$}{suffix}")
}

/// Two dumps compared.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rates {
    /// Seconds between the dumps.
    pub secs: f64,
    /// The counters that rose, most telling first (by class, then by rise per second).
    pub changed: Vec<Change>,
    /// Each counter in both dumps that did not go backwards, with its rise (0: steady).
    pub rises: BTreeMap<Key, u64>,
    /// Counters lower after than before: a reset or a wrap; no rate.
    pub backwards: Vec<(Key, u64, u64)>,
    /// Counters in one dump only.
    pub only_before: usize,
    pub only_after: usize,
}

impl Rates {
    /// The rise of `name` from `source`, if both dumps have it (and it did not go backwards).
    pub(crate) fn rise(&self, source: Source, name: &str) -> Option<u64> {
        self.rises.get(&(source, name.to_string())).copied()
    }

    /// Whether both dumps have `name` from `source` (steady or not).
    pub(crate) fn has(&self, source: Source, name: &str) -> bool {
        self.rise(source, name).is_some()
    }
}

/// Compares `before` with `after`, taken `secs` apart (more than 0).
pub(crate) fn compare(before: &Dump, after: &Dump, secs: f64) -> Rates {
    let mut rates = Rates {
        secs,
        changed: Vec::new(),
        rises: BTreeMap::new(),
        backwards: Vec::new(),
        only_before: 0,
        only_after: 0,
    };
    for (key, &then) in &before.counters {
        let Some(&now) = after.counters.get(key) else {
            rates.only_before += 1;
            continue;
        };
        if now < then {
            rates.backwards.push((key.clone(), then, now));
            continue;
        }
        rates.rises.insert(key.clone(), now - then);
        if now > then {
            rates.changed.push(Change {
                key: key.clone(),
                before: then,
                after: now,
                class: classify(&key.1),
                unit: unit_of(key.0, &key.1),
                per_queue: per_queue(&key.1),
            });
        }
    }
    rates.only_after = after
        .counters
        .keys()
        .filter(|k| !before.counters.contains_key(*k))
        .count();
    let order = |c: &Change| (rank(&c.key.1), c.unit as u8);
    rates.changed.sort_by(|a, b| {
        order(a)
            .cmp(&order(b))
            .then(b.per_second(secs).total_cmp(&a.per_second(secs)))
            .then(a.key.cmp(&b.key))
    });
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(pairs: &[(&str, u64)]) -> Dump {
        let mut d = Dump::default();
        for (name, v) in pairs {
            match name.split_once('/') {
                Some(("hw_counters", n)) => d.insert(Source::HwCounters, n, *v),
                Some(("counters", n)) => d.insert(Source::Counters, n, *v),
                _ => d.insert(Source::Ethtool, name, *v),
            }
        }
        d
    }

    #[test]
    fn counters_are_told_by_what_they_measure() {
        assert_eq!(classify("rx_crc_errors_phy"), Class::Link);
        assert_eq!(classify("rx_symbol_err_phy"), Class::Link);
        assert_eq!(classify("link_down_events_phy"), Class::Link);
        assert_eq!(classify("link_downed"), Class::Link);
        assert_eq!(classify("rx_discards_phy"), Class::Drop);
        assert_eq!(classify("rx_prio3_discards"), Class::Drop);
        assert_eq!(classify("out_of_buffer"), Class::Drop);
        assert_eq!(classify("tx_pause_storm_error_events"), Class::Drop);
        assert_eq!(classify("rx_prio3_pause"), Class::Pause);
        assert_eq!(classify("tx_pause_ctrl_phy"), Class::Pause);
        assert_eq!(classify("np_cnp_sent"), Class::Ecn);
        assert_eq!(classify("np_ecn_marked_roce_packets"), Class::Ecn);
        assert_eq!(classify("rx_buffer_passed_thres_phy"), Class::Ecn);
        assert_eq!(classify("packet_seq_err"), Class::Retry);
        assert_eq!(classify("rx_bytes_phy"), Class::Traffic);
        assert_eq!(classify("port_rcv_data"), Class::Traffic);
        assert_eq!(classify("ch0_poll"), Class::Other);
        assert!(per_queue("rx12_packets") && per_queue("ch3_poll") && per_queue("ptp_tx0_bytes"));
        assert!(!per_queue("rx_prio3_pause") && !per_queue("tx_bytes_phy"));
    }

    #[test]
    fn rates_are_per_second_in_the_units_a_person_reads() {
        let before = dump(&[
            ("rx_bytes_phy", 0),
            ("rx_prio3_pause_duration", 0),
            ("counters/port_rcv_data", 0),
            ("rx_prio3_pause", 0),
        ]);
        let after = dump(&[
            ("rx_bytes_phy", 12_500_000_000),
            ("rx_prio3_pause_duration", 2_500_000),
            ("counters/port_rcv_data", 3_125_000_000),
            ("rx_prio3_pause", 12_345),
        ]);
        let r = compare(&before, &after, 10.0);
        let shown: Vec<(String, String)> = r
            .changed
            .iter()
            .map(|c| (c.key.1.clone(), c.shown_rate(r.secs)))
            .collect();
        assert_eq!(
            shown,
            [
                ("rx_prio3_pause".into(), "1.23k/s".into()),
                ("rx_prio3_pause_duration".into(), "25.0% of the time".into()),
                ("rx_bytes_phy".into(), "10.00 Gb/s".into()),
                ("port_rcv_data".into(), "10.00 Gb/s".into()),
            ]
        );
    }

    #[test]
    fn a_counter_that_went_backwards_is_said_not_made_a_huge_rate() {
        let before = dump(&[("rx_prio3_pause", 1_000), ("tx_bytes_phy", 5), ("gone", 1)]);
        let after = dump(&[("rx_prio3_pause", 10), ("tx_bytes_phy", 5), ("new", 1)]);
        let r = compare(&before, &after, 1.0);
        assert!(r.changed.is_empty());
        assert_eq!(
            r.backwards,
            [((Source::Ethtool, "rx_prio3_pause".into()), 1_000, 10)]
        );
        assert_eq!(r.rise(Source::Ethtool, "rx_prio3_pause"), None);
        assert_eq!(r.rise(Source::Ethtool, "tx_bytes_phy"), Some(0));
        assert_eq!((r.only_before, r.only_after), (1, 1));
    }

    #[test]
    fn compact_counts() {
        assert_eq!(compact(5.7), "5.70");
        assert_eq!(compact(3.0), "3");
        assert_eq!(compact(1234.0), "1.23k");
        assert_eq!(compact(56_789.0), "56.8k");
        assert_eq!(compact(2.5e9), "2.50G");
    }
}
