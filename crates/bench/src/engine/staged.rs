//! `--mem cuda-staged` (GPUDirect RDMA off, done honestly): the payload lives in GPU memory and
//! moves through pinned host bounce buffers inside the measured loop, as a well-written
//! application without GPUDirect RDMA would move it.
//!
//! - **Source** (this side WRITEs or SENDs): copy GPU -> bounce buffer (device-to-host), then
//!   post the operations from the bounce buffer.
//! - **Sink** (this side READs): READ into a bounce buffer, then copy it host -> GPU.
//! - **Receiver** (this side receives SENDs): post receives into a bounce buffer, then copy
//!   what landed host -> GPU (RC and a message count only, so no receive is left waiting; the
//!   same holds for a WRITE target).
//!
//! Each QP has its own pipeline (`cuda::staging`'s scheduler) over its own K bounce buffers; the
//! copies of all QPs share one stream, each bounce buffer has an event. Small messages are
//! batched, as many as fit one bounce buffer per copy; a message larger than a bounce buffer
//! is split into bounce-buffer-sized operations at the matching remote offsets (a SEND is never
//! split: the peer posts receives of the message size, so each SEND has a bounce buffer of its
//! own). The measured window includes the copies, because the application pays for them.
//!
//! - **WRITE target** (the server of write-bw, when the client is staged with the same bounce
//!   buffers): the client WRITEs chunk `seq` into the server's bounce buffer `seq % K`, the
//!   chunk's last WRITE carrying `seq` as immediate data (so the server gets a completion);
//!   the server copies the chunk to the GPU and SENDs a zero-byte credit, and the client
//!   WRITEs into a buffer only while it holds a credit for it. The client's window runs to
//!   the last credit, i.e. until the data is in the server's GPU.
//!
//! A passive staged source (the server of read-bw) is refused: nothing tells it when its data
//! was read, so it has no moment to refill a bounce buffer.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cuda::staging::{Chunk, RecvPipeline, SendPipeline, StagingConfig, StagingPlan};
use verbs::{Completion, Op, SendRequest};

use super::bw::{is_signaled, LoopShape, Measured, Meter, PeerState, Stop};
use super::Connected;
use crate::memory::slot_len;
use crate::plan::{Connection, Mode, TestPlan, Verb};

/// Completions taken per poll.
const POLL_BATCH: usize = 16;
/// Bits of a work request id that hold the operation count; the QP index sits above them.
const COUNT_BITS: u32 = 40;
/// Empty polls between two looks at the clock.
const CLOCK_CHECK_EVERY: u32 = 1 << 10;

/// The staged side's own resources: pinned bounce buffers (the registered region), the copy
/// stream and one event per bounce buffer.
#[derive(Debug)]
pub struct Staging {
    /// Chunk size and bounce buffers per QP.
    pub config: StagingConfig,
    /// Bytes of one bounce buffer (the chunk, or a whole SEND message when larger).
    pub buffer_len: usize,
    /// The bounce buffers: QP q's buffer b starts at `q * stride + b * buffer_len`.
    pub pinned: cuda::PinnedBuffer,
    /// Bytes of pinned memory per QP.
    pub stride: u64,
    stream: cuda::Stream,
    /// QP q's buffer b has event `q * depth + b`.
    events: Vec<cuda::Event>,
}

impl Staging {
    /// Pinned memory and events for `qps` QPs, each with `config.depth` buffers, the region
    /// the NIC sees laid out in strides of at least `slot` bytes.
    pub fn new(
        gpu: &cuda::Device,
        config: StagingConfig,
        verb: Verb,
        max_size: u64,
        qps: u32,
        slot: u64,
    ) -> Result<Staging> {
        let buffer_len = bounce_len(config, verb, max_size)?;
        let stride = slot_len((buffer_len * config.depth) as u64).max(slot);
        let total = usize::try_from(stride * u64::from(qps))
            .context("bounce buffers too large for this machine")?;
        let pinned = cuda::PinnedBuffer::new(gpu, total)?;
        let stream = cuda::Stream::new(gpu)?;
        let events = (0..qps as usize * config.depth)
            .map(|_| cuda::Event::new(gpu))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Staging {
            config,
            buffer_len,
            pinned,
            stride,
            stream,
            events,
        })
    }

    /// Waits for every queued copy (after a failed loop, before buffers are reused or freed).
    pub fn quiesce(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
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
        write!(
            f,
            "{} x {} bounce buffers",
            self.depth,
            crate::units::format_size(self.buffer_len)
        )
    }
}

impl Staging {
    /// The layout the peer is told.
    pub fn layout(&self) -> BounceLayout {
        BounceLayout {
            buffer_len: self.buffer_len as u64,
            depth: self.config.depth as u32,
        }
    }
}

/// Checks that a staged WRITE target has a staged source with the same bounce buffers (the
/// source WRITEs into the target's buffers by number). `mine` and `peer` are each side's
/// layout (`None`: not staged).
pub fn check_peer(
    plan: &TestPlan,
    is_server: bool,
    mine: Option<BounceLayout>,
    peer: Option<BounceLayout>,
) -> Result<()> {
    if plan.test.verb != Verb::Write || plan.test.mode != Mode::Bw || plan.bidirectional {
        return Ok(());
    }
    let (source, target) = if is_server {
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
    bail!(
        "the server stages what it is written (--mem cuda-staged, {target}), which needs a \
         staged client with the same bounce buffers: the client has {source}; give the client \
         --mem cuda-staged --staging-chunk {} --staging-depth {}, or the server --mem host",
        target.buffer_len,
        target.depth
    )
}

/// Bytes of one bounce buffer for `verb` up to `max_size`: the chunk, or for SEND (never
/// split) the largest message rounded up to whole pages when that is larger.
pub(super) fn bounce_len(config: StagingConfig, verb: Verb, max_size: u64) -> Result<usize> {
    let whole = usize::try_from(slot_len(max_size)).context("message size too large")?;
    Ok(if verb == Verb::Send {
        config.chunk.max(whole)
    } else {
        config.chunk
    })
}

/// Why `plan` cannot run with a staged buffer on this side (server or client), if it cannot.
pub fn refusal(plan: &TestPlan, is_server: bool) -> Option<String> {
    let test = plan.test;
    if plan.bidirectional {
        return Some(
            "-b is not staged: with both sides sending, each side's buffer is also the peer's \
             passive target, which cannot be staged; run one direction"
                .to_string(),
        );
    }
    match (test.verb, test.mode, is_server) {
        (Verb::Atomic, _, _) => Some(format!(
            "{test} is not staged: an atomic acts on 8 bytes in place at the target; there is no \
             payload to move through host memory"
        )),
        (Verb::Read, _, true) => Some(format!(
            "the server of {test} is a passive source: the client's READs take its data \
             without it knowing, so it has no moment to refill a bounce buffer. Stage the client \
             (the side that moves the data) and give the server --mem host or cuda (with \
             --loopback: --mem host --peer-mem cuda-staged)"
        )),
        // A ping-pong: one message at a time each way, copied before it is sent and after it
        // arrived, inside the timed round trip.
        (_, Mode::Lat, _) => None,
        (_, _, true) if plan.connection != Connection::Rc => Some(format!(
            "a staged receiver needs RC: over {} a lost message would leave its bounce buffer \
             waiting for data that never comes",
            plan.connection.name()
        )),
        (_, _, true) if plan.duration.is_some() => Some(
            "a staged receiver needs -n (a message count), not -D: it keeps a receive posted \
             for each bounce buffer it hands out, and a timed run would leave receives posted \
             for messages that never come"
                .to_string(),
        ),
        _ => None,
    }
}

/// Latency tests, staged: copies `len` bytes of the GPU's send half to the bounce buffer the
/// message is posted from (the ping-pong uses the slot layout in pinned memory, QP 0), and
/// waits until it is there.
pub fn copy_out(side: &Connected, len: u64, stall: Duration) -> Result<()> {
    copy_and_wait(side, len, stall, true)
}

/// Latency tests, staged: copies the `len` bytes that landed in the bounce buffer to the GPU's
/// receive half, and waits until they are there.
pub fn copy_in(side: &Connected, len: u64, stall: Duration) -> Result<()> {
    copy_and_wait(side, len, stall, false)
}

fn copy_and_wait(side: &Connected, len: u64, stall: Duration, out: bool) -> Result<()> {
    let (Some(s), Some(g)) = (&side.staging, &side.gpu) else {
        return Ok(());
    };
    let len = len as usize;
    // SAFETY: a ping-pong has one message in flight: the NIC does not touch this range until
    // the copy is done (we wait for it below), and both buffers live in `side`.
    unsafe {
        if out {
            let at = side.send_offset(0) as usize;
            s.stream
                .copy_device_to_host(&s.pinned, at, &g.buf, at, len)?;
        } else {
            let at = side.recv_offset(0) as usize;
            s.stream
                .copy_host_to_device(&g.buf, at, &s.pinned, at, len)?;
        }
    }
    let done = event(s, 0, 0)?;
    s.stream.record(done)?;
    let since = Instant::now();
    while !done.is_complete()? {
        if since.elapsed() > stall {
            s.quiesce().ok();
            bail!(
                "a {len}-byte copy {} the GPU did not finish in {:.1} s (--timeout)",
                if out { "from" } else { "to" },
                stall.as_secs_f64()
            );
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// How one size's messages map onto chunks and RDMA operations.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    plan: StagingPlan,
    size: u64,
    /// Messages per chunk when whole messages are batched; 0 when a message spans chunks.
    batch: u64,
    /// Messages per QP (`u64::MAX`: until stopped).
    messages: u64,
}

/// One chunk's share of the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
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
    pub fn new(
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
    pub fn plan(&self) -> StagingPlan {
        self.plan
    }

    /// What chunk `c` carries.
    pub fn work(&self, c: &Chunk) -> Work {
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
    pub fn span(&self) -> u64 {
        if self.batch == 0 {
            self.size
        } else {
            self.batch.min(self.messages) * self.size
        }
    }
}

/// The layout `side` uses for messages of `size` in `plan` (for `--validate`); `None` when
/// messages are not batched (host or GPU memory, or a staged latency test).
pub fn layout_for(side: &Connected, plan: &TestPlan, size: u64) -> Result<Option<Layout>> {
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

/// What this side does with the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// WRITEs or SENDs it: copy to a bounce buffer, then post from there.
    Source,
    /// READs it: READ into a bounce buffer, then copy to the GPU.
    Sink,
    /// Receives SENDs: post receives into a bounce buffer, then copy to the GPU.
    Receiver,
    /// Is WRITEn to by a staged peer: each chunk's last WRITE carries its number as immediate
    /// data (consuming a receive), this side copies the chunk to the GPU and SENDs the peer a
    /// credit for the freed bounce buffer.
    WriteTarget,
}

impl Role {
    fn of(shape: &LoopShape) -> Role {
        match (shape.send, shape.verb) {
            (true, Verb::Read) => Role::Sink,
            (true, _) => Role::Source,
            (false, Verb::Write) => Role::WriteTarget,
            (false, _) => Role::Receiver,
        }
    }

    /// Whether this side's pipeline work requests are receives.
    fn receives(self) -> bool {
        matches!(self, Role::Receiver | Role::WriteTarget)
    }
}

/// The pipeline of one QP: a source's (copy, then post) or a sink's (post, then copy).
#[derive(Debug)]
enum Pipe {
    Source(SendPipeline),
    Sink(RecvPipeline),
}

impl Pipe {
    fn next_copy(&mut self) -> Option<Chunk> {
        match self {
            Pipe::Source(p) => p.next_copy_to_start(),
            Pipe::Sink(p) => p.next_copy_to_start(),
        }
    }

    fn oldest_copy(&self) -> Option<Chunk> {
        match self {
            Pipe::Source(p) => p.oldest_copy_in_flight(),
            Pipe::Sink(p) => p.oldest_copy_in_flight(),
        }
    }

    fn copy_done(&mut self, seq: u64) -> Result<(), cuda::StagingError> {
        match self {
            Pipe::Source(p) => p.copy_done(seq),
            Pipe::Sink(p) => p.copy_done(seq),
        }
    }

    /// The next chunk whose operations may be posted.
    fn next_post(&mut self) -> Option<Chunk> {
        match self {
            Pipe::Source(p) => p.next_post(),
            Pipe::Sink(p) => p.next_landing(),
        }
    }

    /// Every operation of chunk `seq` completed.
    fn ops_done(&mut self, seq: u64) -> Result<(), cuda::StagingError> {
        match self {
            Pipe::Source(p) => p.rdma_done(seq),
            Pipe::Sink(p) => p.landed(seq),
        }
    }

    fn stop(&mut self) {
        match self {
            Pipe::Source(p) => {
                p.stop();
            }
            Pipe::Sink(p) => {
                p.stop();
            }
        }
    }

    fn is_finished(&self) -> bool {
        match self {
            Pipe::Source(p) => p.is_finished(),
            Pipe::Sink(p) => p.is_finished(),
        }
    }
}

/// One QP's pipeline and its send-queue accounting.
#[derive(Debug)]
struct QpStage {
    pipe: Pipe,
    /// The chunk being posted, with how many of its operations are posted.
    posting: Option<(Chunk, u64)>,
    /// Operations posted and known completed, numbered from 1 (a completion for n completes
    /// every operation up to n).
    posted: u64,
    completed: u64,
    /// Chunks wholly posted and not yet completed: (seq, number of their last operation).
    awaiting: VecDeque<(u64, u64)>,
    /// Messages done (sent, or in GPU memory).
    messages: u64,
    /// Notified WRITEs (a staged WRITE target): the credits for freed bounce buffers.
    credits: Credits,
}

/// Bounce-buffer credits between a staged WRITE source and a staged WRITE target: the source
/// may WRITE chunk `seq` once `seq < depth + received`; the target owes one per chunk it
/// copied to the GPU.
#[derive(Debug, Default, Clone, Copy)]
struct Credits {
    /// Source: credits received. Target: credit SENDs posted.
    moved: u64,
    /// Source: receives posted for credits. Target: credit SENDs completed.
    other: u64,
    /// Target: chunks copied whose credit is not yet posted.
    owed: u64,
}

/// Runs one staged bandwidth loop (this side a source, a sink or a receiver) and returns what
/// it measured.
pub fn measure_staged(
    side: &mut Connected,
    shape: &LoopShape,
    peer: &PeerState,
) -> Result<Measured> {
    let result = run_loop(side, shape, peer);
    if result.is_err() {
        // Copies may still be queued into buffers that outlive this call: let them finish.
        if let Some(s) = &side.staging {
            s.quiesce().ok();
        }
    }
    result
}

fn run_loop(side: &mut Connected, shape: &LoopShape, peer: &PeerState) -> Result<Measured> {
    let staging = side
        .staging
        .as_ref()
        .context("internal error: a staged loop on a side without bounce buffers")?;
    let messages = match shape.stop {
        Stop::Iters(n) => n,
        Stop::Duration { .. } => u64::MAX,
    };
    let layout = Layout::new(
        staging.config,
        staging.buffer_len,
        u64::from(shape.size),
        messages,
    )?;
    let role = Role::of(shape);
    let depth = staging.config.depth;
    let mut qps: Vec<QpStage> = (0..side.qps.len())
        .map(|_| QpStage::new(role, layout.plan()))
        .collect();
    let mut batch = vec![SendRequest::default(); shape.post_list.max(1) as usize];
    let mut wcs = [Completion::default(); POLL_BATCH];
    let mut idle = 0u32;
    let start = Instant::now();
    let mut meter = Meter::new(start, shape.stop);
    let mut last_progress = start;
    let deadline = match shape.stop {
        Stop::Duration { total, .. } => Some(start + total),
        Stop::Iters(_) => None,
    };
    let mut stopped = false;
    let notify = role == Role::Source && shape.verb == Verb::Write && side.peer_bounce.is_some();
    if notify && messages == u64::MAX {
        bail!("a staged WRITE target needs -n (a message count), not -D");
    }
    let total = layout.plan().total_chunks();
    loop {
        let mut progress = false;
        for (q, stage) in qps.iter_mut().enumerate() {
            progress |= start_copies(side, stage, q, &layout)?;
            progress |= finish_copies(side, stage, q, &layout)?;
            match role {
                Role::Receiver | Role::WriteTarget => {
                    post_receives(side, stage, q, shape, &layout, role)?;
                }
                _ => post_chunks(side, stage, q, shape, &layout, &mut batch, notify)?,
            }
            if notify {
                post_credit_receives(side, stage, q, total, depth as u64)?;
            }
            if role == Role::WriteTarget {
                post_credits(side, stage, q, shape)?;
            }
        }
        let n = side.cq.poll(&mut wcs)?;
        if n > 0 && role.receives() && qps.iter().all(|s| s.completed == 0) {
            // A receiver's window opens when the first message lands.
            meter = Meter::new(Instant::now(), shape.stop);
        }
        for wc in &wcs[..n] {
            complete(&mut qps, wc, role, &layout)?;
        }
        progress |= n > 0;
        if progress {
            let now = Instant::now();
            last_progress = now;
            idle = 0;
            meter.tick(now, qps.iter().map(|s| s.messages).sum());
            if !stopped && deadline.is_some_and(|d| now >= d) {
                qps.iter_mut().for_each(|s| s.pipe.stop());
                stopped = true;
            }
            if qps.iter().all(|s| s.finished(role, notify, total)) {
                break;
            }
            continue;
        }
        idle += 1;
        if idle >= CLOCK_CHECK_EVERY {
            idle = 0;
            let now = Instant::now();
            if !stopped && deadline.is_some_and(|d| now >= d) {
                qps.iter_mut().for_each(|s| s.pipe.stop());
                stopped = true;
            }
            if qps.iter().all(|s| s.finished(role, notify, total)) {
                break;
            }
            if peer.is_failed() {
                bail!("the peer's control connection failed while measuring");
            }
            if now.duration_since(last_progress) > shape.stall_timeout {
                bail!(
                    "the staged pipeline made no progress for {:.1} s ({} messages done): no RDMA \
                     completion and no copy finished; the peer may be dead or the GPU hung \
                     (--timeout)",
                    shape.stall_timeout.as_secs_f64(),
                    qps.iter().map(|s| s.messages).sum::<u64>()
                );
            }
        }
    }
    let window = meter.window();
    Ok(Measured {
        sent: window.filter(|_| !role.receives()),
        received: window.filter(|_| role.receives()),
        ops_per_qp: qps.iter().map(|s| s.messages).collect(),
    })
}

/// Bit of a work request id that marks a receive.
const RECV_FLAG: u64 = 1 << 63;

/// The id of work request number `n` on QP `q` (`recv`: a receive).
#[inline]
fn wr_id(q: usize, n: u64, recv: bool) -> u64 {
    ((q as u64) << COUNT_BITS) | n | if recv { RECV_FLAG } else { 0 }
}

/// Accounts one completion: the pipeline's own work requests (operations, or a receiver's
/// receives), a credit that arrived, or a credit SEND that completed.
fn complete(qps: &mut [QpStage], wc: &Completion, role: Role, layout: &Layout) -> Result<()> {
    wc.check()?;
    let id = wc.wr_id();
    let recv = id & RECV_FLAG != 0;
    let q = ((id & !RECV_FLAG) >> COUNT_BITS) as usize;
    let count = id & ((1 << COUNT_BITS) - 1);
    let stage = qps
        .get_mut(q)
        .with_context(|| format!("a completion for QP {q}, which does not exist"))?;
    if recv != role.receives() {
        // Source: a credit arrived. Target: a credit SEND completed.
        if role == Role::WriteTarget {
            stage.credits.other = stage.credits.other.max(count);
        } else {
            stage.credits.moved += 1;
        }
        return Ok(());
    }
    stage.completed = stage.completed.max(count);
    while let Some(&(seq, last)) = stage.awaiting.front() {
        if last > stage.completed {
            break;
        }
        if role == Role::WriteTarget && wc.imm_data() != Some(seq as u32) {
            bail!(
                "the peer's WRITE for chunk {seq} carried {:?} as its chunk number; both sides \
                 must run the same plan and bounce buffers",
                wc.imm_data()
            );
        }
        stage.awaiting.pop_front();
        stage.pipe.ops_done(seq)?;
        if let (Pipe::Source(_), Some(c)) = (&stage.pipe, layout.plan().chunk(seq)) {
            stage.messages += layout.work(&c).messages;
        }
    }
    Ok(())
}

impl QpStage {
    /// A staged pipeline of `role` through `plan`'s chunks, nothing posted yet.
    fn new(role: Role, plan: StagingPlan) -> QpStage {
        QpStage {
            pipe: match role {
                Role::Source => Pipe::Source(SendPipeline::new(plan)),
                _ => Pipe::Sink(RecvPipeline::new(plan)),
            },
            posting: None,
            posted: 0,
            completed: 0,
            awaiting: VecDeque::with_capacity(plan.config().depth),
            messages: 0,
            credits: Credits::default(),
        }
    }

    /// The first chunk a WRITE source may not yet post to a staged target: each of the
    /// target's `depth` bounce buffers is free at the start, and each credit frees one more.
    fn credit_limit(&self, depth: u64) -> u64 {
        depth + self.credits.moved
    }

    /// All chunks done, and (notified WRITEs) every credit received or sent.
    fn finished(&self, role: Role, notify: bool, total: u64) -> bool {
        let credits = match role {
            Role::Source if notify => self.credits.moved == total,
            Role::WriteTarget => self.credits.owed == 0 && self.credits.other == self.credits.moved,
            _ => true,
        };
        credits && self.pipe.is_finished()
    }
}

/// A staged WRITE source keeps a receive posted for each credit it may still get (at most
/// one per bounce buffer at a time, exactly one per chunk in all).
fn post_credit_receives(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    total: u64,
    depth: u64,
) -> Result<()> {
    let c = &mut stage.credits;
    while c.other < total && c.other - c.moved < depth {
        c.other += 1;
        side.qps[q].post_recv(&side.mr, wr_id(q, c.other, true), 0, 0)?;
    }
    Ok(())
}

/// A staged WRITE target SENDs a zero-byte credit for each bounce buffer it copied out.
fn post_credits(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    shape: &LoopShape,
) -> Result<()> {
    let c = &mut stage.credits;
    while c.owed > 0 && c.moved - c.other < u64::from(shape.depth) {
        c.moved += 1;
        c.owed -= 1;
        let credit = SendRequest {
            wr_id: wr_id(q, c.moved, false),
            op: Op::Send,
            local_offset: 0,
            len: 0,
            signaled: true,
        };
        side.qps[q].post_send(&side.mr, &[credit], false)?;
    }
    Ok(())
}

/// Byte offset of QP `q`'s bounce buffer for chunk `c` in the registered region.
fn bounce_offset(side: &Connected, q: usize, c: &Chunk) -> Result<u64> {
    let s = side.staging.as_ref().context("no bounce buffers")?;
    Ok(q as u64 * s.stride + c.buffer_offset as u64)
}

/// Queues the copies the pipeline allows now (device-to-host for a source, host-to-device for
/// a sink) and records each buffer's event after its copy. True when one was queued.
fn start_copies(side: &Connected, stage: &mut QpStage, q: usize, layout: &Layout) -> Result<bool> {
    let mut started = false;
    while let Some(c) = stage.pipe.next_copy() {
        let work = layout.work(&c);
        let bounce = bounce_offset(side, q, &c)? as usize;
        let (s, gpu) = match (&side.staging, &side.gpu) {
            (Some(s), Some(g)) => (s, &g.buf),
            _ => bail!("internal error: staged copy without GPU memory"),
        };
        let len = work.copy_len as usize;
        // SAFETY: the pipeline hands a bounce buffer to one copy at a time and never to the
        // NIC until this copy's event completed (source), or only after the NIC is done with
        // it (sink); both buffers live in `side`, which outlives the loop, and a failed loop
        // synchronises the stream before returning.
        unsafe {
            match stage.pipe {
                Pipe::Source(_) => {
                    let from = (side.send_offset(q) + work.offset) as usize;
                    s.stream
                        .copy_device_to_host(&s.pinned, bounce, gpu, from, len)?;
                }
                Pipe::Sink(_) => {
                    let to = (side.recv_offset(q) + work.offset) as usize;
                    s.stream
                        .copy_host_to_device(gpu, to, &s.pinned, bounce, len)?;
                }
            }
        }
        s.stream.record(event(s, q, c.buffer)?)?;
        started = true;
    }
    Ok(started)
}

fn event(s: &Staging, q: usize, buffer: usize) -> Result<&cuda::Event> {
    s.events
        .get(q * s.config.depth + buffer)
        .context("internal error: no event for that bounce buffer")
}

/// Marks done the copies whose events completed, oldest first. True when one did.
fn finish_copies(side: &Connected, stage: &mut QpStage, q: usize, layout: &Layout) -> Result<bool> {
    let s = side.staging.as_ref().context("no bounce buffers")?;
    let mut finished = false;
    while let Some(c) = stage.pipe.oldest_copy() {
        if !event(s, q, c.buffer)?.is_complete()? {
            break;
        }
        stage.pipe.copy_done(c.seq)?;
        if let Pipe::Sink(_) = stage.pipe {
            stage.messages += layout.work(&c).messages;
            stage.credits.owed += 1;
        }
        finished = true;
    }
    Ok(finished)
}

impl QpStage {
    /// The chunk being posted and how many of its operations are posted, or the next chunk
    /// the pipeline hands out if its number is below `limit` (the credits of a WRITE target).
    fn next_to_post(&mut self, limit: u64) -> Option<(Chunk, u64)> {
        if let Some(p) = self.posting.take() {
            return Some(p);
        }
        if let Pipe::Source(p) = &self.pipe {
            if p.peek_post()?.seq >= limit {
                return None;
            }
        }
        self.pipe.next_post().map(|c| (c, 0))
    }

    /// `done` of the chunk's `ops` operations are posted now: it awaits its completions once
    /// all are.
    fn posted_up_to(&mut self, chunk: Chunk, done: u64, ops: u64) {
        if done == ops {
            self.awaiting.push_back((chunk.seq, self.posted));
        } else {
            self.posting = Some((chunk, done));
        }
    }
}

/// Posts the operations of the chunks the pipeline hands out, as far as the send queue's
/// depth allows: post lists of up to `post_list`, every `cq_mod`-th operation and each
/// chunk's last signaled.
fn post_chunks(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    shape: &LoopShape,
    layout: &Layout,
    batch: &mut [SendRequest],
    notify: bool,
) -> Result<()> {
    let depth = side.staging.as_ref().map_or(0, |s| s.config.depth as u64);
    let limit = if notify {
        stage.credit_limit(depth)
    } else {
        u64::MAX
    };
    while let Some((chunk, done)) = stage.next_to_post(limit) {
        let work = layout.work(&chunk);
        let room = u64::from(shape.depth).saturating_sub(stage.posted - stage.completed);
        let count = (work.ops - done).min(room).min(batch.len() as u64);
        if count == 0 {
            stage.posting = Some((chunk, done));
            return Ok(());
        }
        let bounce = bounce_offset(side, q, &chunk)?;
        let last_op = stage.posted + (work.ops - done);
        for (k, wr) in batch[..count as usize].iter_mut().enumerate() {
            let n = stage.posted + k as u64 + 1;
            let i = done + k as u64;
            *wr = SendRequest {
                wr_id: wr_id(q, n, false),
                op: if notify {
                    notified_write(side, q, &chunk, i, &work)
                } else {
                    op_for(side, q, shape.verb, work.offset)
                },
                local_offset: bounce + i * work.op_len,
                len: work.op_len as u32,
                signaled: is_signaled(n, shape.cq_mod, last_op),
            };
        }
        let requests = &batch[..count as usize];
        match side.ah.get(q) {
            Some(ah) => side.qps[q].post_send_ud(&side.mr, requests, shape.inline, ah)?,
            None => side.qps[q].post_send(&side.mr, requests, shape.inline)?,
        }
        stage.posted += count;
        stage.posted_up_to(chunk, done + count, work.ops);
    }
    Ok(())
}

/// Posts receives for the chunks the pipeline hands out, as far as the receive queue's depth
/// allows: a SEND receiver's, one per message at its place in the bounce buffer; a WRITE
/// target's, one empty receive per chunk for the WRITE with immediate that completes it.
fn post_receives(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    shape: &LoopShape,
    layout: &Layout,
    role: Role,
) -> Result<()> {
    while let Some((chunk, mut done)) = stage.next_to_post(u64::MAX) {
        let work = layout.work(&chunk);
        let (count, len) = match role {
            Role::WriteTarget => (1, 0),
            _ => (work.ops, work.op_len),
        };
        let bounce = bounce_offset(side, q, &chunk)?;
        while done < count && stage.posted - stage.completed < u64::from(shape.rx_depth) {
            stage.posted += 1;
            let id = wr_id(q, stage.posted, true);
            side.qps[q].post_recv(&side.mr, id, bounce + done * len, len as u32)?;
            done += 1;
        }
        let full = done < count;
        stage.posted_up_to(chunk, done, count);
        if full {
            return Ok(());
        }
    }
    Ok(())
}

/// Operation `i` of `chunk` to a staged WRITE target: into the peer's bounce buffer of the
/// same number (both sides have the same layout); the chunk's last WRITE carries its number.
#[inline]
fn notified_write(side: &Connected, q: usize, chunk: &Chunk, i: u64, work: &Work) -> Op {
    let remote_addr = side.remote[q].addr + chunk.buffer_offset as u64 + i * work.op_len;
    let rkey = side.remote[q].rkey;
    if i + 1 == work.ops {
        Op::WriteWithImm {
            remote_addr,
            rkey,
            imm: chunk.seq as u32,
        }
    } else {
        Op::Write { remote_addr, rkey }
    }
}

/// The operation a staged QP posts: into the peer's receive half (WRITE), from its send half
/// (READ), or a SEND; `offset` is where the chunk sits in the message.
#[inline]
fn op_for(side: &Connected, q: usize, verb: Verb, offset: u64) -> Op {
    let rkey = side.remote[q].rkey;
    match verb {
        Verb::Write => Op::Write {
            remote_addr: side.remote_recv(q) + offset,
            rkey,
        },
        Verb::Read => Op::Read {
            remote_addr: side.remote_send(q) + offset,
            rkey,
        },
        _ => Op::Send,
    }
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
        assert_eq!(bounce_len(cfg, Verb::Send, 10 << 10).unwrap(), 12 << 10);
        assert_eq!(bounce_len(cfg, Verb::Write, 10 << 10).unwrap(), 4096);
        assert_eq!(bounce_len(cfg, Verb::Send, 64).unwrap(), 4096);
        let layout = Layout::new(cfg, 12 << 10, 10 << 10, 3).unwrap();
        assert!(all_work(&layout)
            .iter()
            .all(|w| w.ops == 1 && w.messages == 1));
    }

    #[test]
    fn a_write_source_posts_only_the_chunks_it_holds_credits_for() {
        let plan = StagingPlan::single(8 * 4096, 4096, 2).unwrap();
        let mut stage = QpStage::new(Role::Source, plan);
        let Pipe::Source(tx) = &mut stage.pipe else {
            unreachable!()
        };
        for _ in 0..2 {
            let c = tx.next_copy_to_start().unwrap();
            tx.copy_done(c.seq).unwrap();
        }
        // Two bounce buffers at the target: chunks 0 and 1 go without a credit...
        assert_eq!(stage.credit_limit(2), 2);
        assert_eq!(stage.next_to_post(1).map(|(c, _)| c.seq), Some(0));
        assert_eq!(stage.next_to_post(1), None, "chunk 1 waits for the limit");
        assert_eq!(stage.next_to_post(2).map(|(c, _)| c.seq), Some(1));
        // ...and each credit lets one more through.
        stage.credits.moved = 1;
        assert_eq!(stage.credit_limit(2), 3);
        assert!(stage.next_to_post(3).is_none(), "chunk 2 is not copied yet");
        // A chunk half posted goes on whatever the limit (its buffer was granted already).
        stage.posting = plan.chunk(1).map(|c| (c, 3));
        assert_eq!(stage.next_to_post(0).map(|(c, d)| (c.seq, d)), Some((1, 3)));
    }

    #[test]
    fn each_side_finishes_only_with_its_credits_settled() {
        let plan = StagingPlan::single(4096, 4096, 2).unwrap();
        let mut source = QpStage::new(Role::Source, plan);
        if let Pipe::Source(tx) = &mut source.pipe {
            let c = tx.next_copy_to_start().unwrap();
            tx.copy_done(c.seq).unwrap();
            tx.next_post().unwrap();
            tx.rdma_done(c.seq).unwrap();
        }
        assert!(source.finished(Role::Source, false, 1));
        assert!(
            !source.finished(Role::Source, true, 1),
            "the last credit is due"
        );
        source.credits.moved = 1;
        assert!(source.finished(Role::Source, true, 1));

        let mut target = QpStage::new(Role::WriteTarget, plan);
        if let Pipe::Sink(rx) = &mut target.pipe {
            let c = rx.next_landing().unwrap();
            rx.landed(c.seq).unwrap();
            rx.next_copy_to_start().unwrap();
            rx.copy_done(c.seq).unwrap();
        }
        target.credits.owed = 1;
        assert!(
            !target.finished(Role::WriteTarget, false, 1),
            "a credit is owed"
        );
        target.credits = Credits {
            moved: 1,
            other: 0,
            owed: 0,
        };
        assert!(
            !target.finished(Role::WriteTarget, false, 1),
            "its SEND is in flight"
        );
        target.credits.other = 1;
        assert!(target.finished(Role::WriteTarget, false, 1));
    }

    #[test]
    fn ids_carry_the_qp_the_count_and_whether_a_receive() {
        let id = wr_id(3, 17, true);
        assert_ne!(id & RECV_FLAG, 0);
        assert_eq!((id & !RECV_FLAG) >> COUNT_BITS, 3);
        assert_eq!(id & ((1 << COUNT_BITS) - 1), 17);
        assert_eq!(wr_id(3, 17, false) & RECV_FLAG, 0);
    }

    #[test]
    fn a_write_target_needs_a_staged_client_with_its_bounce_buffers() {
        let p = plan("write-bw", false);
        let four = Some(BounceLayout {
            buffer_len: 1 << 20,
            depth: 4,
        });
        let two = Some(BounceLayout {
            buffer_len: 1 << 20,
            depth: 2,
        });
        check_peer(&p, true, four, four).unwrap();
        check_peer(&p, false, four, four).unwrap();
        check_peer(&p, true, None, four).unwrap();
        check_peer(&p, true, None, None).unwrap();
        let e = check_peer(&p, true, four, two).unwrap_err().to_string();
        assert!(
            e.contains("2 x 1 MiB") && e.contains("--staging-depth 4"),
            "{e}"
        );
        let e = check_peer(&p, false, None, four).unwrap_err().to_string();
        assert!(e.contains("not staged"), "{e}");
        // Only write-bw WRITEs into the peer's bounce buffers.
        check_peer(&plan("send-bw", false), true, four, None).unwrap();
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
    fn only_the_side_that_moves_the_data_is_staged() {
        for test in ["write-bw", "send-bw", "read-bw"] {
            assert_eq!(refusal(&plan(test, false), false), None, "{test} client");
        }
        assert_eq!(
            refusal(&plan("write-bw", false), true),
            None,
            "a WRITE target"
        );
        let why = refusal(&plan("read-bw", false), true).unwrap();
        assert!(why.contains("passive source"), "{why}");
        assert!(why.contains("--mem host"), "{why}");
        assert_eq!(
            refusal(&plan("send-bw", false), true),
            None,
            "a SEND receiver"
        );
        assert!(refusal(&plan("atomic-bw", false), false).is_some());
        assert!(refusal(&plan("write-bw", true), false)
            .unwrap()
            .contains("-b"));
        for lat in ["write-lat", "send-lat", "read-lat"] {
            assert_eq!(refusal(&plan(lat, false), false), None, "{lat} client");
        }
        assert_eq!(
            refusal(&plan("send-lat", false), true),
            None,
            "send-lat server"
        );
        assert!(refusal(&plan("read-lat", false), true)
            .unwrap()
            .contains("passive source"));
        assert!(refusal(&plan("atomic-lat", false), false).is_some());
    }
}
