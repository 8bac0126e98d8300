//! The LLM runtime compiled to wasm32 (simd128) in headless Chromium: tiny-llama's GGUF and safetensors
//! against the numpy reference's logits and greedy ids in `../shared/golden` (the native suite runs every file);
//! and the GPU decoder on WebGPU (SwiftShader: no shader-f16) with tiny-llama's Q4_0 GGUF and our Loom Q4_0
//! `.entity`, its greedy ids picked on the GPU (every GPU call awaited: the JS event loop drives WebGPU).
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use bytes::Bytes;
use loom_wasm::gpu::Gpu;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::generate::{GenerateOptions, Session};
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::model::{HfFiles, LlmModel};
use loom_wasm::llm::sampler::SamplingParams;
use serde_json::Value;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! golden {
    ($name:literal) => {
        include_bytes!(concat!("../../../shared/golden/tiny-llama/", $name)) as &[u8]
    };
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn check(model: &LlmModel, set: &str) {
    let expected: Value = serde_json::from_slice(golden!("expected.json")).unwrap();
    let prompts: Vec<Vec<u32>> = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    let results = expected["weight_sets"][set]["results"].as_array().unwrap();
    let vocab = model.config.vocab;
    for (p, (prompt, res)) in prompts.iter().zip(results).enumerate() {
        let logits = model.cpu_engine().forward(prompt, true).unwrap();
        let mut worst = 0f32;
        for (pos, row) in res["logits"].as_array().unwrap().iter().enumerate() {
            for (i, w) in row.as_array().unwrap().iter().enumerate() {
                worst = worst.max((logits[pos * vocab + i] - w.as_f64().unwrap() as f32).abs());
            }
        }
        assert!(worst <= 1e-3, "{set} prompt {p}: max |Δlogit| {worst}");
        let mut s = Session::new(model, Box::new(model.cpu_engine())).unwrap();
        let opts = GenerateOptions {
            sampling: SamplingParams::greedy(),
            max_tokens: 16,
            ..GenerateOptions::default()
        };
        let g = s.generate(prompt, &opts, &mut |_| true).unwrap();
        assert_eq!(g.ids, ids(&res["greedy_ids"]), "{set} prompt {p}");
    }
}

#[wasm_bindgen_test]
fn tiny_llama_q4_1_gguf() {
    check(
        &LlmModel::from_gguf(Bytes::from_static(golden!("model.q4_1.gguf"))).unwrap(),
        "gguf_q4_1",
    );
}

#[wasm_bindgen_test]
fn tiny_llama_bf16_hf_folder() {
    let files = HfFiles {
        config_json: golden!("config.json").to_vec(),
        safetensors: vec![(
            "model.safetensors".into(),
            Bytes::from_static(golden!("model.bf16.safetensors")),
        )],
        tokenizer_json: Some(golden!("tokenizer.json").to_vec()),
        ..HfFiles::default()
    };
    check(&LlmModel::from_hf(&files).unwrap(), "safetensors_bf16");
}

async fn check_gpu(model: &LlmModel, set: &str) {
    // GpuEngine takes an Arc (shared across threads natively); in the browser there is one thread.
    #[allow(clippy::arc_with_non_send_sync)]
    let gpu = Arc::new(Gpu::new().await.expect("no WebGPU adapter"));
    let expected: Value = serde_json::from_slice(golden!("expected.json")).unwrap();
    let prompts: Vec<Vec<u32>> = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    let results = expected["weight_sets"][set]["results"].as_array().unwrap();
    let vocab = model.config.vocab;
    for (p, (prompt, res)) in prompts.iter().zip(results).enumerate() {
        let mut engine = GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)
            .await
            .unwrap();
        let logits = engine.forward_logits(prompt, true).await.unwrap();
        let mut worst = 0f32;
        for (pos, row) in res["logits"].as_array().unwrap().iter().enumerate() {
            for (i, w) in row.as_array().unwrap().iter().enumerate() {
                worst = worst.max((logits[pos * vocab + i] - w.as_f64().unwrap() as f32).abs());
            }
        }
        assert!(worst <= 1e-3, "{set} prompt {p}: max |Δlogit| {worst}");
        engine.reset();
        let want = ids(&res["greedy_ids"]);
        let mut got = vec![engine.forward_argmax(prompt).await.unwrap()];
        while got.len() < want.len() {
            let last = *got.last().unwrap();
            got.push(engine.forward_argmax(&[last]).await.unwrap());
        }
        assert_eq!(got, want, "{set} prompt {p}: greedy ids");
    }
}

#[wasm_bindgen_test]
async fn tiny_llama_q4_0_gguf_on_webgpu() {
    let model = LlmModel::from_gguf(Bytes::from_static(golden!("model.q4_0.gguf"))).unwrap();
    check_gpu(&model, "gguf_q4_0").await;
}

#[wasm_bindgen_test]
async fn tiny_llama_loom_q4_0_entity_on_webgpu() {
    let files = HfFiles {
        config_json: golden!("config.json").to_vec(),
        safetensors: vec![(
            "model.safetensors".into(),
            Bytes::from_static(golden!("model.f32.safetensors")),
        )],
        ..HfFiles::default()
    };
    let src = LlmModel::from_hf(&files).unwrap();
    let (bytes, _) = src.to_entity(true).unwrap();
    check_gpu(&LlmModel::from_entity(bytes.into()).unwrap(), "loom_q4_0").await;
}
