//! Latency statistics: an HdrHistogram of nanoseconds (1 ns .. 60 s, 3 significant digits)
//! that records without allocating, the figures the report shows, and the base64 V2 form
//! the record carries so that runs can be merged.

use anyhow::{anyhow, Result};
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;

use crate::report::LatencyStats;

/// Highest latency recorded: 60 s; a longer one counts as 60 s.
pub const MAX_NS: u64 = 60_000_000_000;

/// Records latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Result<Self> {
        let hist =
            Histogram::new_with_bounds(1, MAX_NS, 3).map_err(|e| anyhow!("histogram: {e}"))?;
        Ok(LatencyRecorder { hist })
    }

    /// Records one latency (clamped to 1 ns .. 60 s). Allocates nothing.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, MAX_NS));
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// min, p50 .. p99.99, max, mean and stdev in microseconds (not truncated); an error when
    /// nothing was recorded, so no NaN reaches a report.
    pub fn stats(&self) -> Result<LatencyStats> {
        if self.hist.is_empty() {
            return Err(anyhow!("no latency was recorded; nothing to report"));
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let h = &self.hist;
        Ok(LatencyStats {
            min: us(h.min()),
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
            mean: h.mean() / 1000.0,
            stdev: h.stdev() / 1000.0,
        })
    }

    /// The histogram as base64 of its V2 serialization.
    pub fn to_base64(&self) -> Result<String> {
        let mut bytes = Vec::new();
        V2Serializer::new()
            .serialize(&self.hist, &mut bytes)
            .map_err(|e| anyhow!("cannot serialize the histogram: {e:?}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// A histogram back from [`LatencyRecorder::to_base64`].
    pub fn from_base64(text: &str) -> Result<Self> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| anyhow!("the histogram is not base64: {e}"))?;
        let hist: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| anyhow!("the histogram does not decode: {e:?}"))?;
        Ok(LatencyRecorder { hist })
    }

    /// Adds another recorder's values (merging runs).
    pub fn merge(&mut self, other: &LatencyRecorder) -> Result<()> {
        self.hist
            .add(&other.hist)
            .map_err(|e| anyhow!("cannot merge histograms: {e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_follow_the_values_with_sub_microsecond_precision() {
        let mut r = LatencyRecorder::new().unwrap();
        for ns in 1..=1000u64 {
            r.record(ns * 10); // 10 ns .. 10 us
        }
        let s = r.stats().unwrap();
        assert!((s.min - 0.010).abs() < 1e-9, "{s:?}");
        assert!((s.p50 - 5.0).abs() < 0.01, "{s:?}");
        assert!((s.p99 - 9.9).abs() < 0.02, "{s:?}");
        assert!((s.max - 10.0).abs() < 0.01, "{s:?}");
        assert!((s.mean - 5.005).abs() < 0.01, "{s:?}");
        assert!(
            s.min <= s.p50
                && s.p50 <= s.p90
                && s.p90 <= s.p99
                && s.p99 <= s.p999
                && s.p999 <= s.max
        );
        assert!(s.stdev > 2.8 && s.stdev < 2.95, "{s:?}");
    }

    #[test]
    fn an_empty_recorder_is_an_error_not_nan() {
        assert!(LatencyRecorder::new().unwrap().stats().is_err());
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut r = LatencyRecorder::new().unwrap();
        r.record(0);
        r.record(u64::MAX);
        assert_eq!(r.len(), 2);
        assert!(r.stats().unwrap().max >= 59_000_000.0);
    }

    #[test]
    fn the_histogram_round_trips_through_base64_and_merges() {
        let mut a = LatencyRecorder::new().unwrap();
        for v in [1_000, 2_000, 3_000] {
            a.record(v);
        }
        let text = a.to_base64().unwrap();
        let mut back = LatencyRecorder::from_base64(&text).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back.stats().unwrap(), a.stats().unwrap());
        back.merge(&a).unwrap();
        assert_eq!(back.len(), 6);
        assert!(LatencyRecorder::from_base64("not base64!").is_err());
    }
}
