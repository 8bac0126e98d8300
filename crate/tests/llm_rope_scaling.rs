//! RoPE scaling against `testdata/rope_scaling` (the goldens' numpy Llama with transformers' scaled frequencies, and
//! GGUFs written as llama.cpp's converter writes them): Llama 3 scaling from a GGUF's `rope_freqs.weight` and from an
//! HF `rope_scaling` (or transformers 5's `rope_parameters`), linear scaling from both, YaRN (with its attention
//! factor) from HF configs, on the CPU engine and the GPU engine (lavapipe); and the scalings that do not run
//! refused by name, never run unscaled.

mod llm_util;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use llm_util::{check_cases, golden, json, FileReader};
use loom_wasm::llm::gpu_engine::GpuEngine;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::LoomError;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/rope_scaling")
}

/// An HF folder: the golden tiny Llama's weights and tokenizer with `config` as its config.json.
fn hf_folder(name: &str, config: Value) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rope_{name}"));
    std::fs::create_dir_all(&d).unwrap();
    let tiny = golden().join("tiny-llama");
    std::fs::copy(tiny.join("model.f32.safetensors"), d.join("model.safetensors")).unwrap();
    std::fs::copy(tiny.join("tokenizer.json"), d.join("tokenizer.json")).unwrap();
    std::fs::write(d.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    d
}

fn tiny_config_with(key: &str, value: Value) -> Value {
    let mut c = json(&golden().join("tiny-llama/config.json"));
    c[key] = value;
    c
}

#[test]
fn llama3_and_linear_scaling_from_gguf_files() {
    let expected = json(&dir().join("expected.json"));
    for name in ["llama3", "linear"] {
        let model = LlmModel::open(&dir().join(format!("{name}.gguf"))).unwrap();
        assert!(model.config.rope_factors.is_some(), "{name}");
        check_cases(&model, &expected[name], &|| Box::new(model.cpu_engine()));
    }
}

#[test]
fn llama3_linear_and_yarn_scaling_from_hf_folders() {
    let expected = json(&dir().join("expected.json"));
    for name in ["llama3", "linear", "yarn", "yarn_untruncated"] {
        let config = tiny_config_with("rope_scaling", expected[name]["rope_scaling"].clone());
        let model = LlmModel::open(&hf_folder(name, config)).unwrap();
        check_cases(&model, &expected[name], &|| Box::new(model.cpu_engine()));
    }
    // transformers 5 names it rope_parameters, with rope_theta inside.
    let mut params = expected["llama3"]["rope_scaling"].clone();
    params["rope_theta"] = 10000.0.into();
    let mut config = tiny_config_with("rope_parameters", params);
    config.as_object_mut().unwrap().remove("rope_theta");
    config.as_object_mut().unwrap().remove("rope_scaling");
    let model = LlmModel::open(&hf_folder("v5", config)).unwrap();
    check_cases(&model, &expected["llama3"], &|| Box::new(model.cpu_engine()));
}

#[test]
fn the_gpu_engine_runs_the_scaled_frequencies_too() {
    let expected = json(&dir().join("expected.json"));
    let gpu = Arc::new(pollster::block_on(loom_wasm::gpu::Gpu::new()).expect("a wgpu adapter (lavapipe)"));
    let model = LlmModel::open(&dir().join("llama3.gguf")).unwrap();
    check_cases(&model, &expected["llama3"], &|| {
        Box::new(pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap())
    });
    // YaRN's attention factor rides in the GPU's RoPE table.
    let config = tiny_config_with("rope_scaling", expected["yarn"]["rope_scaling"].clone());
    let model = LlmModel::open(&hf_folder("yarn_gpu", config)).unwrap();
    check_cases(&model, &expected["yarn"], &|| {
        Box::new(pollster::block_on(GpuEngine::new(gpu.clone(), &model.config, &model.weights, None)).unwrap())
    });
}

#[test]
fn scalings_that_do_not_run_are_refused_by_name() {
    for kind in ["dynamic", "ntk-by-parts"] {
        let config = tiny_config_with("rope_scaling", serde_json::json!({"rope_type": kind, "factor": 4.0}));
        match LlmModel::open(&hf_folder(kind, config)) {
            Err(LoomError::Unsupported(m)) => assert!(m.contains(kind), "{m}"),
            other => panic!("{kind}: expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
    // LongRoPE needs one short and one long factor per rotated pair (8 here).
    let longrope =
        serde_json::json!({"rope_type": "longrope", "short_factor": [1.0, 1.0, 1.0], "long_factor": vec![2.0; 8]});
    match LlmModel::open(&hf_folder("longrope_short", tiny_config_with("rope_scaling", longrope))) {
        Err(LoomError::InvalidNetwork(m)) => assert!(m.contains("short_factor"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    match LlmModel::open(&dir().join("hostile_yarn.gguf")) {
        Err(LoomError::Unsupported(m)) => assert!(m.contains("yarn"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    match LlmModel::open(&dir().join("hostile_short_freqs.gguf")) {
        Err(LoomError::InvalidNetwork(m)) => assert!(m.contains("rope_freqs"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
    // A Loom .entity has no place for the factors.
    let model = LlmModel::open(&dir().join("llama3.gguf")).unwrap();
    assert!(matches!(model.to_entity(false), Err(LoomError::Unsupported(_))));
}

/// The streamed load (the browser's GPU chat) reads `rope_freqs.weight` with the header: its config is the whole
/// load's, scaled.
#[test]
fn a_streamed_load_keeps_the_rope_factors() {
    let path = dir().join("llama3.gguf");
    let whole = LlmModel::open(&path).unwrap();
    let size = path.metadata().unwrap().len();
    let reader = FileReader(vec![path]);
    let names = vec!["llama3.gguf".to_string()];
    let streamed = pollster::block_on(loom_wasm::llm::streamed::StreamedModel::open(&names, &[size], &reader)).unwrap();
    assert!(streamed.config.rope_factors.is_some());
    assert_eq!(streamed.config, whole.config);
}
