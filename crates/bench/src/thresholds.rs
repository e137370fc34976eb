//! `--limit-bw` and `--limit-lat-p99`: a run that completes but falls below a threshold the
//! user set exits with code 3 and says which size missed and by how much ("missed the limit:
//! size 2: p99 165.503 us is above --limit-lat-p99 0.5"). A bare `--limit-bw` is in the unit
//! of the run's table (GB/s, or Gb/s with the client's `--report-gbits`), as perftest's `-w`
//! is in its report's unit; the message says both figures in that unit.

use crate::report::SizeResult;
use crate::units::{bandwidth_unit, RateArg, RateUnit};

/// Some size missed a limit; the message lists each miss.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("missed the limit: {}", .0.join("; "))]
pub struct BelowLimit(pub Vec<String>);

/// Checks every size against the limits that were given; `gbits`: the table was in Gb/s.
pub fn check(
    results: &[SizeResult],
    limit_bw: Option<RateArg>,
    limit_p99: Option<f64>,
    gbits: bool,
) -> Result<(), BelowLimit> {
    let (unit, scale) = bandwidth_unit(gbits);
    let bare = if gbits {
        RateUnit::Gbits
    } else {
        RateUnit::Gbytes
    };
    let mut misses = Vec::new();
    for r in results {
        if let Some(limit) = limit_bw.map(|l| l.gbytes(bare)) {
            if r.bw_gbps < limit {
                misses.push(format!(
                    "size {}: {:.3} {unit} is below --limit-bw {} {unit}",
                    r.size,
                    r.bw_gbps * scale,
                    limit * scale
                ));
            }
        }
        if let (Some(limit), Some(lat)) = (limit_p99, r.lat_us) {
            if lat.p99 > limit {
                misses.push(format!(
                    "size {}: p99 {:.3} us is above --limit-lat-p99 {limit}",
                    r.size, lat.p99
                ));
            }
        }
    }
    if misses.is_empty() {
        Ok(())
    } else {
        Err(BelowLimit(misses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::LatencyStats;

    #[test]
    fn a_size_below_the_bandwidth_limit_is_named() {
        let rs = vec![
            SizeResult::from_window(4096, 1_000_000, 1.0).unwrap(), // 4.096 GB/s
            SizeResult::from_window(65536, 1_000_000, 1.0).unwrap(),
        ];
        assert!(check(&rs, Some(RateArg::Bare(4.0)), None, false).is_ok());
        let err = check(&rs, Some(RateArg::Bare(10.0)), None, false).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(
            err.to_string(),
            "missed the limit: size 4096: 4.096 GB/s is below --limit-bw 10 GB/s"
        );
    }

    #[test]
    fn a_bare_bandwidth_limit_is_in_the_tables_unit() {
        let rs = vec![SizeResult::from_window(4096, 1_000_000, 1.0).unwrap()]; // 32.768 Gb/s
                                                                               // With --report-gbits a bare 30 is 30 Gb/s (3.75 GB/s), which 4.096 GB/s passes.
        assert!(check(&rs, Some(RateArg::Bare(30.0)), None, true).is_ok());
        let err = check(&rs, Some(RateArg::Bare(40.0)), None, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missed the limit: size 4096: 32.768 Gb/s is below --limit-bw 40 Gb/s"
        );
        // A limit with its unit means that unit whatever the table's.
        let given = Some(RateArg::parse("40Gb").unwrap());
        let err = check(&rs, given, None, false).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("4.096 GB/s is below --limit-bw 5 GB/s"),
            "{err}"
        );
    }

    #[test]
    fn a_p99_above_the_latency_limit_is_named() {
        let mut r = SizeResult::from_window(2, 1000, 0.01).unwrap();
        r.lat_us = Some(LatencyStats {
            min: 1.0,
            p50: 2.0,
            p90: 3.0,
            p99: 9.5,
            p999: 10.0,
            p9999: 11.0,
            max: 12.0,
            mean: 2.5,
            stdev: 1.0,
        });
        assert!(check(std::slice::from_ref(&r), None, Some(10.0), false).is_ok());
        let err = check(&[r], None, Some(5.0), false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missed the limit: size 2: p99 9.500 us is above --limit-lat-p99 5"
        );
    }
}
