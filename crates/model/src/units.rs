//! Units: parsing sizes the way perftest users type them, and printing bytes and rates.
//!
//! Bytes are payload bytes; GB/s is 10^9 bytes per second; Gb/s is 10^9 bits per second.
//! Size suffixes are binary (64K = 65536), as in perftest. Rates take a unit (`10Gb`, `3GB`,
//! `25GB/s`: topo's one rate parser), durations one too (`500ms`, `10s`, `2m`), classes hex
//! (`0x68`); a bare number means what it means in perftest, as each flag's help says.
//!
//! **The unit bandwidth is shown in**, one rule for every view, decided here: a run's table
//! is in GB/s, or Gb/s when the client gives `--report-gbits` ([`bandwidth_unit`]); the flag
//! travels in the plan, so the server's table is in the client's unit. A view of a fleet's
//! pairs (rank 0's sweep summary, the heat map, `compare` of two sweeps) shows each test in
//! the largest of GB/s, MB/s and KB/s that keeps the fleet median at 1 or above
//! ([`display_unit`]; `compare` takes the before sweep's median). Records always hold GB/s.

pub use topo::RateUnit;

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

/// Parses a rate into GB/s: a number with a unit (`10Gb`, `400G`, `5Gbps`, `3GB`, `25GB/s`;
/// b bits, B bytes), or a bare number in `bare` (the flag's help says which).
pub fn parse_rate(text: &str, bare: RateUnit) -> Result<f64, String> {
    topo::parse_rate(text, bare)
}

/// A rate as typed where a bare number's unit is decided later (`--limit-bw`: the unit of
/// the run's table, which the client's `--report-gbits` chooses).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateArg {
    /// A number without a unit.
    Bare(f64),
    /// A number with its unit, in GB/s.
    Gbytes(f64),
}

impl RateArg {
    /// Parses a rate above zero, with or without a unit.
    pub fn parse(text: &str) -> Result<RateArg, String> {
        match text.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(RateArg::Bare(v)),
            _ => parse_rate(text, RateUnit::Gbytes)
                .map(RateArg::Gbytes)
                .map_err(|_| {
                    format!(
                        "'{text}' is not a rate: give {}; a bare number is in the table's \
                         unit (GB/s, Gb/s with --report-gbits)",
                        topo::RATE_FORMS
                    )
                }),
        }
    }

    /// The rate in GB/s, a bare number taken as `bare`.
    pub fn gbytes(self, bare: RateUnit) -> f64 {
        match self {
            RateArg::Bare(v) => v * bare.bytes() / 1e9,
            RateArg::Gbytes(v) => v,
        }
    }
}

/// Parses a duration in seconds: a bare number of seconds, or one with a unit: `500ms`,
/// `10s`, `2m`, `1h` (also `us`, `sec`, `min`).
pub fn parse_secs(text: &str) -> Result<f64, String> {
    let bad = || {
        format!("'{text}' is not a duration: give seconds or a number with a unit, e.g. 10, 10s, 500ms, 2m")
    };
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let number: f64 = t[..end].parse().map_err(|_| bad())?;
    let scale = match t[end..].trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad()),
    };
    let secs = number * scale;
    secs.is_finite().then_some(secs).ok_or_else(bad)
}

/// Parses a class or a TOS byte, 0 to 255: decimal (`104`) or hex (`0x68`).
pub fn parse_class(text: &str) -> Result<u8, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| format!("'{text}' is not a class: give 0 to 255, decimal or hex (0x68)"))
}

/// Parses a size as [`parse_size`] that must fit 32 bits (`-I`, `-m`).
pub fn parse_size_u32(text: &str) -> Result<u32, String> {
    let n = parse_size(text)?;
    u32::try_from(n).map_err(|_| format!("'{text}' is too large: at most 4G - 1 bytes"))
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
        assert_eq!(parse_size("64KiB"), Ok(65536));
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
    fn rates_take_units_and_a_bare_number_is_the_flags_unit() {
        assert_eq!(parse_rate("10", RateUnit::Gbits), Ok(1.25));
        assert_eq!(parse_rate("10Gb", RateUnit::Gbytes), Ok(1.25));
        assert_eq!(parse_rate("3GB", RateUnit::Gbits), Ok(3.0));
        assert_eq!(RateArg::parse("400"), Ok(RateArg::Bare(400.0)));
        assert_eq!(RateArg::parse("400G"), Ok(RateArg::Gbytes(50.0)));
        assert_eq!(RateArg::Bare(400.0).gbytes(RateUnit::Gbits), 50.0);
        assert_eq!(RateArg::Bare(40.0).gbytes(RateUnit::Gbytes), 40.0);
        assert_eq!(RateArg::Gbytes(50.0).gbytes(RateUnit::Gbytes), 50.0);
        for bad in ["0", "-1", "fast", "10 GB/h"] {
            let err = RateArg::parse(bad).unwrap_err();
            assert!(
                err.contains(&format!("'{bad}'")) && err.contains("25GB/s"),
                "{err}"
            );
        }
    }

    #[test]
    fn durations_take_units_and_a_bare_number_is_seconds() {
        assert_eq!(parse_secs("10"), Ok(10.0));
        assert_eq!(parse_secs("2.5"), Ok(2.5));
        assert_eq!(parse_secs("10s"), Ok(10.0));
        assert_eq!(parse_secs("500ms"), Ok(0.5));
        assert_eq!(parse_secs("2m"), Ok(120.0));
        assert_eq!(parse_secs("1h"), Ok(3600.0));
        assert_eq!(parse_secs("250us"), Ok(0.000_25));
        for bad in ["", "ten", "10x", "-5", "5 days"] {
            let err = parse_secs(bad).unwrap_err();
            assert!(
                err.contains(&format!("'{bad}'")) && err.contains("500ms"),
                "{err}"
            );
        }
    }

    #[test]
    fn classes_are_decimal_or_hex() {
        assert_eq!(parse_class("104"), Ok(104));
        assert_eq!(parse_class("0x68"), Ok(0x68));
        assert_eq!(parse_class("0XFF"), Ok(255));
        for bad in ["256", "0x100", "0x", "-1", "x68"] {
            let err = parse_class(bad).unwrap_err();
            assert!(
                err.contains(&format!("'{bad}'")) && err.contains("0x68"),
                "{err}"
            );
        }
    }

    #[test]
    fn thirty_two_bit_sizes_take_suffixes_and_refuse_more() {
        assert_eq!(parse_size_u32("4K"), Ok(4096));
        assert_eq!(parse_size_u32("220"), Ok(220));
        assert!(parse_size_u32("4G").unwrap_err().contains("'4G'"));
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
