//! The staged bandwidth loop: per QP, `accel::staging`'s scheduler over K bounce buffers,
//! the copies on one copy queue with a marker per buffer, the RDMA operations posted as far as
//! the queues allow, and, between two staged ends of write-bw or read-bw, the zero-byte
//! notices (credits and "ready"s) that tell each side which bounce buffer it may use.
//!
//! Nothing here allocates per message: the per-QP state is set up before the clock starts.
//!
//! Long because the staged loop's protocol (roles, notices, credits, the per-QP pipeline) is
//! one state machine best read whole; its tests are the last 140 lines.

use std::collections::VecDeque;
use std::time::Instant;

use accel::staging::{Chunk, RecvPipeline, SendPipeline, StagingPlan};
use anyhow::{bail, Context, Result};
use verbs::{Completion, Op, SendRequest};

use super::{Layout, Work};
use crate::engine::bw::{
    drive, is_signaled, Counts, LoopBody, LoopShape, Measured, PeerState, Stop, WrId, WrKind,
};
use crate::engine::Connected;
use crate::plan::{PlanError, Verb};

/// What this side does with the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Duty {
    /// WRITEs or SENDs it: copy to a bounce buffer, then post from there.
    Source,
    /// READs it: READ into a bounce buffer, then copy to the GPU.
    Sink,
    /// Receives SENDs: post receives into a bounce buffer, then copy to the GPU.
    Receiver,
    /// Is WRITEn to by a staged peer: each chunk's last WRITE carries its number as immediate
    /// data (consuming a receive); this side copies the chunk to the GPU and SENDs a credit.
    WriteTarget,
    /// Is READ from by a staged peer: this side copies a chunk out of the GPU and SENDs a
    /// "ready"; the peer READs it and SENDs a credit, which frees the bounce buffer.
    ReadSource,
}

impl Duty {
    fn of(shape: &LoopShape) -> Duty {
        match (shape.send, shape.verb) {
            (true, Verb::Read) => Duty::Sink,
            (true, _) => Duty::Source,
            (false, Verb::Write) => Duty::WriteTarget,
            (false, Verb::Read) => Duty::ReadSource,
            (false, _) => Duty::Receiver,
        }
    }

    /// Whether the pipeline's own work requests are receives.
    fn receives(self) -> bool {
        matches!(self, Duty::Receiver | Duty::WriteTarget)
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

    fn copy_done(&mut self, seq: u64) -> Result<(), accel::StagingError> {
        match self {
            Pipe::Source(p) => p.copy_done(seq),
            Pipe::Sink(p) => p.copy_done(seq),
        }
    }

    /// What [`Pipe::next_post`] would return, without handing it out.
    fn peek_post(&self) -> Option<Chunk> {
        match self {
            Pipe::Source(p) => p.peek_post(),
            Pipe::Sink(p) => p.peek_landing(),
        }
    }

    /// The next chunk whose operations may be posted (in order).
    fn next_post(&mut self) -> Option<Chunk> {
        match self {
            Pipe::Source(p) => p.next_post(),
            Pipe::Sink(p) => p.next_landing(),
        }
    }

    /// Every operation of chunk `seq` completed.
    fn ops_done(&mut self, seq: u64) -> Result<(), accel::StagingError> {
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

/// Zero-byte SENDs between two staged ends of write-bw or read-bw, one per chunk: credits (a
/// bounce buffer is free again) and "ready"s (a chunk may be READ).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Notices {
    /// Notices that arrived.
    received: u64,
    /// Receives posted for them.
    recvs_posted: u64,
    /// Notices this side owes the peer, not yet posted.
    owed: u64,
    /// Notices posted, and completed.
    sent: u64,
    sent_done: u64,
}

/// One QP's pipeline and its queue accounting.
#[derive(Debug)]
struct QpStage {
    pipe: Pipe,
    /// The chunk being posted, with how many of its operations are posted.
    posting: Option<(Chunk, u64)>,
    /// Operations posted and known completed (a QP's completions arrive in order, each
    /// accounting for the operations since the previous signaled one).
    posted: u64,
    completed: u64,
    /// The number of the last signaled operation.
    last_signaled: u64,
    /// The most operations posted and not yet completed.
    in_flight_max: u64,
    /// Chunks wholly posted and not yet completed: (seq, number of their last operation).
    awaiting: VecDeque<(u64, u64)>,
    /// Messages done (sent, or in GPU memory).
    messages: u64,
    notices: Notices,
    /// The pipeline's work requests are receives (`posted` counts receive-queue entries).
    ops_are_receives: bool,
}

/// What every step of one loop needs to know.
#[derive(Debug, Clone, Copy)]
struct Ctx<'a> {
    shape: &'a LoopShape,
    layout: &'a Layout,
    p: &'a Protocol,
}

/// How one side takes part in the notices, and how many chunks each QP moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Protocol {
    role: Duty,
    /// The peer is a staged WRITE target or READ source: this side waits for its notices.
    notified: bool,
    /// Bounce buffers per QP (at either end: both have the same).
    depth: u64,
    /// Chunks per QP in all.
    total: u64,
}

impl Protocol {
    /// How `side` takes part in a loop of `shape` over `layout`'s chunks.
    fn of(side: &Connected, shape: &LoopShape, layout: &Layout) -> Result<Protocol> {
        let role = Duty::of(shape);
        let p = Protocol {
            role,
            notified: matches!(role, Duty::Source | Duty::Sink)
                && matches!(shape.verb, Verb::Write | Verb::Read)
                && side.peer_bounce.is_some(),
            depth: layout.plan().config().depth as u64,
            total: layout.plan().total_chunks(),
        };
        if (p.expects_notices() || p.sends_notices()) && matches!(shape.stop, Stop::Duration { .. })
        {
            return Err(PlanError::Value(
                "staged at both ends, a bandwidth test needs -n (a message count), not -D".into(),
            )
            .into());
        }
        Ok(p)
    }

    /// Whether notices arrive here: credits (WRITE source, READ source) or "ready"s (READ
    /// sink).
    fn expects_notices(&self) -> bool {
        self.notified || self.role == Duty::ReadSource
    }

    /// Whether this side SENDs notices: credits (WRITE target, READ sink) or "ready"s (READ
    /// source).
    fn sends_notices(&self) -> bool {
        matches!(self.role, Duty::WriteTarget | Duty::ReadSource)
            || (self.notified && self.role == Duty::Sink)
    }

    /// The first chunk this side may not yet post, given the notices received: a WRITE source
    /// may fill each of the target's buffers once and then one more per credit; a READ sink
    /// may READ what the source said is ready.
    fn limit(&self, notices: &Notices) -> u64 {
        match (self.notified, self.role) {
            (true, Duty::Source) => self.depth + notices.received,
            (true, Duty::Sink) => notices.received,
            _ => u64::MAX,
        }
    }
}

impl QpStage {
    /// A staged pipeline of `role` through `plan`'s chunks, nothing posted yet.
    fn new(role: Duty, plan: StagingPlan) -> QpStage {
        QpStage {
            pipe: match role {
                Duty::Source | Duty::ReadSource => Pipe::Source(SendPipeline::new(plan)),
                _ => Pipe::Sink(RecvPipeline::new(plan)),
            },
            posting: None,
            posted: 0,
            completed: 0,
            last_signaled: 0,
            in_flight_max: 0,
            awaiting: VecDeque::with_capacity(plan.config().depth),
            messages: 0,
            notices: Notices::default(),
            ops_are_receives: role.receives(),
        }
    }

    /// The chunk being posted and how many of its operations are posted, or the next chunk
    /// the pipeline hands out if its number is below `limit`.
    fn next_to_post(&mut self, limit: u64) -> Option<(Chunk, u64)> {
        if let Some(p) = self.posting.take() {
            return Some(p);
        }
        if self.pipe.peek_post()?.seq >= limit {
            return None;
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

    /// Send-queue entries in use: operations (unless the pipeline's work requests are
    /// receives) and notices.
    fn send_queue_used(&self) -> u64 {
        let ops = if self.ops_are_receives {
            0
        } else {
            self.posted - self.completed
        };
        ops + self.notices.sent - self.notices.sent_done
    }

    /// All chunks done and every notice received and sent.
    fn finished(&self, p: &Protocol) -> bool {
        let n = &self.notices;
        let received = !p.expects_notices() || n.received == p.total;
        let sent = n.owed == 0 && n.sent_done == n.sent;
        received && sent && self.pipe.is_finished()
    }

    /// Chunk `seq` is wholly done by the network.
    fn ops_done(&mut self, seq: u64, p: &Protocol, layout: &Layout) -> Result<()> {
        self.pipe.ops_done(seq)?;
        match p.role {
            Duty::Source | Duty::ReadSource => {
                if let Some(c) = layout.plan().chunk(seq) {
                    self.messages += layout.work(&c).messages;
                }
            }
            // A READ sink frees the source's buffer as soon as its READs are done.
            Duty::Sink if p.notified => self.notices.owed += 1,
            _ => {}
        }
        Ok(())
    }
}

/// Runs one staged bandwidth loop and returns what it measured.
pub(crate) fn measure_staged(
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

/// The staged loop's state: one pipeline per QP, the layout of the size and the protocol.
#[derive(Debug)]
struct StagedLoop<'a> {
    shape: &'a LoopShape,
    layout: Layout,
    proto: Protocol,
    qps: Vec<QpStage>,
    batch: Vec<SendRequest>,
}

impl LoopBody for StagedLoop<'_> {
    fn turn(&mut self, side: &mut Connected, wcs: &mut [Completion]) -> Result<bool> {
        let ctx = Ctx {
            shape: self.shape,
            layout: &self.layout,
            p: &self.proto,
        };
        let mut progress = false;
        for (q, stage) in self.qps.iter_mut().enumerate() {
            progress |= advance(side, stage, q, ctx, &mut self.batch)?;
        }
        let n = side.cq.poll(wcs)?;
        for wc in &wcs[..n] {
            complete(&mut self.qps, wc, &self.proto, &self.layout)?;
        }
        Ok(progress || n > 0)
    }

    fn counts(&self) -> Counts {
        let done = self.qps.iter().map(|s| s.messages).sum();
        if self.proto.role.receives() {
            Counts {
                received: done,
                // A receiver's window opens when the first message lands.
                receiving: self.qps.iter().any(|s| s.completed > 0),
                ..Counts::default()
            }
        } else {
            Counts {
                sent: done,
                ..Counts::default()
            }
        }
    }

    fn stop_posting(&mut self) {
        self.qps.iter_mut().for_each(|s| s.pipe.stop());
    }

    fn finished(&mut self, _now: Instant, _peer: &PeerState) -> bool {
        self.qps.iter().all(|s| s.finished(&self.proto))
    }

    #[cold]
    fn stalled(&self, secs: f64) -> anyhow::Error {
        anyhow::anyhow!(
            "the staged pipeline made no progress for {secs:.1} s ({} messages done): no RDMA \
             completion and no copy finished; the peer may be dead or the GPU hung (--timeout)",
            self.qps.iter().map(|s| s.messages).sum::<u64>()
        )
    }
}

fn run_loop(side: &mut Connected, shape: &LoopShape, peer: &PeerState) -> Result<Measured> {
    let staging = side
        .staging
        .as_ref()
        .context("internal error: a staged loop on a side without bounce buffers")?;
    let layout = Layout::new(
        staging.config,
        staging.buffer_len,
        u64::from(shape.size),
        shape.stop.limit(),
    )?;
    let proto = Protocol::of(side, shape, &layout)?;
    let mut body = StagedLoop {
        shape,
        layout,
        proto,
        qps: (0..side.qps.len())
            .map(|_| QpStage::new(proto.role, layout.plan()))
            .collect(),
        batch: vec![SendRequest::default(); shape.post_list.max(1) as usize],
    };
    let windows = drive(side, shape, peer, &mut body)?;
    Ok(Measured {
        sent: windows.sent,
        received: windows.received,
        ops_per_qp: body.qps.iter().map(|s| s.messages).collect(),
        in_flight_max: body.qps.iter().map(|s| s.in_flight_max).max().unwrap_or(0),
        signal_every: 0,
    })
}

/// One QP's share of a loop turn: queue the copies the pipeline allows, note those done, post
/// what may be posted (operations, receives or "ready"s) and the notices. True when a copy
/// started or finished.
fn advance(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    ctx: Ctx<'_>,
    batch: &mut [SendRequest],
) -> Result<bool> {
    let mut progress = start_copies(side, stage, q, ctx.layout)?;
    progress |= finish_copies(side, stage, q, ctx)?;
    match ctx.p.role {
        Duty::Receiver | Duty::WriteTarget => post_receives(side, stage, q, ctx)?,
        Duty::ReadSource => announce_ready(stage),
        Duty::Source | Duty::Sink => post_chunks(side, stage, q, ctx, batch)?,
    }
    if ctx.p.expects_notices() {
        post_notice_receives(side, stage, q, ctx.p)?;
    }
    if ctx.p.sends_notices() {
        post_notices(side, stage, q, ctx.shape)?;
    }
    Ok(progress)
}

/// Accounts one completion: the pipeline's own work requests (operations, or a receiver's
/// receives), a notice that arrived, or a notice SEND that completed.
fn complete(qps: &mut [QpStage], wc: &Completion, p: &Protocol, layout: &Layout) -> Result<()> {
    wc.check()?;
    let id = WrId(wc.wr_id());
    let q = id.qp();
    let stage = qps
        .get_mut(q)
        .with_context(|| format!("a completion for QP {q}, which does not exist"))?;
    if id.kind() == WrKind::Notice {
        stage.notices.sent_done += id.covers();
        return Ok(());
    }
    if id.kind() == WrKind::NoticeRecv {
        stage.notices.received += 1;
        if p.role == Duty::ReadSource {
            // A credit: the peer has READ the oldest chunk announced.
            let (seq, _) = stage
                .awaiting
                .pop_front()
                .context("a credit for a chunk that was never announced")?;
            stage.ops_done(seq, p, layout)?;
        }
        return Ok(());
    }
    stage.completed += id.covers();
    while let Some(&(seq, last)) = stage.awaiting.front() {
        if last > stage.completed {
            break;
        }
        if p.role == Duty::WriteTarget && wc.imm_data() != Some(seq as u32) {
            bail!(
                "the peer's WRITE for chunk {seq} carried {:?} as its chunk number; both sides \
                 must run the same plan and bounce buffers",
                wc.imm_data()
            );
        }
        stage.awaiting.pop_front();
        stage.ops_done(seq, p, layout)?;
    }
    Ok(())
}

/// A READ source announces each chunk copied out of the GPU ("ready"), in order; its buffer
/// is free again when the peer's credit for it arrives.
fn announce_ready(stage: &mut QpStage) {
    while let Some(c) = stage.pipe.next_post() {
        stage.awaiting.push_back((c.seq, 0));
        stage.notices.owed += 1;
    }
}

/// Keeps a receive posted for each notice that may still come (at most one per bounce
/// buffer at a time, exactly one per chunk in all).
fn post_notice_receives(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    p: &Protocol,
) -> Result<()> {
    let n = &mut stage.notices;
    while n.recvs_posted < p.total && n.recvs_posted - n.received < p.depth {
        n.recvs_posted += 1;
        let id = WrId::new(WrKind::NoticeRecv, q, 1).0;
        side.qps[q].post_recv(&side.mr, id, 0, 0)?;
    }
    Ok(())
}

/// SENDs the zero-byte notices this side owes, as far as the send queue allows.
fn post_notices(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    shape: &LoopShape,
) -> Result<()> {
    while stage.notices.owed > 0 && stage.send_queue_used() < u64::from(shape.depth) {
        let n = &mut stage.notices;
        n.owed -= 1;
        n.sent += 1;
        let notice = SendRequest {
            wr_id: WrId::new(WrKind::Notice, q, 1).0,
            op: Op::Send,
            local_offset: 0,
            len: 0,
            signaled: true,
        };
        side.qps[q].post_send(&side.mr, &[notice], false)?;
    }
    Ok(())
}

/// Byte offset of QP `q`'s bounce buffer for chunk `c` in the registered region.
fn bounce_offset(side: &Connected, q: usize, c: &Chunk) -> Result<u64> {
    let s = side.staging.as_ref().context("no bounce buffers")?;
    Ok(q as u64 * s.stride + c.buffer_offset as u64)
}

/// Queues the copies the pipeline allows now (device-to-host for a source, host-to-device for
/// a sink) and sets each buffer's marker after its copy. True when one was queued.
fn start_copies(side: &Connected, stage: &mut QpStage, q: usize, layout: &Layout) -> Result<bool> {
    let mut started = false;
    while let Some(c) = stage.pipe.next_copy() {
        let work = layout.work(&c);
        let bounce = bounce_offset(side, q, &c)? as usize;
        let (s, gpu) = match (&side.staging, &side.gpu) {
            (Some(s), Some(g)) => (s, g.buf.as_ref()),
            _ => bail!("internal error: staged copy without GPU memory"),
        };
        let len = work.copy_len as usize;
        // SAFETY: the pipeline hands a bounce buffer to one copy at a time and never to the
        // NIC until this copy's marker was reached (source), or only after the NIC is done with
        // it (sink); both buffers live in `side`, which outlives the loop, and a failed loop
        // synchronises the copies before returning.
        unsafe {
            match stage.pipe {
                Pipe::Source(_) => {
                    let from = (side.send_offset(q) + work.offset) as usize;
                    s.copies.device_to_host(&s.pinned, bounce, gpu, from, len)?;
                }
                Pipe::Sink(_) => {
                    let to = (side.recv_offset(q) + work.offset) as usize;
                    s.copies.host_to_device(gpu, to, &s.pinned, bounce, len)?;
                }
            }
        }
        s.copies.mark(s.marker(q, c.buffer))?;
        started = true;
    }
    Ok(started)
}

/// Marks done the copies whose markers were reached, oldest first. True when one did.
fn finish_copies(side: &Connected, stage: &mut QpStage, q: usize, ctx: Ctx<'_>) -> Result<bool> {
    let (layout, p) = (ctx.layout, ctx.p);
    let s = side.staging.as_ref().context("no bounce buffers")?;
    let mut finished = false;
    while let Some(c) = stage.pipe.oldest_copy() {
        if !s.copies.reached(s.marker(q, c.buffer))? {
            break;
        }
        stage.pipe.copy_done(c.seq)?;
        if let Pipe::Sink(_) = stage.pipe {
            stage.messages += layout.work(&c).messages;
            // A WRITE target's buffer is free once its chunk is in the GPU.
            if p.role == Duty::WriteTarget {
                stage.notices.owed += 1;
            }
        }
        finished = true;
    }
    Ok(finished)
}

/// Posts the operations of the chunks the pipeline hands out, as far as the send queue's
/// depth (and the peer's notices) allow: post lists of up to `post_list`, every `cq_mod`-th
/// operation and each chunk's last signaled.
fn post_chunks(
    side: &mut Connected,
    stage: &mut QpStage,
    q: usize,
    ctx: Ctx<'_>,
    batch: &mut [SendRequest],
) -> Result<()> {
    let Ctx { shape, layout, p } = ctx;
    while let Some((chunk, done)) = stage.next_to_post(p.limit(&stage.notices)) {
        let work = layout.work(&chunk);
        let room = u64::from(shape.depth).saturating_sub(stage.send_queue_used());
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
            let signaled = is_signaled(n, shape.cq_mod, last_op);
            let covers = if signaled {
                let covers = n - stage.last_signaled;
                stage.last_signaled = n;
                covers as u32
            } else {
                0
            };
            *wr = SendRequest {
                wr_id: WrId::new(WrKind::Op, q, covers).0,
                op: if p.notified {
                    op_between_bounce_buffers(side, q, shape.verb, &chunk, i, &work)
                } else {
                    op_for(side, q, shape.verb, work.offset)
                },
                local_offset: bounce + i * work.op_len,
                len: work.op_len as u32,
                signaled,
            };
        }
        let requests = &batch[..count as usize];
        match side.ah.get(q) {
            Some(ah) => side.qps[q].post_send_ud(&side.mr, requests, shape.inline, ah)?,
            None => side.qps[q].post_send(&side.mr, requests, shape.inline)?,
        }
        stage.posted += count;
        stage.in_flight_max = stage.in_flight_max.max(stage.posted - stage.completed);
        stage.posted_up_to(chunk, done + count, work.ops);
    }
    Ok(())
}

/// Posts receives for the chunks the pipeline hands out, as far as the receive queue's depth
/// allows: a SEND receiver's, one per message at its place in the bounce buffer; a WRITE
/// target's, one empty receive per chunk for the WRITE with immediate that completes it.
fn post_receives(side: &mut Connected, stage: &mut QpStage, q: usize, ctx: Ctx<'_>) -> Result<()> {
    let Ctx { shape, layout, p } = ctx;
    let role = p.role;
    while let Some((chunk, mut done)) = stage.next_to_post(u64::MAX) {
        let work = layout.work(&chunk);
        let (count, len) = match role {
            Duty::WriteTarget => (1, 0),
            _ => (work.ops, work.op_len),
        };
        let bounce = bounce_offset(side, q, &chunk)?;
        while done < count && stage.posted - stage.completed < u64::from(shape.rx_depth) {
            stage.posted += 1;
            let id = WrId::new(WrKind::Recv, q, 1).0;
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

/// Operation `i` of `chunk` between two staged ends (the same layout at both): a WRITE into
/// the peer's bounce buffer of the same number, the chunk's last one carrying the number as
/// immediate data; or a READ from it.
#[inline]
fn op_between_bounce_buffers(
    side: &Connected,
    q: usize,
    verb: Verb,
    chunk: &Chunk,
    i: u64,
    work: &Work,
) -> Op {
    let remote_addr = side.remote[q].addr + chunk.buffer_offset as u64 + i * work.op_len;
    let rkey = side.remote[q].rkey;
    match verb {
        Verb::Read => Op::Read { remote_addr, rkey },
        _ if i + 1 == work.ops => Op::WriteWithImm {
            remote_addr,
            rkey,
            imm: chunk.seq as u32,
        },
        _ => Op::Write { remote_addr, rkey },
    }
}

/// The operation a staged QP posts against a peer that is not staged: into its receive half
/// (WRITE), from its send half (READ), or a SEND; `offset` is where the chunk sits in the
/// message.
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

    fn copied(stage: &mut QpStage, n: usize) {
        let Pipe::Source(tx) = &mut stage.pipe else {
            unreachable!()
        };
        for _ in 0..n {
            let c = tx.next_copy_to_start().unwrap();
            tx.copy_done(c.seq).unwrap();
        }
    }

    fn proto(role: Duty, notified: bool, total: u64) -> Protocol {
        Protocol {
            role,
            notified,
            depth: 2,
            total,
        }
    }

    #[test]
    fn a_write_source_posts_only_the_chunks_it_holds_credits_for() {
        let plan = StagingPlan::single(8 * 4096, 4096, 2).unwrap();
        let p = proto(Duty::Source, true, 8);
        let mut stage = QpStage::new(Duty::Source, plan);
        copied(&mut stage, 2);
        // Two bounce buffers at the target: chunks 0 and 1 go without a credit...
        assert_eq!(p.limit(&stage.notices), 2);
        assert_eq!(stage.next_to_post(1).map(|(c, _)| c.seq), Some(0));
        assert_eq!(stage.next_to_post(1), None, "chunk 1 waits for the limit");
        assert_eq!(stage.next_to_post(2).map(|(c, _)| c.seq), Some(1));
        // ...and each credit lets one more through.
        stage.notices.received = 1;
        assert_eq!(p.limit(&stage.notices), 3);
        assert!(stage.next_to_post(3).is_none(), "chunk 2 is not copied yet");
        // A chunk half posted goes on whatever the limit (its buffer was granted already).
        stage.posting = plan.chunk(1).map(|c| (c, 3));
        assert_eq!(stage.next_to_post(0).map(|(c, d)| (c.seq, d)), Some((1, 3)));
    }

    #[test]
    fn a_read_sink_reads_only_what_was_announced() {
        let plan = StagingPlan::single(8 * 4096, 4096, 2).unwrap();
        let p = proto(Duty::Sink, true, 8);
        let mut stage = QpStage::new(Duty::Sink, plan);
        assert_eq!(p.limit(&stage.notices), 0);
        assert!(stage.next_to_post(p.limit(&stage.notices)).is_none());
        stage.notices.received = 1;
        assert_eq!(
            stage
                .next_to_post(p.limit(&stage.notices))
                .map(|(c, _)| c.seq),
            Some(0)
        );
        assert!(stage.next_to_post(p.limit(&stage.notices)).is_none());
        // Not notified (the source is not staged): no limit.
        assert_eq!(proto(Duty::Sink, false, 8).limit(&stage.notices), u64::MAX);
    }

    #[test]
    fn who_sends_and_who_expects_notices() {
        for (role, notified, expects, sends) in [
            (Duty::Source, true, true, false),
            (Duty::WriteTarget, false, false, true),
            (Duty::ReadSource, false, true, true),
            (Duty::Sink, true, true, true),
            (Duty::Sink, false, false, false),
            (Duty::Source, false, false, false),
            (Duty::Receiver, false, false, false),
        ] {
            let p = proto(role, notified, 1);
            assert_eq!(p.expects_notices(), expects, "{role:?} {notified}");
            assert_eq!(p.sends_notices(), sends, "{role:?} {notified}");
        }
    }

    #[test]
    fn each_side_finishes_only_with_its_notices_settled() {
        let plan = StagingPlan::single(4096, 4096, 2).unwrap();
        let layout_free = proto(Duty::Source, false, 1);
        let notified = proto(Duty::Source, true, 1);
        let mut source = QpStage::new(Duty::Source, plan);
        copied(&mut source, 1);
        if let Pipe::Source(tx) = &mut source.pipe {
            tx.next_post().unwrap();
            tx.rdma_done(0).unwrap();
        }
        assert!(source.finished(&layout_free));
        assert!(!source.finished(&notified), "the last credit is due");
        source.notices.received = 1;
        assert!(source.finished(&notified));

        let target = proto(Duty::WriteTarget, false, 1);
        let mut stage = QpStage::new(Duty::WriteTarget, plan);
        if let Pipe::Sink(rx) = &mut stage.pipe {
            let c = rx.next_landing().unwrap();
            rx.landed(c.seq).unwrap();
            rx.next_copy_to_start().unwrap();
            rx.copy_done(c.seq).unwrap();
        }
        stage.notices.owed = 1;
        assert!(!stage.finished(&target), "a credit is owed");
        stage.notices = Notices {
            sent: 1,
            ..Notices::default()
        };
        assert!(!stage.finished(&target), "its SEND is in flight");
        stage.notices.sent_done = 1;
        assert!(stage.finished(&target));
    }

    #[test]
    fn a_read_source_frees_a_buffer_only_on_its_credit() {
        let plan = StagingPlan::single(3 * 4096, 4096, 2).unwrap();
        let p = proto(Duty::ReadSource, false, 3);
        let layout =
            Layout::new(accel::StagingConfig::new(4096, 2).unwrap(), 4096, 4096, 3).unwrap();
        let mut qps = vec![QpStage::new(Duty::ReadSource, plan)];
        copied(&mut qps[0], 2);
        announce_ready(&mut qps[0]);
        assert_eq!(qps[0].notices.owed, 2, "a ready for each chunk copied");
        let Pipe::Source(tx) = &mut qps[0].pipe else {
            unreachable!()
        };
        assert!(tx.next_copy_to_start().is_none(), "both buffers are out");
        // The peer's credit for chunk 0 arrives: its buffer takes chunk 2.
        let wc = Completion::success(WrId::new(WrKind::NoticeRecv, 0, 1).0);
        complete(&mut qps, &wc, &p, &layout).unwrap();
        assert_eq!(qps[0].messages, 1);
        let Pipe::Source(tx) = &mut qps[0].pipe else {
            unreachable!()
        };
        assert_eq!(tx.next_copy_to_start().map(|c| c.seq), Some(2));
    }
}
