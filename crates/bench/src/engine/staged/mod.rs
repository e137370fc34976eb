//! `--mem cuda-staged` (GPUDirect RDMA off, done honestly): the payload lives in GPU memory and
//! moves through pinned host bounce buffers inside the measured loop, as a well-written
//! application without GPUDirect RDMA would move it.
//!
//! - **Source** (this side WRITEs or SENDs): copy GPU -> bounce buffer (device-to-host), then
//!   post the operations from the bounce buffer.
//! - **Sink** (this side READs): READ into a bounce buffer, then copy it host -> GPU.
//! - **Receiver** (this side receives SENDs): post receives into a bounce buffer, then copy
//!   what landed host -> GPU.
//! - **WRITE target** (a staged write-bw server): the client WRITEs chunk `n` into the server's
//!   bounce buffer `n mod K`, the chunk's last WRITE carrying `n` as immediate data (so the
//!   server gets a completion); the server copies the chunk to the GPU and SENDs a zero-byte
//!   credit; the client WRITEs into a buffer only while it holds its credit.
//! - **READ source** (a staged read-bw server): the server copies chunk `n` out of the GPU into
//!   its buffer `n mod K` and SENDs a zero-byte "ready"; the client READs it and SENDs a
//!   credit, which frees the buffer.
//!
//! Both ends of write-bw and read-bw staged need the same bounce buffers (they are addressed
//! by number), which each side tells the other with its endpoints; a staged server also needs
//! RC and a message count, so that no receive is left waiting for a notice that never comes.
//! Each QP has its own pipeline (`accel::staging`'s scheduler) over its own K bounce buffers;
//! the copies of all QPs share one copy queue, each bounce buffer has a marker in it
//! (`pipeline.rs`).
//! Small messages are batched, as many as fit one bounce buffer per copy; a message larger
//! than a bounce buffer is split into bounce-buffer-sized operations at the matching offsets
//! (a SEND is never split: the peer posts receives of the message size). The measured window
//! includes the copies, because the application pays for them: a client staged against a
//! staged server waits for the server's last notice. Latency tests copy each message out of
//! and into the GPU inside the round trip (`latency.rs`).

mod latency;
mod pipeline;

pub(crate) use latency::{copy_in, copy_out};
pub(crate) use pipeline::measure_staged;

use std::fmt;

use accel::staging::{Chunk, StagingConfig, StagingPlan};
use anyhow::{bail, Context, Result};

use super::buffer::Footprint;
use super::Connected;
use crate::plan::{Connection, Mode, PlanError, Role, TestPlan, Verb};

/// The staged side's own resources: pinned bounce buffers (the registered region), the copy
/// stream and one event per bounce buffer.
///
/// Release order: dropping it first waits for every queued copy (`Drop`), then destroys the
/// copy queue, and only then lets go of the memory the copies used (the bounce buffers and its
/// guard of the GPU payload): fields drop in declaration order, so keep `copies` above `pinned`
/// and `_payload`.
#[derive(Debug)]
pub(crate) struct Staging {
    /// Chunk size and bounce buffers per QP.
    pub config: StagingConfig,
    /// Bytes of one bounce buffer (the chunk, or a whole SEND message when larger).
    pub buffer_len: usize,
    /// Bytes of pinned memory per QP.
    pub stride: u64,
    /// The copies; QP q's buffer b has marker `q * depth + b`.
    copies: Box<dyn accel::CopyQueue>,
    /// The bounce buffers: QP q's buffer b starts at `q * stride + b * buffer_len`.
    pub pinned: accel::PinnedBuffer,
    /// Keeps the GPU payload the copies read and write allocated until they are done.
    _payload: accel::AllocationGuard,
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Copies still queued (a loop that failed half-way) would read or write memory about to
        // be freed; nothing can be reported from here, and a failure means the context is gone.
        let _ = self.copies.synchronize();
    }
}

impl Staging {
    /// Pinned memory and events for the footprint's bounce buffers (`config.depth` per QP),
    /// the region the NIC sees laid out in strides of at least a slot; `payload` is the GPU
    /// memory the copies move to and from.
    pub(crate) fn new(
        gpu: &dyn accel::Gpu,
        config: StagingConfig,
        footprint: &Footprint,
        payload: &dyn accel::GpuBuffer,
    ) -> Result<Staging> {
        let Some(bounce) = footprint.bounce else {
            bail!("internal error: a staged side's footprint has no bounce buffers");
        };
        let total = usize::try_from(footprint.bounce_bytes())
            .context("bounce buffers too large for this machine")?;
        let pinned = gpu.pinned(total)?;
        let copies = gpu.copy_queue(footprint.qps as usize * config.depth)?;
        Ok(Staging {
            config,
            buffer_len: bounce.buffer_len,
            stride: bounce.stride,
            copies,
            pinned,
            _payload: payload.guard(),
        })
    }

    /// Waits for every queued copy (after a failed loop, before buffers are reused or freed).
    pub(crate) fn quiesce(&self) -> Result<()> {
        Ok(self.copies.synchronize()?)
    }

    /// The copy marker of QP `q`'s bounce buffer `buffer`.
    fn marker(&self, q: usize, buffer: usize) -> usize {
        q * self.config.depth + buffer
    }
}

/// A staged side's bounce buffers as its peer sees them (sent with the endpoints): a staged
/// WRITE source WRITEs chunk `seq` into the target's buffer `seq % depth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BounceLayout {
    /// Bytes per bounce buffer.
    pub buffer_len: u64,
    /// Bounce buffers per QP.
    pub depth: u32,
}

impl fmt::Display for BounceLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe_bounce(u64::from(self.depth), self.buffer_len))
    }
}

/// "4 x 1 MiB pinned bounce buffers": `depth` buffers of `buffer_len` bytes (the header's
/// staging line, from the record's `gpu.staging`).
pub(crate) fn describe_bounce(depth: u64, buffer_len: u64) -> String {
    format!(
        "{depth} x {} pinned bounce buffers",
        crate::units::format_size(buffer_len)
    )
}

impl Staging {
    /// The layout the peer is told.
    pub(crate) fn layout(&self) -> BounceLayout {
        BounceLayout {
            buffer_len: self.buffer_len as u64,
            depth: self.config.depth as u32,
        }
    }
}

/// The bounce buffers a side whose memory is `mem` would tell its peer for `plan` (`None`:
/// not staged), worked out without opening anything.
pub(crate) fn planned_layout(
    plan: &TestPlan,
    mem: &crate::memory::MemMode,
    staging: StagingConfig,
) -> Option<BounceLayout> {
    let bounce = Footprint::new(plan, mem, staging).ok()?.bounce?;
    Some(BounceLayout {
        buffer_len: bounce.buffer_len as u64,
        depth: u32::try_from(staging.depth).ok()?,
    })
}

/// Checks that a staged write-bw or read-bw server has a staged client with the same bounce
/// buffers (the client WRITEs into, or READs from, the server's buffers by number). `mine` and `peer` are each side's
/// layout (`None`: not staged).
pub(crate) fn check_peer(
    plan: &TestPlan,
    role: Role,
    mine: Option<BounceLayout>,
    peer: Option<BounceLayout>,
) -> Result<(), PlanError> {
    let verb = plan.test.verb;
    if !matches!(verb, Verb::Write | Verb::Read) || plan.test.mode != Mode::Bw || plan.bidirectional
    {
        return Ok(());
    }
    let (source, target) = if role == Role::Server {
        (peer, mine)
    } else {
        (mine, peer)
    };
    let Some(target) = target else {
        return Ok(());
    };
    if source == Some(target) {
        return Ok(());
    }
    let source = source.map_or("host or GPU memory, not staged".to_string(), |s| {
        s.to_string()
    });
    Err(PlanError::Value(format!(
        "the server stages what is {} (a staged --mem, {target}), which needs a staged \
         client with the same bounce buffers: the client has {source}; give the client a \
         staged --mem (cuda-staged, rocm-staged) with --staging-chunk {} --staging-depth {}, \
         or the server --mem host",
        if verb == Verb::Write {
            "written to it"
        } else {
            "read from it"
        },
        target.buffer_len,
        target.depth
    )))
}

/// Why `plan` cannot run with a staged buffer on this side (server or client), if it cannot.
pub(crate) fn refusal(plan: &TestPlan, role: Role) -> Option<String> {
    let test = plan.test;
    if plan.bidirectional {
        return Some(
            "-b is not staged: with both sides sending, each side's buffer is also the peer's \
             passive target, which cannot be staged; run one direction"
                .to_string(),
        );
    }
    match (test.verb, test.mode, role == Role::Server) {
        (Verb::Atomic, _, _) => Some(format!(
            "{test} is not staged: an atomic acts on 8 bytes in place at the target; there is no \
             payload to move through host memory"
        )),
        (Verb::Read, Mode::Lat, true) => Some(format!(
            "the server of {test} is a passive source: the client's READs take its data \
             without it knowing, so it has no moment to refill a bounce buffer. Stage the client \
             and give the server --mem host or a GPU mode reached directly (with --loopback: \
             --mem host --peer-mem cuda-staged or rocm-staged)"
        )),
        // A ping-pong: one message at a time each way, copied before it is sent and after it
        // arrived, inside the timed round trip.
        (_, Mode::Lat, _) => None,
        (_, _, true) if plan.connection != Connection::Rc => Some(format!(
            "a staged server needs RC: over {} a lost message would leave a bounce buffer \
             waiting for data or a notice that never comes",
            plan.connection.name()
        )),
        (_, _, true) if plan.duration.is_some() => Some(
            "a staged server needs -n (a message count), not -D: it keeps a receive posted for \
             each message or notice it waits for, and a timed run would leave receives posted \
             for ones that never come"
                .to_string(),
        ),
        _ => None,
    }
}

/// How one size's messages map onto chunks and RDMA operations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    plan: StagingPlan,
    size: u64,
    /// Messages per chunk when whole messages are batched; 0 when a message spans chunks.
    batch: u64,
    /// Messages per QP (`u64::MAX`: until stopped).
    messages: u64,
}

/// One chunk's share of the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    /// RDMA operations.
    pub ops: u64,
    /// Bytes per operation.
    pub op_len: u64,
    /// Offset in the message (GPU half and remote half) where the chunk starts.
    pub offset: u64,
    /// Bytes copied (all the operations' bytes, back to back).
    pub copy_len: u64,
    /// Messages this chunk completes.
    pub messages: u64,
}

impl Layout {
    /// The layout of `messages` messages of `size` bytes through bounce buffers of
    /// `buffer_len` bytes (`depth` of them).
    pub(crate) fn new(
        config: StagingConfig,
        buffer_len: usize,
        size: u64,
        messages: u64,
    ) -> Result<Layout> {
        let config = StagingConfig {
            chunk: buffer_len,
            depth: config.depth,
        };
        let size_usize = usize::try_from(size).context("message size too large")?;
        if size_usize <= buffer_len {
            let batch = (buffer_len / size_usize) as u64;
            let chunks = messages.div_ceil(batch);
            let plan = StagingPlan::new(config, batch as usize * size_usize, chunks)?;
            return Ok(Layout {
                plan,
                size,
                batch,
                messages,
            });
        }
        Ok(Layout {
            plan: StagingPlan::new(config, size_usize, messages)?,
            size,
            batch: 0,
            messages,
        })
    }

    /// The scheduler's plan.
    pub(crate) fn plan(&self) -> StagingPlan {
        self.plan
    }

    /// What chunk `c` carries.
    pub(crate) fn work(&self, c: &Chunk) -> Work {
        if self.batch == 0 {
            return Work {
                ops: 1,
                op_len: c.len as u64,
                offset: c.offset as u64,
                copy_len: c.len as u64,
                messages: u64::from(c.last_in_message),
            };
        }
        let first = c.message.saturating_mul(self.batch);
        let ops = self.batch.min(self.messages - first);
        Work {
            ops,
            op_len: self.size,
            offset: 0,
            copy_len: ops * self.size,
            messages: ops,
        }
    }

    /// Bytes at the start of the GPU half that a run writes (source) or fills (sink): a batch
    /// of messages back to back, or one whole message.
    pub(crate) fn span(&self) -> u64 {
        if self.batch == 0 {
            self.size
        } else {
            self.batch.min(self.messages) * self.size
        }
    }
}

/// The layout `side` uses for messages of `size` in `plan` (for `--validate`); `None` when
/// messages are not batched (host or GPU memory, or a staged latency test).
pub(crate) fn layout_for(side: &Connected, plan: &TestPlan, size: u64) -> Result<Option<Layout>> {
    let Some(s) = &side.staging else {
        return Ok(None);
    };
    if plan.test.mode == Mode::Lat {
        // A ping-pong moves one message at a time.
        return Ok(None);
    }
    let messages = match plan.duration {
        Some(_) => u64::MAX,
        None => plan.iters,
    };
    Ok(Some(Layout::new(s.config, s.buffer_len, size, messages)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanRequest, TestKind};

    const K: usize = 4;

    fn config(chunk: usize) -> StagingConfig {
        StagingConfig::new(chunk, K).unwrap()
    }

    fn all_work(layout: &Layout) -> Vec<Work> {
        let plan = layout.plan();
        (0..plan.total_chunks())
            .map(|seq| layout.work(&plan.chunk(seq).unwrap()))
            .collect()
    }

    #[test]
    fn small_messages_are_batched_into_one_copy_per_bounce_buffer() {
        // 64 B messages through 4 KiB buffers: 64 per copy; 150 messages = 64 + 64 + 22.
        let layout = Layout::new(config(4096), 4096, 64, 150).unwrap();
        let work = all_work(&layout);
        assert_eq!(work.len(), 3);
        assert_eq!(
            work[0],
            Work {
                ops: 64,
                op_len: 64,
                offset: 0,
                copy_len: 4096,
                messages: 64
            }
        );
        assert_eq!((work[2].ops, work[2].copy_len), (22, 22 * 64));
        assert_eq!(work.iter().map(|w| w.messages).sum::<u64>(), 150);
        assert_eq!(layout.span(), 4096);
        // Fewer messages than a batch: the span is what was actually moved.
        assert_eq!(Layout::new(config(4096), 4096, 64, 10).unwrap().span(), 640);
    }

    #[test]
    fn a_size_that_does_not_divide_the_buffer_leaves_its_tail_unused() {
        let layout = Layout::new(config(4096), 4096, 3000, 5).unwrap();
        let work = all_work(&layout);
        assert_eq!(work.len(), 5, "one 3000 B message per 4 KiB buffer");
        assert!(work.iter().all(|w| w.ops == 1 && w.copy_len == 3000));
    }

    #[test]
    fn large_messages_are_split_at_matching_offsets() {
        // 10 KiB messages through 4 KiB buffers: 4096 + 4096 + 2048 per message.
        let layout = Layout::new(config(4096), 4096, 10 << 10, 2).unwrap();
        let work = all_work(&layout);
        assert_eq!(work.len(), 6);
        let first: Vec<_> = work[..3]
            .iter()
            .map(|w| (w.offset, w.op_len, w.messages))
            .collect();
        assert_eq!(first, vec![(0, 4096, 0), (4096, 4096, 0), (8192, 2048, 1)]);
        assert_eq!(work.iter().map(|w| w.messages).sum::<u64>(), 2);
        assert_eq!(layout.span(), 10 << 10);
    }

    #[test]
    fn a_send_is_never_split() {
        let cfg = config(4096);
        assert_eq!(
            crate::engine::buffer::bounce_len(cfg, Verb::Send, 10 << 10).unwrap(),
            12 << 10
        );
        assert_eq!(
            crate::engine::buffer::bounce_len(cfg, Verb::Write, 10 << 10).unwrap(),
            4096
        );
        assert_eq!(
            crate::engine::buffer::bounce_len(cfg, Verb::Send, 64).unwrap(),
            4096
        );
        let layout = Layout::new(cfg, 12 << 10, 10 << 10, 3).unwrap();
        assert!(all_work(&layout)
            .iter()
            .all(|w| w.ops == 1 && w.messages == 1));
    }

    #[test]
    fn a_staged_server_needs_a_staged_client_with_its_bounce_buffers() {
        let p = plan("write-bw", false);
        let four = Some(BounceLayout {
            buffer_len: 1 << 20,
            depth: 4,
        });
        let two = Some(BounceLayout {
            buffer_len: 1 << 20,
            depth: 2,
        });
        check_peer(&p, Role::Server, four, four).unwrap();
        check_peer(&p, Role::Client, four, four).unwrap();
        check_peer(&p, Role::Server, None, four).unwrap();
        check_peer(&p, Role::Server, None, None).unwrap();
        let e = check_peer(&p, Role::Server, four, two)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 x 1 MiB") && e.contains("--staging-depth 4"),
            "{e}"
        );
        let e = check_peer(&p, Role::Client, None, four)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not staged"), "{e}");
        let e = check_peer(&plan("read-bw", false), Role::Server, four, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("read from it"), "{e}");
        // A SEND lands wherever the receiver posted its receive.
        check_peer(&plan("send-bw", false), Role::Server, four, None).unwrap();
    }

    #[test]
    fn unbounded_runs_batch_full_chunks() {
        let layout = Layout::new(config(4096), 4096, 64, u64::MAX).unwrap();
        let c = layout.plan().chunk(1000).unwrap();
        assert_eq!(layout.work(&c).ops, 64);
    }

    fn plan(test: &str, bidirectional: bool) -> TestPlan {
        let (verb, mode) = match test.split_once('-').unwrap() {
            (v, "bw") => (v, Mode::Bw),
            (v, _) => (v, Mode::Lat),
        };
        let verb = match verb {
            "write" => Verb::Write,
            "read" => Verb::Read,
            "send" => Verb::Send,
            _ => Verb::Atomic,
        };
        PlanRequest {
            bidirectional,
            ..PlanRequest::default()
        }
        .resolve(TestKind::new(verb, mode))
        .unwrap()
    }

    #[test]
    fn what_cannot_be_staged_is_refused_with_the_reason() {
        for test in ["write-bw", "send-bw", "read-bw"] {
            assert_eq!(
                refusal(&plan(test, false), Role::Client),
                None,
                "{test} client"
            );
        }
        assert_eq!(
            refusal(&plan("write-bw", false), Role::Server),
            None,
            "a WRITE target"
        );
        assert_eq!(
            refusal(&plan("read-bw", false), Role::Server),
            None,
            "a READ source"
        );
        assert_eq!(
            refusal(&plan("send-bw", false), Role::Server),
            None,
            "a SEND receiver"
        );
        assert!(refusal(&plan("atomic-bw", false), Role::Client).is_some());
        assert!(refusal(&plan("write-bw", true), Role::Client)
            .unwrap()
            .contains("-b"));
        for lat in ["write-lat", "send-lat", "read-lat"] {
            assert_eq!(
                refusal(&plan(lat, false), Role::Client),
                None,
                "{lat} client"
            );
        }
        assert_eq!(
            refusal(&plan("send-lat", false), Role::Server),
            None,
            "send-lat server"
        );
        assert!(refusal(&plan("read-lat", false), Role::Server)
            .unwrap()
            .contains("passive source"));
        assert!(refusal(&plan("atomic-lat", false), Role::Client).is_some());
    }
}
