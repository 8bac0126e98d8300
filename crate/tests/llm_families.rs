//! Model families beyond Llama/Qwen against references from outside this code: a tiny random Gemma 3 written as
//! llama.cpp's converter writes one (`testdata/gemma3/gen.py`, gguf-py), whose logits come from a float64 numpy
//! forward that follows transformers' `modeling_gemma3.py`. Checked: the logits at every position of each prompt
//! (within `CASES_ABS + CASES_REL·|logit|`: float32 against float64) on the CPU engine and on the GPU engine
//! (lavapipe), the greedy continuation, and the refusal of a Loom `.entity` conversion.

mod llm_util;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llm_util::{check_cases, greedy, ids, json, FileReader, CASES_ABS, CASES_REL};
use loom_wasm::llm::config::{Arch, FfnAct};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::LoomError;

fn gemma3_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gemma3")
}

fn gpu_engine(model: &LlmModel) -> Box<dyn Engine> {
    static GPU: std::sync::OnceLock<Arc<loom_wasm::gpu::Gpu>> = std::sync::OnceLock::new();
    let gpu = GPU.get_or_init(|| Arc::new(pollster::block_on(loom_wasm::gpu::Gpu::new()).expect("a wgpu adapter")));
    let engine = loom_wasm::llm::gpu_engine::GpuEngine::new(gpu.clone(), &model.config, &model.weights, None);
    Box::new(pollster::block_on(engine).unwrap())
}

#[test]
fn tiny_gemma3_gguf_matches_the_transformers_forward() {
    check_gemma3(&|m| Box::new(m.cpu_engine()));
}

#[test]
fn tiny_gemma3_on_the_gpu_engine() {
    check_gemma3(&|m| gpu_engine(m));
}

fn check_gemma3(new_engine: &dyn Fn(&LlmModel) -> Box<dyn Engine>) {
    let dir = gemma3_dir();
    let expected = json(&dir.join("expected.json"));
    let model = LlmModel::open(&dir.join("model.f32.gguf")).unwrap();
    let c = &model.config;
    assert_eq!(c.arch, Arch::Gemma3);
    assert!(c.block.post_norms);
    assert_eq!(c.block.ffn_act, FfnAct::GeluTanh);
    assert_eq!(c.block.embed_scale, 8.0);
    // The layers that slide are the ones the reference says (HF's layer_types), read from llama.cpp's keys.
    let sliding: Vec<bool> = expected["sliding_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_bool().unwrap())
        .collect();
    let windows: Vec<bool> = (0..c.n_layers).map(|l| c.window(l).is_some()).collect();
    assert_eq!(windows, sliding);
    let (abs, rel) = (1e-3f32, 1e-4f32);
    for case in expected["cases"].as_array().unwrap() {
        let prompt = ids(&case["ids"]);
        let mut engine = new_engine(&model);
        let logits = engine.forward(&prompt, true).unwrap();
        let want: Vec<Vec<f32>> = case["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect();
        assert_eq!(logits.len(), want.len() * c.vocab);
        let mut worst = 0f32;
        for (pos, (got, want)) in logits.chunks(c.vocab).zip(&want).enumerate() {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let err = (g - w).abs();
                worst = worst.max(err);
                assert!(
                    err <= abs + rel * w.abs(),
                    "prompt {prompt:?} position {pos} token {i}: {g} against {w}"
                );
            }
        }
        eprintln!("prompt of {} tokens: max |Δlogit| {worst:.2e}", prompt.len());
        let last = &logits[logits.len() - c.vocab..];
        let mut engine = model.cpu_engine();
        engine.forward(&prompt, false).unwrap();
        assert_eq!(
            greedy(&mut engine, last, 8, None),
            ids(&case["greedy"]),
            "prompt {prompt:?}"
        );
    }
}

/// A window only matters once a prompt is longer than it: the same prompt decoded one token at a time through the
/// KV cache gives the logits of the whole-prompt pass (the window applies to cached positions too).
#[test]
fn sliding_windows_hold_across_decode_steps() {
    let model = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    windows_across_steps(&model, &|| Box::new(model.cpu_engine()));
    windows_across_steps(&model, &|| gpu_engine(&model));
}

fn windows_across_steps(model: &LlmModel, new_engine: &dyn Fn() -> Box<dyn Engine>) {
    let prompt: Vec<u32> = (0..12).map(|i| 40 + 7 * i).collect();
    let mut whole = new_engine();
    let all = whole.forward(&prompt, true).unwrap();
    let mut stepped = new_engine();
    for (t, &id) in prompt.iter().enumerate() {
        let got = stepped.forward(&[id], false).unwrap();
        let want = &all[t * model.config.vocab..(t + 1) * model.config.vocab];
        let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-4, "position {t}: {worst}");
    }
}

#[test]
fn what_does_not_run_is_refused_by_name() {
    // An architecture that does not run: refused by name when opened, and the inspection (which the app's "Chat
    // with this model" reads) says why while the header still inspects.
    let path = families_dir().join("unsupported.gguf");
    match LlmModel::open(&path) {
        Err(LoomError::Unsupported(m)) => assert!(m.contains("phi2"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    let ins = loom_wasm::inspect::inspect_bytes(&std::fs::read(&path).unwrap()).unwrap();
    assert!(ins.llm.is_none());
    assert!(ins.llm_unsupported.as_deref().is_some_and(|m| m.contains("phi2")));
    let ins = loom_wasm::inspect::inspect_bytes(&std::fs::read(gemma3_dir().join("model.f32.gguf")).unwrap()).unwrap();
    assert!(ins.llm.is_some() && ins.llm_unsupported.is_none());

    let model = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    // Loom's transformer layers are Llama's block.
    match model.to_entity(false) {
        Err(LoomError::Unsupported(m)) => assert!(m.contains("gemma3"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// Makes a fresh engine of one kind.
type NewEngine<'a> = dyn Fn() -> Box<dyn Engine> + 'a;

fn families_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/families")
}

/// An HF folder of the families' 4-layer weights with the tiny Llama's tokenizer and `config`.
fn hf_folder(name: &str, config: &serde_json::Value) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("family_{name}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(families_dir().join("model.safetensors"), d.join("model.safetensors")).unwrap();
    std::fs::copy(
        llm_util::golden().join("tiny-llama/tokenizer.json"),
        d.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(d.join("config.json"), serde_json::to_vec(config).unwrap()).unwrap();
    d
}

/// A family's GGUF (`<family>.gguf`, llama.cpp's keys) and HF folder describe the same block, and both give the
/// reference on both engines.
fn gguf_and_hf_folder(family: &str, arch: Arch) {
    let expected = json(&families_dir().join("expected.json"));
    let fam = &expected[family];
    let gguf = LlmModel::open(&families_dir().join(format!("{family}.gguf"))).unwrap();
    assert_eq!(gguf.config.arch, arch);
    let hf = LlmModel::open(&hf_folder(family, &fam["config"])).unwrap();
    assert_eq!(hf.config.block, gguf.config.block);
    for model in [&gguf, &hf] {
        check_cases(model, fam, &|| Box::new(model.cpu_engine()));
        check_cases(model, fam, &|| gpu_engine(model));
    }
}

/// SmolLM3: no RoPE on its NoPE layers, from llama.cpp's GGUF (every 4th layer) and from an HF folder
/// (`no_rope_layers`).
#[test]
fn smollm3_skips_rope_on_its_nope_layers() {
    gguf_and_hf_folder("smollm3", Arch::SmolLM3);
}

/// Mistral's sliding window (every layer) from an HF config, on both engines; Qwen2's `use_sliding_window: false`
/// (how its configs ship) keeps every layer global.
#[test]
fn mistral_attends_within_its_sliding_window() {
    let expected = json(&families_dir().join("expected.json"));
    let fam = &expected["mistral"];
    let model = LlmModel::open(&hf_folder("mistral", &fam["config"])).unwrap();
    assert!((0..model.config.n_layers).all(|l| model.config.window(l) == Some(6)));
    check_cases(&model, fam, &|| Box::new(model.cpu_engine()));
    check_cases(&model, fam, &|| gpu_engine(&model));
    let mut qwen = fam["config"].clone();
    qwen["model_type"] = "qwen2".into();
    qwen["architectures"] = serde_json::json!(["Qwen2ForCausalLM"]);
    qwen["use_sliding_window"] = false.into();
    let model = LlmModel::open(&hf_folder("qwen2_no_window", &qwen)).unwrap();
    assert!(model.config.block.sliding.is_none());
}

/// Every kind of bias (q, k, v, o, gate, up, down) against the float64 reference, on layers 0 and 2 only (as
/// llama.cpp's optional per-layer biases allow): both engines, and on the GPU the blocks with biases keep their
/// projections apart while the others fuse q|k|v and gate|up (seen in the dispatches of a decoded token: 10 a fused
/// block, 21 a biased one, norms apart as on lavapipe).
#[test]
fn every_bias_kind_matches_the_float64_reference() {
    let expected = json(&families_dir().join("expected.json"));
    let fam = &expected["biases"];
    // Two shards and transformers' index naming each tensor's file.
    let dir = hf_folder("biases", &fam["config"]);
    std::fs::copy(
        families_dir().join("biases.safetensors"),
        dir.join("biases.safetensors"),
    )
    .unwrap();
    let mut weight_map = serde_json::Map::new();
    for file in ["model.safetensors", "biases.safetensors"] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        for name in meta.tensors().keys() {
            weight_map.insert(name.clone(), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let model = LlmModel::open(&dir).unwrap();
    let biased = |l: usize| {
        let b = &model.weights.blocks[l];
        [&b.bq, &b.bk, &b.bv, &b.bo, &b.b_gate, &b.b_up, &b.b_down]
            .iter()
            .all(|x| x.is_some())
    };
    assert_eq!((0..4).map(biased).collect::<Vec<_>>(), [true, false, true, false]);
    check_cases(&model, fam, &|| Box::new(model.cpu_engine()));
    check_cases(&model, fam, &|| gpu_engine(&model));

    let gpu = Arc::new(pollster::block_on(loom_wasm::gpu::Gpu::new()).unwrap());
    let mut e = pollster::block_on(loom_wasm::llm::gpu_engine::GpuEngine::new(
        gpu,
        &model.config,
        &model.weights,
        None,
    ))
    .unwrap();
    e.set_fold_norms(false);
    let next = pollster::block_on(e.forward_argmax(&[40, 45, 50])).unwrap();
    pollster::block_on(e.forward_argmax(&[next])).unwrap();
    // The gather, the first and final norms, the head and the argmax, and the blocks (attention's splits, which
    // turn q and k by RoPE and write the KV rows, and their combination one dispatch each; the unbiased blocks'
    // fused gate|up read by the down projection as its gated product, the biased ones' product a dispatch of its
    // own).
    assert_eq!(e.last_call().dispatches, 5 + 2 * 8 + 2 * 19);
}

/// Mistral's window (6) over a 200-token sequence, 33 windows long, against the float64 reference's last logits
/// and 40 greedy ids: the CPU engine keeps only what later queries read (its rows trimmed as positions pass), the
/// GPU engine a ring of the window and a chunk (it wraps three times). Both prefill it whole and token by token; a
/// cut a few positions back keeps the cache, a cut far back (the rows it reads are gone) empties it, and the next
/// run computes from there.
#[test]
fn a_sequence_many_windows_long_through_caches_that_keep_the_window() {
    let expected = json(&families_dir().join("expected.json"));
    let fam = &expected["mistral"];
    let model = LlmModel::open(&hf_folder("mistral", &fam["config"])).unwrap();
    let long = &fam["long"];
    let seq = ids(&long["ids"]);
    let want: Vec<f32> = long["last_logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let want_greedy = ids(&long["greedy"]);
    let close = |what: &str, got: &[f32]| {
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= CASES_ABS + CASES_REL * w.abs(),
                "{what}: token {i}: {g} against {w}"
            );
        }
    };
    let cpu = || Box::new(model.cpu_engine()) as Box<dyn Engine>;
    let gpu = || gpu_engine(&model);
    let engines: [(&str, &NewEngine); 2] = [("CPU", &cpu), ("GPU", &gpu)];
    for (name, new_engine) in engines {
        let mut e = new_engine();
        let logits = e.forward(&seq, false).unwrap();
        close(&format!("{name}, one prefill"), &logits);
        assert_eq!(greedy(e.as_mut(), &logits, 40, None), want_greedy, "{name}");
        let held = e.cached();
        assert_eq!(held, 239);
        // A few positions back: still held; the same token comes next.
        assert_eq!(e.truncate(held - 5), held - 5);
        let context: Vec<u32> = seq.iter().chain(&want_greedy).copied().collect();
        let again = e.forward(&context[held - 5..held], false).unwrap();
        assert_eq!(loom_wasm::cpu::ops::argmax(&again) as u32, want_greedy[39], "{name}");
        // Far back: the rows position 10 reads are gone; the cache empties and the sequence runs again.
        assert_eq!(e.truncate(10), 0, "{name}");
        assert_eq!(e.cached(), 0);
        close(&format!("{name}, again"), &e.forward(&seq, false).unwrap());

        let mut e = new_engine();
        let mut last = Vec::new();
        for &t in &seq {
            last = e.forward(&[t], false).unwrap();
        }
        close(&format!("{name}, token by token"), &last);
    }
    // The CPU's memory over 2,000 positions: a prompt chunk (256) and the trimming slack per layer (the vectors'
    // capacity: 512 rows), not 2,000.
    let mut config = fam["config"].clone();
    config["max_position_embeddings"] = 4096.into();
    let model = LlmModel::open(&hf_folder("mistral_4096", &config)).unwrap();
    let mut cpu = model.cpu_engine();
    let many: Vec<u32> = seq.iter().cycle().take(2000).copied().collect();
    cpu.forward(&many, false).unwrap();
    let kv_bytes_per_position = 2 * model.config.n_layers * model.config.kv_dim() * 4;
    assert!(
        cpu.cache_bytes() <= 512 * kv_bytes_per_position,
        "{} bytes",
        cpu.cache_bytes()
    );
}

/// Granite's multipliers (embedding, attention scores, residual branches, logits), from llama.cpp's GGUF keys and
/// from an HF config.
#[test]
fn granite_applies_its_multipliers() {
    gguf_and_hf_folder("granite", Arch::Granite);
}

/// The tiny Gemma 3 as transformers saves it (HF names, the norms' w for `1 + w`) gives the same logits on both
/// engines; and as a multimodal Gemma3ForConditionalGeneration (its language model's tensors under
/// `model.language_model.`, its config in `text_config`) too.
#[test]
fn tiny_gemma3_from_hf_folders() {
    let hf = gemma3_dir().join("hf");
    let expected = json(&gemma3_dir().join("expected.json"));
    let model = LlmModel::open(&hf).unwrap();
    let gguf = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    assert_eq!(model.config.block.norm_offset, 1.0);
    assert_eq!(model.config.block.sliding, gguf.config.block.sliding);
    check_cases(&model, &expected, &|| Box::new(model.cpu_engine()));
    check_cases(&model, &expected, &|| gpu_engine(&model));

    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gemma3_multimodal");
    std::fs::create_dir_all(&d).unwrap();
    let bytes = std::fs::read(hf.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let renamed: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (name.replacen("model.", "model.language_model.", 1), view))
        .collect();
    std::fs::write(
        d.join("model.safetensors"),
        safetensors::serialize(renamed, None).unwrap(),
    )
    .unwrap();
    let text = json(&hf.join("config.json"));
    let config = serde_json::json!({
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": text,
        "vision_config": {"model_type": "siglip_vision_model"},
    });
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    let multimodal = LlmModel::open(&d).unwrap();
    assert_eq!(multimodal.config, model.config);
    check_cases(&multimodal, &expected, &|| Box::new(multimodal.cpu_engine()));
}

/// The streamed load (the browser's GPU chat) of the HF Gemma 3 reads the same norms (with their +1) and matrices
/// as the whole-file load, under Gemma's names.
#[test]
fn a_streamed_hf_gemma3_reads_what_the_whole_load_reads() {
    let hf = gemma3_dir().join("hf");
    let whole = LlmModel::open(&hf).unwrap();
    let names = ["config.json", "model.safetensors"];
    let paths: Vec<PathBuf> = names.iter().map(|n| hf.join(n)).collect();
    let sizes: Vec<u64> = paths.iter().map(|p| p.metadata().unwrap().len()).collect();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let reader = FileReader(paths);
    pollster::block_on(async {
        let streamed = loom_wasm::llm::streamed::StreamedModel::open(&names, &sizes, &reader)
            .await
            .unwrap();
        assert_eq!(streamed.config, whole.config);
        let g = streamed.globals(&reader).await.unwrap();
        assert_eq!(g.final_norm, whole.weights.final_norm);
        for i in 0..whole.config.n_layers {
            let (b, w) = (streamed.block(&reader, i).await.unwrap(), &whole.weights.blocks[i]);
            assert_eq!(
                (
                    &b.attn_norm,
                    &b.ffn_norm,
                    &b.post_attn_norm,
                    &b.post_ffn_norm,
                    &b.q_norm
                ),
                (
                    &w.attn_norm,
                    &w.ffn_norm,
                    &w.post_attn_norm,
                    &w.post_ffn_norm,
                    &w.q_norm
                )
            );
            assert_eq!(
                (b.wq.data.as_ref(), b.down.data.as_ref()),
                (w.wq.data.as_ref(), w.down.data.as_ref())
            );
        }
    });
}

/// Gemma 2 (soft-capped scores and logits, every other layer sliding, no q/k norms) from llama.cpp's GGUF and from
/// an HF folder, on both engines, against its transformers-style reference.
#[test]
fn tiny_gemma2_soft_caps_its_scores_and_logits() {
    let expected = json(&gemma3_dir().join("expected_gemma2.json"));
    let gguf = LlmModel::open(&gemma3_dir().join("gemma2.f32.gguf")).unwrap();
    assert_eq!(gguf.config.arch, Arch::Gemma2);
    assert_eq!(
        (gguf.config.block.attn_softcap, gguf.config.block.final_softcap),
        (Some(2.0), Some(5.0))
    );
    check_cases(&gguf, &expected, &|| Box::new(gguf.cpu_engine()));
    check_cases(&gguf, &expected, &|| gpu_engine(&gguf));
    let hf = LlmModel::open(&gemma3_dir().join("hf-gemma2")).unwrap();
    assert_eq!(hf.config.block.sliding, gguf.config.block.sliding);
    check_cases(&hf, &expected, &|| Box::new(hf.cpu_engine()));
    check_cases(&hf, &expected, &|| gpu_engine(&hf));
}

fn phi3_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/phi3")
}

/// An HF folder of the tiny Phi-3 with `config`; without `lm_head.weight` when the config ties the head.
fn phi3_hf_folder(name: &str, config: &serde_json::Value) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("phi3_{name}"));
    std::fs::create_dir_all(&d).unwrap();
    let bytes = std::fs::read(phi3_dir().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tied = config["tie_word_embeddings"].as_bool().unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| !(tied && name == "lm_head.weight"))
        .collect();
    std::fs::write(d.join("model.safetensors"), safetensors::serialize(kept, None).unwrap()).unwrap();
    std::fs::copy(
        llm_util::golden().join("tiny-llama/tokenizer.json"),
        d.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(d.join("config.json"), serde_json::to_vec(config).unwrap()).unwrap();
    d
}

/// Each case's logits at every position (`check_cases`), and the logits of each greedy step through the KV cache:
/// the 12-token prompt's decode passes LongRoPE's original length mid-way, where transformers switches to the
/// long factors for new positions while the cached ones keep theirs.
fn check_phi3(model: &LlmModel, expected: &serde_json::Value, new_engine: &dyn Fn() -> Box<dyn Engine>) {
    check_cases(model, expected, new_engine);
    let vocab = model.config.vocab;
    for case in expected["cases"].as_array().unwrap() {
        let mut engine = new_engine();
        engine.forward(&ids(&case["ids"]), false).unwrap();
        let steps = case["step_logits"].as_array().unwrap();
        for (step, (id, want)) in ids(&case["greedy"]).into_iter().zip(steps).enumerate() {
            let got = engine.forward(&[id], false).unwrap();
            assert_eq!(got.len(), vocab);
            for (i, (g, w)) in got.iter().zip(want.as_array().unwrap()).enumerate() {
                let w = w.as_f64().unwrap() as f32;
                assert!(
                    (g - w).abs() <= CASES_ABS + CASES_REL * w.abs(),
                    "prompt of {} tokens, step {step}, token {i}: {g} against {w}",
                    engine.cached() - 1 - step
                );
            }
        }
    }
}

/// Phi-3 (Phi-3.5-mini's shape: a window on every layer, its own head) and Phi-4-mini's shape (12 of 16 dimensions
/// rotated, a tied head), each from llama.cpp's GGUF (fused `attn_qkv` and gate|up `ffn_up`, LongRoPE's factor
/// tensors) and from an HF folder (`qkv_proj`, `gate_up_proj`, `rope_scaling` longrope), on both engines, against
/// a transformers-style reference.
#[test]
fn tiny_phi3_with_longrope_fused_matrices_and_partial_rotary() {
    let expected = json(&phi3_dir().join("expected.json"));
    for name in ["phi3", "phi4mini"] {
        let exp = &expected[name];
        let gguf = LlmModel::open(&phi3_dir().join(format!("{name}.gguf"))).unwrap();
        let c = &gguf.config;
        assert_eq!(c.arch, Arch::Phi3);
        let partial = exp["config"]["partial_rotary_factor"].as_f64().unwrap();
        assert_eq!(c.rope_dims, (c.head_dim as f64 * partial) as usize);
        assert_eq!(c.rope_long.as_ref().map(|l| l.after), Some(16));
        let window = exp["config"]["sliding_window"].as_u64().map(|w| w as usize);
        assert!((0..c.n_layers).all(|l| c.window(l) == window));
        let hf = LlmModel::open(&phi3_hf_folder(name, &exp["config"])).unwrap();
        assert_eq!(hf.config, gguf.config, "{name}: the HF config reads as the GGUF's");
        for model in [&gguf, &hf] {
            check_phi3(model, exp, &|| Box::new(model.cpu_engine()));
            check_phi3(model, exp, &|| gpu_engine(model));
        }
    }
}

/// The streamed load (the browser's GPU chat) reads LongRoPE's factor tensors with the header and splits the fused
/// matrices as the whole-file load does.
#[test]
fn a_streamed_phi3_reads_what_the_whole_load_reads() {
    let path = phi3_dir().join("phi3.gguf");
    let whole = LlmModel::open(&path).unwrap();
    let size = path.metadata().unwrap().len();
    let reader = FileReader(vec![path]);
    let names = vec!["phi3.gguf".to_string()];
    pollster::block_on(async {
        let streamed = loom_wasm::llm::streamed::StreamedModel::open(&names, &[size], &reader)
            .await
            .unwrap();
        assert_eq!(streamed.config, whole.config);
        for i in 0..whole.config.n_layers {
            let (b, w) = (streamed.block(&reader, i).await.unwrap(), &whole.weights.blocks[i]);
            for (got, want) in b.matrices().into_iter().zip(w.matrices()) {
                assert_eq!((got.rows, got.data.as_ref()), (want.rows, want.data.as_ref()));
            }
        }
    });
}

/// A Gemma model whose files carry no chat template (as the real Gemma 3 270M GGUF) chats in Gemma's format: every
/// conversation renders as llama.cpp's built-in `gemma` template writes it (`testdata/templates/built-in-gemma.json`,
/// from `scripts/gen_builtin_template_cases.py`), the prompt ids are BOS and that text's ids, and a reply ends at
/// `<end_of_turn>`. A model of another family without a template still has none.
#[test]
fn a_gemma_without_a_chat_template_uses_gemmas_format() {
    use loom_wasm::llm::generate::{ChatFormat, Conversation, GenerateOptions};
    use loom_wasm::llm::template::ChatMessage;
    let model = LlmModel::open(&gemma3_dir().join("model.f32.gguf")).unwrap();
    let format = ChatFormat::new(&model).unwrap();
    assert_eq!(format.built_in_template(), Some("gemma"));
    let cases = json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/templates/built-in-gemma.json"));
    for case in cases["cases"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let want = case["text"].as_str().unwrap();
        assert_eq!(format.apply_template(&messages, add).unwrap(), want, "{messages:?}");
        if add {
            let tokenizer = format.tokenizer().unwrap();
            let mut ids = vec![tokenizer.bos_id().unwrap()];
            ids.extend(tokenizer.encode(want, false).unwrap());
            assert_eq!(format.chat_prompt(&messages).unwrap(), ids);
        }
    }
    // `<end_of_turn>` ends a reply: the stop id of the first step when the engine picks it.
    let end = format.tokenizer().unwrap().token_to_id("<end_of_turn>").unwrap();
    let mut conversation = Conversation::new(&model).unwrap();
    let opts = GenerateOptions::default();
    let prompt = format
        .chat_prompt(&[ChatMessage {
            role: "user".into(),
            content: "hi".into(),
        }])
        .unwrap();
    let (mut reply, _) = conversation.begin(&prompt, &opts, model.config.context).unwrap();
    reply.accept(loom_wasm::llm::generate::Step::Id(end)).unwrap();
    assert_eq!(reply.stop_reason(), Some(loom_wasm::llm::generate::StopReason::Eos));

    let llama = LlmModel::open(&llm_util::golden().join("tiny-llama/model.q4_0.gguf")).unwrap();
    let format = ChatFormat::new(&llama).unwrap();
    assert!(!format.has_template() && format.built_in_template().is_none());
}
