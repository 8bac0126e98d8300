//! GPU decoder benchmark: prefill and decode tokens/s of [`GpuEngine`] on the wgpu adapter this machine offers
//! (honours `WGPU_BACKEND` / `WGPU_ADAPTER_NAME`), with the dispatches, submits and bytes read back per token. Not a
//! test: it prints JSON on stdout.
//!
//!   cargo bench -p loom-wasm --bench llm_gpu -- MODEL [--runs R] [--prefill-tokens 512] [--decode-tokens 128]
//!       [--fold-norms 0|1]
//!
//! `--fold-norms` overrides the engine's choice of folding the norms and residual adds into the matvecs
//! (`GpuEngine::folds_norms`: on GPUs for the decode steps of models up to 1,024 wide, else off).
//! `prefill`: a fixed sequence of ordinary vocabulary ids into an empty KV cache, last-token logits read back.
//! `decode`: after a short prompt, `decode-tokens` greedy steps, each picked on the GPU (one id read back); then
//! `decode_sampled`, the same steps sampled and drawn on the GPU (`sample.wgsl`, one id read back). Each
//! measurement follows one untimed warm-up (which compiles the pipelines) and reports every run and the median.
//! Without arguments (as under `cargo test --all-targets`) it prints its usage and exits successfully.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{loadavg, median, ms_since};
use loom_wasm::gpu::Gpu;
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::{Sampler, SamplingParams};
use serde_json::json;

const USAGE: &str =
    "usage: cargo bench -p loom-wasm --bench llm_gpu -- MODEL [--runs R] [--prefill-tokens N] [--decode-tokens N] \
     [--fold-norms 0|1]";

type BoxResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn flag(args: &[String], name: &str, default: usize) -> BoxResult<usize> {
    match args.iter().position(|a| a == name) {
        Some(i) => Ok(args.get(i + 1).ok_or(USAGE)?.parse()?),
        None => Ok(default),
    }
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let Some(model_path) = args.first().filter(|a| !a.starts_with("--")) else {
        eprintln!("{USAGE}");
        return Ok(());
    };
    let runs = flag(&args, "--runs", 3)?.max(1);
    let prefill_n = flag(&args, "--prefill-tokens", 512)?;
    let decode_n = flag(&args, "--decode-tokens", 128)?;

    let model = LlmModel::open(std::path::Path::new(model_path))?;
    let gpu = Arc::new(pollster::block_on(Gpu::new())?);
    let t = Instant::now();
    let mut engine = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None))?;
    let upload_ms = ms_since(t);
    if args.iter().any(|a| a == "--fold-norms") {
        engine.set_fold_norms(flag(&args, "--fold-norms", 0)? != 0);
    }
    // Ordinary vocabulary ids, the same sequence every run.
    let vocab = model.config.vocab as u32;
    let prompt: Vec<u32> = (0..prefill_n as u32)
        .map(|i| 1000 + (i * 7919) % (vocab - 1000))
        .collect();

    let mut prefill_ms = Vec::new();
    for run in 0..=runs {
        engine.reset();
        let t = Instant::now();
        pollster::block_on(engine.forward_logits(&prompt, false))?;
        if run > 0 {
            prefill_ms.push(ms_since(t));
        }
    }
    let prefill_stats = engine.last_call();

    // The decode runs start from (at most) the first 16 prompt tokens.
    let decode_prompt = &prompt[..prompt.len().min(16)];
    let mut decode_ms = Vec::new();
    let mut step_stats = engine.last_call();
    for run in 0..=runs {
        engine.reset();
        let mut next = pollster::block_on(engine.forward_argmax(decode_prompt))?;
        let t = Instant::now();
        for _ in 0..decode_n {
            next = pollster::block_on(engine.forward_argmax(&[next]))?;
        }
        if run > 0 {
            decode_ms.push(ms_since(t));
        }
        step_stats = engine.last_call();
    }
    // The same steps sampled (temperature 0.7, top-k 40, top-p 0.95, min-p 0.05) and drawn on the GPU.
    let mut sampled_ms = Vec::new();
    let mut sampled_stats = engine.last_call();
    for run in 0..=runs {
        engine.reset();
        let mut sampler = Sampler::new(SamplingParams::default())?;
        let mut context = decode_prompt.to_vec();
        let mut next = pollster::block_on(engine.forward_sampled(&context, &sampler.draw(&context)))?;
        let t = Instant::now();
        for _ in 0..decode_n {
            context.push(next);
            next = pollster::block_on(engine.forward_sampled(&[next], &sampler.draw(&context)))?;
        }
        if run > 0 {
            sampled_ms.push(ms_since(t));
        }
        sampled_stats = engine.last_call();
    }
    let (p, d) = (median(&prefill_ms), median(&decode_ms));
    let ds = median(&sampled_ms);
    let report = json!({
        "model": model_path,
        "adapter": engine.adapter(),
        "driver": format!("{} {}", gpu.info.driver, gpu.info.driver_info),
        "device_type": format!("{:?}", gpu.info.device_type),
        "shader_f16": gpu.has_f16,
        "subgroups": gpu.has_subgroups,
        "fold_norms": {"decode": engine.folds_norms(1), "prefill": engine.folds_norms(prefill_n)},
        "loadavg": loadavg(),
        "upload_ms": upload_ms,
        "prefill": {"tokens": prefill_n, "ms": prefill_ms, "tok_s_median": prefill_n as f64 / (p / 1e3),
                    "submits": prefill_stats.submits, "dispatches": prefill_stats.dispatches},
        "decode": {"tokens": decode_n, "ms": decode_ms, "tok_s_median": decode_n as f64 / (d / 1e3),
                   "ms_per_token": d / decode_n.max(1) as f64},
        "per_decoded_token": {
            "submits": step_stats.submits,
            "dispatches": step_stats.dispatches,
            "bind_groups_created": step_stats.bind_groups_created,
            "buffers_created": step_stats.buffers_created,
            "bytes_read_back": step_stats.bytes_read_back,
        },
        "decode_sampled": {"tokens": decode_n, "ms": sampled_ms, "ms_per_token": ds / decode_n.max(1) as f64,
                           "dispatches": sampled_stats.dispatches, "submits": sampled_stats.submits,
                           "bytes_read_back": sampled_stats.bytes_read_back},
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
