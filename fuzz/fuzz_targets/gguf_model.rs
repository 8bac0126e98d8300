//! `LlmModel::from_gguf` on arbitrary bytes (GGUF header reader, config, weights, GGUF tokenizer). A model that
//! opens with a tiny config also runs one forward step on token 0, which must return `vocab` logits or an error.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::LlmModel;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = LlmModel::from_gguf(Bytes::from(data.to_vec())) else {
        return;
    };
    let c = &model.config;
    if c.hidden <= 256 && c.n_layers <= 4 && c.vocab <= 4096 && c.ffn <= 1024 && c.q_dim() <= 1024 {
        if let Ok(logits) = model.cpu_engine().forward(&[0], false) {
            assert_eq!(logits.len(), c.vocab, "one step gives one row of logits");
        }
    }
    if let Some(tok) = &model.tokenizer {
        if let Ok(ids) = tok.encode("Hi there, ünïcode 😀", true) {
            let _ = tok.decode(&ids, false);
        }
    }
});
