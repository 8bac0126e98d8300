//! The GPU engine (wgpu: Mesa lavapipe natively) against the numpy goldens in `../shared/golden`, as the CPU
//! engine is tested in `llm_golden.rs`: tiny-llama's logits at every position (within `TINY_GPU`) and 16 greedy ids
//! for every weight file, with tensors split across bindings; SmolLM2-135M Q4_1's greedy replies, and its top-20
//! logits against the reference (within `SMOL_GPU`).

mod llm_util;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use llm_util::{check_tiny_on, check_top20, golden, ids, json, tiny_expected, SMOL_GPU, TINY_GPU};
use loom_wasm::formats::source::RangeReader;
use loom_wasm::gpu::Gpu;
use loom_wasm::llm::config::ModelConfig;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::generate::{GenerateOptions, Session};
use loom_wasm::llm::gpu_engine::{GpuEngine, GpuEngineBuilder, GpuFit};
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::{Sampler, SamplingParams};
use loom_wasm::llm::saved::KvRows;
use loom_wasm::llm::streamed::StreamedModel;
use loom_wasm::llm::weights::Matrix;
use loom_wasm::quant::GgmlType;

fn gpu() -> Arc<Gpu> {
    Arc::new(pollster::block_on(Gpu::new()).expect("no wgpu adapter: is mesa-vulkan-drivers installed?"))
}

fn engine(gpu: &Arc<Gpu>, model: &LlmModel) -> Box<dyn Engine> {
    engine_with_context(gpu, model, None)
}

fn engine_with_context(gpu: &Arc<Gpu>, model: &LlmModel, context: Option<usize>) -> Box<dyn Engine> {
    let e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, context));
    Box::new(e.unwrap_or_else(|e| panic!("GPU engine: {e}")))
}

/// The engine with its norms and residual adds folded into the matvecs (`GpuEngine::set_fold_norms`): the default on
/// GPUs, not on lavapipe, so it is asked for here.
fn engine_folded(gpu: &Arc<Gpu>, model: &LlmModel) -> Box<dyn Engine> {
    let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
    e.set_fold_norms(true);
    Box::new(e)
}

#[test]
fn tiny_llama_every_weight_file_on_the_gpu() {
    let gpu = gpu();
    let dir = golden().join("tiny-llama");
    let (expected, prompts) = tiny_expected();
    let mut checked = 0;
    for (name, set) in expected["weight_sets"].as_object().unwrap() {
        if name == "loom_q4_0" {
            continue; // written by our converter: below
        }
        let model = LlmModel::open(&dir.join(set["file"].as_str().unwrap())).unwrap();
        check_tiny_on(model.config.vocab, name, set, &prompts, TINY_GPU, &mut || {
            engine(&gpu, &model)
        });
        let folded = format!("{name}, norms folded");
        check_tiny_on(model.config.vocab, &folded, set, &prompts, TINY_GPU, &mut || {
            engine_folded(&gpu, &model)
        });
        checked += 1;
    }
    assert_eq!(checked, 8);
}

#[test]
fn tiny_llama_loom_q4_0_entity_on_the_gpu() {
    let gpu = gpu();
    let src = LlmModel::open(&golden().join("tiny-llama/model.f32.safetensors")).unwrap();
    let (bytes, _) = src.to_entity(true).unwrap();
    let model = LlmModel::from_entity(bytes.into()).unwrap();
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["loom_q4_0"];
    check_tiny_on(model.config.vocab, "loom_q4_0", set, &prompts, TINY_GPU, &mut || {
        engine(&gpu, &model)
    });
}

/// A prompt longer than the engine's chunk runs in several submits (`GpuEngine::set_prefill_chunk`), each chunk's
/// queries reading the cache its earlier chunks wrote: the logits at every position are still the goldens'.
#[test]
fn prompts_over_several_chunks_match_the_goldens() {
    let gpu = gpu();
    let (expected, prompts) = tiny_expected();
    for name in ["gguf_f32", "gguf_q4_1"] {
        let set = &expected["weight_sets"][name];
        let model = LlmModel::open(&golden().join("tiny-llama").join(set["file"].as_str().unwrap())).unwrap();
        for chunk in [1, 3, 7] {
            let label = format!("{name}, chunks of {chunk}");
            check_tiny_on(model.config.vocab, &label, set, &prompts, TINY_GPU, &mut || {
                let e = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None);
                let mut e = pollster::block_on(e).unwrap();
                assert_eq!(e.set_prefill_chunk(chunk), chunk);
                Box::new(e)
            });
        }
    }
}

/// A decode step submitted in parts (`GpuEngine::set_decode_submit_blocks`; on GPUs by default, one submit on
/// lavapipe): every prompt token run as its own step, the logits at every position and the greedy ids are still the
/// goldens', and a step is one submit after block 0 and after every `blocks` blocks from there, plus the last.
#[test]
fn decode_steps_submitted_in_parts_match_the_goldens() {
    let gpu = gpu();
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["gguf_q4_1"];
    let model = LlmModel::open(&golden().join("tiny-llama").join(set["file"].as_str().unwrap())).unwrap();
    let layers = model.config.n_layers;
    for blocks in [1, layers] {
        for fold in [false, true] {
            let label = format!("a submit every {blocks} blocks, fold {fold}");
            check_tiny_on(model.config.vocab, &label, set, &prompts, TINY_GPU, &mut || {
                let e = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None);
                let mut e = pollster::block_on(e).unwrap();
                e.set_prefill_chunk(1);
                e.set_fold_norms(fold);
                e.set_decode_submit_blocks(blocks);
                Box::new(e)
            });
        }
        let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
        e.set_decode_submit_blocks(blocks);
        let next = pollster::block_on(e.forward_argmax(&[1, 5, 9])).unwrap();
        assert_eq!(e.last_call().submits, 1, "a prompt of 3 tokens");
        let submits = gpu.submit_count();
        pollster::block_on(e.forward_argmax(&[next])).unwrap();
        let parts = (0..layers - 1).filter(|l| l % blocks == 0).count() as u64 + 1;
        assert_eq!(gpu.submit_count() - submits, parts, "a submit every {blocks} blocks");
        assert_eq!(u64::from(e.last_call().submits), parts);
    }
}

/// The decode attention split into runs of a single position (as many runs as the split allows) or of 64, and the
/// prefill products a lane a row, a lane 2 or 4 rows, or four lanes a row (on GPUs; CPU adapters never take four
/// lanes a row): the logits at every position and the greedy ids are still the goldens'.
#[test]
fn attention_runs_and_prefill_rows_settings_match_the_goldens() {
    let gpu = gpu();
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["gguf_q8_0"];
    let model = LlmModel::open(&golden().join("tiny-llama").join(set["file"].as_str().unwrap())).unwrap();
    for (positions, groups, rows) in [(1, 0, 1), (64, u32::MAX, 1), (8, 0, 2), (32, 0, 4)] {
        let label = format!("attention runs of {positions}, tiled full groups {groups}, {rows} rows a lane");
        check_tiny_on(model.config.vocab, &label, set, &prompts, TINY_GPU, &mut || {
            let e = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None);
            let mut e = pollster::block_on(e).unwrap();
            e.set_attention_run_positions(positions);
            e.set_tiled_full_groups(groups);
            e.set_tiled_rows(Some(rows)).unwrap();
            Box::new(e)
        });
    }
    let e = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None);
    let mut e = pollster::block_on(e).unwrap();
    for rows in [0, 3, 8] {
        let err = e.set_tiled_rows(Some(rows)).unwrap_err().to_string();
        assert!(err.contains("tiled rows a lane"), "{rows}: {err}");
    }
}

/// Every weight tensor over the device's storage-binding limit is split across bindings: with a limit of 24 KiB the
/// f32 embedding table (64 KiB) takes three, and the logits are the same.
#[test]
fn tensors_split_across_bindings() {
    let model = LlmModel::open(&golden().join("tiny-llama/model.f32.gguf")).unwrap();
    assert_eq!(model.weights.embed.data.len(), 256 * 64 * 4);
    let gpu = Arc::new(pollster::block_on(Gpu::with_max_binding(24 << 10)).unwrap());
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["gguf_f32"];
    // A KV cache of 128 positions fits one binding (2 heads × 16 × 128 × 4 bytes).
    let mut new_engine = || engine_with_context(&gpu, &model, Some(128));
    check_tiny_on(
        model.config.vocab,
        "gguf_f32 split",
        set,
        &prompts,
        TINY_GPU,
        &mut new_engine,
    );
}

/// Picked files read through [`RangeReader`], every read recorded as `(file, offset, length)`.
struct RecordingReader {
    paths: Vec<PathBuf>,
    reads: RefCell<Vec<(usize, u64, u64)>>,
}

impl RangeReader for RecordingReader {
    async fn read(&self, file: usize, offset: u64, len: u64) -> loom_wasm::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        self.reads.borrow_mut().push((file, offset, len));
        let mut buf = vec![0; len as usize];
        std::fs::File::open(&self.paths[file])?.read_exact_at(&mut buf, offset)?;
        Ok(buf.into())
    }
}

/// A streamed load onto the GPU, as the browser's `Chat.openGpu` runs it: headers, then the globals and each block
/// read, uploaded and dropped.
fn streamed_engine(gpu: &Arc<Gpu>, reader: &RecordingReader) -> (StreamedModel, GpuEngine) {
    let names: Vec<String> = reader
        .paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let sizes: Vec<u64> = reader.paths.iter().map(|p| p.metadata().unwrap().len()).collect();
    pollster::block_on(async {
        let model = StreamedModel::open(&names, &sizes, reader).await.unwrap();
        let mut builder = GpuEngineBuilder::new(gpu.clone(), &model.config, None);
        let g = model.globals(reader).await.unwrap();
        builder.globals(&g.embed, g.head.as_ref(), &g.final_norm).await.unwrap();
        for i in 0..model.config.n_layers {
            builder.block(&model.block(reader, i).await.unwrap()).await.unwrap();
        }
        let engine = builder.finish().await.unwrap();
        (model, engine)
    })
}

/// Every tiny-llama weight file (GGUF; safetensors with config.json and tokenizer.json as an HF folder; our Loom
/// Q4_0 `.entity` with tokenizer.json) streamed onto the GPU gives the golden logits and greedy ids, and the load
/// reads no range longer than the largest tensor beyond each file's first (header) read.
#[test]
fn tiny_llama_streamed_onto_the_gpu() {
    let gpu = gpu();
    let dir = golden().join("tiny-llama");
    let (expected, prompts) = tiny_expected();
    let entity = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tiny_streamed.entity");
    let (bytes, _) = LlmModel::open(&dir.join("model.f32.safetensors"))
        .unwrap()
        .to_entity(true)
        .unwrap();
    std::fs::write(&entity, bytes).unwrap();
    for (name, set) in expected["weight_sets"].as_object().unwrap() {
        let file = dir.join(set["file"].as_str().unwrap());
        let (paths, largest) = match name.as_str() {
            "loom_q4_0" => (vec![entity.clone(), dir.join("tokenizer.json")], &entity),
            n if n.starts_with("safetensors") => (
                vec![dir.join("config.json"), dir.join("tokenizer.json"), file.clone()],
                &file,
            ),
            _ => (vec![file.clone()], &file),
        };
        let whole = LlmModel::open(largest).unwrap();
        let largest = whole.weights.matrices().map(|m| m.data.len() as u64).max().unwrap();
        let reader = RecordingReader {
            paths,
            reads: RefCell::new(Vec::new()),
        };
        check_tiny_on(
            whole.config.vocab,
            &format!("{name} streamed"),
            set,
            &prompts,
            TINY_GPU,
            &mut || Box::new(streamed_engine(&gpu, &reader).1),
        );
        let (model, _) = streamed_engine(&gpu, &reader);
        assert!(model.tokenizer().is_ok(), "{name}");
        let weight_reads: Vec<u64> = reader.reads.borrow().iter().filter(|r| r.1 > 0).map(|r| r.2).collect();
        assert!(
            weight_reads.len() > 2 * model.config.n_layers,
            "{name}: {} reads",
            weight_reads.len()
        );
        assert!(
            weight_reads.iter().all(|&n| n <= largest),
            "{name}: a read over {largest} bytes"
        );
    }
}

/// The GPU engine with its sampling left out: the last logits go back to the CPU sampler.
struct LogitsOnly(GpuEngine);

impl Engine for LogitsOnly {
    fn config(&self) -> &ModelConfig {
        self.0.config()
    }
    fn device(&self) -> String {
        Engine::device(&self.0)
    }
    fn cached(&self) -> usize {
        Engine::cached(&self.0)
    }
    fn truncate(&mut self, len: usize) -> usize {
        self.0.truncate(len)
    }
    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> loom_wasm::Result<Vec<f32>> {
        Engine::forward(&mut self.0, tokens, all_logits)
    }
    fn kv_rows(&self) -> loom_wasm::Result<KvRows> {
        Engine::kv_rows(&self.0)
    }
    fn set_kv_rows(&mut self, kv: KvRows) -> loom_wasm::Result<()> {
        Engine::set_kv_rows(&mut self.0, kv)
    }
}

/// Seeded sampling drawn on the GPU (`sample.wgsl`, one id read back per token) gives the ids the CPU sampler draws
/// from the same engine's logits with the same seed, for several seeds and settings (penalty included); seeds
/// differ in what they draw.
#[test]
fn seeded_sampling_on_the_gpu_matches_the_cpu_sampler() {
    let gpu = gpu();
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let (_, prompts) = tiny_expected();
    let new_engine = || pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
    let settings = [
        (0.8, 40, 0.95, 0.05, 1.1),
        (1.5, 256, 1.0, 0.0, 1.0),
        (0.0, 40, 1.0, 0.0, 1.3),
    ];
    let mut seen = std::collections::HashSet::new();
    for (temperature, top_k, top_p, min_p, repetition_penalty) in settings {
        for seed in 1..=3 {
            let opts = GenerateOptions {
                sampling: SamplingParams {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    repetition_penalty,
                    seed,
                    ..SamplingParams::default()
                },
                max_tokens: 24,
                ..GenerateOptions::default()
            };
            let run = |engine: Box<dyn Engine>| {
                let mut s = Session::new(&model, engine).unwrap();
                s.generate(&prompts[1], &opts, &mut |_| true).unwrap().ids
            };
            let on_gpu = run(Box::new(new_engine()));
            let on_cpu = run(Box::new(LogitsOnly(new_engine())));
            assert_eq!(
                on_gpu, on_cpu,
                "T {temperature} k {top_k} p {top_p} min {min_p} penalty {repetition_penalty} seed {seed}"
            );
            assert!(!on_gpu.is_empty());
            seen.insert(on_gpu);
        }
    }
    assert!(seen.len() >= 5, "only {} distinct replies", seen.len());
    let mut e = new_engine();
    let mut sampler = Sampler::new(SamplingParams::default()).unwrap();
    pollster::block_on(e.forward_sampled(&prompts[1], &sampler.draw(&prompts[1]))).unwrap();
    assert_eq!(e.last_call().bytes_read_back, 4, "one id read back");
}

/// Gate and up, and q, k and v, run as one fused matvec when they share a block type and have no biases (nor q/k
/// norms); otherwise apart (the fused ones: every other test). A model with each reason to split (block 0: up
/// re-stored as F16 beside an F32 gate, q/k/v biases; block 1: gate and up biases, v re-stored as F16) gives the
/// CPU engine's logits at every position, and then decoding one token.
#[test]
fn projections_fused_or_apart_match_the_cpu() {
    let gpu = gpu();
    let mut model = LlmModel::open(&golden().join("tiny-llama/model.f32.gguf")).unwrap();
    let mut w = (*model.weights).clone();
    let as_f16 = |m: &Matrix| Matrix {
        ty: GgmlType::F16,
        data: m
            .data
            .chunks_exact(4)
            .flat_map(|b| half::f16::from_f32(f32::from_le_bytes(b.try_into().unwrap())).to_le_bytes())
            .collect::<Vec<u8>>()
            .into(),
        ..m.clone()
    };
    let bias = |n: usize, f: f32| Some((0..n).map(|i| (i as f32 * f).sin() * 0.1).collect::<Vec<f32>>());
    let c = &model.config;
    let (qd, kvd) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let b = &mut w.blocks[0];
    b.up = as_f16(&b.up);
    (b.bq, b.bk, b.bv) = (bias(qd, 0.23), bias(kvd, 0.53), bias(kvd, 0.71));
    let h = c.hidden;
    b.bo = bias(h, 0.29);
    let b = &mut w.blocks[1];
    (b.b_gate, b.b_up) = (bias(c.ffn, 0.37), bias(c.ffn, 0.11));
    b.wv = as_f16(&b.wv);
    b.b_down = bias(h, 0.41);
    model.weights = Arc::new(w);
    let prompt: Vec<u32> = (1..40).map(|i| (i * 37 % 256) as u32).collect();
    let want = model.cpu_engine().forward(&prompt, true).unwrap();
    let mut cpu = model.cpu_engine();
    cpu.forward(&prompt, false).unwrap();
    let want_one = cpu.forward(&[5], false).unwrap();
    // With the norms and residual adds as dispatches of their own, and folded into the matvecs; the gated product
    // a dispatch of its own, and read by the down projection.
    for (fold, fuse_glu) in [(false, false), (true, true), (false, true), (true, false)] {
        let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
        e.set_fold_norms(fold);
        e.set_fuse_glu(fuse_glu);
        let got = e.forward(&prompt, true).unwrap();
        let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-3, "folded {fold}, glu {fuse_glu}: max |Δlogit| {worst}");
        let got_one = e.forward(&[5], false).unwrap();
        let worst = want_one
            .iter()
            .zip(&got_one)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-3,
            "folded {fold}, glu {fuse_glu}, decode step: max |Δlogit| {worst}"
        );
    }
}

#[test]
fn context_limit_and_bad_ids_are_typed_errors() {
    let gpu = gpu();
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let mut e = pollster::block_on(GpuEngine::new(gpu, &model.config, &model.weights, Some(8))).unwrap();
    assert_eq!(e.config().context, 8);
    let err = e.forward(&[1; 9], false).unwrap_err();
    assert_eq!(err.code(), "context_full", "{err}");
    assert_eq!(e.cached(), 0);
    let err = e.forward(&[1, 256], false).unwrap_err();
    assert_eq!(err.code(), "invalid_input", "{err}");
    assert_eq!(e.cached(), 0);
    e.forward(&[1; 8], false).unwrap();
    assert_eq!(e.cached(), 8);
    e.truncate(3);
    assert_eq!(e.cached(), 3);
}

/// A decoded token is one submit (counted at the queue) that creates nothing: after the first step of a shape has
/// filled its arena, each next step reuses every bind group, uniform, output and the staging buffer, writes only
/// its id, its RoPE angles and one uniform block for all its attention dispatches, and reads back only what it
/// returns (the id of a greedy or sampled step, the logits row otherwise); folded or not.
#[test]
fn a_decoded_token_is_one_submit_that_creates_nothing() {
    let gpu = gpu();
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_1.gguf")).unwrap();
    let vocab = model.config.vocab as u64;
    for fold in [false, true] {
        let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
        e.set_fold_norms(fold);
        // On GPUs a step goes in parts by default (`decode_steps_submitted_in_parts_match_the_goldens`).
        e.set_decode_submit_blocks(0);
        let mut last = pollster::block_on(e.forward_argmax(&[1, 5, 9, 13])).unwrap();
        // Submits are counted where the queue takes them (Gpu::submit_count), not by the engine: a prompt is one
        // submit per chunk (64 tokens on CPU adapters, 256 on GPUs; 64 here, within tiny-llama's 256 positions).
        assert_eq!(e.last_call().submits, 1);
        let cpu = gpu.info.device_type == wgpu::DeviceType::Cpu;
        assert_eq!(e.prefill_chunk(), if cpu { 64 } else { 256 });
        assert_eq!(e.set_prefill_chunk(64), 64);
        let submits = gpu.submit_count();
        let long: Vec<u32> = (0..130).map(|i| i % 200 + 1).collect();
        pollster::block_on(e.forward_logits(&long, false)).unwrap();
        assert_eq!((e.last_call().submits, gpu.submit_count() - submits), (3, 3));
        e.truncate(4);
        let mut sampler = Sampler::new(SamplingParams {
            temperature: 0.8,
            top_k: 20,
            top_p: 0.9,
            repetition_penalty: 1.1,
            seed: 7,
            ..SamplingParams::default()
        })
        .unwrap();
        for step in 0..3 {
            last = pollster::block_on(e.forward_argmax(&[last])).unwrap();
            let greedy = e.last_call();
            let args = sampler.draw(&[1, 5, 9, 13, last]);
            last = pollster::block_on(e.forward_sampled(&[last], &args)).unwrap();
            let sampled = e.last_call();
            let logits = pollster::block_on(e.forward_logits(&[last], false)).unwrap();
            let row = e.last_call();
            assert_eq!(logits.len() as u64, vocab);
            for (what, stats, bytes) in [
                ("greedy", greedy, 4),
                ("sampled", sampled, 4),
                ("logits", row, 4 * vocab),
            ] {
                assert_eq!(stats.submits, 1, "{what} step {step}, fold {fold}: {stats:?}");
                assert_eq!(
                    stats.bytes_read_back, bytes,
                    "{what} step {step}, fold {fold}: {stats:?}"
                );
                // Counted at the wgpu calls: the gather, 6 dispatches a block folded (q|k|v, attention's splits
                // turning q and k by RoPE and writing the KV rows, their combination, o +=, gate|up, down += reading
                // the gated product from the gate|up rows) and the head, or 8 apart (with an add + norm after each
                // output projection, and the first and final norms); then the argmax or the draw.
                let layers = model.config.n_layers as u32;
                let per_token = if fold { 6 * layers + 2 } else { 8 * layers + 4 };
                let picked = u32::from(what != "logits");
                assert_eq!(stats.dispatches, per_token + picked, "{what} step {step}, fold {fold}");
                // Written per step: the token's id, its RoPE angles and the one uniform block every attention
                // dispatch of the step shares (its position moved), and a draw's own words.
                let writes = 3 + u32::from(what == "sampled");
                assert!(stats.writes <= writes, "{what} step {step}, fold {fold}: {stats:?}");
                if step > 0 {
                    assert_eq!(
                        (stats.bind_groups_created, stats.buffers_created),
                        (0, 0),
                        "{what} step {step}, fold {fold}: {stats:?}"
                    );
                }
            }
        }
    }
}

/// Greedy steps checked per SmolLM2 prompt: lavapipe decodes this model at about a token a second, so the suite
/// checks the first steps of every reply on the GPU (the whole of "Paris"), and `llm_golden.rs` every step on the CPU.
const GPU_GREEDY_STEPS: usize = 10;

/// SmolLM2-135M-Instruct Q4_1 (setup fetches it), every golden prompt: the top-20 logits at the last prompt position
/// within `SMOL_GPU` of the reference's, greedy ids (picked on the GPU) equal to the reference up to its first near-tie
/// (at most [`GPU_GREEDY_STEPS`]), and "What is the capital of France?" answered with "Paris".
#[test]
fn smollm2_gguf_greedy_on_the_gpu() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(path.exists(), "{} is missing: run scripts/setup.sh", path.display());
    let model = LlmModel::open(&path).unwrap();
    let gpu = gpu();
    let expected = json(&golden().join("smollm2/expected.json"));
    let vocab = model.config.vocab;
    let mut paris = false;
    for case in expected["cases"].as_array().unwrap() {
        let msg = case["user_message"].as_str().unwrap();
        let want = &case["results"]["gguf_dequant_f32"];
        let prompt = ids(&case["prompt_ids"]);
        let mut engine = engine(&gpu, &model);
        let logits = engine.forward(&prompt, false).unwrap();
        assert_eq!(logits.len(), vocab);
        check_top20(
            msg,
            &logits,
            want["top20_last_prompt_position"].as_array().unwrap(),
            SMOL_GPU,
        );
        let sure = want["greedy_prefix_len_margin_ge_0.1"].as_u64().unwrap() as usize;
        let reference = ids(&want["greedy_ids"]);
        let steps = want["greedy_steps"].as_array().unwrap();
        let n = reference.len().min(sure + 1).min(GPU_GREEDY_STEPS);
        let mut got = vec![loom_wasm::cpu::ops::argmax(&logits) as u32];
        while got.len() < n {
            let last = *got.last().unwrap();
            got.push(engine.forward_greedy(&[last]).unwrap());
        }
        for (i, &g) in got.iter().enumerate() {
            if i < sure {
                assert_eq!(g, reference[i], "{msg}: greedy step {i}: {got:?} vs {reference:?}");
            } else {
                let runner_up = steps[i]["second"].as_u64().map(|x| x as u32);
                assert!(
                    g == reference[i] || Some(g) == runner_up,
                    "{msg}: step {i} (near-tie) gave {g}"
                );
            }
        }
        if msg == "What is the capital of France?" {
            // The whole reply: continue to EOS (2) on the GPU.
            while got.len() < GPU_GREEDY_STEPS && *got.last().unwrap() != 2 {
                let last = *got.last().unwrap();
                got.push(engine.forward_greedy(&[last]).unwrap());
            }
            let text = model.tokenizer.as_ref().unwrap().decode(&got, true).unwrap();
            assert!(text.contains("Paris"), "{msg}: {text:?}");
            paris = true;
        }
    }
    assert!(paris, "the golden set has the France prompt");

    // The dispatches per decoded token BENCHMARKS.md states for this model, counted at the wgpu calls: 246 with
    // the norms apart, 184 folded into the matvecs (the argmax of its 49,152 logits two of them, in slices).
    let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
    for (fold, dispatches) in [(false, 246), (true, 184)] {
        e.set_fold_norms(fold);
        e.reset();
        let next = pollster::block_on(e.forward_argmax(&[1, 2, 3])).unwrap();
        pollster::block_on(e.forward_argmax(&[next])).unwrap();
        let step = e.last_call();
        assert_eq!(
            (step.dispatches, step.submits),
            (dispatches, 1),
            "folded {fold}: {step:?}"
        );
    }
}

/// A device lost mid-conversation (here destroyed on purpose) is a typed error, never a panic, and the model opens
/// again on a new device.
#[test]
fn device_lost_is_a_typed_error_and_the_model_reopens() {
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let gpu = gpu();
    let mut e = engine(&gpu, &model);
    e.forward(&[72, 101], false).unwrap();
    gpu.device.destroy();
    let err = e.forward(&[108], false).unwrap_err();
    assert_eq!(err.code(), "device_lost", "{err}");
    let (expected, prompts) = tiny_expected();
    let set = &expected["weight_sets"]["gguf_q4_0"];
    let fresh = self::gpu();
    check_tiny_on(
        model.config.vocab,
        "gguf_q4_0 reopened",
        set,
        &prompts,
        TINY_GPU,
        &mut || engine(&fresh, &model),
    );
}

/// The weights take on the GPU what the file stores, each tensor once: a tied head reads the embedding's buffers
/// instead of a second copy. Expected sizes come from the GGUF header (gguf-py wrote the files); the gate and up
/// projections fused into one matrix are the same bytes.
#[test]
fn gpu_weights_take_the_file_s_tensor_bytes_once() {
    let gpu = gpu();
    for name in ["model.q4_0.gguf", "model.q8_0.gguf", "model.f32.gguf"] {
        let bytes = std::fs::read(golden().join("tiny-llama").join(name)).unwrap();
        let header = loom_wasm::formats::gguf::read_header_bytes(&bytes).unwrap();
        assert!(
            header.tensor("output.weight").is_none(),
            "{name}: the tiny llama has a tied head"
        );
        let stored: u64 = header.tensors.iter().map(|t| t.bytes).sum();
        let model = LlmModel::from_gguf(Bytes::from(bytes)).unwrap();
        let e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
        assert_eq!(e.weight_bytes(), stored, "{name}");
    }
}

/// The self-test at open (`GpuEngine::self_test`): every kernel of the engine against its CPU twin, then the first
/// token's logits. It passes on lavapipe for a Llama (SwiGLU, one RoPE) and a Gemma (GeGLU, a window, post-norms),
/// and each kernel made wrong on purpose (`Gpu::break_kernel`: its dispatches skipped) fails it by name; logits all
/// one value fail it too. A failed self-test leaves the engine usable: the cache is empty.
#[test]
fn the_self_test_passes_and_names_each_kernel_made_wrong() {
    let gpu = gpu();
    let llama = LlmModel::open(&golden().join("tiny-llama/model.q4_1.gguf")).unwrap();
    let gemma =
        LlmModel::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gemma3/model.f32.gguf")).unwrap();
    for (model, kernels) in [
        (&llama, ["matvec/ggml_q4_1 ×1", "elementwise_swiglu (Silu)"]),
        (&gemma, ["matvec/float32 ×1", "elementwise_swiglu (Gelu)"]),
    ] {
        let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap();
        let checks = pollster::block_on(e.self_test()).unwrap_or_else(|err| panic!("{err}"));
        let names: Vec<&str> = checks.iter().map(|c| c.kernel.as_str()).collect();
        for k in kernels {
            assert!(names.contains(&k), "{k} not in {names:?}");
        }
        assert!(checks.iter().all(|c| c.passed && c.max_error < 1e-3), "{checks:#?}");
    }

    // Each kernel the engine dispatches, broken in turn: (pipeline-name prefix, the check that must name it).
    let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &llama.config, &llama.weights, None)).unwrap();
    for (broken, named) in [
        ("matvec/ggml_q4_1/f32/1/1/x/matvec", "matvec/ggml_q4_1 ×1"),
        ("matvec/ggml_q4_1/f32/1/1/norm", "matvec/ggml_q4_1 (norm, +=)"),
        ("matvec/ggml_q4_1/f32/1/1/x/gather", "matvec/ggml_q4_1 gather"),
        ("matvec/ggml_q4_1/f32/1/4", "matvec/ggml_q4_1 ×3"),
        ("matvec/ggml_q4_1/f32/1/16", "matvec/ggml_q4_1 ×17"),
        ("norm_rms", "norm_rms"),
        ("norm_add_rms", "norm_add_rms"),
        ("attention_attend", "attention_attend"),
        ("matvec/ggml_q4_1/f32/1/1/glu", "matvec/ggml_q4_1 (glu, +=) ×1"),
        ("matvec/ggml_q4_1/f32/1/16/glu", "matvec/ggml_q4_1 (glu, +=) ×17"),
        ("elementwise_swiglu_rows", "elementwise_swiglu_rows"),
        ("elementwise_swiglu", "elementwise_swiglu (Silu)"),
        ("elementwise_add_inplace", "elementwise_add_inplace"),
        ("elementwise_scale", "elementwise_add_inplace + elementwise_scale"),
        ("argmax_rows", "argmax_rows"),
        ("sample", "sample"),
    ] {
        gpu.break_kernel(Some(broken));
        let err = pollster::block_on(e.self_test()).expect_err(broken);
        gpu.break_kernel(None);
        assert_eq!(err.code(), "gpu_self_test", "{broken}: {err}");
        assert!(err.to_string().contains(&format!("the {named}")), "{broken}: {err}");
    }
    // Mended, the same engine passes and, its cache left empty, picks what a fresh engine picks.
    pollster::block_on(e.self_test()).unwrap();
    let mut fresh = pollster::block_on(GpuEngine::new(gpu.clone(), &llama.config, &llama.weights, None)).unwrap();
    let prompt = [1, 5, 9, 2];
    assert_eq!(
        pollster::block_on(e.forward_logits(&prompt, true)).unwrap(),
        pollster::block_on(fresh.forward_logits(&prompt, true)).unwrap()
    );

    // Logits all one value: a final norm of zeros.
    let mut flat = (*llama.weights).clone();
    flat.final_norm.iter_mut().for_each(|w| *w = 0.0);
    let mut e = pollster::block_on(GpuEngine::new(gpu.clone(), &llama.config, &flat, None)).unwrap();
    let err = pollster::block_on(e.self_test()).unwrap_err();
    assert_eq!(err.code(), "gpu_self_test");
    assert!(err.to_string().contains("logits on the GPU are all one value"), "{err}");
}

/// The fit check from the headers (`GpuFit::of` over `StreamedModel::tensor_bytes`, nothing of the weights read)
/// says what the upload then does: under storage-binding limits from 4 KiB to the adapter's own, a model it says
/// fits opens, and one it refuses fails to open, on tiny-llama (F32 and Q4_1) and SmolLM2-135M.
#[test]
fn the_fit_check_from_the_headers_predicts_the_upload() {
    let smol = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let cases = [
        (
            golden().join("tiny-llama/model.f32.gguf"),
            vec![4 << 10, 16 << 10, 32 << 10, 1 << 20],
        ),
        (
            golden().join("tiny-llama/model.q4_1.gguf"),
            vec![4 << 10, 16 << 10, 1 << 20],
        ),
        (smol, vec![1 << 20, 4 << 20, 8 << 20, 128 << 20]),
    ];
    let (mut fits, mut refused) = (0, 0);
    for (path, limits) in cases {
        let reader = RecordingReader {
            paths: vec![path.clone()],
            reads: RefCell::new(Vec::new()),
        };
        let names = vec![path.file_name().unwrap().to_string_lossy().into_owned()];
        let sizes = vec![path.metadata().unwrap().len()];
        let streamed = pollster::block_on(StreamedModel::open(&names, &sizes, &reader)).unwrap();
        let read: u64 = reader.reads.borrow().iter().map(|r| r.2).sum();
        // The first 64 KiB, then what the header says it needs: SmolLM2's 49,152-token vocabulary, not its weights.
        assert!(
            read <= (128 << 10).max(sizes[0] / 20),
            "{}: the headers took {read} bytes",
            names[0]
        );
        let tensors = streamed.tensor_bytes();
        let model = LlmModel::open(&path).unwrap();
        for max_binding in limits {
            let gpu = Arc::new(pollster::block_on(Gpu::with_max_binding(max_binding)).unwrap());
            let fit = GpuFit::of(&model.config, &tensors, None, &gpu.limits);
            let opened = pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None));
            let what = format!("{} under {max_binding} bytes: {:?}", names[0], fit.problems);
            assert_eq!(fit.problems.is_empty(), opened.is_ok(), "{what}: {:?}", opened.err());
            if fit.problems.is_empty() {
                fits += 1;
                let e = opened.unwrap();
                assert_eq!(e.config().context, fit.context, "{what}");
                // Every weight buffer is the file's tensors as stored (norms included, fused ones once).
                assert_eq!(e.weight_bytes(), fit.weight_bytes, "{what}");
            } else {
                refused += 1;
            }
        }
    }
    assert_eq!((fits, refused), (5, 6));
}

/// A device lost in the middle of a reply (destroyed on purpose after a few pieces of text): with a way to reopen
/// (`Session::on_device_lost`: a new device, the weights uploaded again) the conversation and the reply so far run
/// again on the new device and the reply goes on to the same greedy ids as one never interrupted; without one the
/// reply ends with `device_lost` and the text so far, a prefix of the whole.
#[test]
fn a_reply_survives_a_lost_device_on_a_new_one() {
    use loom_wasm::llm::generate::StopReason;
    let model = LlmModel::open(&golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let opts = GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens: 24,
        ..GenerateOptions::default()
    };
    let prompt: Vec<u32> = vec![72, 101, 108, 108, 111, 44, 32];
    let mut whole = Session::new(&model, engine(&gpu(), &model)).unwrap();
    let want = whole.generate(&prompt, &opts, &mut |_| true).unwrap();
    assert_eq!(want.ids.len(), 24);

    for reopen in [true, false] {
        let first = gpu();
        let mut session = Session::new(&model, engine(&first, &model)).unwrap();
        if reopen {
            let (cfg, weights) = (model.config.clone(), model.weights.clone());
            session.on_device_lost(Box::new(move || {
                let e = pollster::block_on(GpuEngine::new(gpu(), &cfg, &weights, None))?;
                Ok(Box::new(e) as Box<dyn Engine>)
            }));
        }
        let mut pieces = 0;
        let got = session
            .generate(&prompt, &opts, &mut |_| {
                pieces += 1;
                if pieces == 3 {
                    first.device.destroy();
                }
                true
            })
            .unwrap();
        assert_eq!(session.devices_lost, 1, "reopen {reopen}");
        if reopen {
            assert_eq!(got.ids, want.ids);
            assert_eq!(got.text, want.text);
            assert_eq!(got.stop_reason, want.stop_reason);
        } else {
            assert_eq!(got.stop_reason, StopReason::DeviceLost);
            assert!(
                got.ids.len() < want.ids.len() && want.ids.starts_with(&got.ids),
                "{:?}",
                got.ids
            );
            assert!(want.text.starts_with(&got.text), "{:?}", got.text);
        }
    }
}
