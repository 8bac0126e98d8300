//! The template half shared by `chat_template` and `tokenizer_template`.

use loom_wasm::llm::template::{ChatMessage, ChatTemplate};

/// `ChatTemplate::new` on `source` (as UTF-8); an accepted template renders a fixed two-message conversation.
pub fn compile_and_render(source: &[u8]) {
    let Ok(source) = std::str::from_utf8(source) else {
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
}
