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
//! Long because nearly half is tests: the scheduler is checked against copy-engine and network
//! models.

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
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

    const K: usize = 4;

    fn plan(total: usize, chunk: usize, depth: usize) -> StagingPlan {
        StagingPlan::single(total, chunk, depth).unwrap()
    }

    /// xorshift64*: deterministic, dependency-free randomness for the simulations.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    // ---- configuration -------------------------------------------------------------------------------------

    #[test]
    fn defaults_are_valid_and_sensible() {
        let cfg = StagingConfig::default();
        assert_eq!(
            cfg,
            StagingConfig {
                chunk: 1 << 20,
                depth: 4
            }
        );
        cfg.validate().unwrap();
        assert_eq!(cfg.bounce_bytes(), 4 << 20);
        assert_eq!(cfg.buffer_offset(3), 3 << 20);
    }

    #[test]
    fn bad_configurations_say_what_to_try() {
        let e = StagingConfig::new(1000, 4).unwrap_err();
        assert_eq!(e, StagingError::ChunkTooSmall { chunk: 1000 });
        assert!(e.to_string().contains("at least 4096 B"), "{e}");
        let e = StagingConfig::new(5000, 4).unwrap_err();
        assert_eq!(
            e,
            StagingError::ChunkNotPageMultiple {
                chunk: 5000,
                suggest: 8192
            }
        );
        assert!(e.to_string().contains("try 8192 B"), "{e}");
        let e = StagingConfig::new(2 << 30, 4).unwrap_err();
        assert!(matches!(e, StagingError::ChunkTooLarge { .. }));
        for depth in [0, 65, usize::MAX] {
            let e = StagingConfig::new(4096, depth).unwrap_err();
            assert_eq!(e, StagingError::BadDepth { depth });
            assert!(e.to_string().contains("1 to 64"), "{e}");
        }
        StagingConfig::new(4096, 1).unwrap();
        StagingConfig::new(1 << 30, 64).unwrap();
        assert_eq!(
            StagingPlan::new(StagingConfig::default(), 0, 1),
            Err(StagingError::EmptyPayload)
        );
        assert_eq!(
            StagingPlan::new(StagingConfig::default(), 1, 0),
            Err(StagingError::NoMessages)
        );
    }

    #[test]
    fn usage_errors_are_told_apart_from_engine_bugs() {
        assert!(StagingConfig::new(1000, 4).unwrap_err().is_usage_error());
        assert!(StagingConfig::new(4096, 0).unwrap_err().is_usage_error());
        let mut tx = SendPipeline::new(plan(4096, 4096, 1));
        assert!(!tx.copy_done(0).unwrap_err().is_usage_error());
    }

    // ---- chunking ------------------------------------------------------------------------------------------

    #[test]
    fn chunks_cover_the_payload_with_a_partial_last_chunk() {
        let chunk = 64 << 10;
        let total = 5 * chunk + 123;
        let p = plan(total, chunk, K);
        assert_eq!(p.total_chunks(), 6);
        let chunks: Vec<Chunk> = (0..6).map(|s| p.chunk(s).unwrap()).collect();
        let mut next = 0;
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c.seq, i as u64);
            assert_eq!(c.offset, next, "contiguous");
            assert_eq!(c.buffer, i % K);
            assert_eq!(c.buffer_offset, (i % K) * chunk);
            assert_eq!(c.last_in_message, i == 5);
            next += c.len;
        }
        assert_eq!(next, total);
        assert_eq!(chunks[5].len, 123, "last chunk is partial");
        assert!(chunks[..5].iter().all(|c| c.len == chunk));
        assert_eq!(p.chunk(6), None);
    }

    #[test]
    fn small_messages_are_one_chunk_each_and_exact_multiples_have_no_empty_tail() {
        let p = StagingPlan::new(StagingConfig::default(), 64, 10).unwrap();
        assert_eq!(p.chunks_per_message(), 1);
        assert_eq!(p.total_chunks(), 10);
        let c = p.chunk(7).unwrap();
        assert_eq!(
            (c.message, c.index, c.offset, c.len, c.buffer),
            (7, 0, 0, 64, 3)
        );
        assert!(c.last_in_message);

        let p = StagingPlan::new(StagingConfig::new(4096, 2).unwrap(), 3 * 4096, 2).unwrap();
        assert_eq!(p.total_chunks(), 6);
        let c = p.chunk(5).unwrap();
        assert_eq!((c.message, c.index, c.offset, c.len), (1, 2, 8192, 4096));
        assert!(p.chunk(6).is_none());
    }

    #[test]
    fn unbounded_plans_saturate() {
        let p = StagingPlan::new(StagingConfig::default(), 3 << 20, u64::MAX).unwrap();
        assert_eq!(p.total_chunks(), u64::MAX);
        let c = p.chunk(u64::MAX - 1).unwrap();
        assert_eq!(c.len, 1 << 20);
    }

    // ---- sender ordering and reuse -------------------------------------------------------------------------

    #[test]
    fn sender_copies_and_posts_in_order_even_if_copies_complete_out_of_order() {
        let mut tx = SendPipeline::new(plan(10 << 20, 1 << 20, K));
        let started: Vec<u64> = std::iter::from_fn(|| tx.next_copy_to_start())
            .map(|c| c.seq)
            .collect();
        assert_eq!(started, vec![0, 1, 2, 3], "K copies start, in order");
        assert_eq!(tx.copies_in_flight(), 4);
        tx.copy_done(2).unwrap();
        tx.copy_done(1).unwrap();
        assert_eq!(
            tx.next_post(),
            None,
            "chunk 0 is still being copied: nothing is posted out of order"
        );
        tx.copy_done(0).unwrap();
        let posted: Vec<u64> = std::iter::from_fn(|| tx.next_post())
            .map(|c| c.seq)
            .collect();
        assert_eq!(posted, vec![0, 1, 2]);
        assert_eq!(tx.oldest_copy_in_flight().map(|c| c.seq), Some(3));
        assert_eq!(tx.posts_in_flight(), 3);
    }

    #[test]
    fn sender_reuses_a_buffer_only_after_both_its_copy_and_its_rdma_completed() {
        let mut tx = SendPipeline::new(plan(8 << 20, 1 << 20, 2));
        let c0 = tx.next_copy_to_start().unwrap();
        let c1 = tx.next_copy_to_start().unwrap();
        assert_eq!((c0.buffer, c1.buffer), (0, 1));
        assert_eq!(tx.next_copy_to_start(), None, "both buffers busy");
        assert!(!tx.buffer_free(0));

        tx.copy_done(0).unwrap();
        assert_eq!(
            tx.next_copy_to_start(),
            None,
            "copy done but RDMA not even posted: buffer 0 stays busy"
        );
        assert_eq!(tx.next_post().unwrap().seq, 0);
        assert_eq!(
            tx.next_copy_to_start(),
            None,
            "posted, RDMA in flight: buffer 0 stays busy"
        );
        assert!(!tx.buffer_free(0));

        tx.rdma_done(0).unwrap();
        assert!(tx.buffer_free(0));
        let c2 = tx.next_copy_to_start().unwrap();
        assert_eq!(
            (c2.seq, c2.buffer),
            (2, 0),
            "chunk i + K reuses buffer b only now"
        );
    }

    #[test]
    fn sender_rejects_contradictory_completions() {
        let mut tx = SendPipeline::new(plan(8 << 20, 1 << 20, 2));
        let e = tx.copy_done(0).unwrap_err();
        assert!(e.to_string().contains("never started"), "{e}");
        tx.next_copy_to_start().unwrap();
        let e = tx.rdma_done(0).unwrap_err();
        assert!(
            e.to_string().contains("being copied"),
            "rdma_done before the copy completed: {e}"
        );
        tx.copy_done(0).unwrap();
        let e = tx.copy_done(0).unwrap_err();
        assert!(
            matches!(
                e,
                StagingError::Misuse {
                    event: "copy_done",
                    seq: 0,
                    ..
                }
            ),
            "{e}"
        );
        let e = tx.rdma_done(0).unwrap_err();
        assert!(
            e.to_string().contains("not yet posted"),
            "rdma_done before the post: {e}"
        );
        tx.next_post().unwrap();
        tx.rdma_done(0).unwrap();
        let e = tx.rdma_done(0).unwrap_err();
        assert!(e.to_string().contains("already completed"), "{e}");
        let e = tx.rdma_done(99).unwrap_err();
        assert!(e.to_string().contains("never started"), "{e}");
        assert!(e.to_string().contains("bug in the engine"), "{e}");
    }

    #[test]
    fn sender_finishes_drains_stops_and_resets() {
        let p = StagingPlan::new(StagingConfig::new(4096, 2).unwrap(), 3 * 4096, 100).unwrap();
        let mut tx = SendPipeline::new(p);
        // Move one and a bit messages, then stop: the current message is finished, no new one starts.
        for _ in 0..4 {
            let c = tx.next_copy_to_start().unwrap();
            tx.copy_done(c.seq).unwrap();
            tx.next_post().unwrap();
            tx.rdma_done(c.seq).unwrap();
        }
        assert_eq!(tx.messages_done(), 1);
        assert!(tx.reset().is_ok(), "idle: reset allowed");
        let c = tx.next_copy_to_start().unwrap();
        assert_eq!(c.seq, 0, "reset starts over");
        assert!(tx.reset().is_err(), "in flight: reset refused");
        assert_eq!(tx.stop(), 1);
        tx.copy_done(0).unwrap();
        let mut seqs = vec![];
        loop {
            if let Some(c) = tx.next_post() {
                tx.rdma_done(c.seq).unwrap();
                seqs.push(c.seq);
            } else if let Some(c) = tx.next_copy_to_start() {
                tx.copy_done(c.seq).unwrap();
            } else {
                break;
            }
        }
        assert_eq!(seqs, vec![0, 1, 2]);
        assert!(tx.is_finished());
        assert_eq!(tx.messages_done(), 1);
    }

    // ---- receiver ordering and reuse -----------------------------------------------------------------------

    #[test]
    fn receiver_reuses_a_buffer_only_after_its_copy_completed() {
        let mut rx = RecvPipeline::new(plan(8 << 20, 1 << 20, 2));
        let g: Vec<u64> = std::iter::from_fn(|| rx.next_landing())
            .map(|c| c.seq)
            .collect();
        assert_eq!(g, vec![0, 1]);
        assert_eq!(rx.next_copy_to_start(), None, "nothing landed yet");
        rx.landed(1).unwrap();
        assert_eq!(rx.next_copy_to_start(), None, "chunk 0 first");
        rx.landed(0).unwrap();
        assert_eq!(
            rx.next_landing(),
            None,
            "landed but not copied: buffers busy"
        );
        assert_eq!(rx.next_copy_to_start().unwrap().seq, 0);
        assert_eq!(rx.next_copy_to_start().unwrap().seq, 1);
        assert_eq!(rx.next_landing(), None, "copies in flight: buffers busy");
        rx.copy_done(1).unwrap();
        assert_eq!(
            rx.next_landing(),
            None,
            "buffer 0 (chunk 2's) still copying"
        );
        assert!(rx.buffer_free(1));
        rx.copy_done(0).unwrap();
        let c = rx.next_landing().unwrap();
        assert_eq!((c.seq, c.buffer), (2, 0));
        assert_eq!(rx.chunks_done(), 2);
    }

    #[test]
    fn a_peek_shows_the_next_chunk_without_handing_it_out() {
        let mut rx = RecvPipeline::new(plan(3 * 4096, 4096, 1));
        assert_eq!(rx.peek_landing().map(|c| c.seq), Some(0));
        assert_eq!(
            rx.peek_landing().map(|c| c.seq),
            Some(0),
            "a peek changes nothing"
        );
        assert_eq!(rx.next_landing().map(|c| c.seq), Some(0));
        assert!(rx.peek_landing().is_none(), "the one buffer is out");
        let mut tx = SendPipeline::new(plan(3 * 4096, 4096, 1));
        assert!(tx.peek_post().is_none(), "nothing copied yet");
        let c = tx.next_copy_to_start().unwrap();
        tx.copy_done(c.seq).unwrap();
        assert_eq!(tx.peek_post().map(|c| c.seq), Some(0));
        assert_eq!(tx.next_post().map(|c| c.seq), Some(0));
        assert!(tx.peek_post().is_none());
    }

    #[test]
    fn receiver_rejects_contradictory_completions() {
        let mut rx = RecvPipeline::new(plan(8 << 20, 1 << 20, 2));
        assert!(rx
            .landed(0)
            .unwrap_err()
            .to_string()
            .contains("never handed out"));
        rx.next_landing().unwrap();
        assert!(rx
            .copy_done(0)
            .unwrap_err()
            .to_string()
            .contains("waiting for chunk 0 to land"));
        rx.landed(0).unwrap();
        assert!(rx.landed(0).is_err());
        rx.next_copy_to_start().unwrap();
        rx.copy_done(0).unwrap();
        assert!(rx
            .copy_done(0)
            .unwrap_err()
            .to_string()
            .contains("already completed"));
    }

    // ---- simulations ---------------------------------------------------------------------------------------

    /// A sender against a model of the copy engine (one stream: copies run one after another, FIFO) and of the
    /// network (operations serialised on the wire, completing in order). Returns (ticks, overlap ticks).
    fn simulate_sender(p: StagingPlan, copy_ticks: u64, net_ticks: u64) -> (u64, u64) {
        let mut tx = SendPipeline::new(p);
        let mut copies: VecDeque<(u64, u64)> = VecDeque::new();
        let mut wire: VecDeque<(u64, u64)> = VecDeque::new();
        let (mut t, mut overlap, mut posted) = (0u64, 0u64, Vec::new());
        while !tx.is_finished() {
            while let Some(c) = tx.next_copy_to_start() {
                copies.push_back((c.seq, copy_ticks));
            }
            while let Some(c) = tx.next_post() {
                posted.push(c.seq);
                wire.push_back((c.seq, net_ticks));
            }
            if !copies.is_empty() && !wire.is_empty() {
                overlap += 1;
            }
            t += 1;
            if let Some(head) = copies.front_mut() {
                head.1 -= 1;
                if head.1 == 0 {
                    tx.copy_done(head.0).unwrap();
                    copies.pop_front();
                }
            }
            if let Some(head) = wire.front_mut() {
                head.1 -= 1;
                if head.1 == 0 {
                    tx.rdma_done(head.0).unwrap();
                    wire.pop_front();
                }
            }
            assert!(t < 1_000_000, "stuck");
        }
        assert_eq!(
            posted,
            (0..p.total_chunks()).collect::<Vec<_>>(),
            "each chunk posted once, in order"
        );
        (t, overlap)
    }

    #[test]
    fn copies_and_network_overlap() {
        let n = 32u64;
        let p = plan(n as usize * 4096, 4096, K);
        let (copy, net) = (10, 10);
        let (ticks, overlap) = simulate_sender(p, copy, net);
        let serial = n * (copy + net);
        assert!(
            overlap > ticks / 2,
            "copies and RDMA in flight at once most of the time ({overlap}/{ticks})"
        );
        // Pipelined: about n * max(copy, net) plus the fill, not n * (copy + net).
        assert!(
            ticks <= n * copy.max(net) + copy + net + n,
            "{ticks} ticks, serial would be {serial}"
        );
        assert!(ticks * 3 / 2 < serial);
    }

    #[test]
    fn one_buffer_serialises() {
        let n = 8u64;
        let p = plan(n as usize * 4096, 4096, 1);
        let (ticks, overlap) = simulate_sender(p, 5, 7);
        assert_eq!(overlap, 0, "with one bounce buffer nothing can overlap");
        assert_eq!(ticks, n * (5 + 7));
    }

    #[test]
    fn slower_side_sets_the_pace() {
        let n = 64u64;
        let p = plan(n as usize * 4096, 4096, K);
        let (ticks, _) = simulate_sender(p, 3, 12);
        assert!(ticks <= n * 12 + 3 + 12 + n, "network-bound: {ticks}");
        let (ticks, _) = simulate_sender(p, 12, 3);
        assert!(ticks <= n * 12 + 3 + 12 + n, "copy-bound: {ticks}");
    }

    /// Random completion order (copies and RDMA operations reported out of order), checked against an
    /// independent record of which chunk each buffer holds: no buffer is ever handed out while it holds a chunk.
    #[test]
    fn a_buffer_is_never_handed_out_twice_under_random_completion_order() {
        for seed in 1..=50u64 {
            let mut rng = Rng(seed * 0x9e37_79b9);
            let depth = 1 + rng.below(6) as usize;
            let chunks = 1 + rng.below(40) as usize;
            let p = plan(chunks * 4096 - rng.below(4000) as usize, 4096, depth);
            let mut tx = SendPipeline::new(p);
            let mut owner: HashMap<usize, u64> = HashMap::new();
            let (mut copying, mut copied_unposted, mut posted) = (Vec::new(), 0usize, Vec::new());
            let mut posts = Vec::new();
            let mut steps = 0;
            while !tx.is_finished() {
                steps += 1;
                assert!(steps < 100_000, "seed {seed}: stuck");
                match rng.below(4) {
                    0 => {
                        if let Some(c) = tx.next_copy_to_start() {
                            assert!(
                                !owner.contains_key(&c.buffer),
                                "seed {seed}: buffer {} handed out twice",
                                c.buffer
                            );
                            assert_eq!(c.buffer, (c.seq % depth as u64) as usize);
                            owner.insert(c.buffer, c.seq);
                            copying.push(c.seq);
                        }
                    }
                    1 if !copying.is_empty() => {
                        let seq = copying.swap_remove(rng.below(copying.len() as u64) as usize);
                        tx.copy_done(seq).unwrap();
                        copied_unposted += 1;
                    }
                    2 => {
                        if let Some(c) = tx.next_post() {
                            assert_eq!(
                                owner.get(&c.buffer),
                                Some(&c.seq),
                                "seed {seed}: posted from the wrong buffer"
                            );
                            assert!(
                                !copying.contains(&c.seq),
                                "seed {seed}: posted before its copy completed"
                            );
                            posts.push(c.seq);
                            posted.push(c.seq);
                            copied_unposted -= 1;
                        }
                    }
                    3 if !posted.is_empty() => {
                        let seq = posted.swap_remove(rng.below(posted.len() as u64) as usize);
                        tx.rdma_done(seq).unwrap();
                        let b = (seq % depth as u64) as usize;
                        assert_eq!(owner.remove(&b), Some(seq));
                    }
                    _ => {}
                }
                assert!(owner.len() <= depth);
                assert_eq!(tx.copies_in_flight(), copying.len());
                assert_eq!(tx.posts_in_flight(), posted.len());
                assert!(copied_unposted <= depth);
            }
            assert_eq!(
                posts,
                (0..p.total_chunks()).collect::<Vec<_>>(),
                "seed {seed}"
            );
            assert_eq!(tx.chunks_done(), p.total_chunks());
            assert_eq!(tx.messages_done(), 1);
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    enum Ev {
        SendCopyDone(u64),
        WireDone(u64),
        RecvCopyDone(u64),
        CreditArrives(u64),
    }

    /// Both sides end to end with bytes: the sender's device-to-host copies, a WRITE into the receiver's bounce
    /// buffer `seq % K` (allowed by a credit the receiver sends once that buffer is free), the receiver's
    /// host-to-device copies, with random latencies. A DMA in progress scribbles over its destination until it
    /// completes, and the NIC reads its source only at completion, so any early reuse of a bounce buffer on
    /// either side corrupts the payload and is caught.
    fn simulate_end_to_end(
        seed: u64,
        message_size: usize,
        messages: u64,
        chunk: usize,
        depth: usize,
    ) {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491) | 1);
        let p = StagingPlan::new(
            StagingConfig::new(chunk, depth).unwrap(),
            message_size,
            messages,
        )
        .unwrap();
        let src: Vec<Vec<u8>> = (0..messages)
            .map(|m| {
                let mut v = vec![0u8; message_size];
                crate::pattern::fill(m + 1, 0, &mut v);
                v
            })
            .collect();
        let mut dst = vec![vec![0u8; message_size]; messages as usize];
        let mut s_bounce = vec![0u8; depth * chunk];
        let mut r_bounce = vec![0u8; depth * chunk];
        let mut tx = SendPipeline::new(p);
        let mut rx = RecvPipeline::new(p);
        let mut credits: BTreeMap<u64, ()> = BTreeMap::new();
        let mut events: BinaryHeap<Reverse<(u64, Ev)>> = BinaryHeap::new();
        let (mut t, mut s_copy_free_at, mut wire_free_at, mut r_copy_free_at) =
            (0u64, 0u64, 0u64, 0u64);
        let mut max_overlap = (0usize, 0usize);
        let scribble = |buf: &mut [u8]| buf.iter_mut().for_each(|b| *b = 0xEE);

        loop {
            // Receiver hands out free buffers (credits reach the sender after a delay).
            while let Some(c) = rx.next_landing() {
                events.push(Reverse((t + 1 + rng.below(5), Ev::CreditArrives(c.seq))));
            }
            // Sender starts copies into free buffers (one stream: FIFO).
            while let Some(c) = tx.next_copy_to_start() {
                let b = &mut s_bounce[c.buffer_offset..c.buffer_offset + c.len];
                scribble(b);
                s_copy_free_at = s_copy_free_at.max(t) + 1 + rng.below(8);
                events.push(Reverse((s_copy_free_at, Ev::SendCopyDone(c.seq))));
            }
            // Sender posts copied chunks that have a credit; the NIC starts writing the remote buffer.
            while let Some(c) = tx.peek_post() {
                if credits.remove(&c.seq).is_none() {
                    break;
                }
                let c = tx.next_post().unwrap();
                scribble(&mut r_bounce[c.buffer_offset..c.buffer_offset + c.len]);
                wire_free_at = wire_free_at.max(t) + 1 + rng.below(8);
                events.push(Reverse((wire_free_at, Ev::WireDone(c.seq))));
            }
            // Receiver starts copies of landed chunks.
            while let Some(c) = rx.next_copy_to_start() {
                r_copy_free_at = r_copy_free_at.max(t) + 1 + rng.below(8);
                events.push(Reverse((r_copy_free_at, Ev::RecvCopyDone(c.seq))));
            }
            max_overlap.0 = max_overlap
                .0
                .max(tx.copies_in_flight().min(tx.posts_in_flight()));
            max_overlap.1 = max_overlap
                .1
                .max(rx.copies_in_flight().min(rx.landings_pending()));

            let Some(Reverse((at, ev))) = events.pop() else {
                break;
            };
            t = at;
            match ev {
                Ev::CreditArrives(seq) => {
                    credits.insert(seq, ());
                }
                Ev::SendCopyDone(seq) => {
                    let c = p.chunk(seq).unwrap();
                    let data = &src[c.message as usize][c.offset..c.offset + c.len];
                    s_bounce[c.buffer_offset..c.buffer_offset + c.len].copy_from_slice(data);
                    tx.copy_done(seq).unwrap();
                }
                Ev::WireDone(seq) => {
                    let c = p.chunk(seq).unwrap();
                    let range = c.buffer_offset..c.buffer_offset + c.len;
                    let data = s_bounce[range.clone()].to_vec();
                    r_bounce[range].copy_from_slice(&data);
                    tx.rdma_done(seq).unwrap();
                    rx.landed(seq).unwrap();
                }
                Ev::RecvCopyDone(seq) => {
                    let c = p.chunk(seq).unwrap();
                    let data = &r_bounce[c.buffer_offset..c.buffer_offset + c.len];
                    dst[c.message as usize][c.offset..c.offset + c.len].copy_from_slice(data);
                    rx.copy_done(seq).unwrap();
                }
            }
        }
        assert!(
            tx.is_finished() && rx.is_finished(),
            "seed {seed}: did not finish"
        );
        assert_eq!(rx.messages_done(), messages);
        for m in 0..messages as usize {
            assert!(
                dst[m] == src[m],
                "seed {seed}: message {m} arrived corrupted"
            );
        }
        if depth > 1 && p.total_chunks() > depth as u64 {
            assert!(
                max_overlap.0 > 0,
                "seed {seed}: sender never overlapped copies and RDMA"
            );
        }
    }

    #[test]
    fn end_to_end_bytes_arrive_intact() {
        for seed in 1..=40u64 {
            let depth = 1 + (seed % 5) as usize;
            let message_size = 4096 * (1 + (seed % 7) as usize) + (seed as usize * 37) % 4096;
            simulate_end_to_end(seed, message_size, 1 + seed % 4, 4096, depth);
        }
    }

    #[test]
    fn end_to_end_small_messages_and_exact_multiples() {
        simulate_end_to_end(7, 64, 20, 4096, 4);
        simulate_end_to_end(8, 8192, 5, 4096, 3);
        simulate_end_to_end(9, 1, 3, 4096, 2);
    }
}
