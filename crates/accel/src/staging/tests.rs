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
fn simulate_end_to_end(seed: u64, message_size: usize, messages: u64, chunk: usize, depth: usize) {
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
