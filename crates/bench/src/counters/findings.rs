//! What the rates mean for a training job, and what to touch first: the rules an RDMA
//! engineer applies to a dump, each a pure function of [`Rates`] and the lossless priority.
//! A finding (exit 3) is something to act on; a note is context (a little pause under load,
//! ECN at work) that changes nothing.

use super::finding::{finding, note, rises};
pub(crate) use super::finding::{grouped, Finding, Severity};
use super::lossless::{Lossless, PauseSide};
use super::parse::Source;
use super::rates::Rates;

/// Every finding and note, the most decisive first.
pub(crate) fn judge(rates: &Rates, lossless: &Lossless) -> Vec<Finding> {
    let rx = lossless.pause(rates, "rx");
    let tx = lossless.pause(rates, "tx");
    let mut all = Vec::new();
    let storm = pause_storm(rates);
    let stuck = storm.is_some();
    all.extend(storm);
    all.extend(link(rates));
    let class = wrong_class(rates, lossless, tx.as_ref());
    all.extend(host(rates, lossless, tx.as_ref(), class.is_some()));
    all.extend(class);
    all.extend(held_back(lossless, rx.as_ref()));
    // A stuck receiver explains the congestion; what ECN did about it is beside the point.
    let ecn = crate::counters::ecn::judge(rates, lossless, [rx.as_ref(), tx.as_ref()]);
    all.extend(
        ecn.into_iter()
            .filter(|f| !(stuck && f.code == "ECN_ABSENT")),
    );
    all.extend(retransmits(rates));
    all.sort_by_key(|f| f.severity == Severity::Note);
    all
}

/// Pause storms: the NIC sent pause without a break until its watchdog tripped.
fn pause_storm(rates: &Rates) -> Option<Finding> {
    let error = rates
        .rise(Source::Ethtool, "tx_pause_storm_error_events")
        .unwrap_or(0);
    let seen = rises(
        rates,
        &[
            (Source::Ethtool, "tx_pause_storm_error_events"),
            (Source::Ethtool, "tx_pause_storm_warning_events"),
        ],
    );
    if seen.is_empty() {
        return None;
    }
    let stopped = if error > 0 {
        ", and the NIC stopped sending pause, so what arrived meanwhile was dropped"
    } else {
        ""
    };
    Some(finding(
        "PAUSE_STORM",
        format!(
            "pause storm: {}: this NIC sent pause without a break long enough to trip its \
             watchdog{stopped}",
            seen.join(", ")
        ),
        "a stuck receiver: something on this host stopped draining the NIC (a hung process \
         or GPU, a PCIe fault, the driver); a storm freezes the priority on the switch port and \
         spreads through the fabric, stalling every job that shares it",
        "drain the node (take it out of the scheduler) before anything else, then read dmesg \
         for mlx5 and PCIe AER errors and see which processes hold the NIC; bring it back \
         once `rdmabench health` passes"
            .into(),
    ))
}

/// Link downs and symbol/CRC errors: the cable or the optics.
fn link(rates: &Rates) -> Vec<Finding> {
    let mut out = Vec::new();
    let downs = rises(
        rates,
        &[
            (Source::Ethtool, "link_down_events_phy"),
            (Source::Counters, "link_downed"),
            (Source::Counters, "link_error_recovery"),
        ],
    );
    if !downs.is_empty() {
        out.push(finding(
            "LINK_DOWN",
            format!(
                "the link went down or retrained in {:.1} s: {}",
                rates.secs,
                downs.join(", ")
            ),
            "each flap stalls every queue pair on the port until the link is back, and a \
             connection whose retries run out fails the job (transport retry counter exceeded)",
            "cable or optics: the module's temperature and light levels (ethtool -m DEV), \
             reseat or replace the cable or transceiver, and the switch port's side; drain the \
             node while it keeps flapping"
                .into(),
        ));
    }
    let errors = rises(
        rates,
        &[
            (Source::Ethtool, "rx_crc_errors_phy"),
            (Source::Ethtool, "rx_symbol_err_phy"),
            (Source::Ethtool, "rx_pcs_symbol_err_phy"),
            (Source::Counters, "symbol_error"),
            (Source::Counters, "port_rcv_errors"),
            (Source::Counters, "local_link_integrity_errors"),
        ],
    );
    if !errors.is_empty() {
        out.push(finding(
            "LINK_ERRORS",
            format!("the link takes errors: {}", errors.join(", ")),
            "each CRC error is a packet lost on the wire that RoCE resends with the whole \
             window behind it (go-back-N), so a few per second cost far more bandwidth than \
             their count",
            "cable or optics: ethtool -m DEV (Rx power, temperature), reseat or replace the \
             cable or transceiver, and compare with the switch port's error counters"
                .into(),
        ));
    }
    out
}

/// Receive-side drops in the port (the buffer) and in the RDMA queues (no receive posted).
const DROPS: [(Source, &str); 4] = [
    (Source::Ethtool, "rx_discards_phy"),
    (Source::Ethtool, "rx_out_of_buffer"),
    (Source::HwCounters, "out_of_buffer"),
    (Source::Ethtool, "outbound_pci_buffer_overflow"),
];

/// This host cannot take what arrives: it sends pause, and drops or runs out of receive
/// buffers; or it drops with no pause at all on the lossless priority (unless the traffic is
/// outside it: `misclassed`, said by [`wrong_class`]).
fn host(
    rates: &Rates,
    lossless: &Lossless,
    tx: Option<&PauseSide>,
    misclassed: bool,
) -> Option<Finding> {
    let mut drop_names = DROPS.to_vec();
    let prio_discards = lossless.prio.map(|p| format!("rx_prio{p}_discards"));
    if let Some(name) = &prio_discards {
        drop_names.push((Source::Ethtool, name));
    }
    let drops = rises(rates, &drop_names);
    let queue_only = drops.iter().all(|d| d.contains("out_of_buffer"));
    let first = if queue_only {
        "the receive queues first (out_of_buffer: receives not posted in time: the \
         application's receive queue depth, --rx-depth for SEND tests), then the NIC's PCIe \
         link against its port rate (`rdmabench topo`) and GPUDirect RDMA (`rdmabench \
         doctor`, `rdmabench nccl-log`)"
    } else {
        "the host side, in this order: the NIC's PCIe link against its port rate (`rdmabench \
         topo`: a narrower or older link than the slot's), GPUDirect RDMA off (receives \
         staged through host memory: `rdmabench doctor`, `rdmabench nccl-log`), the receive \
         queue depth (out_of_buffer: receives not posted in time)"
    };
    match tx.filter(|t| t.frames > 0) {
        Some(tx) if !drops.is_empty() => Some(finding(
            "HOST_DROPS",
            format!(
                "{} sends pause ({}) while its receive side drops: {}",
                lossless.subject(),
                tx.shown(),
                drops.join(", ")
            ),
            "this host cannot take what arrives: the NIC's receive buffer fills faster than \
             the host drains it, and its pauses spread the congestion to every sender through \
             the switch (head-of-line blocking of other flows on the same priority)",
            first.into(),
        )),
        Some(tx) if tx.heavy() => Some(finding(
            "HOST_SLOW",
            format!(
                "{} sends pause ({}): its receive buffer fills",
                lossless.subject(),
                tx.shown()
            ),
            "the host drains slower than the wire delivers: nothing is lost yet, but every \
             sender to this node is held back and the job's traffic into it is capped by the \
             host, not the network",
            first.into(),
        )),
        Some(tx) => Some(note(
            "PAUSE_SENT_LIGHT",
            format!(
                "{} sends a little pause ({})",
                lossless.subject(),
                tx.shown()
            ),
            "normal for a lossless class under load",
        )),
        _ if drops.is_empty() => None,
        _ if queue_only => Some(finding(
            "RECV_QUEUE_EMPTY",
            format!("receives found no posted buffer: {}", drops.join(", ")),
            "the application posts receives slower than SENDs arrive: each miss is a \
             receiver-not-ready NAK that makes the sender back off and resend",
            first.into(),
        )),
        _ if misclassed || lossless.prio.is_none() => None,
        _ => Some(drops_without_pause(lossless, tx, &drops)),
    }
}

/// The port drops on the lossless priority and sends no pause: PFC does not protect it.
fn drops_without_pause(lossless: &Lossless, tx: Option<&PauseSide>, drops: &[String]) -> Finding {
    let why = match tx {
        Some(t) => format!("{} did not rise", t.counter),
        None => "the dumps have no pause counter for it: PFC is off there".into(),
    };
    let p = lossless.prio.unwrap_or_default();
    finding(
        "DROPS_WITHOUT_PAUSE",
        format!(
            "{} drops what it receives and sends no pause ({why}): {}",
            lossless.subject(),
            drops.join(", ")
        ),
        "the lossless class is not lossless here: the receive buffer overflows before PFC \
         holds the senders back, and each drop stalls a connection for a resend",
        format!(
            "PFC on the NIC for priority {p} (mlnx_qos -i DEV: its pfc line), and its buffer \
             and headroom (mlnx_qos --buffer_size; more headroom for longer cables), matching \
             the switch port's PFC"
        ),
    )
}

/// Drops with the traffic outside the lossless priority, or with no priority lossless.
fn wrong_class(rates: &Rates, lossless: &Lossless, tx: Option<&PauseSide>) -> Option<Finding> {
    let port_drops = rates.rise(Source::Ethtool, "rx_discards_phy").unwrap_or(0);
    let Some(l) = lossless.prio else {
        if port_drops == 0 || tx.is_some_and(|t| t.frames > 0) {
            return None;
        }
        return Some(finding(
            "DROPS_NO_PFC",
            format!(
                "the port drops what it receives (rx_discards_phy +{}) and no priority shows \
                 PFC counters",
                grouped(port_drops)
            ),
            "RoCE without a lossless priority loses packets whenever a buffer fills, and \
             each loss stalls a connection for a resend",
            "enable PFC on the priority the job's traffic uses, on the NIC (mlnx_qos -i DEV \
             --pfc 0,0,0,1,0,0,0,0 for priority 3) and the switch alike; if PFC is on, give \
             --lossless-prio N"
                .into(),
        ));
    };
    let outside: Vec<String> = (0..8u8)
        .filter(|p| *p != l)
        .filter_map(|p| {
            let name = format!("rx_prio{p}_discards");
            let rise = rates.rise(Source::Ethtool, &name).filter(|r| *r > 0)?;
            Some(format!("{name} +{}", grouped(rise)))
        })
        .collect();
    let share = outside_share(rates, l);
    let moved = share.filter(|s| *s >= 0.5 && port_drops > 0);
    if outside.is_empty() && moved.is_none() {
        return None;
    }
    let mut what = vec![];
    if !outside.is_empty() {
        what.push(format!(
            "discards outside the lossless priority: {}",
            outside.join(", ")
        ));
    }
    if let Some(s) = share.filter(|s| *s >= 0.5) {
        what.push(format!(
            "{:.0}% of the bytes travel outside priority {l} (rx_discards_phy +{})",
            s * 100.0,
            grouped(port_drops)
        ));
    }
    let dscp = 8 * u32::from(l) + 2;
    Some(finding(
        "CLASS_NOT_LOSSLESS",
        what.join("; "),
        "the job's packets are not in the lossless class: their DSCP or PCP maps to a \
         priority that drops instead of pausing, and each drop stalls a connection for a resend",
        format!(
            "the traffic class: send on priority {l} (rdmabench --tclass {}, NCCL_IB_TC={}: \
             DSCP {dscp}, which the default DSCP map puts on priority {l}), or fix the map \
             (mlnx_qos -i DEV --trust dscp, --dscp2prio) so the job's DSCP lands on priority {l}",
            dscp * 4 + 2,
            dscp * 4 + 2
        ),
    ))
}

/// The share of the bytes per priority (received and sent) outside priority `l`, when the
/// dumps count bytes per priority.
fn outside_share(rates: &Rates, l: u8) -> Option<f64> {
    let mut total = 0u64;
    let mut inside = 0u64;
    for p in 0..8u8 {
        for dir in ["rx", "tx"] {
            let bytes = rates
                .rise(Source::Ethtool, &format!("{dir}_prio{p}_bytes"))
                .unwrap_or(0);
            total = total.saturating_add(bytes);
            if p == l {
                inside = inside.saturating_add(bytes);
            }
        }
    }
    (total > 0).then(|| (total - inside) as f64 / total as f64)
}

/// This port receives pause: it is held back from downstream.
fn held_back(lossless: &Lossless, rx: Option<&PauseSide>) -> Option<Finding> {
    let rx = rx.filter(|r| r.frames > 0)?;
    if !rx.heavy() {
        return Some(note(
            "PAUSE_RECEIVED_LIGHT",
            format!(
                "{} receives a little pause ({})",
                lossless.subject(),
                rx.shown()
            ),
            "normal for a lossless class under load",
        ));
    }
    let prio = lossless
        .prio
        .map_or(String::new(), |p| format!(" on priority {p}"));
    Some(finding(
        "PAUSE_RECEIVED",
        format!("{} receives pause ({})", lossless.subject(), rx.shown()),
        "this port is held back: the switch has no room for what it sends, so the congestion \
         is downstream (a receiver behind the switch, or an uplink); every rank sending \
         through this port waits, and the collective runs at the pace of that path",
        format!(
            "look downstream, not at this host: the switch port's egress queue{prio} and the \
             receivers behind it (their tx_prio*_pause, rx_discards_phy, out_of_buffer: run \
             this command on their dumps)"
        ),
    ))
}

/// RC retransmissions: packets were lost somewhere on the way.
fn retransmits(rates: &Rates) -> Option<Finding> {
    let seen = rises(
        rates,
        &[
            (Source::HwCounters, "local_ack_timeout_err"),
            (Source::HwCounters, "packet_seq_err"),
            (Source::HwCounters, "out_of_sequence"),
            (Source::HwCounters, "implied_nak_seq_err"),
            (Source::HwCounters, "roce_adp_retrans"),
            (Source::HwCounters, "rnr_nak_retry_err"),
        ],
    );
    if seen.is_empty() {
        return None;
    }
    Some(finding(
        "RETRANSMITS",
        format!("connections resend: {}", seen.join(", ")),
        "packets were lost on the way (a lossless fabric should lose none): each loss costs \
         a resend of the window behind it, and an ack timeout stalls the connection for its \
         whole timeout",
        "where the loss is: the findings above when they name one, else these counters on \
         the peers and the switch ports between them (discards, CRC errors)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::parse::Dump;
    use crate::counters::rates::compare;

    /// The codes `judge` gives two dumps 10 s apart, each counter (`name`, before, after);
    /// `hw_counters/` and `counters/` names are the port's.
    fn codes(pairs: &[(&str, u64, u64)], prio: Option<u8>) -> Vec<String> {
        let (mut before, mut after) = (Dump::default(), Dump::default());
        for (name, b, a) in pairs {
            let (source, name) = match name.split_once('/') {
                Some(("hw_counters", n)) => (Source::HwCounters, n),
                Some(("counters", n)) => (Source::Counters, n),
                _ => (Source::Ethtool, *name),
            };
            before.insert(source, name, *b);
            after.insert(source, name, *a);
        }
        let rates = compare(&before, &after, 10.0);
        let lossless = Lossless::infer(&rates, prio);
        judge(&rates, &lossless)
            .into_iter()
            .map(|f| match f.severity {
                Severity::Finding => f.code,
                Severity::Note => format!("note {}", f.code),
            })
            .collect()
    }

    const CNPS: [(&str, u64, u64); 2] = [
        ("hw_counters/np_cnp_sent", 0, 0),
        ("hw_counters/rp_cnp_handled", 0, 0),
    ];

    #[test]
    fn pause_received_is_a_finding_from_one_percent_of_the_time() {
        let light = [
            ("rx_prio3_pause", 0, 10),
            ("rx_prio3_pause_duration", 0, 90_000),
        ];
        assert_eq!(codes(&light, None), ["note PAUSE_RECEIVED_LIGHT"]);
        let heavy = [
            ("rx_prio3_pause", 0, 10),
            ("rx_prio3_pause_duration", 0, 100_000),
        ];
        // Without the port's CNP counters, whether ECN acts is not known: a note says so.
        assert_eq!(codes(&heavy, None), ["PAUSE_RECEIVED", "note ECN_UNKNOWN"]);
        // Heavy, with the port's CNP counters flat: ECN is absent under congestion.
        let mut with_cnps = heavy.to_vec();
        with_cnps.extend(CNPS);
        assert_eq!(codes(&with_cnps, None), ["PAUSE_RECEIVED", "ECN_ABSENT"]);
    }

    #[test]
    fn pause_sent_is_read_with_what_the_receive_side_drops() {
        let sent = [
            ("tx_prio3_pause", 0, 500),
            ("tx_prio3_pause_duration", 0, 500_000),
        ];
        assert_eq!(codes(&sent, None), ["HOST_SLOW", "note ECN_UNKNOWN"]);
        let mut drops = sent.to_vec();
        drops.push(("rx_out_of_buffer", 7, 9));
        assert_eq!(codes(&drops, None), ["HOST_DROPS", "note ECN_UNKNOWN"]);
        // Receive queues empty with no pause sent: the application's receives.
        let queue = [
            ("tx_prio3_pause", 0, 0),
            ("hw_counters/out_of_buffer", 0, 40),
        ];
        assert_eq!(codes(&queue, None), ["RECV_QUEUE_EMPTY"]);
        // Port drops with PFC on the lossless priority and no pause sent: PFC not protecting.
        let unprotected = [("tx_prio3_pause", 0, 0), ("rx_discards_phy", 0, 40)];
        assert_eq!(codes(&unprotected, None), ["DROPS_WITHOUT_PAUSE"]);
        // And without any PFC counter.
        assert_eq!(codes(&[("rx_discards_phy", 0, 40)], None), ["DROPS_NO_PFC"]);
    }

    #[test]
    fn most_bytes_outside_the_lossless_priority_with_drops_is_the_class() {
        let pairs = [
            ("rx_prio3_pause", 0, 0),
            ("rx_prio0_bytes", 0, 900),
            ("rx_prio3_bytes", 0, 100),
            ("rx_discards_phy", 0, 5),
        ];
        assert_eq!(codes(&pairs, None), ["CLASS_NOT_LOSSLESS"]);
        // The same bytes inside it: no class finding (the drops are PFC's).
        let inside = [
            ("rx_prio3_pause", 0, 0),
            ("rx_prio0_bytes", 0, 100),
            ("rx_prio3_bytes", 0, 900),
            ("rx_discards_phy", 0, 5),
        ];
        assert_eq!(codes(&inside, None), ["DROPS_WITHOUT_PAUSE"]);
    }

    #[test]
    fn half_of_dcqcn_off_is_named() {
        let ignored = [
            ("hw_counters/np_cnp_sent", 0, 0),
            ("hw_counters/rp_cnp_handled", 0, 0),
            ("hw_counters/rp_cnp_ignored", 0, 300),
        ];
        assert_eq!(codes(&ignored, Some(3)), ["CNP_IGNORED"]);
        let no_np = [
            ("hw_counters/np_cnp_sent", 0, 0),
            ("hw_counters/rp_cnp_handled", 0, 0),
            ("hw_counters/np_ecn_marked_roce_packets", 0, 300),
        ];
        assert_eq!(codes(&no_np, Some(3)), ["ECN_NO_CNP"]);
        // Congestion without the port's hw_counters: unknown, a note.
        let unknown = [("rx_buffer_passed_thres_phy", 0, 3)];
        assert_eq!(codes(&unknown, None), ["note ECN_UNKNOWN"]);
    }

    #[test]
    fn a_storm_comes_first_and_silences_ecns_absence() {
        let mut pairs = vec![
            ("tx_pause_storm_warning_events", 0, 1),
            ("tx_pause_storm_error_events", 0, 0),
            ("tx_prio3_pause", 0, 9_000),
        ];
        pairs.extend(CNPS);
        assert_eq!(codes(&pairs, None), ["PAUSE_STORM", "HOST_SLOW"]);
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1234), "1,234");
        assert_eq!(grouped(12_345_678), "12,345,678");
    }
}
