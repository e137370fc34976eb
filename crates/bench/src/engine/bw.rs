//! The bandwidth loop: keep `tx-depth` operations in flight on every QP, ring one doorbell per
//! post list, request a completion every `cq-mod`-th operation, and time the window from the
//! first post to the last completion with a monotonic clock.
//!
//! Nothing in the loop allocates, locks or makes a system call besides the verbs' own: the
//! counters and the post list are set up before the clock starts.

use std::time::{Duration, Instant};

use anyhow::Result;
use verbs::{Completion, Op, SendRequest};

use super::Connected;

/// Completions taken per poll.
const POLL_BATCH: usize = 16;
/// Bits of a work request id that hold the operation count; the QP index sits above them.
const COUNT_BITS: u32 = 40;
/// How many empty polls pass between two looks at the clock for a stall.
const STALL_CHECK_EVERY: u32 = 1 << 12;

/// One measured window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Operations completed, all QPs together.
    pub ops: u64,
    /// First post to last completion.
    pub seconds: f64,
}

/// The shape of one loop: what each work request does, how many, how they are batched.
#[derive(Debug, Clone, Copy)]
pub struct LoopShape {
    /// Bytes per operation.
    pub size: u32,
    /// Operations per QP.
    pub iters: u64,
    /// Operations in flight per QP.
    pub tx_depth: u32,
    /// Work requests per doorbell.
    pub post_list: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// Send the payload inline.
    pub inline: bool,
    /// Fail when no completion arrives for this long.
    pub stall_timeout: Duration,
}

/// Whether operation number `n` (1-based, per QP) asks for a completion.
#[inline]
fn is_signaled(n: u64, cq_mod: u32, iters: u64) -> bool {
    n % u64::from(cq_mod) == 0 || n == iters
}

/// Counts per QP: posted and known completed (a completion for operation n completes every
/// operation up to n on that QP).
#[derive(Debug)]
struct Progress {
    posted: Vec<u64>,
    completed: Vec<u64>,
    done: u64,
}

impl Progress {
    fn new(qps: usize) -> Self {
        Progress {
            posted: vec![0; qps],
            completed: vec![0; qps],
            done: 0,
        }
    }

    /// How many operations QP `q` may post now: bounded by the depth, the post list and what
    /// is left to do.
    #[inline]
    fn room(&self, q: usize, shape: &LoopShape) -> u64 {
        let in_flight = self.posted[q] - self.completed[q];
        let free = u64::from(shape.tx_depth).saturating_sub(in_flight);
        let left = shape.iters - self.posted[q];
        let batch = u64::from(shape.post_list).min(left);
        if free >= batch {
            batch
        } else {
            0
        }
    }

    /// Accounts one completion whose id carries (QP, count).
    #[inline]
    fn complete(&mut self, wr_id: u64) {
        let q = (wr_id >> COUNT_BITS) as usize;
        let n = wr_id & ((1 << COUNT_BITS) - 1);
        if let Some(c) = self.completed.get_mut(q) {
            if n > *c {
                self.done += n - *c;
                *c = n;
            }
        }
    }
}

/// Runs RDMA WRITEs from each QP's local slot to the peer's slot and returns the window.
pub fn measure_writes(side: &mut Connected, shape: &LoopShape) -> Result<Window> {
    let qps = side.qps.len();
    let mut progress = Progress::new(qps);
    let mut batch = vec![
        SendRequest {
            wr_id: 0,
            op: Op::Send,
            local_offset: 0,
            len: shape.size,
            signaled: false,
        };
        shape.post_list as usize
    ];
    let mut wcs = [Completion::default(); POLL_BATCH];
    let total = shape.iters * qps as u64;
    let mut idle_polls = 0u32;
    let mut last_progress = Instant::now();

    let start = Instant::now();
    let mut end = start;
    while progress.done < total {
        for q in 0..qps {
            post_writes(side, q, shape, &mut progress, &mut batch)?;
        }
        let n = side.cq.poll(&mut wcs)?;
        if n == 0 {
            idle_polls += 1;
            if idle_polls == STALL_CHECK_EVERY {
                idle_polls = 0;
                if last_progress.elapsed() > shape.stall_timeout {
                    return Err(stalled(&progress, shape, total));
                }
            }
            continue;
        }
        for wc in &wcs[..n] {
            wc.check()?;
            progress.complete(wc.wr_id());
        }
        end = Instant::now();
        last_progress = end;
        idle_polls = 0;
    }
    Ok(Window {
        ops: progress.done,
        seconds: end.duration_since(start).as_secs_f64(),
    })
}

/// The error for a loop that saw no completion within the stall timeout.
#[cold]
fn stalled(progress: &Progress, shape: &LoopShape, total: u64) -> anyhow::Error {
    let in_flight: u64 = progress
        .posted
        .iter()
        .zip(&progress.completed)
        .map(|(p, c)| p - c)
        .sum();
    let bytes = in_flight * u64::from(shape.size);
    let secs = shape.stall_timeout.as_secs_f64();
    anyhow::anyhow!(
        "no completion for {secs:.1} s with {} of {total} operations done and {} in flight: the peer \
         may be dead, or the link slower than {:.1} MB/s; raise --timeout or lower --tx-depth",
        progress.done,
        crate::units::format_size(bytes),
        bytes as f64 / secs / 1e6
    )
}

/// Posts as many post lists on QP `q` as its depth allows.
#[inline]
fn post_writes(
    side: &mut Connected,
    q: usize,
    shape: &LoopShape,
    progress: &mut Progress,
    batch: &mut [SendRequest],
) -> Result<()> {
    let remote = side.remote[q];
    let local_offset = q as u64 * side.slot;
    loop {
        let count = progress.room(q, shape) as usize;
        if count == 0 {
            return Ok(());
        }
        let first = progress.posted[q];
        for (k, wr) in batch[..count].iter_mut().enumerate() {
            let n = first + k as u64 + 1;
            *wr = SendRequest {
                wr_id: ((q as u64) << COUNT_BITS) | n,
                op: Op::Write {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                },
                local_offset,
                len: shape.size,
                signaled: is_signaled(n, shape.cq_mod, shape.iters),
            };
        }
        side.qps[q].post_send(&side.mr, &batch[..count], shape.inline)?;
        progress.posted[q] += count as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(iters: u64, tx_depth: u32, post_list: u32, cq_mod: u32) -> LoopShape {
        LoopShape {
            size: 64,
            iters,
            tx_depth,
            post_list,
            cq_mod,
            inline: false,
            stall_timeout: Duration::from_secs(1),
        }
    }

    /// A model NIC: completes the oldest signaled request each step. The loop's accounting
    /// must finish every operation without ever exceeding the depth.
    fn simulate(s: LoopShape, qps: usize) -> u64 {
        let mut p = Progress::new(qps);
        let mut signaled_in_flight: Vec<std::collections::VecDeque<u64>> =
            vec![Default::default(); qps];
        let total = s.iters * qps as u64;
        let mut steps = 0;
        while p.done < total {
            steps += 1;
            assert!(steps < 1_000_000, "stalled at {} of {total}", p.done);
            for (q, queue) in signaled_in_flight.iter_mut().enumerate() {
                loop {
                    let count = p.room(q, &s);
                    if count == 0 {
                        break;
                    }
                    for k in 0..count {
                        let n = p.posted[q] + k + 1;
                        if is_signaled(n, s.cq_mod, s.iters) {
                            queue.push_back(n);
                        }
                    }
                    p.posted[q] += count;
                    assert!(p.posted[q] - p.completed[q] <= u64::from(s.tx_depth));
                }
                if let Some(n) = queue.pop_front() {
                    p.complete(((q as u64) << COUNT_BITS) | n);
                }
            }
        }
        p.done
    }

    #[test]
    fn every_operation_completes_for_valid_shapes() {
        assert_eq!(simulate(shape(5000, 128, 1, 100), 1), 5000);
        assert_eq!(simulate(shape(1000, 16, 4, 13), 4), 4000);
        assert_eq!(simulate(shape(7, 128, 16, 100), 2), 14);
        assert_eq!(simulate(shape(1, 1, 1, 1), 1), 1);
    }

    #[test]
    fn the_last_operation_is_always_signaled() {
        assert!(is_signaled(7, 100, 7));
        assert!(is_signaled(100, 100, 5000));
        assert!(!is_signaled(99, 100, 5000));
    }

    #[test]
    fn a_completion_counts_every_operation_before_it() {
        let mut p = Progress::new(2);
        p.complete((1 << COUNT_BITS) | 100);
        assert_eq!((p.completed[1], p.done), (100, 100));
        // an older id changes nothing
        p.complete((1 << COUNT_BITS) | 50);
        assert_eq!(p.done, 100);
    }
}
