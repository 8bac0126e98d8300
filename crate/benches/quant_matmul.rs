//! CPU quantized matmul (`loom_wasm::quant::matmul`): decode (one token) and a 64-token prefill over SmolLM2-135M's
//! matrix shapes, per block type, on 1 and 2 threads. Prints a Markdown table: time per call, GFLOP/s (2 flops
//! per weight and token) and GB/s of weight bytes read (once per call).
//!
//!     cargo bench --bench quant_matmul
//!
//! `BENCH_SHAPES=2048x8192,49152x2048` measures other shapes (rows × columns), e.g. a 1B model's, which outgrow
//! the caches that SmolLM2's fit; `BENCH_TYPES`, `BENCH_TOKENS` and `BENCH_ONE_THREAD` narrow the cases.

mod common;

use std::time::{Duration, Instant};

use common::Rng;
use loom_wasm::quant::{self, GgmlType, QMatrix};

/// Uniform in [-1, 1).
fn uniform(rng: &mut Rng) -> f32 {
    (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

fn half_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random weights of type `t`: random codes, plausible scales (and minimums). The interleaved types: those of the
/// type they come from, interleaved.
fn weights(t: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    if t.interleaved() {
        let stored_type = match t {
            GgmlType::Q4_0x8 => GgmlType::Q4_0,
            GgmlType::Q4_1x8 => GgmlType::Q4_1,
            GgmlType::Q5_0x8 => GgmlType::Q5_0,
            GgmlType::Q5_1x8 => GgmlType::Q5_1,
            GgmlType::Q4_Kx8 => GgmlType::Q4_K,
            GgmlType::Q5_Kx8 => GgmlType::Q5_K,
            _ => GgmlType::Q6_K,
        };
        let stored = weights(stored_type, rows, cols, rng);
        return quant::interleave(&QMatrix::new(stored_type, rows, cols, &stored).unwrap())
            .unwrap()
            .1;
    }
    let blocks = rows * cols / t.block_len();
    let mut out = Vec::with_capacity(blocks * t.block_bytes());
    for _ in 0..blocks {
        let start = out.len();
        match t {
            GgmlType::F16 => out.extend(half_bytes(uniform(rng) * 0.1)),
            GgmlType::LoomQ4_0 => out.extend((uniform(rng) * 0.02).to_le_bytes()),
            _ => out.extend(half_bytes(uniform(rng) * 0.02)),
        }
        if matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K) {
            out.extend(half_bytes(uniform(rng) * 0.1));
        }
        while out.len() < start + t.block_bytes() {
            out.push(rng.next() as u8);
        }
        if t == GgmlType::Q6_K {
            // Its scale is last.
            out[start + 208..start + 210].copy_from_slice(&half_bytes(uniform(rng) * 0.02));
        }
    }
    out
}

/// Mean time of a call, over at least 0.4 s after one warm-up call.
fn time(mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    let mut calls = 0u32;
    while calls < 3 || start.elapsed() < Duration::from_millis(400) {
        f();
        calls += 1;
    }
    start.elapsed() / calls
}

fn main() {
    let mut rng = Rng(7);
    let small = [
        GgmlType::Q4_0,
        GgmlType::Q4_0x8,
        GgmlType::Q4_1,
        GgmlType::Q4_1x8,
        GgmlType::Q5_0,
        GgmlType::Q5_0x8,
        GgmlType::Q5_1,
        GgmlType::Q5_1x8,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q4_Kx8,
        GgmlType::Q5_K,
        GgmlType::Q5_Kx8,
        GgmlType::Q6_K,
        GgmlType::Q6_Kx8,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::LoomQ4_0,
    ];
    // `BENCH_SIMD=avx2` (or `none`) caps the kernels.
    quant::set_simd(match std::env::var("BENCH_SIMD").as_deref() {
        Ok("avx512") => quant::Simd::Avx512,
        Ok("avx2") => quant::Simd::Avx2,
        Ok("none") => quant::Simd::None,
        _ => quant::Simd::All,
    });
    eprintln!("kernels: {}", quant::simd_in_use());
    // `BENCH_TYPES=Q4_K,Q6_K` measures only those.
    let only = std::env::var("BENCH_TYPES").ok();
    // `BENCH_SHAPES=2048x8192,49152x2048` (rows × columns) instead of SmolLM2's, e.g. a 1B model's: out of cache.
    let shapes: Vec<(usize, usize)> = match std::env::var("BENCH_SHAPES") {
        Ok(v) => v
            .split(',')
            .map(|s| {
                let (rows, cols) = s.split_once('x').expect("BENCH_SHAPES: ROWSxCOLS");
                (rows.parse().expect("rows"), cols.parse().expect("columns"))
            })
            .collect(),
        _ => vec![(1536, 576), (576, 1536)],
    };
    let smollm2 = std::env::var("BENCH_SHAPES").is_err();
    let cases: Vec<(GgmlType, usize, usize)> = shapes
        .into_iter()
        .flat_map(|(rows, cols)| small.map(|t| (t, rows, cols)))
        .chain(smollm2.then_some((GgmlType::Q8_0, 49152, 576)))
        // K-quant rows are whole super-blocks of 256.
        .filter(|&(t, _, cols)| cols % t.block_len() == 0)
        .filter(|(t, _, _)| only.as_ref().is_none_or(|o| o.split(',').any(|n| n == t.name())))
        .collect();
    println!("| type | rows × cols | tokens | threads | µs / call | GFLOP/s | weight GB/s |");
    println!("|---|---|---|---|---|---|---|");
    for (t, rows, cols) in cases {
        let data = weights(t, rows, cols, &mut rng);
        let w = QMatrix::new(t, rows, cols, &data).expect("whole rows");
        // `BENCH_TOKENS=1,512`: the token counts (default 1 and 64).
        let tokens: Vec<usize> = match std::env::var("BENCH_TOKENS") {
            Ok(v) => v
                .split(',')
                .map(|n| n.parse().expect("BENCH_TOKENS: numbers"))
                .collect(),
            _ => vec![1, 64],
        };
        for &n in &tokens {
            let x: Vec<f32> = (0..n * cols).map(|_| uniform(&mut rng)).collect();
            let mut y = vec![0.0; n * rows];
            for threads in [1, 2].into_iter().take(if std::env::var("BENCH_ONE_THREAD").is_ok() {
                1
            } else {
                2
            }) {
                quant::set_threads(threads).expect("thread pool");
                let dt = time(|| quant::matmul(&w, &x, n, &mut y).expect("matmul")).as_secs_f64();
                let gflops = 2.0 * (rows * cols * n) as f64 / dt / 1e9;
                let gbs = data.len() as f64 / dt / 1e9;
                println!(
                    "| {t} | {rows} × {cols} | {n} | {threads} | {:.1} | {gflops:.2} | {gbs:.2} |",
                    dt * 1e6
                );
            }
        }
    }
}
