//! Congestion and error counters sampled twice, a few seconds apart: the port's
//! `hw_counters` (the driver's: CNPs, ECN marks, retransmits) and `counters` (the InfiniBand
//! PMA's: symbol errors, link downs, transmit waits), and its netdevs' `statistics`.
//!
//! Pause (PFC) frame counters of mlx5 NICs are only in `ethtool -S`; a driver that exposes
//! them in sysfs gets them read here by name ("pause", "pfc").

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use topo::Sysfs;

use super::verdict::Check;

/// What a climbing counter means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// The fabric pushes back: pause/PFC frames, ECN marks, CNPs, transmit waits.
    Congestion,
    /// Packets lost and retransmitted, receive buffers overrun.
    Transport,
    /// The physical link takes errors or goes down.
    Link,
}

/// Name fragments of physical-link error counters.
const LINK: [&str; 10] = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "local_link_integrity",
    "excessive_buffer_overrun",
    "port_rcv_remote_physical_errors",
    "rx_crc_errors",
    "rx_frame_errors",
    "rx_length_errors",
];
/// Name fragments of congestion counters.
const CONGESTION: [&str; 5] = ["cnp", "ecn", "pause", "pfc", "xmit_wait"];
/// Name fragments of loss and retransmission counters.
const TRANSPORT: [&str; 14] = [
    "out_of_seq",
    "seq_err",
    "ack_timeout",
    "retry_exceeded",
    "retry_err",
    "rnr",
    "duplicate_request",
    "out_of_buffer",
    "retrans",
    "slow_restart",
    "xmit_discards",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
];

/// What a counter called `name` measures; `None` for counters this check ignores (traffic
/// totals, say).
pub(crate) fn classify(name: &str) -> Option<Kind> {
    let has = |list: &[&str]| list.iter().any(|frag| name.contains(frag));
    if has(&LINK) {
        Some(Kind::Link)
    } else if has(&CONGESTION) {
        Some(Kind::Congestion)
    } else if has(&TRANSPORT) {
        Some(Kind::Transport)
    } else {
        None
    }
}

/// One reading of every classified counter, by "source/name".
pub(crate) type Sample = BTreeMap<String, (Kind, u64)>;

/// Read the counters of `device` port `port` and of `netdevs`.
pub(crate) fn read(sysfs: &Sysfs, device: &str, port: u32, netdevs: &[String]) -> Sample {
    let mut sample = Sample::new();
    let port_dir = Path::new("/sys/class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    for dir in ["hw_counters", "counters"] {
        read_dir(sysfs, &port_dir.join(dir), dir, &mut sample);
    }
    for netdev in netdevs {
        let dir = Path::new("/sys/class/net").join(netdev).join("statistics");
        read_dir(sysfs, &dir, netdev, &mut sample);
    }
    sample
}

fn read_dir(sysfs: &Sysfs, dir: &Path, label: &str, sample: &mut Sample) {
    // Resolve once, so each counter read does not walk the class symlinks again.
    let dir = match sysfs.resolve(dir) {
        Ok(Some(dir)) => dir,
        _ => return,
    };
    for name in sysfs.list(&dir).unwrap_or_default() {
        let Some(kind) = classify(&name) else {
            continue;
        };
        // Counters a port does not support fail to read; skip them.
        if let Some(value) = sysfs
            .read_text(&dir.join(&name))
            .and_then(|text| text.parse::<u64>().ok())
        {
            sample.insert(format!("{label}/{name}"), (kind, value));
        }
    }
}

/// The counters of `kind` that rose between the samples: (name, rise).
fn rises(before: &Sample, after: &Sample, kind: Kind) -> Vec<(String, u64)> {
    after
        .iter()
        .filter(|(_, (k, _))| *k == kind)
        .filter_map(|(name, &(_, now))| {
            let (_, then) = before.get(name)?;
            let rise = now.saturating_sub(*then);
            (rise > 0).then(|| (name.clone(), rise))
        })
        .collect()
}

fn list_rises(rises: &[(String, u64)], secs: f64) -> String {
    let mut text = String::new();
    for (i, (name, rise)) in rises.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        let _ = write!(text, "{name} +{rise}");
        if secs > 0.0 {
            let _ = write!(text, " ({:.0}/s)", *rise as f64 / secs);
        }
    }
    text
}

/// The non-zero totals of `kind`, at most four, for the evidence.
fn totals(sample: &Sample, kind: Kind) -> String {
    let nonzero: Vec<String> = sample
        .iter()
        .filter(|(_, (k, v))| *k == kind && *v > 0)
        .map(|(name, (_, v))| format!("{name} {v}"))
        .collect();
    match nonzero.len() {
        0 => String::new(),
        n if n <= 4 => format!("; totals {}", nonzero.join(", ")),
        n => format!("; totals {} and {} more", nonzero[..4].join(", "), n - 4),
    }
}

/// The congestion and error checks from two samples taken `elapsed` apart; `ethernet` adds
/// where pause counters are to be found when sysfs has none.
pub(crate) fn checks(
    before: &Sample,
    after: &Sample,
    elapsed: Duration,
    ethernet: bool,
    ethtool_netdev: Option<&str>,
) -> [Check; 2] {
    [
        congestion(before, after, elapsed, ethernet, ethtool_netdev),
        errors(before, after, elapsed),
    ]
}

fn count(sample: &Sample, kinds: &[Kind]) -> usize {
    sample.values().filter(|(k, _)| kinds.contains(k)).count()
}

/// "1 counter", "3 counters".
fn counters(n: usize) -> String {
    format!("{n} counter{}", if n == 1 { "" } else { "s" })
}

fn congestion(
    before: &Sample,
    after: &Sample,
    elapsed: Duration,
    ethernet: bool,
    netdev: Option<&str>,
) -> Check {
    const NAME: &str = "congestion counters";
    let secs = elapsed.as_secs_f64();
    let netdev = netdev.unwrap_or("<netdev>");
    let no_pause = ethernet
        && !after
            .keys()
            .any(|name| name.contains("pause") || name.contains("pfc"));
    let pause_note = format!(
        "pause/PFC frames are counted outside sysfs: check `ethtool -S {netdev} | grep -iE 'pause|pfc'` too"
    );
    let n = count(after, &[Kind::Congestion]);
    if n == 0 {
        let check = Check::skip(
            NAME,
            "no PFC/pause, ECN or CNP counters in sysfs for this port",
        );
        return if ethernet {
            check.fix(pause_note)
        } else {
            check
        };
    }
    let climbing = rises(before, after, Kind::Congestion);
    let check = if !climbing.is_empty() {
        Check::warn(
            NAME,
            format!("climbing over {secs:.1} s: {}", list_rises(&climbing, secs)),
        )
        .fix(format!(
            "the fabric is pushing back: check PFC and ECN settings on the NIC and the switch \
             ports, and what else sends through this port; {pause_note}"
        ))
    } else if secs == 0.0 {
        Check::info(
            NAME,
            format!(
                "{} read once (--sample-secs 0){}",
                counters(n),
                totals(after, Kind::Congestion)
            ),
        )
    } else {
        Check::pass(
            NAME,
            format!(
                "{} steady over {secs:.1} s{}",
                counters(n),
                totals(after, Kind::Congestion)
            ),
        )
    };
    if no_pause && check.fix.is_none() {
        check.fix(pause_note)
    } else {
        check
    }
}

fn errors(before: &Sample, after: &Sample, elapsed: Duration) -> Check {
    const NAME: &str = "error counters";
    let secs = elapsed.as_secs_f64();
    let n = count(after, &[Kind::Link, Kind::Transport]);
    if n == 0 {
        return Check::skip(
            NAME,
            "no link-error or retransmission counters in sysfs for this port",
        );
    }
    let link = rises(before, after, Kind::Link);
    if !link.is_empty() {
        return Check::fail(
            NAME,
            format!(
                "link errors climbing over {secs:.1} s: {}",
                list_rises(&link, secs)
            ),
        )
        .fix(
            "the physical link is taking errors: reseat or replace the cable or transceiver, \
             check the switch port (`ibdiagnet` on InfiniBand, `mlxlink` on NVIDIA NICs)",
        );
    }
    let transport = rises(before, after, Kind::Transport);
    if !transport.is_empty() {
        return Check::warn(
            NAME,
            format!(
                "losses climbing over {secs:.1} s: {}",
                list_rises(&transport, secs)
            ),
        )
        .fix(
            "packets are dropped and retransmitted: on RoCE a lossless class (PFC) or ECN must \
             be configured end to end; on InfiniBand check the fabric with `ibdiagnet`",
        );
    }
    let totals = format!(
        "{}{}",
        totals(after, Kind::Link),
        totals(after, Kind::Transport)
    );
    if secs == 0.0 {
        Check::info(
            NAME,
            format!("{} read once (--sample-secs 0){totals}", counters(n)),
        )
    } else {
        Check::pass(
            NAME,
            format!("{} steady over {secs:.1} s{totals}", counters(n)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::verdict::Verdict;

    fn sample(pairs: &[(&str, u64)]) -> Sample {
        pairs
            .iter()
            .filter_map(|(name, v)| {
                let short = name.rsplit('/').next()?;
                Some((name.to_string(), (classify(short)?, *v)))
            })
            .collect()
    }

    #[test]
    fn names_classify() {
        assert_eq!(classify("np_cnp_sent"), Some(Kind::Congestion));
        assert_eq!(
            classify("np_ecn_marked_roce_packets"),
            Some(Kind::Congestion)
        );
        assert_eq!(classify("port_xmit_wait"), Some(Kind::Congestion));
        assert_eq!(classify("rx_prio3_pause"), Some(Kind::Congestion));
        assert_eq!(classify("symbol_error"), Some(Kind::Link));
        assert_eq!(classify("link_downed"), Some(Kind::Link));
        assert_eq!(classify("rx_crc_errors"), Some(Kind::Link));
        assert_eq!(classify("out_of_sequence"), Some(Kind::Transport));
        assert_eq!(classify("rnr_nak_retry_err"), Some(Kind::Transport));
        assert_eq!(classify("out_of_seq_request"), Some(Kind::Transport));
        assert_eq!(classify("port_xmit_data"), None);
        assert_eq!(classify("rx_bytes"), None);
    }

    #[test]
    fn steady_counters_pass_and_climbing_ones_do_not() {
        let before = sample(&[
            ("hw_counters/np_cnp_sent", 10),
            ("hw_counters/out_of_sequence", 3),
            ("counters/symbol_error", 0),
        ]);
        let [c, e] = checks(&before, &before, Duration::from_secs(3), false, None);
        assert_eq!((c.verdict, e.verdict), (Verdict::Pass, Verdict::Pass));
        assert!(c.evidence.contains("np_cnp_sent 10"), "{}", c.evidence);

        let after = sample(&[
            ("hw_counters/np_cnp_sent", 310),
            ("hw_counters/out_of_sequence", 3),
            ("counters/symbol_error", 0),
        ]);
        let [c, e] = checks(&before, &after, Duration::from_secs(3), false, None);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(
            c.evidence.contains("np_cnp_sent +300 (100/s)"),
            "{}",
            c.evidence
        );
        assert_eq!(e.verdict, Verdict::Pass);

        let after = sample(&[
            ("hw_counters/np_cnp_sent", 10),
            ("hw_counters/out_of_sequence", 9),
            ("counters/symbol_error", 2),
        ]);
        let [_, e] = checks(&before, &after, Duration::from_secs(2), false, None);
        assert_eq!(e.verdict, Verdict::Fail);
        assert!(e.evidence.contains("symbol_error +2"), "{}", e.evidence);
        let after = sample(&[("hw_counters/out_of_sequence", 9)]);
        let [_, e] = checks(&before, &after, Duration::from_secs(2), false, None);
        assert_eq!(e.verdict, Verdict::Warn);
    }

    #[test]
    fn no_counters_skip_and_ethernet_says_where_pause_frames_are() {
        let empty = Sample::new();
        let [c, e] = checks(
            &empty,
            &empty,
            Duration::from_secs(1),
            true,
            Some("ens2f0np0"),
        );
        assert_eq!((c.verdict, e.verdict), (Verdict::Skip, Verdict::Skip));
        assert!(c.fix.unwrap().contains("ethtool -S ens2f0np0"));
        let once = sample(&[("hw_counters/np_cnp_sent", 1)]);
        let [c, _] = checks(&once, &once, Duration::ZERO, false, None);
        assert_eq!(c.verdict, Verdict::Info);
    }

    #[test]
    fn fixture_counters_are_read() {
        let sysfs = Sysfs::new(format!(
            "{}/../topo/tests/fixtures/two-socket",
            env!("CARGO_MANIFEST_DIR")
        ));
        let s = read(&sysfs, "mlx5_0", 1, &["ens2f0np0".to_string()]);
        assert_eq!(
            s.get("hw_counters/np_cnp_sent"),
            Some(&(Kind::Congestion, 4821))
        );
        assert_eq!(s.get("ens2f0np0/rx_crc_errors"), Some(&(Kind::Link, 0)));
    }
}
