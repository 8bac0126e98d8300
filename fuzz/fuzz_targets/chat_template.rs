//! `ChatTemplate::new` on the whole input (as UTF-8); an accepted template renders a fixed two-message conversation.
//! It may not panic, hang or allocate beyond the fuel and output caps. The template half of `tokenizer_template`
//! without the tokenizer, whose regex compilation makes that target a hundred times slower per input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loom_wasm::llm::template::{ChatMessage, ChatTemplate};

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(template) = ChatTemplate::new(source) {
        let messages = [
            ChatMessage {
                role: "system".into(),
                content: "You are helpful.".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "Hi there!".into(),
            },
        ];
        let _ = template
            .with_fixed_now(1_700_000_000)
            .render(&messages, true, Some("<s>"), Some("</s>"));
    }
});
