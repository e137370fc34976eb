//! The terminal output: a perftest-like header and one row per size.

use std::fmt::Write as _;

use crate::report::SizeResult;

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The facts the header shows.
#[derive(Debug, Clone)]
pub struct Header {
    /// Test title, e.g. "RDMA_Write BW Test".
    pub title: String,
    /// "server" or "client".
    pub role: &'static str,
    /// Label/value pairs in display order.
    pub fields: Vec<(&'static str, String)>,
}

/// Renders the header block.
pub fn header(h: &Header) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(out, "{:^87}", format!("{} ({})", h.title, h.role));
    for pair in h.fields.chunks(2) {
        let mut line = String::new();
        for (label, value) in pair {
            let _ = write!(line, " {label:<15}: {value:<26}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = writeln!(out, "{RULE}");
    out
}

/// The column titles.
pub fn columns(gbits: bool) -> String {
    let unit = if gbits {
        "BW average[Gb/s]"
    } else {
        "BW average[GB/s]"
    };
    format!(
        " {:<10} {:<13} {:<18} {:<15} {}",
        "#bytes", "#iterations", unit, "MsgRate[Mpps]", "% of ceiling"
    )
}

/// One row.
pub fn row(r: &SizeResult, gbits: bool) -> String {
    let bw = if gbits { r.gbits } else { r.bw_gbps };
    let pct = r
        .pct_of_ceiling
        .map(|p| format!("{p:.1}%"))
        .unwrap_or_else(|| "-".to_string());
    format!(
        " {:<10} {:<13} {:<18.6} {:<15.6} {}",
        r.size, r.iterations, bw, r.msg_rate_mpps, pct
    )
}

/// The column titles of a latency test.
pub fn lat_columns() -> String {
    format!(
        " {:<10} {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "#bytes",
        "#iterations",
        "min[us]",
        "p50[us]",
        "p90[us]",
        "p99[us]",
        "p99.9[us]",
        "max[us]",
        "mean[us]",
        "stdev[us]"
    )
}

/// One row of a latency test (microseconds with three decimals: no truncation to whole us).
pub fn lat_row(r: &SizeResult) -> String {
    match &r.lat_us {
        Some(l) => format!(
            " {:<10} {:<12} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            r.size, r.iterations, l.min, l.p50, l.p90, l.p99, l.p999, l.max, l.mean, l.stdev
        ),
        None => format!(" {:<10} {:<12} (no latency recorded)", r.size, r.iterations),
    }
}

/// One direction of a bidirectional row, indented under it.
pub fn direction_row(label: &str, d: &crate::report::DirectionFigures, gbits: bool) -> String {
    let bw = if gbits { d.bw_gbps * 8.0 } else { d.bw_gbps };
    format!("   {label:<21} {bw:<18.6} {:<15.6}", d.msg_rate_mpps)
}

/// The closing rule.
pub fn footer() -> &'static str {
    RULE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_the_unit_asked_for() {
        let r = SizeResult::from_window(65536, 5000, 1.0).unwrap();
        assert!(columns(false).contains("GB/s"));
        assert!(columns(true).contains("Gb/s"));
        assert!(row(&r, false).contains("0.327680"), "{}", row(&r, false));
        assert!(row(&r, true).contains("2.621440"), "{}", row(&r, true));
    }

    #[test]
    fn latency_rows_keep_sub_microsecond_digits() {
        let mut r = SizeResult::from_window(2, 1000, 0.01).unwrap();
        r.lat_us = Some(crate::report::LatencyStats {
            min: 1.234,
            p50: 2.5,
            p90: 3.0,
            p99: 4.125,
            p999: 5.0,
            p9999: 6.0,
            max: 7.0,
            mean: 2.75,
            stdev: 0.5,
        });
        let row = lat_row(&r);
        assert!(row.contains("1.234") && row.contains("4.125"), "{row}");
        assert!(lat_columns().contains("p99[us]"));
    }

    #[test]
    fn the_header_shows_every_field() {
        let h = Header {
            title: "RDMA_Write BW Test".to_string(),
            role: "client",
            fields: vec![
                ("Device", "rxe1".to_string()),
                ("GID index", "1".to_string()),
            ],
        };
        let text = header(&h);
        assert!(text.contains("RDMA_Write BW Test (client)"));
        assert!(text.contains("Device") && text.contains("rxe1") && text.contains("GID index"));
    }
}
