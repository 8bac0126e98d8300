//! tiny-llama's goldens (`../shared/golden`, logits at every position within the tolerances of `llm_util`, and the
//! greedy ids) on every CPU kernel path this machine has, not only the best one: capped at AVX2 (the 16-bit decode
//! and integer prefill of CPUs without AVX-512) and portable. Its own test binary, since the cap is process-wide.

mod llm_util;

use llm_util::{check_tiny, golden, ids, json};
use loom_wasm::llm::model::LlmModel;
use loom_wasm::quant::{self, GgmlType, Simd};

#[test]
fn tiny_llama_on_every_kernel_path() {
    let dir = golden().join("tiny-llama");
    let expected = json(&dir.join("expected.json"));
    let prompts: Vec<Vec<u32>> = expected["prompts"].as_array().unwrap().iter().map(ids).collect();
    let mut paths = Vec::new();
    let mut interleaved = false;
    for simd in [Simd::Avx512, Simd::Avx2, Simd::None] {
        quant::set_simd(simd);
        paths.push(quant::simd_in_use());
        let mut checked = 0;
        for (name, set) in expected["weight_sets"].as_object().unwrap() {
            if name == "loom_q4_0" {
                continue; // an .entity we write ourselves: crate/tests/llm_entity.rs
            }
            let model = LlmModel::open(&dir.join(set["file"].as_str().unwrap())).unwrap();
            // With the AVX2 kernels, the CPU engine reads Q4_0 rows interleaved by eight.
            if name == "gguf_q4_0" && quant::simd_in_use() == "avx2" {
                let cpu = model.weights.for_cpu();
                let matrices = cpu.blocks.iter().flat_map(|b| b.matrices());
                assert!(matrices.into_iter().all(|m| m.ty == GgmlType::Q4_0x8));
                interleaved = true;
            }
            check_tiny(&model, &format!("{name} ({simd:?})"), set, &prompts);
            checked += 1;
        }
        assert_eq!(checked, 8);
    }
    quant::set_simd(Simd::All);
    assert_eq!(interleaved, paths.contains(&"avx2"));
    eprintln!("tiny_llama_on_every_kernel_path: ran the {paths:?} paths");
}
