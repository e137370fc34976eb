//! The PCIe link checks: a NIC's or GPU's link, and the links above it on its path, each
//! judged against what both its ends can do ([`topo::PciLink::training`], the one
//! definition `topo`, `health`, a run's ceilings and gpu_check share).

use topo::pci::gen_width;
use topo::{PciLink, PciPath, PortRole, Training};

use super::verdict::{Check, Verdict};

/// A PCIe link against what both its ends can do: `port` is the address of the port above
/// the function, when there is one (named in the advice).
pub(crate) fn pcie_link(
    name: &'static str,
    bdf: &str,
    link: &PciLink,
    port: Option<&str>,
    gpu: bool,
) -> Check {
    let lspci = format!("`lspci -vv -s {bdf} | grep -E 'LnkCap|LnkSta'` shows both");
    let (Some(_), Some(width)) = (link.speed_gts, link.width) else {
        if link.max_speed_gts.is_none() && link.max_width.is_none() {
            return Check::warn(
                name,
                format!("{bdf}: no PCIe link attributes (a conventional PCI function?)"),
            );
        }
        return Check::fail(name, format!("{bdf}: link down or unknown: {link}"))
            .fix(format!("check the card is seated and powered; {lspci}"));
    };
    let now = link.now_text();
    let own = gen_width(link.max_speed_gts, link.max_width);
    let mps = match link.mps {
        Some(mps) => format!("MPS {mps}"),
        None => "MPS unknown (reading config space needs root)".to_string(),
    };
    let port = port.unwrap_or("?");
    match link.training() {
        Training::Down => {
            let evidence = format!(
                "{bdf} DOWNTRAINED: running {now}, it and its port can do {}; {mps}",
                link.capable_text()
            );
            let narrow = link.capable_width().is_some_and(|cap| width < cap);
            if gpu && !narrow {
                return Check::warn(
                    name,
                    format!("{evidence}; GPUs lower their link speed when idle"),
                )
                .fix(format!(
                    "check under load: `nvidia-smi -q -d PCIE` (Link Gen, Current against \
                     Max); if it stays low, reseat the GPU or check the slot's BIOS speed \
                     setting; {lspci}"
                ));
            }
            Check::fail(name, evidence).fix(format!(
                "reseat the card (or its riser) and check the slot's BIOS link speed and \
                 bifurcation settings; {lspci}"
            ))
        }
        Training::Unknown => Check::warn(
            name,
            format!("{bdf} {}; {mps}", link.training_note().unwrap_or_default()),
        )
        .fix(format!(
            "`lspci -vv -s {port} | grep LnkCap` shows what the port above can do; {lspci}"
        )),
        Training::Full | Training::NotUp if link.is_limited_by_peer() => Check::warn(
            name,
            format!(
                "{bdf} running {now}: the card can do {own}, its slot (port {port}) only {now}; \
                 {mps}"
            ),
        )
        .fix("move it to a slot that matches the card for its full bandwidth"),
        Training::Full | Training::NotUp if link.mps == Some(128) => Check::warn(
            name,
            format!(
                "{bdf} {now} (max {own}); MPS 128 costs about 8 % of PCIe bandwidth against 256"
            ),
        )
        .fix("raise Max Payload Size in the BIOS, or boot with pci=pcie_bus_perf"),
        Training::Full | Training::NotUp => {
            Check::pass(name, format!("{bdf} {now} (max {own}), {mps}"))
        }
    }
}

/// The links above a device's own on its path (root port to switch, switch to switch) that
/// trained below what both their ends can do. Each link is read at its downstream end, the
/// function below a root or downstream port; a switch's internal bus is not a link.
pub(crate) fn downtrained_uplinks(path: &PciPath) -> Vec<String> {
    let hops = &path.hops;
    let mut notes = Vec::new();
    for i in 0..hops.len().saturating_sub(2) {
        let (above, below) = (&hops[i], &hops[i + 1]);
        if !matches!(
            above.role,
            PortRole::RootPort | PortRole::SwitchDownstream | PortRole::Bridge
        ) {
            continue;
        }
        if below.link.is_downtrained() {
            notes.push(format!(
                "{} -> {} runs {}, both ends can do {}",
                above.bdf,
                below.bdf,
                below.link.now_text(),
                below.link.capable_text()
            ));
        }
    }
    notes
}

/// A link check made a FAIL when links above the device are trained down.
pub(crate) fn with_uplinks(check: Check, uplinks: &[String]) -> Check {
    if uplinks.is_empty() {
        return check;
    }
    Check {
        verdict: Verdict::Fail,
        evidence: format!(
            "{}; DOWNTRAINED above it: {}",
            check.evidence,
            uplinks.join("; ")
        ),
        fix: Some(
            "every byte to host memory crosses those links: reseat the switch or riser and \
             check the BIOS link settings of the ports named; `lspci -vv` shows LnkCap and \
             LnkSta of each"
                .to_string(),
        ),
        ..check
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topo::{Acs, Hop};

    /// A link running `speed` x `width` of the function's `max_speed` x `max_width`, the
    /// other end capable of `peer` (unknown where `None`).
    fn link(
        (speed, width): (f64, u32),
        (max_speed, max_width): (f64, u32),
        peer: Option<(f64, u32)>,
        mps: Option<u32>,
    ) -> PciLink {
        PciLink {
            speed_gts: Some(speed),
            width: Some(width),
            max_speed_gts: Some(max_speed),
            max_width: Some(max_width),
            peer_max_speed_gts: peer.map(|p| p.0),
            peer_max_width: peer.map(|p| p.1),
            mps,
            mrrs: None,
        }
    }

    const G5: (f64, u32) = (32.0, 16);
    const G4: (f64, u32) = (16.0, 16);

    #[test]
    fn links_at_max_pass_and_trained_down_ones_fail() {
        let full = link(G5, G5, Some(G5), Some(256));
        let c = pcie_link("NIC PCIe link", "0000:18:00.0", &full, Some("p"), false);
        assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        let down = link((8.0, 8), G4, Some(G4), Some(512));
        let c = pcie_link("NIC PCIe link", "0000:41:00.0", &down, Some("p"), false);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(
            c.evidence
                .contains("DOWNTRAINED: running Gen3 x8, it and its port can do Gen4 x16"),
            "{}",
            c.evidence
        );
    }

    #[test]
    fn a_slot_slower_than_the_card_warns_and_an_idle_gpu_warns() {
        let card = link(G4, G5, Some(G4), Some(256));
        let c = pcie_link("NIC PCIe link", "b", &card, Some("p"), false);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(
            c.evidence.contains("its slot (port p) only Gen4 x16"),
            "{}",
            c.evidence
        );
        let idle = link((2.5, 16), G5, Some(G5), Some(256));
        let c = pcie_link("GPU PCIe link", "g", &idle, Some("p"), true);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(c.evidence.contains("idle"), "{}", c.evidence);
        let narrow = link((32.0, 8), G5, Some(G5), Some(256));
        assert_eq!(
            pcie_link("GPU PCIe link", "g", &narrow, Some("p"), true).verdict,
            Verdict::Fail
        );
        let small_mps = link(G5, G5, Some(G5), Some(128));
        assert_eq!(
            pcie_link("NIC PCIe link", "b", &small_mps, Some("p"), false).verdict,
            Verdict::Warn
        );
    }

    #[test]
    fn a_port_that_cannot_be_read_is_unknown_not_downtrained() {
        // Gen4 of its own Gen5 with nothing known of the port above: before, the card's own
        // maximum stood in for both ends and this FAILed as DOWNTRAINED.
        let card = link(G4, G5, None, Some(256));
        let c = pcie_link("NIC PCIe link", "b", &card, None, false);
        assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
        assert!(
            c.evidence.starts_with(
                "b UNKNOWN whether trained down: running Gen4 x16 of the function's Gen5 x16, \
                 the other end's capability cannot be read"
            ),
            "{}",
            c.evidence
        );
        assert!(!c.evidence.contains("DOWNTRAINED"), "{}", c.evidence);
        // At its own maximum the port cannot matter.
        let full = link(G5, G5, None, Some(256));
        assert_eq!(
            pcie_link("NIC PCIe link", "b", &full, None, false).verdict,
            Verdict::Pass
        );
    }

    #[test]
    fn a_trained_down_switch_uplink_is_found() {
        let hop = |bdf: &str, role, link| Hop {
            bdf: bdf.to_string(),
            role,
            link,
            acs: Acs::NotSupported,
        };
        let gen5 = link(G5, G5, Some(G5), Some(256));
        let slow = link(G4, G5, Some(G5), Some(256));
        let mut path = PciPath {
            host_bridge: "pci0000:15".to_string(),
            hops: vec![
                hop("root", PortRole::RootPort, slow),
                hop("up", PortRole::SwitchUpstream, slow),
                hop("down", PortRole::SwitchDownstream, gen5),
                hop("nic", PortRole::Endpoint, gen5),
            ],
        };
        let notes = downtrained_uplinks(&path);
        assert_eq!(
            notes,
            ["root -> up runs Gen4 x16, both ends can do Gen5 x16"]
        );
        let c = with_uplinks(Check::pass("NIC PCIe link", "nic Gen5 x16"), &notes);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(
            c.evidence.contains("DOWNTRAINED above it: root -> up"),
            "{}",
            c.evidence
        );
        // A root port that can only do Gen4 limits the link: not trained down.
        path.hops[1].link = link(G4, G5, Some(G4), Some(256));
        assert!(downtrained_uplinks(&path).is_empty());
    }
}
