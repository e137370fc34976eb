//! The staged path's scheduling (GPUDirect RDMA off), as pure code: no runtime calls, so every ordering rule is
//! unit-tested on any machine.
//!
//! # The model
//! The payload lives in GPU memory and moves through `depth` (K) pinned bounce buffers of `chunk` (C) bytes
//! each, in chunks numbered by a sequence number `seq` that runs across messages (so the next message's copies
//! overlap the previous one's network operations, as a well-written application without GDR would do).
//! Chunk `seq` always uses bounce buffer `seq % K` on both sides, so sender and receiver agree on the remote
//! buffer without exchanging it.
//!
//! **Sender** ([`SendPipeline`]): copy GPU -> bounce buffer (device-to-host), then post the RDMA operation from
//! the bounce buffer.
//! 1. [`SendPipeline::next_copy_to_start`] hands out chunk `seq` once its buffer is free; the engine queues the
//!    device-to-host copy and records the buffer's event after it.
//! 2. [`SendPipeline::copy_done`] when that event completes.
//! 3. [`SendPipeline::next_post`] hands out the next chunk, in order, whose copy is done; the engine posts it
//!    (wr_id = seq).
//! 4. [`SendPipeline::rdma_done`] on its completion. The buffer is free again only now: **both** its copy and its
//!    RDMA operation have completed, so chunk `seq + K` may be copied into it.
//!
//! **Receiver** ([`RecvPipeline`]): data lands in a bounce buffer, then is copied host-to-device.
//! 1. [`RecvPipeline::next_landing`] hands out chunk `seq`'s buffer to the network once it is free (post a
//!    receive, or grant the sender a credit for a WRITE).
//! 2. [`RecvPipeline::landed`] when the data is there.
//! 3. [`RecvPipeline::next_copy_to_start`] hands out the next landed chunk, in order; the engine queues the
//!    host-to-device copy and records the buffer's event.
//! 4. [`RecvPipeline::copy_done`] when that event completes: the buffer is free for chunk `seq + K`.
//!
//! Copies start in chunk order and operations are posted in chunk order; completions may be reported in any
//! order. A call that contradicts the state (a completion for a chunk not in flight, twice, or before its
//! start) is a [`StagingError::Misuse`], never a panic. Nothing here allocates after construction: the state
//! is one slot per bounce buffer plus counters.
//!
//! ```
//! use accel::staging::{SendPipeline, StagingConfig, StagingPlan};
//! # fn main() -> Result<(), accel::StagingError> {
//! let plan = StagingPlan::new(StagingConfig::default(), 3 << 20, 1)?; // 3 MiB, 1 MiB chunks, K = 4
//! let mut tx = SendPipeline::new(plan);
//! while !tx.is_finished() {
//!     while let Some(c) = tx.next_copy_to_start() {
//!         // stream.copy_device_to_host(bounce, c.buffer_offset, payload, c.offset, c.len); record event[c.buffer]
//!         tx.copy_done(c.seq)?; // (here: pretend it completed at once; really: when event[c.buffer] does)
//!     }
//!     while let Some(c) = tx.next_post() {
//!         // post the RDMA operation from bounce + c.buffer_offset, c.len bytes, wr_id = c.seq
//!         tx.rdma_done(c.seq)?; // (really: when its completion is polled)
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Its tests (`staging/tests.rs`) check the scheduler against copy-engine and network models.

use std::fmt;

/// Default bounce-buffer (chunk) size: 1 MiB, large enough that a copy's fixed cost (a few µs) is small next to
/// its transfer time at PCIe Gen5 speeds, small enough that the pipeline fills quickly.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Default number of bounce buffers: 4, so that a copy, a network operation and their completions overlap
/// with room to spare.
pub const DEFAULT_DEPTH: usize = 4;
/// Chunks are multiples of the host page: bounce buffers are page-aligned slices of one pinned allocation.
pub const CHUNK_ALIGN: usize = 4096;
/// Largest chunk accepted.
pub const MAX_CHUNK: usize = 1 << 30;
/// Most bounce buffers accepted.
pub const MAX_DEPTH: usize = 64;

/// A staging configuration that cannot work, or an engine call that contradicts the pipeline's state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StagingError {
    /// Chunk below 4 KiB.
    #[error("staging chunk size {chunk} B is too small: at least 4096 B (4K); the default is 1M")]
    ChunkTooSmall {
        /// The chunk size given.
        chunk: usize,
    },
    /// Chunk above 1 GiB.
    #[error("staging chunk size {chunk} B is too large: at most 1 GiB (1G); the default is 1M")]
    ChunkTooLarge {
        /// The chunk size given.
        chunk: usize,
    },
    /// Chunk not a multiple of 4 KiB.
    #[error(
        "staging chunk size {chunk} B is not a multiple of 4096 B (bounce buffers are page-aligned slices of \
         one pinned allocation); try {suggest} B, or the default 1M"
    )]
    ChunkNotPageMultiple {
        /// The chunk size given.
        chunk: usize,
        /// The nearest multiple of 4 KiB at or above it.
        suggest: usize,
    },
    /// Depth outside 1..=64.
    #[error(
        "staging depth {depth} is out of range: 1 to 64 bounce buffers; the default is 4 (2 or more let copies \
         and network operations overlap)"
    )]
    BadDepth {
        /// The depth given.
        depth: usize,
    },
    /// A zero-byte message.
    #[error("staged payload is empty: the message size must be at least 1 byte")]
    EmptyPayload,
    /// Zero messages.
    #[error("staged transfer of 0 messages: at least 1 is needed")]
    NoMessages,
    /// An engine call that contradicts the pipeline's state (a bug in the caller).
    #[error("staging pipeline misuse: {event} for chunk {seq}, but {state}; this is a bug in the engine")]
    Misuse {
        /// The call.
        event: &'static str,
        /// The chunk it named.
        seq: u64,
        /// What the pipeline knows about that chunk.
        state: String,
    },
}

impl StagingError {
    /// Whether the user gave a bad value (exit status 2), as opposed to an engine bug ([`StagingError::Misuse`]).
    pub fn is_usage_error(&self) -> bool {
        !matches!(self, StagingError::Misuse { .. })
    }
}

/// Chunk size and bounce-buffer count, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingConfig {
    /// Bytes per chunk (per bounce buffer).
    pub chunk: usize,
    /// Number of bounce buffers (K).
    pub depth: usize,
}

impl Default for StagingConfig {
    fn default() -> Self {
        StagingConfig {
            chunk: DEFAULT_CHUNK,
            depth: DEFAULT_DEPTH,
        }
    }
}

impl StagingConfig {
    /// A validated configuration.
    pub fn new(chunk: usize, depth: usize) -> Result<StagingConfig, StagingError> {
        let cfg = StagingConfig { chunk, depth };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks chunk (4 KiB multiple, 4 KiB ..= 1 GiB) and depth (1 ..= 64).
    pub fn validate(&self) -> Result<(), StagingError> {
        if self.chunk < CHUNK_ALIGN {
            return Err(StagingError::ChunkTooSmall { chunk: self.chunk });
        }
        if self.chunk > MAX_CHUNK {
            return Err(StagingError::ChunkTooLarge { chunk: self.chunk });
        }
        if !self.chunk.is_multiple_of(CHUNK_ALIGN) {
            return Err(StagingError::ChunkNotPageMultiple {
                chunk: self.chunk,
                suggest: self.chunk.next_multiple_of(CHUNK_ALIGN),
            });
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(StagingError::BadDepth { depth: self.depth });
        }
        Ok(())
    }

    /// Bytes of pinned memory for all bounce buffers (one allocation; buffer `b` starts at `b * chunk`).
    pub fn bounce_bytes(&self) -> usize {
        self.chunk.saturating_mul(self.depth)
    }

    /// Where bounce buffer `b` starts inside the pinned allocation (saturating for `b` beyond any real depth).
    pub fn buffer_offset(&self, buffer: usize) -> usize {
        buffer.saturating_mul(self.chunk)
    }
}

/// What is moved: `messages` messages of `message_size` bytes each, cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagingPlan {
    config: StagingConfig,
    message_size: usize,
    messages: u64,
    chunks_per_message: u64,
    total_chunks: u64,
}

impl StagingPlan {
    /// `messages` messages of `message_size` bytes (use `u64::MAX` for "until stopped", e.g. `--duration`).
    pub fn new(
        config: StagingConfig,
        message_size: usize,
        messages: u64,
    ) -> Result<StagingPlan, StagingError> {
        config.validate()?;
        if message_size == 0 {
            return Err(StagingError::EmptyPayload);
        }
        if messages == 0 {
            return Err(StagingError::NoMessages);
        }
        let chunks_per_message = message_size.div_ceil(config.chunk) as u64;
        Ok(StagingPlan {
            config,
            message_size,
            messages,
            chunks_per_message,
            total_chunks: messages.saturating_mul(chunks_per_message),
        })
    }

    /// One payload of `total_bytes`, in chunks of `chunk` through `depth` buffers.
    pub fn single(
        total_bytes: usize,
        chunk: usize,
        depth: usize,
    ) -> Result<StagingPlan, StagingError> {
        StagingPlan::new(StagingConfig::new(chunk, depth)?, total_bytes, 1)
    }

    /// The configuration.
    pub fn config(&self) -> StagingConfig {
        self.config
    }

    /// Bytes per message.
    pub fn message_size(&self) -> usize {
        self.message_size
    }

    /// Messages to move.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Chunks per message (the last one may be partial).
    pub fn chunks_per_message(&self) -> u64 {
        self.chunks_per_message
    }

    /// Where a pipeline that has started `next` chunks stops when told to: the end of the
    /// message under way (never past the current `limit`).
    fn stop_at(&self, next: u64, limit: u64) -> u64 {
        let cpm = self.chunks_per_message;
        next.div_ceil(cpm).saturating_mul(cpm).min(limit)
    }

    /// Chunks in all (saturating at `u64::MAX`).
    pub fn total_chunks(&self) -> u64 {
        self.total_chunks
    }

    /// Chunk `seq`, or `None` past the end.
    pub fn chunk(&self, seq: u64) -> Option<Chunk> {
        if seq >= self.total_chunks {
            return None;
        }
        let message = seq / self.chunks_per_message;
        let index = seq % self.chunks_per_message;
        // index < chunks_per_message = ceil(message_size / chunk), so offset < message_size fits in usize.
        let offset = (index as usize) * self.config.chunk;
        let len = self.config.chunk.min(self.message_size - offset);
        let buffer = (seq % self.config.depth as u64) as usize;
        Some(Chunk {
            seq,
            message,
            index,
            offset,
            len,
            buffer,
            buffer_offset: self.config.buffer_offset(buffer),
            last_in_message: index + 1 == self.chunks_per_message,
        })
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.config.depth as u64) as usize
    }
}

/// One chunk's work order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Sequence number across all messages (use it as the wr_id).
    pub seq: u64,
    /// Which message.
    pub message: u64,
    /// Index of the chunk within its message.
    pub index: u64,
    /// Byte offset within the message's payload (in GPU memory).
    pub offset: usize,
    /// Bytes in this chunk (the chunk size, or less for a message's last chunk).
    pub len: usize,
    /// Bounce buffer: `seq % depth`.
    pub buffer: usize,
    /// Byte offset of that bounce buffer in the pinned allocation.
    pub buffer_offset: usize,
    /// Whether this completes its message.
    pub last_in_message: bool,
}

/// What a bounce buffer holds at one stage of a pipeline: free, or a chunk in one of the pipeline's states.
trait Stage: Copy + PartialEq + fmt::Display {
    /// The buffer holds no chunk.
    const FREE: Self;
    /// How a chunk that was never handed out is described in a misuse error.
    const NEVER: &'static str;
    /// The chunk the buffer holds, in whatever state.
    fn chunk(self) -> Option<u64>;

    /// Whether the buffer holds chunk `seq`.
    fn holds(self, seq: u64) -> bool {
        self.chunk() == Some(seq)
    }
}

/// The bounce buffers a pipeline passes chunks through, in order, stage by stage: what [`SendPipeline`] and
/// [`RecvPipeline`] share. Chunk `seq` uses buffer `seq % depth`; a chunk is handed out (its first stage) only
/// when its buffer is free, and done when it leaves its last stage.
#[derive(Debug, Clone)]
struct Ring<S> {
    plan: StagingPlan,
    slots: Vec<S>,
    /// Chunks handed out so far (the next one's number).
    started: u64,
    /// Where handing out stops: the plan's end, or the end of the message under way after a stop.
    limit: u64,
    /// Chunks done.
    done: u64,
    /// Every chunk below this one is done.
    done_prefix: u64,
}

impl<S: Stage> Ring<S> {
    fn new(plan: StagingPlan) -> Ring<S> {
        Ring {
            plan,
            slots: vec![S::FREE; plan.config.depth],
            started: 0,
            limit: plan.total_chunks,
            done: 0,
            done_prefix: 0,
        }
    }

    /// The next chunk to hand out, if the limit allows and its buffer is free.
    fn peek_start(&self) -> Option<Chunk> {
        let seq = self.started;
        if seq >= self.limit || self.slots[self.plan.slot(seq)] != S::FREE {
            return None;
        }
        self.plan.chunk(seq)
    }

    /// Hands out the next chunk into its first stage, if the limit allows and its buffer is free.
    fn start(&mut self, first: fn(u64) -> S) -> Option<Chunk> {
        let chunk = self.peek_start()?;
        self.slots[chunk.buffer] = first(chunk.seq);
        self.started += 1;
        Some(chunk)
    }

    /// Chunk number `*next`, in order, if it is in stage `from`: moved to stage `to`, and `*next` advanced.
    fn take_next(&mut self, next: &mut u64, from: fn(u64) -> S, to: fn(u64) -> S) -> Option<Chunk> {
        let chunk = self.peek(*next, from)?;
        self.slots[chunk.buffer] = to(chunk.seq);
        *next += 1;
        Some(chunk)
    }

    /// Chunk `seq`, if it was handed out and is in stage `stage`.
    fn peek(&self, seq: u64, stage: fn(u64) -> S) -> Option<Chunk> {
        if seq >= self.started || self.slots[self.plan.slot(seq)] != stage(seq) {
            return None;
        }
        self.plan.chunk(seq)
    }

    /// Chunk `seq` moves from stage `from` to stage `to` (`S::FREE`: it is done); anything else is misuse.
    fn advance(
        &mut self,
        event: &'static str,
        seq: u64,
        from: fn(u64) -> S,
        to: S,
    ) -> Result<(), StagingError> {
        let slot = self.plan.slot(seq);
        let now = self.slots[slot];
        if seq >= self.started || now != from(seq) {
            return Err(self.misuse(event, seq, now));
        }
        self.slots[slot] = to;
        if to == S::FREE {
            self.done += 1;
            while self.done_prefix < self.started
                && !self.slots[self.plan.slot(self.done_prefix)].holds(self.done_prefix)
            {
                self.done_prefix += 1;
            }
        }
        Ok(())
    }

    fn misuse(&self, event: &'static str, seq: u64, slot: S) -> StagingError {
        let state = if seq >= self.started {
            S::NEVER.to_string()
        } else if !slot.holds(seq) {
            format!("it already completed ({slot})")
        } else {
            slot.to_string()
        };
        StagingError::Misuse { event, seq, state }
    }

    /// Buffers holding a chunk in stage `stage`.
    fn count(&self, stage: fn(u64) -> S) -> usize {
        self.slots
            .iter()
            .filter(|s| s.chunk().is_some_and(|seq| **s == stage(seq)))
            .count()
    }

    /// The oldest chunk in stage `stage` below `upto` (copies on one stream complete in order).
    fn oldest(&self, stage: fn(u64) -> S, upto: u64) -> Option<Chunk> {
        (self.done_prefix..upto)
            .find(|&seq| self.slots[self.plan.slot(seq)] == stage(seq))
            .and_then(|seq| self.plan.chunk(seq))
    }

    fn buffer_free(&self, buffer: usize) -> bool {
        self.slots.get(buffer) == Some(&S::FREE)
    }

    fn messages_done(&self) -> u64 {
        self.done_prefix / self.plan.chunks_per_message
    }

    fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| *s == S::FREE)
    }

    fn is_finished(&self) -> bool {
        self.started == self.limit && self.is_idle()
    }

    fn stop(&mut self) -> u64 {
        self.limit = self.plan.stop_at(self.started, self.limit);
        self.limit / self.plan.chunks_per_message
    }

    fn reset(&mut self) -> Result<(), StagingError> {
        if !self.is_idle() {
            let seq = self.done_prefix;
            return Err(self.misuse("reset", seq, self.slots[self.plan.slot(seq)]));
        }
        *self = Ring::new(self.plan);
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendSlot {
    Free,
    Copying(u64),
    Copied(u64),
    Posted(u64),
}

impl Stage for SendSlot {
    const FREE: Self = SendSlot::Free;
    const NEVER: &'static str = "it was never started";

    fn chunk(self) -> Option<u64> {
        match self {
            SendSlot::Free => None,
            SendSlot::Copying(s) | SendSlot::Copied(s) | SendSlot::Posted(s) => Some(s),
        }
    }
}

impl fmt::Display for SendSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendSlot::Free => write!(f, "its buffer is free"),
            SendSlot::Copying(s) => write!(f, "its buffer holds chunk {s}, being copied"),
            SendSlot::Copied(s) => {
                write!(f, "its buffer holds chunk {s}, copied and not yet posted")
            }
            SendSlot::Posted(s) => write!(f, "its buffer holds chunk {s}, posted"),
        }
    }
}

/// The sender's side of the staged path: GPU -> bounce buffer copy, then RDMA from the bounce buffer.
#[derive(Debug, Clone)]
pub struct SendPipeline {
    ring: Ring<SendSlot>,
    next_post: u64,
}

impl SendPipeline {
    /// A pipeline with all bounce buffers free.
    pub fn new(plan: StagingPlan) -> SendPipeline {
        SendPipeline {
            ring: Ring::new(plan),
            next_post: 0,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &StagingPlan {
        &self.ring.plan
    }

    /// The next chunk to copy device-to-host, if its bounce buffer is free (its previous chunk's copy and RDMA
    /// operation both completed); marks the copy started. Chunks come in order.
    pub fn next_copy_to_start(&mut self) -> Option<Chunk> {
        self.ring.start(SendSlot::Copying)
    }

    /// The copy of chunk `seq` completed (its event reported complete).
    pub fn copy_done(&mut self, seq: u64) -> Result<(), StagingError> {
        self.ring
            .advance("copy_done", seq, SendSlot::Copying, SendSlot::Copied(seq))
    }

    /// The next chunk to post, in order, if its copy is done; marks it posted. (`None` while the next chunk in
    /// order is still being copied, even if later ones are done.)
    pub fn next_post(&mut self) -> Option<Chunk> {
        self.ring
            .take_next(&mut self.next_post, SendSlot::Copied, SendSlot::Posted)
    }

    /// What [`SendPipeline::next_post`] would return, without marking it posted (e.g. to check for a credit
    /// from the receiver first).
    pub fn peek_post(&self) -> Option<Chunk> {
        self.ring.peek(self.next_post, SendSlot::Copied)
    }

    /// The RDMA operation of chunk `seq` completed: its bounce buffer is free.
    pub fn rdma_done(&mut self, seq: u64) -> Result<(), StagingError> {
        self.ring
            .advance("rdma_done", seq, SendSlot::Posted, SendSlot::Free)
    }

    /// Whether bounce buffer `b` is free (no chunk in it).
    pub fn buffer_free(&self, buffer: usize) -> bool {
        self.ring.buffer_free(buffer)
    }

    /// The oldest chunk whose copy is in flight: the event to poll next (copies on one stream complete in order).
    pub fn oldest_copy_in_flight(&self) -> Option<Chunk> {
        self.ring.oldest(SendSlot::Copying, self.ring.started)
    }

    /// Copies started and not completed.
    pub fn copies_in_flight(&self) -> usize {
        self.ring.count(SendSlot::Copying)
    }

    /// RDMA operations posted and not completed.
    pub fn posts_in_flight(&self) -> usize {
        self.ring.count(SendSlot::Posted)
    }

    /// Chunks fully done (copy and RDMA completed).
    pub fn chunks_done(&self) -> u64 {
        self.ring.done
    }

    /// Messages whose chunks are all done, counted from the first (in order).
    pub fn messages_done(&self) -> u64 {
        self.ring.messages_done()
    }

    /// Nothing in flight (copies, copied-not-posted, posts).
    pub fn is_idle(&self) -> bool {
        self.ring.is_idle()
    }

    /// All chunks up to the limit (the plan's end, or where [`SendPipeline::stop`] put it) are done.
    pub fn is_finished(&self) -> bool {
        self.ring.is_finished()
    }

    /// Starts no chunk of a new message: the current message is finished, then the pipeline drains. Returns
    /// the number of messages that will have been moved.
    pub fn stop(&mut self) -> u64 {
        self.ring.stop()
    }

    /// Back to the start (all buffers free), for the next run. `Err(Misuse)` while anything is in flight.
    pub fn reset(&mut self) -> Result<(), StagingError> {
        self.ring.reset()?;
        self.next_post = 0;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecvSlot {
    Free,
    Granted(u64),
    Landed(u64),
    Copying(u64),
}

impl Stage for RecvSlot {
    const FREE: Self = RecvSlot::Free;
    const NEVER: &'static str = "it was never handed out";

    fn chunk(self) -> Option<u64> {
        match self {
            RecvSlot::Free => None,
            RecvSlot::Granted(s) | RecvSlot::Landed(s) | RecvSlot::Copying(s) => Some(s),
        }
    }
}

impl fmt::Display for RecvSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvSlot::Free => write!(f, "its buffer is free"),
            RecvSlot::Granted(s) => write!(f, "its buffer is waiting for chunk {s} to land"),
            RecvSlot::Landed(s) => {
                write!(f, "its buffer holds chunk {s}, landed and not yet copied")
            }
            RecvSlot::Copying(s) => write!(f, "its buffer holds chunk {s}, being copied"),
        }
    }
}

/// The receiver's side of the staged path: data lands in a bounce buffer, then is copied host-to-device.
#[derive(Debug, Clone)]
pub struct RecvPipeline {
    ring: Ring<RecvSlot>,
    next_copy: u64,
}

impl RecvPipeline {
    /// A pipeline with all bounce buffers free.
    pub fn new(plan: StagingPlan) -> RecvPipeline {
        RecvPipeline {
            ring: Ring::new(plan),
            next_copy: 0,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &StagingPlan {
        &self.ring.plan
    }

    /// The next chunk whose bounce buffer is free to receive it: post a receive there, or grant the sender a
    /// credit. Chunks come in order.
    pub fn next_landing(&mut self) -> Option<Chunk> {
        self.ring.start(RecvSlot::Granted)
    }

    /// What [`RecvPipeline::next_landing`] would return, without handing it out (e.g. to check that the
    /// sender announced it first).
    pub fn peek_landing(&self) -> Option<Chunk> {
        self.ring.peek_start()
    }

    /// Chunk `seq`'s data is in its bounce buffer (receive completion, or the sender's notice for a WRITE).
    pub fn landed(&mut self, seq: u64) -> Result<(), StagingError> {
        self.ring
            .advance("landed", seq, RecvSlot::Granted, RecvSlot::Landed(seq))
    }

    /// The next landed chunk, in order, to copy host-to-device; marks the copy started.
    pub fn next_copy_to_start(&mut self) -> Option<Chunk> {
        self.ring
            .take_next(&mut self.next_copy, RecvSlot::Landed, RecvSlot::Copying)
    }

    /// The host-to-device copy of chunk `seq` completed: its data is in GPU memory and its buffer is free.
    pub fn copy_done(&mut self, seq: u64) -> Result<(), StagingError> {
        self.ring
            .advance("copy_done", seq, RecvSlot::Copying, RecvSlot::Free)
    }

    /// Whether bounce buffer `b` is free.
    pub fn buffer_free(&self, buffer: usize) -> bool {
        self.ring.buffer_free(buffer)
    }

    /// The oldest chunk whose copy is in flight: the event to poll next.
    pub fn oldest_copy_in_flight(&self) -> Option<Chunk> {
        self.ring.oldest(RecvSlot::Copying, self.next_copy)
    }

    /// Buffers handed to the network and not yet landed.
    pub fn landings_pending(&self) -> usize {
        self.ring.count(RecvSlot::Granted)
    }

    /// Copies started and not completed.
    pub fn copies_in_flight(&self) -> usize {
        self.ring.count(RecvSlot::Copying)
    }

    /// Chunks in GPU memory.
    pub fn chunks_done(&self) -> u64 {
        self.ring.done
    }

    /// Messages wholly in GPU memory, counted from the first (in order).
    pub fn messages_done(&self) -> u64 {
        self.ring.messages_done()
    }

    /// Nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.ring.is_idle()
    }

    /// All chunks up to the limit are in GPU memory.
    pub fn is_finished(&self) -> bool {
        self.ring.is_finished()
    }

    /// Hands out no buffer for a new message; returns the number of messages that will have been received.
    /// Buffers already handed out for chunks that will never come must still be reclaimed by the engine (e.g.
    /// by flushing the receive queue) before [`RecvPipeline::reset`].
    pub fn stop(&mut self) -> u64 {
        self.ring.stop()
    }

    /// Back to the start. `Err(Misuse)` while anything is in flight.
    pub fn reset(&mut self) -> Result<(), StagingError> {
        self.ring.reset()?;
        self.next_copy = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
