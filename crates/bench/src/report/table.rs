//! The terminal output: a perftest-like header and one row per size.

use std::fmt::Write as _;

use super::SizeResult;

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
