//! The input split at its first 0 byte: `Tokenizer::from_json` on the first part (an accepted tokenizer encodes a
//! short text and decodes the ids), `ChatTemplate::new` on the second (an accepted template renders a fixed
//! two-message conversation). Neither may panic, hang or allocate beyond the fuel and output caps.
#![no_main]

#[path = "shared/template.rs"]
mod template;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use loom_wasm::llm::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let (a, b) = match data.iter().position(|&x| x == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(tok) = Tokenizer::from_json(a).map(Arc::new) {
        if let Ok(ids) = tok.encode("Hello, world! ünïcode 😀 <|im_start|>", true) {
            let _ = tok.decode(&ids, false);
            let _ = tok.decode(&ids, true);
            let mut stream = tok.stream();
            for &id in &ids {
                let _ = stream.push(id);
            }
            let _ = stream.finish();
        }
    }
    template::compile_and_render(b);
});
