//! The collective's figures from the ring's links, as nccl-tests defines them. A ring
//! all-reduce of S bytes over n ranks moves S/n bytes per step over every link at once, for
//! 2(n-1) steps (reduce-scatter, then all-gather); each step ends when its slowest link has
//! delivered, so every rank sends for S/n / its link's rate and waits the rest of the step
//! for its predecessor. Its time is 2(n-1) x S/n / the slowest rate, algbw S / time, and busbw
//! algbw x 2(n-1)/n: the slowest link's rate, what a healthy ring's links all run at.

use super::record::{CollectiveRecord, RankShare};
use super::split::Link;

/// The all-reduce size the times are given for: 1 GiB, where a ring's per-step latency is a
/// small part of each step (the rates come from links loaded for seconds).
pub(crate) const SIZE: u64 = 1 << 30;

/// The figures of the ring whose links (rank i into the next, in ring order) measured
/// `links`; `expected` (GB/s) sets `pct_of_expected`.
pub(crate) fn collective(links: &[Link], expected: Option<f64>) -> CollectiveRecord {
    let n = links.len() as u32;
    let steps = 2.0 * (f64::from(n) - 1.0);
    let chunk = SIZE as f64 / f64::from(n.max(1)) / 1e9;
    let busbw = links
        .iter()
        .map(|l| l.gbps)
        .try_fold(f64::INFINITY, |m, g| g.map(|g| m.min(g)))
        .filter(|b| b.is_finite() && *b > 0.0);
    let seconds = busbw.map(|b| steps * chunk / b);
    let per_rank = links
        .iter()
        .map(|l| {
            let send = l.gbps.filter(|g| *g > 0.0).map(|g| steps * chunk / g);
            RankShare {
                rank: l.from,
                next: l.to,
                link_gbps: l.gbps,
                send_seconds: send,
                wait_seconds: seconds.zip(send).map(|(t, s)| (t - s).max(0.0)),
            }
        })
        .collect();
    CollectiveRecord {
        ranks: n,
        size_bytes: SIZE,
        seconds,
        // size / seconds, which is busbw x n / 2(n-1).
        algbw_gbps: busbw.map(|b| b * f64::from(n) / steps),
        busbw_gbps: busbw,
        pct_of_expected: busbw.zip(expected).map(|(b, e)| 100.0 * b / e),
        per_rank,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(from: u32, to: u32, gbps: Option<f64>) -> Link {
        Link { from, to, gbps }
    }

    #[test]
    fn busbw_is_the_slowest_link_and_algbw_its_share_of_the_ring() {
        let links = [
            link(0, 1, Some(12.0)),
            link(1, 2, Some(12.0)),
            link(2, 3, Some(3.0)),
            link(3, 0, Some(12.0)),
        ];
        let c = collective(&links, Some(12.0));
        let busbw = c.busbw_gbps.unwrap();
        assert!((busbw - 3.0).abs() < 1e-9, "{c:?}");
        // algbw = busbw x n / 2(n-1) = 3 x 4/6.
        assert!((c.algbw_gbps.unwrap() - 2.0).abs() < 1e-9, "{c:?}");
        assert!((c.pct_of_expected.unwrap() - 25.0).abs() < 1e-9);
        // 6 steps of 1 GiB / 4 at 3 GB/s.
        let t = 6.0 * (SIZE as f64 / 4.0 / 1e9) / 3.0;
        assert!((c.seconds.unwrap() - t).abs() < 1e-9);
        // Rank 2 sends all the time; the others a quarter of it and wait the rest.
        let r2 = &c.per_rank[2];
        assert_eq!((r2.rank, r2.next), (2, 3));
        assert!((r2.send_seconds.unwrap() - t).abs() < 1e-9);
        assert!(r2.wait_seconds.unwrap().abs() < 1e-9);
        let r0 = &c.per_rank[0];
        assert!((r0.send_seconds.unwrap() - t / 4.0).abs() < 1e-9);
        assert!((r0.wait_seconds.unwrap() - 0.75 * t).abs() < 1e-9);
    }

    #[test]
    fn a_failed_link_leaves_the_collective_without_figures() {
        let c = collective(&[link(0, 1, Some(5.0)), link(1, 0, None)], None);
        assert_eq!(
            (c.busbw_gbps, c.seconds, c.pct_of_expected),
            (None, None, None)
        );
        assert!(c.per_rank[0].send_seconds.is_some());
        assert_eq!(c.per_rank[1].send_seconds, None);
    }
}
