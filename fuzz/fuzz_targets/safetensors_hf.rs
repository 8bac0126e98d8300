//! `LlmModel::from_hf` on arbitrary bytes split at the first 0 byte into config.json and one safetensors file. A
//! model that opens with a tiny config also runs one forward step on token 0.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::{HfFiles, LlmModel};

fuzz_target!(|data: &[u8]| {
    let Some(i) = data.iter().position(|&x| x == 0) else {
        return;
    };
    let files = HfFiles {
        config_json: data[..i].to_vec(),
        safetensors: vec![("model.safetensors".into(), Bytes::copy_from_slice(&data[i + 1..]))],
        ..HfFiles::default()
    };
    let Ok(model) = LlmModel::from_hf(&files) else {
        return;
    };
    let c = &model.config;
    if c.hidden <= 256 && c.n_layers <= 4 && c.vocab <= 4096 && c.ffn <= 1024 && c.q_dim() <= 1024 {
        if let Ok(logits) = model.cpu_engine().forward(&[0], false) {
            assert_eq!(logits.len(), c.vocab, "one step gives one row of logits");
        }
    }
});
