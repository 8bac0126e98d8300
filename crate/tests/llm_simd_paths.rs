//! tiny-llama's goldens (`../shared/golden`, logits at every position within the tolerances of `llm_util`, and the
//! greedy ids) on every CPU kernel path this machine has, not only the best one: AVX-512 with VNNI and without,
//! capped at AVX2 (the 16-bit decode and integer prefill of CPUs without AVX-512) and portable; with `LOOM_GEMMA_GGUF` set, the real Gemma 3 270M
//! Q4_K_M's greedy ids against llama.cpp's too. Its own test binary, since the cap is process-wide.

mod llm_util;

use std::path::Path;

use llm_util::{check_tiny, golden, ids, json};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::LlmModel;
use loom_wasm::quant::{self, GgmlType, Simd};

#[test]
fn tiny_llama_on_every_kernel_path() {
    let dir = golden().join("tiny-llama");
    let expected = json(&dir.join("expected.json"));
    let prompts: Vec<Vec<u32>> = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    let mut paths = Vec::new();
    let mut interleaved = false;
    for simd in [Simd::All, Simd::Avx512, Simd::Avx2, Simd::None] {
        quant::set_simd(simd);
        paths.push(quant::simd_in_use());
        let mut checked = 0;
        for (name, set) in expected["weight_sets"].as_object().unwrap() {
            if name == "loom_q4_0" {
                continue; // an .entity we write ourselves: crate/tests/llm_entity.rs
            }
            let model = LlmModel::open(&dir.join(set["file"].as_str().unwrap())).unwrap();
            // With SIMD kernels, the CPU engine reads Q4_0 and Q4_1 rows interleaved by eight (no file here has
            // Q4_K).
            let stored_and_interleaved = match name.as_str() {
                "gguf_q4_0" => Some((GgmlType::Q4_0, GgmlType::Q4_0x8)),
                "gguf_q4_1" => Some((GgmlType::Q4_1, GgmlType::Q4_1x8)),
                _ => None,
            };
            if let Some((stored, want)) = stored_and_interleaved.filter(|_| quant::simd_in_use() != "portable") {
                let cpu = model.weights.for_cpu();
                let matrices = cpu.blocks.iter().flat_map(|b| b.matrices());
                assert!(matrices.into_iter().all(|m| m.ty == want), "{name}");
                // A head of that type (tied or not) too.
                if model.weights.lm_head().ty == stored {
                    assert_eq!(cpu.lm_head().ty, want);
                }
                interleaved = true;
            }
            check_tiny(&model, &format!("{name} ({simd:?})"), set, &prompts);
            checked += 1;
        }
        assert_eq!(checked, 8);
        real_gemma3(simd);
    }
    quant::set_simd(Simd::All);
    assert_eq!(interleaved, paths.iter().any(|&p| p != "portable"));
    eprintln!("tiny_llama_on_every_kernel_path: ran the {paths:?} paths");
}

/// Gemma 3 270M Q4_K_M, the real file (`LOOM_GEMMA_GGUF`: 253 MB that setup does not fetch; skipped without it): our
/// greedy continuation of a chat prompt equals llama.cpp's 24 ids (`testdata/gemma3/real-270m-q4_k_m.json`). With
/// SIMD kernels its Q4_K and Q5_0 matrices are read interleaved by eight.
fn real_gemma3(simd: Simd) {
    let Some(path) = std::env::var_os("LOOM_GEMMA_GGUF") else {
        eprintln!("real_gemma3: skipped, LOOM_GEMMA_GGUF is not set");
        return;
    };
    let expected = json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gemma3/real-270m-q4_k_m.json"));
    let model = LlmModel::open(Path::new(&path)).unwrap();
    let want = ids(&expected["greedy_ids"]);
    if quant::simd_in_use() != "portable" {
        let cpu = model.weights.for_cpu();
        let types: Vec<GgmlType> = cpu.blocks.iter().flat_map(|b| b.matrices()).map(|m| m.ty).collect();
        assert!(
            types.contains(&GgmlType::Q4_Kx8) && types.contains(&GgmlType::Q5_0x8),
            "{types:?}"
        );
    }
    let mut engine = model.cpu_engine();
    let mut got = vec![engine.forward_greedy(&ids(&expected["prompt_ids"])).unwrap()];
    while got.len() < want.len() {
        got.push(engine.forward_greedy(&got[got.len() - 1..]).unwrap());
    }
    assert_eq!(got, want, "Gemma 3 270M Q4_K_M greedy ids at {simd:?}");
}
