//! `ChatTemplate::new` on the whole input (as UTF-8); an accepted template renders a fixed two-message conversation.
//! It may not panic, hang or allocate beyond the fuel and output caps. The template half of `tokenizer_template`
//! without the tokenizer, whose regex compilation makes that target a hundred times slower per input.
#![no_main]

#[path = "shared/template.rs"]
mod template;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| template::compile_and_render(data));
