//! Units: parsing sizes the way perftest users type them, and printing bytes and rates.
//!
//! Bytes are payload bytes; GB/s is 10^9 bytes per second; Gb/s is 10^9 bits per second.
//! Size suffixes are binary (64K = 65536), as in perftest.
//!
//! **The unit bandwidth is shown in**, one rule for every view, decided here: a run's table
//! is in GB/s, or Gb/s when the client gives `--report-gbits` ([`bandwidth_unit`]); the flag
//! travels in the plan, so the server's table is in the client's unit. A view of a fleet's
//! pairs (rank 0's sweep summary, the heat map, `compare` of two sweeps) shows each test in
//! the largest of GB/s, MB/s and KB/s that keeps the fleet median at 1 or above
//! ([`display_unit`]; `compare` takes the before sweep's median). Records always hold GB/s.

/// Parses a message size: a plain number of bytes or one with a binary suffix (K, M, G; an
/// optional trailing "B" or "iB" is accepted), e.g. `64K`, `1M`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (digits, shift) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 10),
        Some('M') => (&body[..body.len() - 1], 20),
        Some('G') => (&body[..body.len() - 1], 30),
        _ => (body, 0),
    };
    let bad = || format!("'{text}' is not a size: use bytes or a K/M/G suffix, e.g. 4096, 64K, 1M");
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// Prints a byte count compactly with a binary suffix when it divides evenly (65536 -> "64 KiB").
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 3] = [("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} B")
}

/// Prints a byte count in its largest binary unit, to a tenth when it does not divide evenly
/// (16_400_000_000 -> "15.3 GiB", 3 << 30 -> "3 GiB").
pub fn format_size_approx(bytes: u64) -> String {
    let (unit, shift) = match bytes {
        b if b >= 1 << 30 => ("GiB", 30),
        b if b >= 1 << 20 => ("MiB", 20),
        b if b >= 1 << 10 => ("KiB", 10),
        _ => return format!("{bytes} B"),
    };
    if bytes.is_multiple_of(1 << shift) {
        format!("{} {unit}", bytes >> shift)
    } else {
        format!("{:.1} {unit}", bytes as f64 / (1u64 << shift) as f64)
    }
}

/// Decimal gigabytes per second of payload.
pub fn gbytes_per_sec(bytes: f64, seconds: f64) -> f64 {
    bytes / seconds / 1e9
}

/// Gigabits per second from gigabytes per second.
pub fn gbits_from_gbytes(gbps: f64) -> f64 {
    gbps * 8.0
}

/// The sizes of a `-a` sweep: powers of two from 2 B to 8 MiB, as perftest does.
pub fn sweep_sizes() -> Vec<u64> {
    (1..=23).map(|p| 1u64 << p).collect()
}

/// The unit of a run's bandwidth column and the factor from GB/s: Gb/s (x 8) when `gbits`
/// (the plan's `--report-gbits`), else GB/s.
pub fn bandwidth_unit(gbits: bool) -> (&'static str, f64) {
    if gbits {
        ("Gb/s", 8.0)
    } else {
        ("GB/s", 1.0)
    }
}

/// The unit a fleet's figure in `unit` is shown in: bandwidth ("GB/s") in the largest of GB/s, MB/s
/// and KB/s that keeps `median` at 1 or above (an emulated link's 0.000912 GB/s shows as
/// 912 KB/s); other units as they are. Returns the unit and the factor from `unit`.
pub fn display_unit(unit: &str, median: Option<f64>) -> (String, f64) {
    if unit != "GB/s" {
        return (unit.to_string(), 1.0);
    }
    let m = median.unwrap_or(1.0);
    [("GB/s", 1.0), ("MB/s", 1e3)]
        .into_iter()
        .find(|&(_, f)| m * f >= 1.0)
        .map_or(("KB/s".to_string(), 1e6), |(name, f)| (name.to_string(), f))
}

/// A figure to four significant digits ("50.79", "1157", "0.5209").
pub fn four_digits(v: f64) -> String {
    let digits = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    let decimals = (3 - digits).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_perftest_users_type_them() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2KB"), Ok(2048));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
    }

    #[test]
    fn bad_sizes_name_the_value_and_the_valid_forms() {
        let err = parse_size("12X").unwrap_err();
        assert!(err.contains("'12X'") && err.contains("64K"), "{err}");
        assert!(parse_size("").is_err());
        assert!(parse_size("-5").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    #[test]
    fn sizes_print_compactly() {
        assert_eq!(format_size(2), "2 B");
        assert_eq!(format_size(65536), "64 KiB");
        assert_eq!(format_size(8 << 20), "8 MiB");
        assert_eq!(format_size(1000), "1000 B");
        assert_eq!(format_size_approx(16_400_000_000), "15.3 GiB");
        assert_eq!(format_size_approx(3 << 30), "3 GiB");
        assert_eq!(format_size_approx(1000), "1000 B");
        assert_eq!(format_size_approx(1500), "1.5 KiB");
    }

    #[test]
    fn rates_use_decimal_units() {
        // 1e9 bytes in one second is 1 GB/s and 8 Gb/s.
        assert!((gbytes_per_sec(1e9, 1.0) - 1.0).abs() < 1e-12);
        assert!((gbits_from_gbytes(1.0) - 8.0).abs() < 1e-12);
    }

    #[test]
    fn sweep_runs_from_2_bytes_to_8_mib() {
        let s = sweep_sizes();
        assert_eq!(s.first(), Some(&2));
        assert_eq!(s.last(), Some(&(8 << 20)));
        assert_eq!(s.len(), 23);
    }

    #[test]
    fn slow_links_show_in_a_unit_that_keeps_their_digits() {
        assert_eq!(display_unit("GB/s", Some(46.0)), ("GB/s".to_string(), 1.0));
        assert_eq!(
            display_unit("GB/s", Some(0.002_5)),
            ("MB/s".to_string(), 1e3)
        );
        assert_eq!(
            display_unit("GB/s", Some(0.000_912)),
            ("KB/s".to_string(), 1e6)
        );
        assert_eq!(display_unit("us", Some(0.5)), ("us".to_string(), 1.0));
    }

    #[test]
    fn a_runs_bandwidth_is_in_gbytes_or_with_report_gbits_in_gbits() {
        assert_eq!(bandwidth_unit(false), ("GB/s", 1.0));
        assert_eq!(bandwidth_unit(true), ("Gb/s", 8.0));
        assert!((gbits_from_gbytes(1.5) - 1.5 * bandwidth_unit(true).1).abs() < 1e-12);
    }
}
