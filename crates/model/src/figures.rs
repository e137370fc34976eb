//! The figures of one message size: bandwidth, message rate, latency statistics, each
//! direction of a bidirectional run and each repetition of `--repeat`.

use anyhow::{bail, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::intervals::IntervalFigures;
use crate::units::{gbits_from_gbytes, gbytes_per_sec};

/// The figures for one message size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeResult {
    /// Message size in payload bytes.
    pub size: u64,
    /// Operations measured, all QPs together.
    pub iterations: u64,
    /// Length of the measured window, first post to last completion.
    pub seconds: f64,
    /// Payload bandwidth in GB/s (10^9 bytes/s).
    pub bw_gbps: f64,
    /// Payload bandwidth in Gb/s (10^9 bits/s).
    pub gbits: f64,
    /// Messages per second, in millions.
    pub msg_rate_mpps: f64,
    /// Bandwidth as a percentage of the binding ceiling, when one is known.
    pub pct_of_ceiling: Option<f64>,
    /// Latency tests: the statistics, in microseconds (one-way or round trip: see
    /// `params.latency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_us: Option<LatencyStats>,
    /// Latency tests: the whole histogram (nanoseconds), base64 of a V2 HdrHistogram, so
    /// runs can be merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdr: Option<String>,
    /// Bidirectional runs: each direction's figures (the top-level ones are their sum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directions: Option<Directions>,
    /// With `--repeat N`: every repetition's figures, in order; the top-level figures are
    /// their medians.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repetitions: Vec<Repetition>,
    /// Bandwidth tests: the most operations one QP of the client had posted and not yet
    /// completed (READ and atomics keep `tx_depth` posted beyond `params.outs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight_max: Option<u64>,
    /// Bandwidth tests: what the measured window held (its completion events; whether a
    /// `-D` window was extended to hold enough of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowFacts>,
    /// `-D` runs with `--interval`: the window's bandwidth interval by interval, its worst
    /// interval and their coefficient of variation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<IntervalFigures>,
}

/// What a bandwidth figure's measured window held. The rate is counted from its first to
/// its last completion event, so it needs at least two; a `-D` window that reaches its
/// planned end with fewer than ten is kept open until it has them, for at most `--timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WindowFacts {
    /// Completion events inside the window (after the one that opened it).
    pub completions: u64,
    /// The sender asked for a completion every this many operations per QP when the loop
    /// ended: `cq_mod`, or fewer in a `-D` run whose warm-up was too slow for `cq_mod` to
    /// give about fifty completions in the window. Absent for a staged loop (it signals
    /// each bounce buffer's last operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_every: Option<u32>,
    /// Seconds the window was kept open past its planned end: to span its planned length
    /// when it opened late, or to hold enough completions; absent when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_s: Option<f64>,
}

/// Latency statistics in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LatencyStats {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
}

/// One direction of a bidirectional run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirectionFigures {
    /// Operations measured.
    pub iterations: u64,
    /// Measured window.
    pub seconds: f64,
    /// GB/s.
    pub bw_gbps: f64,
    /// Millions of messages per second.
    pub msg_rate_mpps: f64,
}

/// Both directions of a bidirectional run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Directions {
    /// What the client sent.
    pub client_to_server: DirectionFigures,
    /// What the server sent.
    pub server_to_client: DirectionFigures,
}

/// One repetition's figures for one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Repetition {
    /// Operations measured.
    pub iterations: u64,
    /// Measured window.
    pub seconds: f64,
    /// GB/s.
    pub bw_gbps: f64,
    /// Millions of messages per second.
    pub msg_rate_mpps: f64,
    /// Latency tests: the statistics in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_us: Option<LatencyStats>,
}

impl SizeResult {
    /// Figures from a measured window. A window of zero length (or not finite) is an error,
    /// never an infinite bandwidth.
    pub fn from_window(size: u64, iterations: u64, seconds: f64) -> Result<Self> {
        if !(seconds.is_finite() && seconds > 0.0) {
            bail!(
                "the measured window for size {size} has length {seconds} s; cannot compute a rate"
            );
        }
        let bw = gbytes_per_sec(size as f64 * iterations as f64, seconds);
        Ok(SizeResult {
            iterations,
            seconds,
            bw_gbps: bw,
            gbits: gbits_from_gbytes(bw),
            msg_rate_mpps: iterations as f64 / seconds / 1e6,
            ..SizeResult::empty(size)
        })
    }

    /// A size with no figures: nothing measured, every optional part absent (a failed size's
    /// report).
    pub fn empty(size: u64) -> Self {
        SizeResult {
            size,
            iterations: 0,
            seconds: 0.0,
            bw_gbps: 0.0,
            gbits: 0.0,
            msg_rate_mpps: 0.0,
            pct_of_ceiling: None,
            lat_us: None,
            hdr: None,
            directions: None,
            repetitions: Vec::new(),
            in_flight_max: None,
            window: None,
            intervals: None,
        }
    }

    /// Fills in the percentage of a ceiling given in GB/s.
    pub fn with_ceiling(mut self, limit_gbps: Option<f64>) -> Self {
        self.pct_of_ceiling = limit_gbps
            .filter(|l| l.is_finite() && *l > 0.0)
            .map(|l| self.bw_gbps / l * 100.0);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_from_the_window() {
        let r = SizeResult::from_window(65536, 10_000, 0.5).unwrap();
        assert!((r.bw_gbps - 1.31072).abs() < 1e-9);
        assert!((r.gbits - 10.48576).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.02).abs() < 1e-12);
        assert_eq!(r.pct_of_ceiling, None);
        let r = r.with_ceiling(Some(2.62144));
        assert!((r.pct_of_ceiling.unwrap() - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_zero_length_window_is_an_error_not_infinity() {
        assert!(SizeResult::from_window(64, 10, 0.0).is_err());
        assert!(SizeResult::from_window(64, 10, f64::NAN).is_err());
    }
}
