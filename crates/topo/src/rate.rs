//! Rates as people type them: a number and a unit, `400G`, `10Gb`, `5Gbps`, `3GB`, `25GB/s`,
//! `800MiB/s`. The one rate parser of the workspace: a port rate (`PortRate`), rdmabench's
//! `--rate-limit` and `--limit-bw`.
//!
//! A lower-case `b` (or `bit`) is bits, an upper-case `B` bytes; a prefix alone (`400G`) is
//! bits, as network rates are named. Prefixes are decimal (k, M, G, T), binary with `i` (Ki,
//! Mi, Gi). `/s`, `/sec` or `ps` may follow. A bare number is in the unit the caller says.

use std::fmt;

/// The unit a bare number is in, as a flag's help says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateUnit {
    /// Gb/s: 10^9 bits per second (perftest's `--rate_limit`, a port's rate).
    Gbits,
    /// GB/s: 10^9 bytes per second (rdmabench's tables).
    Gbytes,
    /// MiB/s: 2^20 bytes per second (perftest's tables and `--limit_bw`).
    Mibytes,
}

impl RateUnit {
    /// Bytes per second in one of this unit.
    pub fn bytes(self) -> f64 {
        match self {
            RateUnit::Gbits => 1.25e8,
            RateUnit::Gbytes => 1e9,
            RateUnit::Mibytes => (1u64 << 20) as f64,
        }
    }
}

impl fmt::Display for RateUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            RateUnit::Gbits => "Gb/s",
            RateUnit::Gbytes => "GB/s",
            RateUnit::Mibytes => "MiB/s",
        })
    }
}

/// The accepted forms, for error messages.
pub const RATE_FORMS: &str = "a number with a unit, e.g. 10Gb, 400G, 5Gbps, 3GB, 25GB/s, \
                              800MiB/s (b bits, B bytes)";

/// Parses a rate above zero into GB/s (10^9 bytes per second); a bare number is in `bare`.
pub fn parse_rate(text: &str, bare: RateUnit) -> Result<f64, String> {
    let bad = || format!("'{text}' is not a rate: give {RATE_FORMS}; a bare number is {bare}");
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let number: f64 = t[..end].parse().map_err(|_| bad())?;
    let unit = t[end..].trim();
    let per = if unit.is_empty() {
        bare.bytes()
    } else {
        unit_bytes(unit).ok_or_else(bad)?
    };
    let rate = number * per / 1e9;
    if rate > 0.0 && rate.is_finite() {
        Ok(rate)
    } else {
        Err(bad())
    }
}

/// Bytes per second in one `unit` ("Gb/s", "MiB", "G"), or `None` for an unknown unit.
fn unit_bytes(unit: &str) -> Option<f64> {
    let mut chars = unit.chars();
    let scale = match chars.next()?.to_ascii_uppercase() {
        'K' => 1e3,
        'M' => 1e6,
        'G' => 1e9,
        'T' => 1e12,
        _ => return bits_or_bytes(unit),
    };
    let rest = chars.as_str();
    let (scale, rest) = match rest.strip_prefix('i') {
        Some(r) => (binary_of(scale), r),
        None => (scale, rest),
    };
    let per = if matches!(rest, "" | "/s" | "ps") {
        0.125 // "400G", "400G/s": a network rate, in bits
    } else {
        bits_or_bytes(rest)?
    };
    Some(scale * per)
}

/// 2^10 for 1e3, 2^20 for 1e6, ...
fn binary_of(decimal: f64) -> f64 {
    2f64.powi((decimal.log10() / 3.0).round() as i32 * 10)
}

/// Bytes in one of `unit` without its prefix: bits ("b", "bit", "b/s", "bps") or bytes ("B",
/// "B/s", "Bps").
fn bits_or_bytes(unit: &str) -> Option<f64> {
    let (per, rest) = if let Some(r) = unit.strip_prefix("bit") {
        (0.125, r.strip_prefix('s').unwrap_or(r))
    } else if let Some(r) = unit.strip_prefix('b') {
        (0.125, r)
    } else if let Some(r) = unit.strip_prefix('B') {
        (1.0, r)
    } else {
        return None;
    };
    matches!(rest, "" | "/s" | "/sec" | "ps" | "PS").then_some(per)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gb(text: &str, bare: RateUnit) -> f64 {
        parse_rate(text, bare).unwrap()
    }

    #[test]
    fn every_unit_form_gives_gbytes_per_second() {
        let bits = RateUnit::Gbits;
        for text in [
            "400",
            "400G",
            "400Gb",
            "400 Gb/s",
            "400Gbps",
            "400gbps",
            "400Gbit/s",
        ] {
            assert_eq!(gb(text, bits), 50.0, "{text}");
        }
        assert_eq!(gb("400 Gb/sec", bits), 50.0);
        assert_eq!(gb("5Gbps", RateUnit::Gbytes), 0.625);
        assert_eq!(gb("3GB", bits), 3.0);
        assert_eq!(gb("25GB/s", bits), 25.0);
        assert_eq!(gb("0.01GB/s", bits), 0.01);
        assert_eq!(gb("25GBps", bits), 25.0);
        assert_eq!(gb("800Mb", bits), 0.1);
        assert_eq!(gb("100MB/s", bits), 0.1);
        assert_eq!(gb("1000MiB/s", bits), 1000.0 * 1_048_576.0 / 1e9);
        assert_eq!(gb("2GiB/s", bits), 2.0 * 1_073_741_824.0 / 1e9);
        assert_eq!(gb("1Tb", bits), 125.0);
        assert_eq!(gb("8000kb", bits), 0.001);
    }

    #[test]
    fn a_bare_number_is_in_the_unit_the_caller_names() {
        assert_eq!(gb("10", RateUnit::Gbits), 1.25);
        assert_eq!(gb("10", RateUnit::Gbytes), 10.0);
        assert_eq!(gb("1000", RateUnit::Mibytes), 1.048576);
    }

    #[test]
    fn bad_rates_name_the_value_and_the_forms() {
        for text in [
            "",
            "fast",
            "0",
            "0Gb",
            "-5",
            "10Xb",
            "10 furlongs",
            "1e999",
            "10GB/h",
        ] {
            let err = parse_rate(text, RateUnit::Gbits).unwrap_err();
            assert!(err.contains(&format!("'{text}'")), "{err}");
            assert!(
                err.contains("25GB/s") && err.contains("bare number is Gb/s"),
                "{err}"
            );
        }
    }
}
