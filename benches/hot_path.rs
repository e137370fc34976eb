//! The engine's own work per message, without a device: what rdmabench adds on top of the
//! provider's post and poll. Each bench reports the time per message.

#![allow(clippy::expect_used)] // a bench: a histogram that cannot be built is a bug, not input

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rdmabench::engine::bw::host::{fill_batch, SendProgress, Target};
use rdmabench::engine::bw::startup::Startup;
use rdmabench::engine::bw::{LoopShape, Stop, WrId, WrKind};
use rdmabench::histogram::LatencyRecorder;
use rdmabench::plan::{AtomicOp, Verb};
use verbs::SendRequest;

fn shape(post_list: u32) -> LoopShape {
    LoopShape {
        verb: Verb::Write,
        atomic: AtomicOp::FetchAdd,
        size: 65536,
        stop: Stop::Iters(5000),
        depth: 128,
        rx_depth: 512,
        post_list,
        cq_mod: 100,
        inline: false,
        send: true,
        recv: None,
        stall_timeout: Duration::from_secs(30),
        rate_limit: None,
        interval: None,
    }
}

/// Where the benches' WRITEs go: a peer's halves and key, as a connection would set them.
const TARGET: Target = Target {
    remote_recv: 0x7f00_0000_0000,
    remote_send: 0x7f00_0010_0000,
    rkey: 0x1234,
    local_offset: 0,
};

fn post_list(c: &mut Criterion) {
    let target = TARGET;
    let mut g = c.benchmark_group("post_list");
    for n in [1u32, 16] {
        let s = shape(n);
        let mut batch = vec![SendRequest::default(); n as usize];
        let mut p = SendProgress::new(1, u64::MAX, s.cq_mod);
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_function(format!("fill_{n}_write_requests"), |b| {
            b.iter(|| {
                fill_batch(black_box(&mut batch), 0, &mut p, &s, &target);
                p.add_posted(0, u64::from(n));
                black_box(&batch);
            })
        });
    }
    g.finish();
}

fn completions(c: &mut Criterion) {
    let s = shape(1);
    let mut g = c.benchmark_group("completions");
    g.throughput(Throughput::Elements(1));
    g.bench_function("account_one_completion_and_check_room", |b| {
        let mut p = SendProgress::new(4, u64::MAX, s.cq_mod);
        // Posted far ahead, so that no number of completions outruns what was posted.
        p.add_posted(3, u64::MAX / 2);
        let id = WrId::new(WrKind::Op, 3, 100);
        b.iter(|| {
            p.complete(black_box(id));
            black_box(p.room(3, &s));
        })
    });
    // A duration run's startup, at each completion until it finds the link's rate: a
    // comparison, and at the end of each round a division.
    g.bench_function("startup_sees_one_completion", |b| {
        let start = Instant::now();
        let mut st = Startup::new(start);
        let (mut done, mut posted) = (0u64, 2u64);
        b.iter(|| {
            done += 1;
            posted += 1;
            black_box(st.progress(black_box(start), done, posted));
        })
    });
    g.finish();
}

/// One thread's engine work for `messages` messages: fill a post list of one WRITE, account
/// it posted, and every `cq_mod`-th message account a completion and check the room, each
/// thread on its own tables, as `--threads` runs them.
fn one_threads_work(target: &Target, messages: u64) {
    let s = shape(1);
    let mut batch = [SendRequest::default()];
    let mut p = SendProgress::new(1, u64::MAX, s.cq_mod);
    let covers = s.cq_mod;
    for n in 1..=messages {
        fill_batch(black_box(&mut batch), 0, &mut p, &s, target);
        p.add_posted(0, 1);
        if n % u64::from(covers) == 0 {
            p.complete(WrId::new(WrKind::Op, 0, covers));
            black_box(p.room(0, &s));
        }
    }
}

/// `--threads`: the engine's cost per message in each of N threads at once. The threads share
/// nothing, so the time per message stays where one thread's is while there are cores for
/// them (this host has 2).
fn threads(c: &mut Criterion) {
    let target = TARGET;
    const MESSAGES: u64 = 100_000;
    let mut g = c.benchmark_group("threads");
    g.throughput(Throughput::Elements(MESSAGES));
    for n in [1usize, 2] {
        g.bench_function(format!("{n}_threads_100k_messages_each"), |b| {
            b.iter(|| {
                std::thread::scope(|scope| {
                    for _ in 0..n {
                        scope.spawn(|| one_threads_work(&target, MESSAGES));
                    }
                })
            })
        });
    }
    g.finish();
}

fn timestamps(c: &mut Criterion) {
    let mut g = c.benchmark_group("timestamps");
    g.throughput(Throughput::Elements(1));
    g.bench_function("instant_now", |b| b.iter(|| black_box(Instant::now())));
    g.finish();
}

fn histogram(c: &mut Criterion) {
    let mut g = c.benchmark_group("histogram");
    g.throughput(Throughput::Elements(1));
    let mut h = LatencyRecorder::new().expect("a histogram");
    let mut v = 1_000u64;
    g.bench_function("record_one_latency", |b| {
        b.iter(|| {
            v = v
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                % 50_000
                + 500;
            h.record(black_box(v));
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    post_list,
    completions,
    threads,
    timestamps,
    histogram
);
criterion_main!(benches);
