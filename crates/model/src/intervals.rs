//! `--interval SECS` on a `-D` run: the measured window's bandwidth interval by interval, its
//! worst interval against the intervals' median, and their coefficient of variation. An
//! intermittently unstable link (a flapping cable, a pause storm, a neighbour's burst) shows
//! as a dip here while the window's average hides it.
//!
//! The engine cuts the window at the first completion event at or past each boundary, so an
//! interval lasts about `every_s`: longer where completions come rarely (a slow stretch), and
//! the last one holds what is left (merged into the one before when shorter than half an
//! interval). The intervals partition the window: their operations add up to the figure's.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::gbytes_per_sec;

/// One interval of a measured window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalFigure {
    /// Seconds from the window's opening to the interval's start.
    pub start_s: f64,
    /// Its length in seconds.
    pub seconds: f64,
    /// Operations completed in it.
    pub iterations: u64,
    /// Payload bandwidth in GB/s.
    pub bw_gbps: f64,
}

impl IntervalFigure {
    /// The interval of `iterations` operations of `size` bytes from `start_s`, `seconds`
    /// long (a length of zero gives a bandwidth of zero, never an infinite one).
    pub fn new(size: u64, start_s: f64, seconds: f64, iterations: u64) -> IntervalFigure {
        let bw_gbps = if seconds > 0.0 && seconds.is_finite() {
            gbytes_per_sec(size as f64 * iterations as f64, seconds)
        } else {
            0.0
        };
        IntervalFigure {
            start_s,
            seconds,
            iterations,
            bw_gbps,
        }
    }

    /// Where it ends, in seconds from the window's opening.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.seconds
    }
}

/// A window's intervals and what they say together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IntervalFigures {
    /// The intervals' planned length in seconds (`--interval`).
    pub every_s: f64,
    /// Each interval of the window, in order.
    pub list: Vec<IntervalFigure>,
    /// The interval of least bandwidth (the first of equals).
    pub worst: IntervalFigure,
    /// The worst interval's bandwidth as a percentage of the intervals' median.
    pub worst_pct_of_median: f64,
    /// The coefficient of variation of the intervals' bandwidth: their standard deviation
    /// over their mean (0 for a steady link).
    pub cov: f64,
}

impl IntervalFigures {
    /// The figures of `list` (`None` when it is empty).
    pub fn from_list(every_s: f64, list: Vec<IntervalFigure>) -> Option<IntervalFigures> {
        let mut worst = *list.first()?;
        for i in &list {
            if i.bw_gbps < worst.bw_gbps {
                worst = *i;
            }
        }
        let bws: Vec<f64> = list.iter().map(|i| i.bw_gbps).collect();
        let median = crate::stats::median(&bws).unwrap_or(0.0);
        let mean = bws.iter().sum::<f64>() / bws.len() as f64;
        let variance = bws.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / bws.len() as f64;
        Some(IntervalFigures {
            every_s,
            worst_pct_of_median: if median > 0.0 {
                worst.bw_gbps / median * 100.0
            } else {
                0.0
            },
            cov: if mean > 0.0 {
                variance.sqrt() / mean
            } else {
                0.0
            },
            worst,
            list,
        })
    }

    /// Several windows measured at once (the two directions of `-b`, rails, threads):
    /// interval `k` of each added up (operations and bandwidth; the earliest start, the
    /// longest length), as far as the shortest list goes. `None` unless every part has
    /// intervals.
    pub fn summed(size: u64, parts: &[Option<&IntervalFigures>]) -> Option<IntervalFigures> {
        let parts: Vec<&IntervalFigures> = parts.iter().copied().collect::<Option<_>>()?;
        let first = parts.first()?;
        let n = parts.iter().map(|p| p.list.len()).min()?;
        let list = (0..n)
            .map(|k| {
                let at: Vec<&IntervalFigure> = parts.iter().map(|p| &p.list[k]).collect();
                let mut sum = IntervalFigure::new(
                    size,
                    at.iter().map(|i| i.start_s).fold(f64::INFINITY, f64::min),
                    at.iter().map(|i| i.seconds).fold(0.0, f64::max),
                    at.iter().map(|i| i.iterations).sum(),
                );
                sum.bw_gbps = at.iter().map(|i| i.bw_gbps).sum();
                sum
            })
            .collect();
        IntervalFigures::from_list(first.every_s, list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steady_then_dip() -> IntervalFigures {
        // 1 MB per interval of 1 s, but 0.1 MB in the fourth.
        let list = (0..8)
            .map(|k| {
                let ops = if k == 3 { 100 } else { 1000 };
                IntervalFigure::new(1000, k as f64, 1.0, ops)
            })
            .collect();
        IntervalFigures::from_list(1.0, list).unwrap()
    }

    #[test]
    fn the_worst_interval_is_named_against_the_median() {
        let f = steady_then_dip();
        assert_eq!(f.worst.start_s, 3.0);
        assert!((f.worst.bw_gbps - 1e-4).abs() < 1e-12);
        assert!((f.worst_pct_of_median - 10.0).abs() < 1e-9);
        // mean 0.8875 MB/s, deviations 0.1125 (x7) and 0.7875: stdev 0.2976
        assert!((f.cov - 0.3354).abs() < 1e-3, "{}", f.cov);
    }

    #[test]
    fn a_steady_link_has_no_variation() {
        let list = (0..5)
            .map(|k| IntervalFigure::new(64, k as f64, 1.0, 50))
            .collect();
        let f = IntervalFigures::from_list(1.0, list).unwrap();
        assert_eq!((f.cov, f.worst_pct_of_median), (0.0, 100.0));
        assert!(IntervalFigures::from_list(1.0, Vec::new()).is_none());
    }

    #[test]
    fn windows_measured_together_add_up_interval_by_interval() {
        let a = steady_then_dip();
        let mut b = steady_then_dip();
        b.list.truncate(6);
        let sum = IntervalFigures::summed(1000, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(sum.list.len(), 6);
        assert_eq!(sum.list[0].iterations, 2000);
        assert!((sum.list[0].bw_gbps - 2e-3).abs() < 1e-12);
        assert_eq!(sum.worst.start_s, 3.0);
        assert!(IntervalFigures::summed(1000, &[Some(&a), None]).is_none());
    }
}
