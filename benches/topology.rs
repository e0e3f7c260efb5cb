//! Cost of the thread helpers the record path uses: finding the current CPU
//! (`sched_getcpu`, rseq/vDSO, no syscall) against reading the allowed set
//! (`sched_getaffinity`, a syscall), which `record` handles therefore cache.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use steer::topology::thread;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("steer/topology");
    g.bench_function("current_cpu", |b| {
        b.iter(|| black_box(thread::current_cpu().unwrap()))
    });
    g.bench_function("allowed_cpus", |b| {
        b.iter(|| black_box(thread::allowed_cpus().unwrap()))
    });
    let topo = steer::topology::Topology::synthetic("pack:2 l3:16 core:8 pu:1").unwrap();
    let layout = topo.layout();
    g.bench_function("shares_llc", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = (i + 7) & 255;
            black_box(layout.shares_llc(black_box(i), black_box(255 - i)))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
