//! Which priority is lossless, and its pause counters: given (`--lossless-prio`), else the
//! one with pause activity, else the only one with PFC counters (mlx5 lists a priority's
//! pause counters only where PFC is enabled), else none known (then the port's global pause
//! counters stand for it).

use super::finding::grouped;
use super::parse::Source;
use super::rates::{compact, Rates};

/// A share of the time paused at or above which pause is more than a lossless class's usual
/// push-back under load: 1%.
pub(crate) const HEAVY_SHARE: f64 = 0.01;

/// The lossless priority and how it was known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lossless {
    /// The priority (0-7), when known.
    pub prio: Option<u8>,
    /// How: "--lossless-prio", "the one with pause activity", ..., or why none is known.
    pub why: String,
}

/// One direction's pause on the lossless priority (or the port's global pause).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PauseSide {
    /// The counter of pause frames ("rx_prio3_pause").
    pub counter: String,
    /// Its rise.
    pub frames: u64,
    /// The share of the interval paused, from its `_duration` counter (µs), when there is one.
    pub share: Option<f64>,
    /// The interval.
    pub secs: f64,
}

impl PauseSide {
    /// More than a lossless class's usual push-back: paused [`HEAVY_SHARE`] of the time or
    /// more, or any pause when the time paused is not counted.
    pub(crate) fn heavy(&self) -> bool {
        self.frames > 0 && self.share.is_none_or(|s| s >= HEAVY_SHARE)
    }

    /// "rx_prio3_pause +12,345, 1.23k/s, paused 25.0% of the time".
    pub(crate) fn shown(&self) -> String {
        let mut text = format!(
            "{} +{}, {}/s",
            self.counter,
            grouped(self.frames),
            compact(self.frames as f64 / self.secs)
        );
        if let Some(s) = self.share {
            text.push_str(&format!(", paused {:.1}% of the time", s * 100.0));
        }
        text
    }
}

impl Lossless {
    /// The lossless priority of the dumps compared in `rates`, or `given`.
    pub(crate) fn infer(rates: &Rates, given: Option<u8>) -> Lossless {
        if let Some(p) = given {
            return Lossless {
                prio: Some(p),
                why: "--lossless-prio".into(),
            };
        }
        let active = (0..8u8)
            .map(|p| {
                let frames = |dir: &str| {
                    rates
                        .rise(Source::Ethtool, &format!("{dir}_prio{p}_pause"))
                        .unwrap_or(0)
                };
                (frames("rx").saturating_add(frames("tx")), p)
            })
            .filter(|(n, _)| *n > 0)
            .max_by_key(|&(n, p)| (n, std::cmp::Reverse(p)));
        if let Some((_, p)) = active {
            return Lossless {
                prio: Some(p),
                why: "the one with pause activity".into(),
            };
        }
        let with_pfc: Vec<u8> = (0..8u8)
            .filter(|p| {
                ["rx", "tx"]
                    .iter()
                    .any(|dir| rates.has(Source::Ethtool, &format!("{dir}_prio{p}_pause")))
            })
            .collect();
        match with_pfc.as_slice() {
            [p] => Lossless {
                prio: Some(*p),
                why: "the only one with PFC counters".into(),
            },
            [] => Lossless {
                prio: None,
                why: "none known: no priority's PFC counters in the dumps (PFC off, or no \
                      ethtool -S); give --lossless-prio N"
                    .into(),
            },
            many => Lossless {
                prio: None,
                why: format!(
                    "none known: PFC counters on priorities {many:?} and no pause on any; give \
                     --lossless-prio N"
                ),
            },
        }
    }

    /// What the pause findings speak of: "priority 3", or "the port (global pause)".
    pub(crate) fn subject(&self) -> String {
        match self.prio {
            Some(p) => format!("priority {p}"),
            None => "the port (global pause)".into(),
        }
    }

    /// The pause of direction `dir` ("rx" received, "tx" sent) on the lossless priority, or
    /// the port's global pause when none is known; `None` when the dumps do not count it.
    pub(crate) fn pause(&self, rates: &Rates, dir: &str) -> Option<PauseSide> {
        let (names, duration) = match self.prio {
            Some(p) => (
                vec![format!("{dir}_prio{p}_pause")],
                format!("{dir}_prio{p}_pause_duration"),
            ),
            None => (
                vec![
                    format!("{dir}_pause_ctrl_phy"),
                    format!("{dir}_global_pause"),
                ],
                format!("{dir}_global_pause_duration"),
            ),
        };
        let counter = names.into_iter().find(|n| rates.has(Source::Ethtool, n))?;
        let frames = rates.rise(Source::Ethtool, &counter).unwrap_or(0);
        let share = rates
            .rise(Source::Ethtool, &duration)
            .map(|us| (us as f64 / 1e6 / rates.secs).min(1.0));
        Some(PauseSide {
            counter,
            frames,
            share,
            secs: rates.secs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::parse::Dump;
    use crate::counters::rates::compare;

    fn rates(pairs: &[(&str, u64, u64)]) -> Rates {
        let (mut before, mut after) = (Dump::default(), Dump::default());
        for (name, b, a) in pairs {
            before.insert(Source::Ethtool, name, *b);
            after.insert(Source::Ethtool, name, *a);
        }
        compare(&before, &after, 10.0)
    }

    #[test]
    fn the_lossless_priority_is_given_or_where_the_pause_is_or_where_pfc_is() {
        let r = rates(&[
            ("rx_prio3_pause", 0, 0),
            ("rx_prio4_pause", 0, 50),
            ("tx_prio3_pause", 0, 10),
        ]);
        let l = Lossless::infer(&r, None);
        assert_eq!(
            (l.prio, l.why.as_str()),
            (Some(4), "the one with pause activity")
        );
        assert_eq!(Lossless::infer(&r, Some(3)).prio, Some(3));
        let r = rates(&[("rx_prio3_pause", 5, 5), ("tx_prio3_pause", 5, 5)]);
        let l = Lossless::infer(&r, None);
        assert_eq!(
            (l.prio, l.why.as_str()),
            (Some(3), "the only one with PFC counters")
        );
        let r = rates(&[("rx_prio3_pause", 5, 5), ("rx_prio4_pause", 5, 5)]);
        let l = Lossless::infer(&r, None);
        assert_eq!(l.prio, None);
        assert!(l.why.contains("priorities [3, 4]"), "{}", l.why);
        assert_eq!(Lossless::infer(&rates(&[]), None).prio, None);
    }

    #[test]
    fn pause_is_heavy_from_one_percent_of_the_time_paused() {
        let r = rates(&[
            ("rx_prio3_pause", 0, 100),
            ("rx_prio3_pause_duration", 0, 50_000),
            ("tx_prio3_pause", 0, 100),
            ("tx_prio3_pause_duration", 0, 200_000),
        ]);
        let l = Lossless::infer(&r, None);
        let rx = l.pause(&r, "rx").unwrap();
        assert!(!rx.heavy(), "0.5% of the time: {rx:?}");
        let tx = l.pause(&r, "tx").unwrap();
        assert!(tx.heavy());
        assert_eq!(
            tx.shown(),
            "tx_prio3_pause +100, 10/s, paused 2.0% of the time"
        );
        // Without a duration counter, any pause counts.
        let r = rates(&[("rx_pause_ctrl_phy", 0, 3)]);
        let l = Lossless::infer(&r, None);
        assert_eq!(l.subject(), "the port (global pause)");
        assert!(l.pause(&r, "rx").unwrap().heavy());
        assert_eq!(l.pause(&r, "tx"), None);
    }
}
