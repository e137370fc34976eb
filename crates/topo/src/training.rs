//! How a PCIe link trained, judged against what both its ends can do.
//!
//! sysfs's `max_link_speed` and `max_link_width` are one function's capability, not the
//! link's: a Gen5 GPU in a Gen4 slot runs Gen4 x16 at full health. As the kernel's own report
//! does (`pcie_report_downtraining`, "limited by ... (capable of ...)"), a link is judged
//! against the lesser of its two ends' capabilities: below that it trained down (a riser, a
//! contact, a BIOS setting); at it, the slower end limits it and nothing is wrong. Where the
//! link runs below the function's own capability and the other end's cannot be read, the
//! verdict is unknown: neither OK nor degraded. `topo`, `doctor`, `health`, a run's ceilings
//! and gpu_check all judge a link here.

use crate::ceiling::gen_from_gts;
use crate::pci::{gen_width, PciLink};

/// How far below a capability a speed must be to count as slower, GT/s (sysfs's speeds are
/// decimal strings: "2.5", "16.0").
const SPEED_SLACK: f64 = 0.01;

/// A link's training against what both its ends can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Training {
    /// At the most both ends can do.
    Full,
    /// Slower or narrower than both ends can do: trained down.
    Down,
    /// Below what the ends whose capability is known can do, with an end's capability
    /// unreadable: whether that end limits it or the link trained down cannot be told.
    Unknown,
    /// The link is down, or sysfs gives no current speed or width: nothing to judge.
    NotUp,
}

/// The most both ends can do in one dimension: the lesser of the two capabilities; where one
/// is unknown, the other only when the link runs at it (a link never runs above either end).
fn capable(now: Option<f64>, own: Option<f64>, peer: Option<f64>) -> Option<f64> {
    match (own, peer) {
        (Some(own), Some(peer)) => Some(own.min(peer)),
        (Some(known), None) | (None, Some(known)) => {
            now.filter(|&now| now >= known - SPEED_SLACK).map(|_| known)
        }
        (None, None) => None,
    }
}

impl PciLink {
    /// This link with the other end's capability (maximum speed in GT/s, maximum width).
    pub fn with_peer(self, (speed_gts, width): (Option<f64>, Option<u32>)) -> Self {
        Self {
            peer_max_speed_gts: speed_gts,
            peer_max_width: width,
            ..self
        }
    }

    /// The fastest speed both ends can do, GT/s; `None` when it cannot be told.
    pub fn capable_speed_gts(&self) -> Option<f64> {
        capable(self.speed_gts, self.max_speed_gts, self.peer_max_speed_gts)
    }

    /// The widest width both ends can do; `None` when it cannot be told.
    pub fn capable_width(&self) -> Option<u32> {
        let width = |w: Option<u32>| w.map(f64::from);
        let both = capable(
            width(self.width),
            width(self.max_width),
            width(self.peer_max_width),
        );
        // Lane counts are small integers, so the f64 holds one exactly.
        both.map(|w| w as u32)
    }

    /// The generation both ends can do (1..=6).
    pub fn capable_gen(&self) -> Option<u8> {
        gen_from_gts(self.capable_speed_gts()?)
    }

    /// How the link trained against what both its ends can do.
    pub fn training(&self) -> Training {
        let (Some(speed), Some(width)) = (self.speed_gts, self.width) else {
            return Training::NotUp;
        };
        let (cap_speed, cap_width) = (self.capable_speed_gts(), self.capable_width());
        let slow = cap_speed.is_some_and(|cap| speed < cap - SPEED_SLACK);
        let narrow = cap_width.is_some_and(|cap| width < cap);
        if slow || narrow {
            Training::Down
        } else if cap_speed.is_none() || cap_width.is_none() {
            Training::Unknown
        } else {
            Training::Full
        }
    }

    /// Whether the link trained slower or narrower than both its ends can do.
    pub fn is_downtrained(&self) -> bool {
        self.training() == Training::Down
    }

    /// "DOWNTRAINED: running Gen3 x8, capable of Gen4 x16" (what both ends can do), when
    /// it is.
    pub fn downtrain_note(&self) -> Option<String> {
        self.is_downtrained().then(|| {
            format!(
                "DOWNTRAINED: running {}, capable of {}",
                self.now_text(),
                self.capable_text()
            )
        })
    }

    /// What there is to say about the training: the downtrain note; "UNKNOWN whether
    /// trained down: ..." with the end that cannot be read; or, on a link at full speed that
    /// the other end holds below the function's own capability, "limited by the other end:
    /// Gen4 x16 is the most both ends can do". `None` on a link at the function's own
    /// capability, or one that is not up.
    pub fn training_note(&self) -> Option<String> {
        match self.training() {
            Training::Down => self.downtrain_note(),
            Training::Unknown => Some(format!(
                "UNKNOWN whether trained down: running {} of the function's {}, {}",
                self.now_text(),
                gen_width(self.max_speed_gts, self.max_width),
                self.unreadable_end()
            )),
            Training::Full if self.is_limited_by_peer() => Some(format!(
                "limited by the other end: {} is the most both ends can do",
                self.capable_text()
            )),
            Training::Full | Training::NotUp => None,
        }
    }

    /// Whether the other end can do less than this function: its capability is below the
    /// function's own in speed or width.
    pub fn is_limited_by_peer(&self) -> bool {
        let below = |peer: Option<f64>, own: Option<f64>| matches!((peer, own), (Some(p), Some(o)) if p < o - SPEED_SLACK);
        below(self.peer_max_speed_gts, self.max_speed_gts)
            || below(
                self.peer_max_width.map(f64::from),
                self.max_width.map(f64::from),
            )
    }

    /// Which end's capability is missing, in words.
    fn unreadable_end(&self) -> &'static str {
        let own = self.max_speed_gts.is_some() && self.max_width.is_some();
        let peer = self.peer_max_speed_gts.is_some() && self.peer_max_width.is_some();
        match (own, peer) {
            (false, false) => "neither end's capability can be read",
            (false, true) => "the function's own capability cannot be read",
            _ => "the other end's capability cannot be read",
        }
    }

    /// "Gen4 x16": what it runs at.
    pub fn now_text(&self) -> String {
        gen_width(self.speed_gts, self.width)
    }

    /// "Gen5 x16": what both ends can do ("?" where that cannot be told).
    pub fn capable_text(&self) -> String {
        gen_width(self.capable_speed_gts(), self.capable_width())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link running `now`, the function capable of `own`, the other end of `peer`: each
    /// (GT/s, lanes), `None` where unknown.
    fn link(now: (f64, u32), own: Option<(f64, u32)>, peer: Option<(f64, u32)>) -> PciLink {
        PciLink {
            speed_gts: Some(now.0),
            width: Some(now.1),
            max_speed_gts: own.map(|o| o.0),
            max_width: own.map(|o| o.1),
            peer_max_speed_gts: peer.map(|p| p.0),
            peer_max_width: peer.map(|p| p.1),
            mps: Some(256),
            mrrs: None,
        }
    }

    const G5X16: Option<(f64, u32)> = Some((32.0, 16));

    #[test]
    fn every_combination_of_both_ends() {
        use Training::*;
        let g4 = 16.0;
        for (now, own, peer, want, capable) in [
            // A Gen5 card in a Gen4 slot at Gen4: the slot limits it.
            ((g4, 16), G5X16, Some((g4, 16)), Full, Some((g4, 16))),
            // A Gen5 card below a Gen5 port at Gen4: trained down.
            ((g4, 16), G5X16, G5X16, Down, Some((32.0, 16))),
            // Gen4 below a Gen4 slot: Gen3 is a fault.
            ((8.0, 16), G5X16, Some((g4, 16)), Down, Some((g4, 16))),
            // x16 card, x8 slot, x8: full; x16 slot, x8: down; x8 card, x16 slot, x8: full.
            ((32.0, 8), G5X16, Some((32.0, 8)), Full, Some((32.0, 8))),
            ((32.0, 8), G5X16, G5X16, Down, Some((32.0, 16))),
            ((32.0, 8), Some((32.0, 8)), G5X16, Full, Some((32.0, 8))),
            // Gen4 x8 slot: at Gen4 x8 full, at Gen4 x4 down.
            ((g4, 8), G5X16, Some((g4, 8)), Full, Some((g4, 8))),
            ((g4, 4), G5X16, Some((g4, 8)), Down, Some((g4, 8))),
            // The other end unreadable: below the card's own, unknown; at it, full.
            ((g4, 16), G5X16, None, Unknown, None),
            ((32.0, 16), G5X16, None, Full, Some((32.0, 16))),
            // Narrower than both can do is down whatever the speed's verdict.
            ((g4, 8), G5X16, Some((32.0, 16)), Down, Some((32.0, 16))),
            // The card's own capability unreadable, the port's known: at it full, below unknown.
            ((g4, 16), None, Some((g4, 16)), Full, Some((g4, 16))),
            ((g4, 16), None, G5X16, Unknown, None),
        ] {
            let l = link(now, own, peer);
            assert_eq!(l.training(), want, "{l:?}");
            assert_eq!(l.is_downtrained(), want == Down, "{l:?}");
            let got = l.capable_speed_gts().zip(l.capable_width());
            assert_eq!(got, capable, "{l:?}");
        }
        let down = PciLink {
            speed_gts: None,
            ..link((g4, 16), G5X16, G5X16)
        };
        assert_eq!(down.training(), NotUp);
        assert_eq!(down.training_note(), None);
    }

    #[test]
    fn notes_say_what_limits_the_link_or_what_is_unknown() {
        let slot = link((16.0, 16), G5X16, Some((16.0, 16)));
        assert_eq!(slot.downtrain_note(), None);
        assert_eq!(
            slot.training_note().as_deref(),
            Some("limited by the other end: Gen4 x16 is the most both ends can do")
        );
        let down = link((16.0, 16), G5X16, G5X16);
        assert_eq!(
            down.training_note().as_deref(),
            Some("DOWNTRAINED: running Gen4 x16, capable of Gen5 x16")
        );
        let unread = link((16.0, 16), G5X16, None);
        assert_eq!(
            unread.training_note().as_deref(),
            Some(
                "UNKNOWN whether trained down: running Gen4 x16 of the function's Gen5 x16, \
                 the other end's capability cannot be read"
            )
        );
        let neither = link((16.0, 16), None, None);
        assert!(neither
            .training_note()
            .unwrap()
            .ends_with("neither end's capability can be read"));
        assert_eq!(link((32.0, 16), G5X16, G5X16).training_note(), None);
    }
}
