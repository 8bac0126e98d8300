//! The GPU decoder at real model shapes on whatever adapter this machine has (`scripts/device-check.sh` runs it on a
//! GPU machine; lavapipe here). No model file is needed: each model's weights are generated from a seed at its real
//! shapes in a block-type plan as llama-quantize writes it (tensors whose rows are not whole 256-blocks fall back to
//! Q5_0 / Q8_0 as llama.cpp's do). Not a test: it prints one JSON document on stdout.
//!
//!   cargo bench -p loom-wasm --bench device_check -- [--shapes a,b] [--types a,b] [--prefill-tokens 512]
//!       [--decode-tokens 64] [--runs 2] [--seed 1] [--fold-norms 0|1|both] [--prefill-chunks 64,128,...]
//!       [--decode-submit-blocks 0,4,8,...] [--attention-runs 8,16,32,...] [--attention-max-splits 8,16,32,...]
//!       [--tiled-full-groups 128,512,...] [--tiled-rows 1,2,4]
//!
//! For each shape × type: upload time, prefill and greedy decode tok/s (wall clock, median of `runs` after a
//! warm-up; decode after a 16-token prompt and after the whole prefill prompt), dispatches and submits per decoded
//! token, then one prefill and the decode steps again with timestamp queries on (where the adapter has them): GPU
//! time per kernel per token and, for matvecs, the weight bytes/s it achieved against the device-to-device copy
//! bandwidth measured first. With `--prefill-chunks`, the prefill is
//! timed again at each of those prompt tokens per submit (`GpuEngine::set_prefill_chunk`); with
//! `--decode-submit-blocks`, the decode at each of those blocks per submit (`GpuEngine::set_decode_submit_blocks`);
//! with `--attention-runs`, the decode (after the short prompt and after the whole one) at each of those fewest
//! positions an attention run takes (`GpuEngine::set_attention_run_positions`); with `--attention-max-splits`, the
//! same at each of those runs a query takes before its runs grow (`GpuEngine::set_attention_max_splits`); with
//! `--tiled-full-groups`, the prefill at each of those thresholds (`GpuEngine::set_tiled_full_groups`); with
//! `--tiled-rows`, the prefill at each of those rows a lane (`GpuEngine::set_tiled_rows`). The
//! synthetic weights give meaningless tokens; the logits are only checked to be finite. Without arguments (as under
//! `cargo test --all-targets`) it prints its usage and exits successfully.

mod common;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use common::{loadavg, median, ms_since, Rng};
use loom_wasm::gpu::{Gpu, KernelTime, ATTENTION_MAX_SPLITS, ATTENTION_RUN_POSITIONS, TILED_FULL_GROUPS};
use loom_wasm::llm::config::{Arch, BlockSpec, ModelConfig, RopeStyle};
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::weights::{BlockWeights, Matrix, ModelWeights};
use loom_wasm::quant::GgmlType;
use rayon::prelude::*;
use serde_json::{json, Value};

const USAGE: &str = "usage: cargo bench -p loom-wasm --bench device_check -- --shapes all|NAME,... \
     [--types q4_0,q4_1,q8_0,q4_k_m,f16] [--prefill-tokens 512] [--decode-tokens 64] [--runs 2] [--seed 1] \
     [--fold-norms 0|1|both] [--prefill-chunks 64,128,...] [--decode-submit-blocks 0,4,8,...] \
     [--attention-runs 8,16,32,...] [--attention-max-splits 8,16,32,...] [--tiled-full-groups 128,512,...] \
     [--tiled-rows 1,2,4]";

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A model's shape, from its published config.
struct Shape {
    name: &'static str,
    arch: Arch,
    layers: usize,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    ffn: usize,
    vocab: usize,
    rope_theta: f32,
}

const SHAPES: [Shape; 5] = [
    Shape {
        name: "smollm2-135m",
        arch: Arch::Llama,
        layers: 30,
        hidden: 576,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        vocab: 49152,
        rope_theta: 100000.0,
    },
    Shape {
        name: "qwen2.5-0.5b",
        arch: Arch::Qwen2,
        layers: 24,
        hidden: 896,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        ffn: 4864,
        vocab: 151936,
        rope_theta: 1e6,
    },
    Shape {
        name: "llama-3.2-1b",
        arch: Arch::Llama,
        layers: 16,
        hidden: 2048,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        ffn: 8192,
        vocab: 128256,
        rope_theta: 500000.0,
    },
    // Gemma 3's extra norms and GeGLU do not run yet: this is a Qwen3 block (q/k norms) at its shapes.
    Shape {
        name: "gemma-3-270m",
        arch: Arch::Qwen3,
        layers: 18,
        hidden: 640,
        heads: 4,
        kv_heads: 1,
        head_dim: 256,
        ffn: 2048,
        vocab: 262144,
        rope_theta: 1e6,
    },
    // Small enough for a CPU adapter (lavapipe): the script's self-check.
    Shape {
        name: "tiny",
        arch: Arch::Qwen2,
        layers: 2,
        hidden: 256,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        ffn: 512,
        vocab: 4096,
        rope_theta: 10000.0,
    },
];

const TYPES: [&str; 5] = ["q4_0", "q4_1", "q8_0", "q4_k_m", "f16"];

/// What a tensor is, for the block-type plan.
#[derive(Clone, Copy, PartialEq)]
enum Tensor {
    Embed,
    V,
    Down,
    Other,
}

/// The block type llama-quantize gives `tensor` of layer `layer` of `layers` for file type `file`: the tied
/// embedding (the head) Q6_K except in Q8_0 files; Q4_K_M's attn_v and ffn_down Q6_K on the layers its
/// `use_more_bits` picks; a K-quant whose rows are not whole 256-blocks falls back to Q5_0 (Q4_K) or Q8_0 (Q6_K).
fn plan(file: &str, tensor: Tensor, layer: usize, layers: usize, cols: usize) -> GgmlType {
    let more_bits = layer < layers / 8 || layer >= 7 * layers / 8 || (layer + 2 * layers / 8) % 3 == 2;
    let ty = match (file, tensor) {
        ("f16", _) => GgmlType::F16,
        ("q8_0", _) => GgmlType::Q8_0,
        (_, Tensor::Embed) => GgmlType::Q6_K,
        ("q4_k_m", Tensor::V | Tensor::Down) if more_bits => GgmlType::Q6_K,
        ("q4_k_m", _) => GgmlType::Q4_K,
        ("q4_1", _) => GgmlType::Q4_1,
        _ => GgmlType::Q4_0,
    };
    match ty {
        GgmlType::Q4_K if !cols.is_multiple_of(256) => GgmlType::Q5_0,
        GgmlType::Q6_K if !cols.is_multiple_of(256) => GgmlType::Q8_0,
        t => t,
    }
}

/// A half in ±`scale`.
fn random_half(rng: &mut Rng, scale: f32) -> [u8; 2] {
    let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
    half::f16::from_f32((2.0 * u - 1.0) * scale).to_le_bytes()
}

/// Random blocks of `ty` for a `rows × cols` matrix: random codes, and the block scales (the f16 fields) set to
/// small positive values so that every product stays finite.
fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Matrix {
    let row_bytes = ty.row_bytes(cols).expect("whole blocks");
    let mut data = vec![0u8; rows * row_bytes];
    // Scale fields (f16 byte offsets in a block) and their size.
    let (scales, d): (&[usize], f32) = match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => (&[0], 0.01),
        GgmlType::Q4_1 | GgmlType::Q5_1 => (&[0, 2], 0.01),
        GgmlType::Q4_K | GgmlType::Q5_K => (&[0, 2], 0.001),
        GgmlType::Q6_K => (&[208], 0.001),
        _ => (&[], 0.0),
    };
    data.par_chunks_mut(row_bytes).enumerate().for_each(|(r, row)| {
        let mut rng = Rng(seed ^ (r as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
        if ty == GgmlType::F16 {
            for h in row.chunks_exact_mut(2) {
                h.copy_from_slice(&random_half(&mut rng, 0.05));
            }
            return;
        }
        for w in row.chunks_mut(8) {
            let v = rng.next().to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
        for block in row.chunks_exact_mut(ty.block_bytes()) {
            for &at in scales {
                let u = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                block[at..at + 2].copy_from_slice(&half::f16::from_f32(d * (0.5 + u)).to_le_bytes());
            }
        }
    });
    Matrix {
        ty,
        rows,
        cols,
        data: Bytes::from(data),
    }
}

fn config(s: &Shape) -> ModelConfig {
    ModelConfig {
        arch: s.arch,
        n_layers: s.layers,
        hidden: s.hidden,
        n_heads: s.heads,
        n_kv_heads: s.kv_heads,
        head_dim: s.head_dim,
        ffn: s.ffn,
        vocab: s.vocab,
        rope_theta: s.rope_theta,
        rope_dims: s.head_dim,
        rope_style: RopeStyle::Neox,
        rms_eps: 1e-6,
        final_norm_eps: 1e-6,
        context: 4096,
        tied_embeddings: true,
        block: BlockSpec::llama(s.head_dim),
        rope_factors: None,
        rope_long: None,
        rope_mscale: 1.0,
    }
}

fn weights(s: &Shape, file: &str, seed: u64) -> ModelWeights {
    let mut n = 0u64;
    let mut mat = |tensor, layer, rows, cols| {
        n += 1;
        random_matrix(
            plan(file, tensor, layer, s.layers, cols),
            rows,
            cols,
            seed.wrapping_mul(1_000_003) + n,
        )
    };
    let ones = |len| vec![1.0f32; len];
    let (h, q, kv, f) = (s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim, s.ffn);
    let embed = mat(Tensor::Embed, 0, s.vocab, h);
    let blocks = (0..s.layers)
        .map(|i| {
            let bias = |len| (s.arch == Arch::Qwen2).then(|| vec![0.01f32; len]);
            let head_norm = || (s.arch == Arch::Qwen3).then(|| ones(s.head_dim));
            BlockWeights {
                attn_norm: ones(h),
                wq: mat(Tensor::Other, i, q, h),
                wk: mat(Tensor::Other, i, kv, h),
                wv: mat(Tensor::V, i, kv, h),
                wo: mat(Tensor::Other, i, h, q),
                bq: bias(q),
                bk: bias(kv),
                bv: bias(kv),
                bo: None,
                b_gate: None,
                b_up: None,
                b_down: None,
                q_norm: head_norm(),
                k_norm: head_norm(),
                ffn_norm: ones(h),
                post_attn_norm: None,
                post_ffn_norm: None,
                gate: mat(Tensor::Other, i, f, h),
                up: mat(Tensor::Other, i, f, h),
                down: mat(Tensor::Down, i, h, f),
            }
        })
        .collect();
    ModelWeights {
        embed,
        blocks,
        final_norm: ones(h),
        head: None,
    }
}

/// Device-to-device copy bandwidth (bytes read + written per second): the bound the matvecs are held to.
fn copy_bandwidth(gpu: &Gpu) -> BoxResult<Value> {
    let size = (gpu.limits.max_buffer_size / 2).min(1 << 30) & !255;
    let buffer = |usage| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bandwidth"),
            size,
            usage,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (
        buffer(wgpu::BufferUsages::COPY_SRC),
        buffer(wgpu::BufferUsages::COPY_DST),
    );
    let copies = |n: usize| -> BoxResult<f64> {
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        for _ in 0..n {
            encoder.copy_buffer_to_buffer(&a, 0, &b, 0, size);
        }
        let t = Instant::now();
        gpu.queue.submit([encoder.finish()]);
        gpu.device.poll(wgpu::PollType::wait_indefinitely())?;
        Ok(t.elapsed().as_secs_f64())
    };
    copies(1)?;
    let (one, many) = (copies(2)?, copies(12)?);
    // The difference cancels the submit and wait.
    let seconds = (many - one).max(1e-9) / 10.0;
    Ok(json!({"bytes_per_copy": size, "seconds_per_copy": seconds, "gb_s": 2.0 * size as f64 / seconds / 1e9}))
}

fn kernels(times: Vec<KernelTime>, per: f64, copy_gb_s: f64) -> (Value, f64) {
    let total: f64 = times.iter().map(|k| k.seconds).sum();
    let mut rows: Vec<Value> = times
        .iter()
        .map(|k| {
            let mut row = json!({
                "kernel": k.kernel,
                "passes": k.passes as f64 / per,
                "us": k.seconds / per * 1e6,
                "share": k.seconds / total.max(1e-12),
            });
            if k.weight_bytes > 0 {
                let gb_s = k.weight_bytes as f64 / k.seconds.max(1e-12) / 1e9;
                row["weight_gb_s"] = json!(gb_s);
                row["of_copy_bandwidth"] = json!(gb_s / copy_gb_s);
            }
            row
        })
        .collect();
    rows.sort_by(|a, b| b["us"].as_f64().partial_cmp(&a["us"].as_f64()).expect("finite"));
    (Value::Array(rows), total / per * 1e3)
}

struct Run {
    prefill: usize,
    decode: usize,
    runs: usize,
    /// Prompt tokens per submit to time the prefill at too.
    chunks: Vec<usize>,
    /// Blocks per submit of a decode step to time the decode at too (0: one submit).
    submit_blocks: Vec<usize>,
    /// The fewest positions of an attention run to time the decode at too.
    attention_runs: Vec<u32>,
    /// The runs an attention query takes before its runs grow, to time the decode at too.
    max_splits: Vec<u32>,
    /// Workgroups of 64 rows a prefill product fills before a lane a row, to time the prefill at too.
    full_groups: Vec<u32>,
    /// Rows a lane of a prefill product takes (where it takes a lane a row), to time the prefill at too.
    tiled_rows: Vec<u32>,
}

fn run_one(
    gpu: &Arc<Gpu>,
    s: &Shape,
    file: &str,
    fold: Option<bool>,
    seed: u64,
    r: &Run,
    copy_gb_s: f64,
) -> BoxResult<Value> {
    let t = Instant::now();
    let w = weights(s, file, seed);
    let generate_ms = ms_since(t);
    let cfg = config(s);
    let t = Instant::now();
    let context = Some(r.prefill + r.decode + 16);
    let mut engine = pollster::block_on(GpuEngine::new(gpu.clone(), &cfg, &w, context))?;
    if let Some(fold) = fold {
        engine.set_fold_norms(fold);
    }
    let upload_ms = ms_since(t);
    // The self-test at open, as `loom chat` and the package run it: each kernel against its CPU twin.
    let t = Instant::now();
    let self_test = match pollster::block_on(engine.self_test()) {
        Ok(checks) => json!({"ms": ms_since(t), "passed": true, "checks": checks.len(),
            "max_error": checks.iter().map(|c| c.max_error).fold(0f32, f32::max)}),
        Err(e) => json!({"ms": ms_since(t), "passed": false, "error": e.to_string()}),
    };
    let mix: Vec<Value> = w.type_mix().iter().map(|(t, n)| json!([t.name(), n])).collect();
    let weight_bytes = w.bytes();
    drop(w);
    let prompt: Vec<u32> = (0..r.prefill as u32)
        .map(|i| 100 + (i * 7919) % (s.vocab as u32 - 100))
        .collect();

    let mut finite = true;
    let mut prefill = |engine: &mut GpuEngine| -> BoxResult<Vec<f64>> {
        let mut ms = Vec::new();
        for run in 0..=r.runs {
            engine.reset();
            let t = Instant::now();
            let logits = pollster::block_on(engine.forward_logits(&prompt, false))?;
            if run > 0 {
                ms.push(ms_since(t));
            }
            finite &= logits.iter().all(|v| v.is_finite());
        }
        Ok(ms)
    };
    let prefill_ms = prefill(&mut engine)?;
    let prefill_submits = engine.last_call().submits;
    let default_chunk = engine.prefill_chunk();
    let mut by_chunk = Vec::new();
    for &chunk in &r.chunks {
        let taken = engine.set_prefill_chunk(chunk);
        let ms = prefill(&mut engine)?;
        by_chunk.push(
            json!({"chunk": taken, "ms": ms, "tok_s": r.prefill as f64 / (median(&ms) / 1e3),
                             "submits": engine.last_call().submits}),
        );
    }
    engine.set_prefill_chunk(default_chunk);
    let mut by_full_groups = Vec::new();
    for &groups in &r.full_groups {
        engine.set_tiled_full_groups(groups);
        let ms = prefill(&mut engine)?;
        by_full_groups.push(json!({"groups": groups, "ms": ms, "tok_s": r.prefill as f64 / (median(&ms) / 1e3)}));
    }
    engine.set_tiled_full_groups(TILED_FULL_GROUPS);
    let mut by_tiled_rows = Vec::new();
    for &rows in &r.tiled_rows {
        engine.set_tiled_rows(Some(rows))?;
        let ms = prefill(&mut engine)?;
        by_tiled_rows.push(json!({"rows": rows, "ms": ms, "tok_s": r.prefill as f64 / (median(&ms) / 1e3)}));
    }
    engine.set_tiled_rows(None)?;
    let decode_prompt = &prompt[..prompt.len().min(16)];
    // The decode steps after `first` (untimed), after a warm-up, timed `runs` times.
    let steps_after = |engine: &mut GpuEngine, first: &[u32]| -> BoxResult<Vec<f64>> {
        let mut ms = Vec::new();
        for run in 0..=r.runs {
            engine.reset();
            let mut next = pollster::block_on(engine.forward_argmax(first))?;
            let t = Instant::now();
            for _ in 0..r.decode {
                next = pollster::block_on(engine.forward_argmax(&[next]))?;
            }
            if run > 0 {
                ms.push(ms_since(t));
            }
        }
        Ok(ms)
    };
    let decode = |engine: &mut GpuEngine| steps_after(engine, decode_prompt);
    let decode_ms = decode(&mut engine)?;
    let step = engine.last_call();
    let mut by_submit_blocks = Vec::new();
    let default_blocks = engine.decode_submit_blocks();
    for &blocks in &r.submit_blocks {
        engine.set_decode_submit_blocks(blocks);
        let ms = decode(&mut engine)?;
        by_submit_blocks.push(json!({"blocks": blocks, "ms": ms,
            "tok_s": r.decode as f64 / (median(&ms) / 1e3), "submits": engine.last_call().submits}));
    }
    engine.set_decode_submit_blocks(default_blocks);
    // Decode at depth: the same steps after the whole prompt, attention reading every position of it.
    let deep = |engine: &mut GpuEngine| steps_after(engine, &prompt);
    let mut by_attention_run = Vec::new();
    for &positions in &r.attention_runs {
        engine.set_attention_run_positions(positions);
        let (ms, deep_ms) = (decode(&mut engine)?, deep(&mut engine)?);
        by_attention_run.push(json!({"positions": positions, "ms": ms,
            "tok_s": r.decode as f64 / (median(&ms) / 1e3), "after_prompt_ms": deep_ms,
            "after_prompt_tok_s": r.decode as f64 / (median(&deep_ms) / 1e3)}));
    }
    engine.set_attention_run_positions(ATTENTION_RUN_POSITIONS);
    let mut by_max_splits = Vec::new();
    for &splits in &r.max_splits {
        engine.set_attention_max_splits(splits);
        let (ms, deep_ms) = (decode(&mut engine)?, deep(&mut engine)?);
        by_max_splits.push(json!({"splits": splits, "ms": ms,
            "tok_s": r.decode as f64 / (median(&ms) / 1e3), "after_prompt_ms": deep_ms,
            "after_prompt_tok_s": r.decode as f64 / (median(&deep_ms) / 1e3)}));
    }
    engine.set_attention_max_splits(ATTENTION_MAX_SPLITS);
    let deep_ms = deep(&mut engine)?;

    // The same work again, timed per kernel on the GPU.
    gpu.set_profiling(true);
    engine.reset();
    pollster::block_on(engine.forward_logits(&prompt, false))?;
    let (prefill_kernels, prefill_gpu_ms) = kernels(gpu.take_kernel_times(), r.prefill as f64, copy_gb_s);
    engine.reset();
    let mut next = pollster::block_on(engine.forward_argmax(decode_prompt))?;
    gpu.take_kernel_times();
    for _ in 0..r.decode {
        next = pollster::block_on(engine.forward_argmax(&[next]))?;
    }
    gpu.set_profiling(false);
    let (decode_kernels, decode_gpu_ms) = kernels(gpu.take_kernel_times(), r.decode as f64, copy_gb_s);
    let (p, d) = (median(&prefill_ms), median(&decode_ms));
    let ms_per_token = d / r.decode.max(1) as f64;
    Ok(json!({
        "shape": s.name,
        "type": file,
        "fold_norms": {"decode": engine.folds_norms(1), "prefill": engine.folds_norms(r.prefill)},
        "fuse_glu": {"decode": engine.fuses_glu(1), "prefill": engine.fuses_glu(r.prefill)},
        "block_types": mix,
        "weight_bytes": weight_bytes,
        "generate_ms": generate_ms,
        "upload_ms": upload_ms,
        "self_test": self_test,
        "logits_finite": finite,
        "prefill": {"tokens": r.prefill, "ms": prefill_ms, "tok_s": r.prefill as f64 / (p / 1e3),
                    "submits": prefill_submits, "gpu_ms_per_token": prefill_gpu_ms},
        "prefill_chunk": default_chunk,
        "prefill_by_chunk": by_chunk,
        "decode": {"tokens": r.decode, "ms": decode_ms, "tok_s": r.decode as f64 / (d / 1e3),
                   "ms_per_token": ms_per_token, "gpu_ms_per_token": decode_gpu_ms,
                   "weight_gb_s": weight_bytes as f64 / (ms_per_token / 1e3) / 1e9},
        "decode_after_prompt": {"context": r.prefill, "tokens": r.decode, "ms": deep_ms,
                                "tok_s": r.decode as f64 / (median(&deep_ms) / 1e3)},
        "decode_by_submit_blocks": by_submit_blocks,
        "decode_by_attention_run": by_attention_run,
        "decode_by_attention_max_splits": by_max_splits,
        "prefill_by_tiled_full_groups": by_full_groups,
        "prefill_by_tiled_rows": by_tiled_rows,
        "per_decoded_token": {"dispatches": step.dispatches, "submits": step.submits,
                              "record_us": step.record_us,
                              "bind_groups_created": step.bind_groups_created,
                              "bytes_read_back": step.bytes_read_back,
                              // The wall clock beyond the kernels' own time, per dispatch: the host's recording,
                              // the submit and readback, and the GPU's time between kernels.
                              "overhead_us_per_dispatch": (ms_per_token - decode_gpu_ms) * 1e3
                                  / f64::from(step.dispatches.max(1))},
        "kernels_decode": decode_kernels,
        "kernels_prefill": prefill_kernels,
    }))
}

/// A comma-separated list of numbers (none without the option).
fn list<T: std::str::FromStr>(v: Option<&String>) -> Result<Vec<T>, T::Err> {
    v.map_or(Ok(Vec::new()), |v| v.split(',').map(str::parse).collect())
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let Some(shapes) = value("--shapes") else {
        eprintln!("{USAGE}");
        return Ok(());
    };
    let number = |name: &str, default: usize| -> BoxResult<usize> {
        Ok(value(name).map(|v| v.parse()).transpose()?.unwrap_or(default))
    };
    let r = Run {
        prefill: number("--prefill-tokens", 512)?.max(1),
        decode: number("--decode-tokens", 64)?.max(1),
        runs: number("--runs", 2)?.max(1),
        chunks: list(value("--prefill-chunks"))?,
        submit_blocks: list(value("--decode-submit-blocks"))?,
        attention_runs: list(value("--attention-runs"))?,
        max_splits: list(value("--attention-max-splits"))?,
        full_groups: list(value("--tiled-full-groups"))?,
        tiled_rows: list(value("--tiled-rows"))?,
    };
    let seed = number("--seed", 1)? as u64;
    let shapes: Vec<&Shape> = if shapes == "all" {
        SHAPES.iter().filter(|s| s.name != "tiny").collect()
    } else {
        shapes
            .split(',')
            .map(|n| SHAPES.iter().find(|s| s.name == n).ok_or(format!("unknown shape {n}")))
            .collect::<Result<_, _>>()?
    };
    let types: Vec<&str> = match value("--types") {
        Some(t) => t.split(',').collect(),
        None => TYPES.to_vec(),
    };
    if let Some(t) = types.iter().find(|t| !TYPES.contains(t)) {
        return Err(format!("unknown type {t} (one of {TYPES:?})").into());
    }

    let gpu = Arc::new(match pollster::block_on(Gpu::profiled()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("no timestamp queries ({e}): kernel times left out");
            pollster::block_on(Gpu::new())?
        }
    });
    let info = &gpu.info;
    let l = &gpu.limits;
    let bandwidth = copy_bandwidth(&gpu)?;
    let copy_gb_s = bandwidth["gb_s"].as_f64().unwrap_or(1.0);
    let mut results = Vec::new();
    // The engine's choice of folding the norms and residual adds into the matvecs, or both ways.
    let folds = match value("--fold-norms").map(String::as_str) {
        None => vec![None],
        Some("both") => vec![Some(true), Some(false)],
        Some(v) => vec![Some(v.parse::<u8>()? != 0)],
    };
    for s in &shapes {
        for (file, fold) in types.iter().flat_map(|t| folds.iter().map(move |f| (t, *f))) {
            let t = Instant::now();
            let result = run_one(&gpu, s, file, fold, seed, &r, copy_gb_s)
                .unwrap_or_else(|e| json!({"shape": s.name, "type": file, "error": e.to_string()}));
            eprintln!(
                "{} {} fold {}: {:.1} s, decode {:.1} tok/s, prefill {:.1} tok/s{}",
                s.name,
                file,
                result["fold_norms"],
                t.elapsed().as_secs_f64(),
                result["decode"]["tok_s"].as_f64().unwrap_or(f64::NAN),
                result["prefill"]["tok_s"].as_f64().unwrap_or(f64::NAN),
                result["error"]
                    .as_str()
                    .map(|e| format!(" ERROR {e}"))
                    .unwrap_or_default()
            );
            results.push(result);
        }
    }
    let report = json!({
        "adapter": {
            "name": info.name, "vendor": format!("{:#06x}", info.vendor), "device": format!("{:#06x}", info.device),
            "device_type": format!("{:?}", info.device_type), "backend": format!("{:?}", info.backend),
            "driver": info.driver, "driver_info": info.driver_info,
            "subgroup_sizes": [info.subgroup_min_size, info.subgroup_max_size],
        },
        "features": format!("{:?}", gpu.device.features()),
        "shader_f16": gpu.has_f16,
        "subgroups": gpu.has_subgroups,
        "limits": {
            "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
            "max_buffer_size": l.max_buffer_size,
            "max_storage_buffers_per_shader_stage": l.max_storage_buffers_per_shader_stage,
            "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
            "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
            "max_compute_workgroup_size_x": l.max_compute_workgroup_size_x,
            "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
        },
        "loadavg": loadavg(),
        "copy_bandwidth": bandwidth,
        "settings": {"prefill_tokens": r.prefill, "decode_tokens": r.decode, "runs": r.runs, "seed": seed},
        "runs": results,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
