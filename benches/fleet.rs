//! The fleet paths at scale, each linear in the ranks (issue 35's figures, docs/cluster.md's
//! and docs/gpu.md's scale tables): a sweep's plan at 100,000 ranks, the first host of a vast
//! node list, `compare` and the heat map of 10,000-rank sweeps, and `nccl-log`'s reading of
//! a 300,000-rank log and of the 15,000-ranks-by-15,000-NICs one. The inputs are made by the
//! scale tests' generators (`crates/bench/tests/synthetic`).

#![allow(clippy::expect_used)] // a bench: an input that cannot be made is a bug, not input

#[path = "../crates/bench/tests/synthetic/mod.rs"]
mod synthetic;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rdmabench::cluster::{hostlist, schedule};
use rdmabench::compare::fleet::{compare_sweeps, Thresholds};
use rdmabench::nccl_log::paths;
use rdmabench::plot::heatmap::heat_map;
use rdmabench::report::sweep::load_sweep;
use rdmabench::report::SweepRecord;

fn plan(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    g.bench_function("quick, 100000 ranks", |b| {
        b.iter(|| schedule::quick(black_box(100_000)))
    });
    g.bench_function("ring, 100000 ranks", |b| {
        b.iter(|| schedule::ring(black_box(100_000)))
    });
    g.bench_function("first host of h[0-999999]x[0-999999]", |b| {
        b.iter(|| hostlist::first(black_box("h[0-999999]x[0-999999]")))
    });
    g.finish();
}

/// A sweep of `ranks` ranks, through a file as `compare` and `plot` read one.
fn sweep(ranks: usize, slow: Option<usize>) -> SweepRecord {
    let path = std::env::temp_dir().join(format!("rdmabench-bench-{}.json", std::process::id()));
    std::fs::write(&path, synthetic::sweep(ranks, slow, &synthetic::mlx5)).expect("written");
    let rec = load_sweep(&path).expect("a sweep record");
    let _ = std::fs::remove_file(&path);
    rec
}

fn fleet(c: &mut Criterion) {
    let (before, after) = (sweep(10_000, None), sweep(10_000, Some(700)));
    let thresholds = Thresholds { bw: 3.0, lat: 10.0 };
    let mut g = c.benchmark_group("fleet");
    g.sample_size(10);
    g.bench_function("compare, 10000 ranks", |b| {
        b.iter(|| compare_sweeps(("before", &before), ("after", &after), thresholds))
    });
    g.bench_function("heat map, 10000 ranks", |b| {
        b.iter(|| heat_map(&after, "write-bw", None))
    });
    g.finish();
}

fn nccl_log(c: &mut Criterion) {
    let ranks = synthetic::nccl_log(1, 300_000, 1);
    let nics = synthetic::nccl_log(1, 15_000, 15_000);
    let mut g = c.benchmark_group("nccl_log");
    g.sample_size(10);
    g.bench_function("300000 ranks of one GPU", |b| {
        b.iter(|| paths::read(black_box(&ranks)))
    });
    g.bench_function("15000 ranks by 15000 NICs, with findings", |b| {
        b.iter(|| {
            let log = paths::read(black_box(&nics));
            paths::findings(&log, &|_| None)
        })
    });
    g.finish();
}

criterion_group!(benches, plan, fleet, nccl_log);
criterion_main!(benches);
