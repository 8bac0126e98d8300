//! The LLM runtime compiled to wasm32 (simd128) in headless Chromium: tiny-llama's GGUF and safetensors
//! against the numpy reference's logits and greedy ids in `../shared/golden` (the native suite runs every file).
#![cfg(target_arch = "wasm32")]

use bytes::Bytes;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::generate::{GenerateOptions, Session};
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
