//! `--limit-bw` and `--limit-lat-p99`: a run that completes but falls below a threshold the
//! user set exits with code 3 and says which size missed and by how much ("missed the limit:
//! size 2: p99 165.503 us is above --limit-lat-p99 0.5").

use crate::report::SizeResult;

/// Some size missed a limit; the message lists each miss.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("missed the limit: {}", .0.join("; "))]
pub struct BelowLimit(pub Vec<String>);

/// Checks every size against the limits that were given.
pub fn check(
    results: &[SizeResult],
    limit_bw: Option<f64>,
    limit_p99: Option<f64>,
) -> Result<(), BelowLimit> {
    let mut misses = Vec::new();
    for r in results {
        if let Some(limit) = limit_bw {
            if r.bw_gbps < limit {
                misses.push(format!(
                    "size {}: {:.3} GB/s is below --limit-bw {limit}",
                    r.size, r.bw_gbps
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
        assert!(check(&rs, Some(4.0), None).is_ok());
        let err = check(&rs, Some(10.0), None).unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(
            err.to_string(),
            "missed the limit: size 4096: 4.096 GB/s is below --limit-bw 10"
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
        assert!(check(std::slice::from_ref(&r), None, Some(10.0)).is_ok());
        let err = check(&[r], None, Some(5.0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missed the limit: size 2: p99 9.500 us is above --limit-lat-p99 5"
        );
    }
}
