//! ECN and DCQCN from the RDMA port's `hw_counters`: ECN-marked packets received and CNPs
//! sent (the notification point, this port as a receiver), CNPs handled or ignored (the
//! reaction point, this port as a sender). Working, half off, or absent under congestion.

use super::finding::{finding, grouped, note, Finding};
use super::lossless::{Lossless, PauseSide};
use super::parse::Source;
use super::rates::{compact, Rates};

/// The DCQCN counters' rises; `None` when the dumps have no CNP counter at all.
struct Dcqcn {
    marked: u64,
    sent: u64,
    handled: u64,
    ignored: u64,
}

impl Dcqcn {
    fn of(rates: &Rates) -> Option<Dcqcn> {
        let hw = |name: &str| rates.rise(Source::HwCounters, name);
        if hw("np_cnp_sent").is_none() && hw("rp_cnp_handled").is_none() {
            return None;
        }
        Some(Dcqcn {
            marked: hw("np_ecn_marked_roce_packets").unwrap_or(0),
            sent: hw("np_cnp_sent").unwrap_or(0),
            handled: hw("rp_cnp_handled").unwrap_or(0),
            ignored: hw("rp_cnp_ignored").unwrap_or(0),
        })
    }
}

/// What the ECN counters say, given the pause on the lossless priority (received, sent).
pub(crate) fn judge(
    rates: &Rates,
    lossless: &Lossless,
    pause: [Option<&PauseSide>; 2],
) -> Vec<Finding> {
    let paused = pause.iter().flatten().any(|p| p.heavy());
    let full = rates
        .rise(Source::Ethtool, "rx_buffer_passed_thres_phy")
        .unwrap_or(0);
    let congested = paused || full > 0;
    let prio = lossless.prio.map_or("N".to_string(), |p| p.to_string());
    let Some(d) = Dcqcn::of(rates) else {
        return congested
            .then(|| {
                note(
                    "ECN_UNKNOWN",
                    "congestion, and the dumps have no CNP counters (hw_counters/np_cnp_sent, \
                     rp_cnp_handled): whether ECN and DCQCN act is not known"
                        .into(),
                    "add the RDMA port's hw_counters to the dumps: grep -r . \
                     /sys/class/infiniband/DEV/ports/1/hw_counters",
                )
            })
            .into_iter()
            .collect();
    };
    let per_s = |n: u64| compact(n as f64 / rates.secs);
    let mut out = Vec::new();
    if d.ignored > 0 && d.handled == 0 {
        out.push(finding(
            "CNP_IGNORED",
            format!(
                "CNPs arrive and are ignored (hw_counters/rp_cnp_ignored +{}), none handled",
                grouped(d.ignored)
            ),
            "senders on this port are told to slow down and do not: DCQCN's reaction point is \
             off for the priority, so only pause holds them back",
            format!(
                "enable the reaction point: echo 1 > /sys/class/net/DEV/ecn/roce_rp/enable/{prio}"
            ),
        ));
    }
    if d.marked > 0 && d.sent == 0 {
        out.push(finding(
            "ECN_NO_CNP",
            format!(
                "ECN-marked packets arrive (hw_counters/np_ecn_marked_roce_packets +{}) and no \
                 CNP is sent",
                grouped(d.marked)
            ),
            "the switch marks congestion but this receiver never tells the senders: DCQCN's \
             notification point is off, so only pause holds them back",
            format!(
                "enable the notification point: echo 1 > \
                 /sys/class/net/DEV/ecn/roce_np/enable/{prio}"
            ),
        ));
    }
    if d.sent > 0 || d.handled > 0 {
        out.push(note(
            "ECN_WORKING",
            format!(
                "ECN/DCQCN at work: as a receiver, {}/s ECN-marked packets and {}/s CNPs sent; \
                 as a sender, {}/s CNPs handled",
                per_s(d.marked),
                per_s(d.sent),
                per_s(d.handled)
            ),
            "senders slow down before buffers fill: the rate this costs is the congestion's, \
             not a fault",
        ));
    } else if congested && d.marked == 0 && d.ignored == 0 {
        out.push(absent(lossless, paused, full, &prio));
    }
    out
}

/// Congestion and no ECN at all.
fn absent(lossless: &Lossless, paused: bool, full: u64, prio: &str) -> Finding {
    let why = if paused {
        format!("pause on {}", lossless.subject())
    } else {
        format!("rx_buffer_passed_thres_phy +{}", grouped(full))
    };
    finding(
        "ECN_ABSENT",
        format!(
            "congestion ({why}) and no ECN: no packet arrived ECN-marked, no CNP was sent or \
             handled"
        ),
        "PFC alone carries the congestion: pauses spread hop by hop to flows that did not \
         cause it, where DCQCN would slow the senders that did",
        format!(
            "ECN marking on the switch's queue for priority {prio} (its ECN/WRED thresholds), \
             then DCQCN on the NICs (/sys/class/net/DEV/ecn/roce_np/enable/{prio} and \
             roce_rp/enable/{prio})"
        ),
    )
}
