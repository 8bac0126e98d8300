//! The GGUF reader without the tokenizer (building a tokenizer compiles its pre-tokenizer regexes, which keeps
//! `gguf_model` at a few executions per second): the header and tensor table, the inspector's summary, the
//! model config, and the decoder's weights located in the file. An accepted tensor table covers the file only
//! where it says, and a model that loads runs one forward step when its config is tiny.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use loom_wasm::formats::gguf;
use loom_wasm::inspect::gguf_inspection;
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::gguf_config;
use loom_wasm::llm::sources::{GgufData, GgufSource};
use loom_wasm::llm::weights;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = gguf::read_header_bytes(data) else {
        return;
    };
    for t in &header.tensors {
        let end = header
            .data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.bytes));
        assert!(end.is_some_and(|e| e <= data.len() as u64), "{}: past the file", t.name);
    }
    let ins = gguf_inspection(&header, data.len() as u64);
    assert_eq!(ins.tensors.len(), header.tensors.len());
    let Ok((config, _)) = gguf_config(&header) else {
        return;
    };
    let source = GgufSource {
        header: &header,
        data: GgufData::File(Bytes::copy_from_slice(data)),
    };
    let Ok(w) = weights::load(&config, &source) else {
        return;
    };
    let c = &config;
    if c.hidden <= 256 && c.n_layers <= 4 && c.vocab <= 4096 && c.ffn <= 1024 && c.q_dim() <= 1024 {
        let mut engine = loom_wasm::llm::engine::CpuEngine::new(config.clone(), std::sync::Arc::new(w));
        if let Ok(logits) = engine.forward(&[0], false) {
            assert_eq!(logits.len(), c.vocab, "one step gives one row of logits");
        }
    }
});
