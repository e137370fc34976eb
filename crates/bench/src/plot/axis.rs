//! Axes: every axis is linear in what is drawn (sizes as log2 of bytes, log-scale latency as
//! log10 of µs), with tick positions and labels chosen here, few enough not to overlap.

/// One axis: the drawn range, tick positions with their labels, and the description.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    /// Description with the unit, e.g. "message size [bytes]".
    pub desc: String,
    /// Drawn range (in transformed units).
    pub lo: f64,
    /// Drawn range (in transformed units).
    pub hi: f64,
    /// Tick positions (transformed units) and their labels.
    pub ticks: Vec<(f64, String)>,
    /// Positions of light grid lines between ticks.
    pub minor: Vec<f64>,
}

impl Axis {
    /// The label at a tick position, or "" between ticks.
    pub(crate) fn label(&self, v: f64) -> String {
        self.ticks
            .iter()
            .find(|(t, _)| (t - v).abs() < 1e-9)
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }
}

/// A size label: 2, 512, 1K, 64K, 1M, 8M (K = 1024).
pub(crate) fn size_label(bytes: f64) -> String {
    let b = bytes.round() as u64;
    const UNITS: [(&str, u32); 3] = [("G", 30), ("M", 20), ("K", 10)];
    for (unit, shift) in UNITS {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// The message-size axis: log2 of bytes, a tick on powers of two (every k-th when there are
/// more than `max_ticks`).
pub(crate) fn size_axis(min_bytes: u64, max_bytes: u64, max_ticks: usize) -> Axis {
    let lo = (min_bytes.max(1) as f64).log2();
    let hi = (max_bytes.max(1) as f64).log2();
    let (first, last) = (lo.floor() as i64, hi.ceil() as i64);
    let count = (last - first + 1).max(1) as usize;
    let stride = count.div_ceil(max_ticks.max(1)).max(1);
    let ticks: Vec<(f64, String)> = (first..=last)
        .step_by(stride)
        .map(|p| (p as f64, size_label(2f64.powi(p as i32))))
        .collect();
    let minor = (first..=last).map(|p| p as f64).collect();
    let pad = 0.4;
    Axis {
        desc: "message size [bytes, K = 1024]".to_string(),
        lo: lo - pad,
        hi: hi + pad,
        ticks,
        minor,
    }
}

/// A "nice" step (1, 2, 2.5 or 5 times a power of ten) for about `n` steps across `span`.
pub(crate) fn nice_step(span: f64, n: usize) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Formats a value on a linear axis with as many decimals as the step needs.
pub(crate) fn linear_label(v: f64, step: f64) -> String {
    let k = step.log10().floor() as i32;
    let mantissa = step / 10f64.powi(k);
    let extra = i32::from((mantissa - 2.5).abs() < 1e-9);
    let decimals = ((-k).max(0) + extra) as usize;
    let s = format!("{v:.decimals$}");
    // No "-0.0".
    if s.starts_with('-') && s.trim_start_matches(['-', '0', '.']).is_empty() {
        s[1..].to_string()
    } else {
        s
    }
}

/// A linear axis from `lo` (often 0) to a little above `hi`, about `n` ticks.
pub(crate) fn linear_axis(desc: &str, lo: f64, hi: f64, n: usize) -> Axis {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let step = nice_step(hi - lo, n);
    let top = hi + (hi - lo) * 0.06;
    let first = (lo / step).ceil() as i64;
    let last = (top / step).floor() as i64;
    let ticks: Vec<(f64, String)> = (first..=last)
        .map(|i| {
            let v = i as f64 * step;
            (v, linear_label(v, step))
        })
        .collect();
    let minor = (first * 2..=last * 2)
        .map(|i| i as f64 * step / 2.0)
        .collect();
    Axis {
        desc: desc.to_string(),
        lo,
        hi: top,
        ticks,
        minor,
    }
}

/// A logarithmic axis over values `lo..hi` (both > 0), drawn as log10: ticks at 1-2-5 per
/// decade, or 1-3, or 1 per decade when that would be too many.
pub(crate) fn log_axis(desc: &str, lo: f64, hi: f64, max_ticks: usize) -> Axis {
    let (lo, hi) = (lo.max(1e-12), hi.max(lo.max(1e-12) * 1.0001));
    let (l, h) = (lo.log10() - 0.08, hi.log10() + 0.08);
    let candidates = |mults: &[f64]| -> Vec<f64> {
        let mut v = Vec::new();
        for d in (l.floor() as i32)..=(h.ceil() as i32) {
            for m in mults {
                let x = (m * 10f64.powi(d)).log10();
                if x >= l && x <= h {
                    v.push(x);
                }
            }
        }
        v
    };
    let mut ticks = candidates(&[1.0, 2.0, 5.0]);
    if ticks.len() > max_ticks {
        ticks = candidates(&[1.0, 3.0]);
    }
    if ticks.len() > max_ticks {
        ticks = candidates(&[1.0]);
    }
    if ticks.len() < 3 {
        ticks = candidates(&[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]);
    }
    let minor = candidates(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    Axis {
        desc: desc.to_string(),
        lo: l,
        hi: h,
        ticks: ticks
            .into_iter()
            .map(|x| (x, log_label(10f64.powf(x))))
            .collect(),
        minor,
    }
}

/// A label for a value on a log axis: 0.5, 2, 10, 1500.
fn log_label(v: f64) -> String {
    if v >= 1.0 {
        format!("{}", (v * 100.0).round() / 100.0)
    } else {
        let digits = (-v.log10().floor()) as usize + 1;
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Category axis: one tick per index, labelled every `stride`-th so that labels of about
/// `label_px` pixels fit in `width_px`.
pub(crate) fn category_axis(
    desc: &str,
    labels: &[String],
    label_px: &[u32],
    width_px: u32,
) -> Axis {
    let n = labels.len();
    let widest = label_px.iter().copied().max().unwrap_or(0) as f64 + 12.0;
    let per = width_px as f64 / n.max(1) as f64;
    let stride = ((widest / per).ceil() as usize).max(1);
    let ticks = labels
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0 || (*i + 1 == n && stride == 1))
        .map(|(i, l)| (i as f64, l.clone()))
        .collect();
    Axis {
        desc: desc.to_string(),
        lo: -0.5,
        hi: n.max(1) as f64 - 0.5,
        ticks,
        minor: (0..n).map(|i| i as f64).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_are_short() {
        assert_eq!(size_label(2.0), "2");
        assert_eq!(size_label(512.0), "512");
        assert_eq!(size_label(65536.0), "64K");
        assert_eq!(size_label((8 << 20) as f64), "8M");
        assert_eq!(size_label(3000.0), "3000");
    }

    #[test]
    fn a_full_sweep_gets_every_other_power_of_two() {
        let a = size_axis(2, 8 << 20, 14);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["2", "8", "32", "128", "512", "2K", "8K", "32K", "128K", "512K", "2M", "8M"]
        );
        assert_eq!(a.label(13.0), "8K");
        assert_eq!(a.label(12.0), "");
        let one = size_axis(65536, 65536, 14);
        assert_eq!(one.ticks, [(16.0, "64K".to_string())]);
        assert!(one.lo < 16.0 && one.hi > 16.0);
    }

    #[test]
    fn linear_axes_have_nice_steps() {
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(0.06, 6), 0.01);
        assert_eq!(nice_step(12.0, 5), 2.5);
        let a = linear_axis("GB/s", 0.0, 48.5, 6);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0", "10", "20", "30", "40", "50"]);
        let a = linear_axis("GB/s", 0.0, 0.055, 6);
        assert_eq!(a.ticks[1].1, "0.01");
        let a = linear_axis("GB/s", 0.0, 11.0, 5);
        assert_eq!(a.ticks[1].1, "2.5");
    }

    #[test]
    fn log_axes_tick_per_decade() {
        let a = log_axis("us", 2.0, 900.0, 12);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["2", "5", "10", "20", "50", "100", "200", "500", "1000"]
        );
        let a = log_axis("us", 0.5, 50_000.0, 8);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["1", "10", "100", "1000", "10000"]);
        let a = log_axis("us", 13.0, 370_000.0, 12);
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["30", "100", "300", "1000", "3000", "10000", "30000", "100000", "300000"]
        );
        let a = log_axis("us", 3.0, 4.0, 8);
        assert!(a.ticks.len() >= 2, "{a:?}");
    }

    #[test]
    fn category_labels_thin_out_to_fit() {
        let labels: Vec<String> = (0..20).map(|i| format!("2026-11-{i:02}")).collect();
        let px = vec![80; 20];
        let a = category_axis("run", &labels, &px, 900);
        assert!(
            a.ticks.len() < 20 && a.ticks.len() >= 5,
            "{}",
            a.ticks.len()
        );
        let a = category_axis("run", &labels[..4], &px[..4], 900);
        assert_eq!(a.ticks.len(), 4);
    }
}
