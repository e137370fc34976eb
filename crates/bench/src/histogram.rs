//! Latency statistics: an HdrHistogram of nanoseconds (1 ns .. 60 s, 3 significant digits)
//! that records without allocating, the figures the report shows, and the base64 V2 form
//! the record carries so that runs can be merged. A histogram read back (from the peer, or
//! from a record) is input: its header is checked against its own bytes and rdmabench's range
//! before the decoder, which allocates the length the header announces, sees it.

use anyhow::{anyhow, bail, Result};
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;

use crate::report::LatencyStats;

/// Highest latency recorded: 60 s; a longer one counts as 60 s.
pub const MAX_NS: u64 = 60_000_000_000;

/// Significant digits recorded.
const DIGITS: u8 = 3;

/// The cookie of an uncompressed V2 HdrHistogram, the one form rdmabench writes.
const V2_COOKIE: u32 = 0x1c84_9313;

/// A V2 header's bytes: cookie, payload length, normalizing offset and significant digits
/// (4 bytes each), lowest and highest value and the integer-to-double ratio (8 bytes each).
const V2_HEADER: usize = 40;

/// The counts of a histogram of rdmabench's range.
const COUNTS: u64 = 27_648;

/// The most payload a histogram of rdmabench's range encodes to: 9 bytes at most for each of
/// its [`COUNTS`] counts.
pub(crate) const MAX_PAYLOAD: usize = 256 * 1024;

/// The longest base64 text of a histogram.
const MAX_TEXT: usize = (V2_HEADER + MAX_PAYLOAD).div_ceil(3) * 4;

/// Records latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    hist: Histogram<u64>,
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Result<Self> {
        let hist =
            Histogram::new_with_bounds(1, MAX_NS, DIGITS).map_err(|e| anyhow!("histogram: {e}"))?;
        Ok(LatencyRecorder { hist })
    }

    /// Records one latency (clamped to 1 ns .. 60 s). Allocates nothing.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, MAX_NS));
    }

    /// How many latencies were recorded.
    pub(crate) fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True before the first record.
    pub(crate) fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// min, p50 .. p99.99, max, mean and stdev in microseconds (not truncated); an error when
    /// nothing was recorded, so no NaN reaches a report.
    pub(crate) fn stats(&self) -> Result<LatencyStats> {
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
    pub(crate) fn to_base64(&self) -> Result<String> {
        let mut bytes = Vec::new();
        V2Serializer::new()
            .serialize(&self.hist, &mut bytes)
            .map_err(|e| anyhow!("cannot serialize the histogram: {e:?}"))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// A histogram back from [`LatencyRecorder::to_base64`]: refused, before the decoder
    /// allocates anything, unless its header describes rdmabench's histogram and the bytes
    /// that follow it ([`check_header`]).
    pub fn from_base64(text: &str) -> Result<Self> {
        let text = text.trim();
        if text.len() > MAX_TEXT {
            bail!(
                "the histogram is {} characters of base64, beyond the {MAX_TEXT} of the largest \
                 rdmabench writes",
                text.len()
            );
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| anyhow!("the histogram is not base64: {e}"))?;
        check_header(&bytes)?;
        let hist: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| anyhow!("the histogram does not decode: {e:?}"))?;
        Ok(LatencyRecorder { hist })
    }

    /// Every latency recorded, times `factor`: for values recorded at a clock's rate that a
    /// better one replaced after the loop. Each recorded bucket moves as its middle value,
    /// so a value moves by at most a bucket's width on each side (3 digits: 0.1%).
    pub(crate) fn scaled(&self, factor: f64) -> Result<Self> {
        let mut out = LatencyRecorder::new()?;
        for v in self.hist.iter_recorded() {
            let mid = self.hist.median_equivalent(v.value_iterated_to()) as f64;
            let ns = (mid * factor).round() as u64;
            out.hist
                .saturating_record_n(ns.clamp(1, MAX_NS), v.count_at_value());
        }
        Ok(out)
    }

    /// Adds another recorder's values (merging runs).
    pub(crate) fn merge(&mut self, other: &LatencyRecorder) -> Result<()> {
        self.hist
            .add(&other.hist)
            .map_err(|e| anyhow!("cannot merge histograms: {e:?}"))
    }
}

/// Reads a serialized histogram's header as the decoder would, and refuses one that does not
/// describe `bytes`: another form than the uncompressed V2 rdmabench writes, another range or
/// precision than its histograms', or a payload length other than the bytes that follow
/// (beyond [`MAX_PAYLOAD`] at most). The decoder allocates the announced length before it
/// reads a byte of it.
fn check_header(bytes: &[u8]) -> Result<()> {
    let Some((header, payload)) = bytes.split_first_chunk::<V2_HEADER>() else {
        bail!(
            "the histogram is {} bytes, shorter than the {V2_HEADER}-byte header of a V2 \
             HdrHistogram",
            bytes.len()
        );
    };
    let cookie = be_u32(header, 0);
    if cookie != V2_COOKIE {
        bail!(
            "the histogram's cookie is {cookie:#010x}; rdmabench reads only the uncompressed V2 \
             form it writes ({V2_COOKIE:#010x})"
        );
    }
    let announced = be_u32(header, 4);
    if u64::from(announced) != payload.len() as u64 {
        bail!(
            "the histogram announces a payload of {announced} bytes but carries {} after its \
             {V2_HEADER}-byte header",
            payload.len()
        );
    }
    if payload.len() > MAX_PAYLOAD {
        bail!(
            "the histogram's payload of {} bytes is beyond the {MAX_PAYLOAD} bytes any \
             histogram of rdmabench's range takes",
            payload.len()
        );
    }
    let (digits, low, high) = (be_u32(header, 12), be_u64(header, 16), be_u64(header, 24));
    if (digits, low, high) != (u32::from(DIGITS), 1, MAX_NS) {
        bail!(
            "the histogram records {low} .. {high} ns at {digits} significant digits; \
             rdmabench's record 1 .. {MAX_NS} ns at {DIGITS}"
        );
    }
    check_counts(payload)
}

/// Walks a V2 payload's numbers (LEB128 varints of at most 9 bytes, zig-zag encoded: a count,
/// or when negative a run of empty counts) and refuses a run longer than a histogram of
/// rdmabench's range has counts: the decoder negates the run's number, which overflows for
/// the most negative one.
fn check_counts(payload: &[u8]) -> Result<()> {
    let mut rest = payload;
    while !rest.is_empty() {
        let (value, len) = varint(rest);
        rest = rest.get(len..).unwrap_or_default();
        // Zig-zag: odd numbers are the negative ones, -(value / 2) - 1.
        let zeros = (value & 1 == 1).then(|| (value >> 1) + 1);
        if let Some(zeros) = zeros.filter(|&z| z > COUNTS) {
            bail!(
                "the histogram's payload skips {zeros} empty counts; rdmabench's histograms \
                 have {COUNTS}"
            );
        }
    }
    Ok(())
}

/// The LEB128-64b9B varint at the start of `bytes` (7 bits a byte while the high bit is set,
/// the ninth byte whole) and its length; a truncated one ends with `bytes`.
fn varint(bytes: &[u8]) -> (u64, usize) {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return (value | u64::from(b) << 56, 9);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (value, i + 1);
        }
    }
    (value, bytes.len())
}

/// The big-endian `u32` at `at` in a V2 header.
fn be_u32(header: &[u8; V2_HEADER], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&header[at..at + 4]);
    u32::from_be_bytes(word)
}

/// The big-endian `u64` at `at` in a V2 header.
fn be_u64(header: &[u8; V2_HEADER], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&header[at..at + 8]);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A histogram's bytes, from its base64.
    fn bytes_of(r: &LatencyRecorder) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(r.to_base64().unwrap())
            .unwrap()
    }

    fn base64_of(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn a_scaled_histogram_moves_every_value_by_the_factor_to_its_precision() {
        let mut h = LatencyRecorder::new().unwrap();
        for ns in [1_000u64, 2_950_000, 3_430_000, 59_000_000_000] {
            (0..10).for_each(|_| h.record(ns));
        }
        let s = h.scaled(5.90 / 6.87).unwrap();
        assert_eq!(s.len(), h.len());
        let (a, b) = (h.stats().unwrap(), s.stats().unwrap());
        for (was, is) in [
            (a.min, b.min),
            (a.p50, b.p50),
            (a.max, b.max),
            (a.mean, b.mean),
        ] {
            let off = (is / (was * 5.90 / 6.87) - 1.0).abs();
            assert!(off < 0.002, "{was} us scaled to {is} us");
        }
        // Beyond 60 s, a value stays at 60 s.
        let mut longest = LatencyRecorder::new().unwrap();
        longest.record(MAX_NS);
        let max = |r: &LatencyRecorder| r.stats().unwrap().max;
        assert_eq!(max(&h.scaled(2.0).unwrap()), max(&longest));
    }

    #[test]
    fn the_payload_cap_holds_the_largest_histogram_of_rdmabenchs_range() {
        let r = LatencyRecorder::new().unwrap();
        assert_eq!(r.hist.distinct_values() as u64, COUNTS);
        assert!(COUNTS * 9 <= MAX_PAYLOAD as u64);
        // Every value of the range recorded, some many times.
        let mut full = LatencyRecorder::new().unwrap();
        let mut v = 1;
        while v <= MAX_NS {
            full.hist.saturating_record_n(v, v);
            v = full.hist.next_non_equivalent(v);
        }
        let text = full.to_base64().unwrap();
        assert!(text.len() <= MAX_TEXT, "{}", text.len());
        assert_eq!(LatencyRecorder::from_base64(&text).unwrap().hist, full.hist);
    }

    #[test]
    fn a_histogram_whose_header_does_not_describe_it_is_refused_naming_what_differs() {
        let mut a = LatencyRecorder::new().unwrap();
        a.record(1_500);
        let good = bytes_of(&a);
        let refused = |bytes: Vec<u8>| match LatencyRecorder::from_base64(&base64_of(&bytes)) {
            Ok(_) => panic!("{bytes:?} was taken"),
            Err(e) => format!("{e:#}"),
        };
        let e = refused(good[..39].to_vec());
        assert!(
            e.contains("39 bytes, shorter than the 40-byte header"),
            "{e}"
        );
        let mut compressed = good.clone();
        compressed[3] = 0x14;
        let e = refused(compressed);
        assert!(e.contains("0x1c849314") && e.contains("0x1c849313"), "{e}");
        let mut trailing = good.clone();
        trailing.push(0);
        let payload = good.len() - V2_HEADER;
        let e = refused(trailing);
        assert!(
            e.contains(&format!("{payload} bytes but carries {}", payload + 1)),
            "{e}"
        );
        let mut wide = good.clone();
        wide[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        let e = refused(wide);
        assert!(e.contains(&format!("1 .. {} ns at 3", u64::MAX)), "{e}");
        let e = format!(
            "{:#}",
            LatencyRecorder::from_base64(&"A".repeat(MAX_TEXT + 4)).unwrap_err()
        );
        assert!(e.contains("beyond the"), "{e}");
        assert_eq!(
            LatencyRecorder::from_base64(&base64_of(&good))
                .unwrap()
                .len(),
            1
        );
    }

    /// The decoder negates a run of empty counts; the most negative number (nine bytes of
    /// 0xff) would overflow it (a panic where overflow is checked).
    #[test]
    fn a_run_of_empty_counts_longer_than_the_histogram_is_refused() {
        let mut bytes = bytes_of(&LatencyRecorder::new().unwrap());
        bytes.truncate(V2_HEADER);
        bytes[4..8].copy_from_slice(&9u32.to_be_bytes());
        bytes.extend([0xff; 9]);
        let e = format!(
            "{:#}",
            LatencyRecorder::from_base64(&base64_of(&bytes)).unwrap_err()
        );
        assert!(e.contains("skips 9223372036854775808 empty counts"), "{e}");
        assert_eq!(varint(&[0x81, 0x01]), (129, 2));
        assert_eq!(varint(&[0xff; 9]), (u64::MAX, 9));
        assert_eq!(varint(&[0x80]), (0, 1));
    }

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
