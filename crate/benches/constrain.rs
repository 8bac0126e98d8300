//! What a constraint costs per token (`cargo bench -p loom-wasm --bench constrain -- MODEL`): the grammar engine's
//! view of the vocabulary (built once per model), each grammar's compile, then a greedy constrained reply replayed
//! token by token, timing the mask (llguidance's allowed set, applied to the logits) against the decode step it
//! precedes. Prints JSON. Without arguments (as under `cargo test --all-targets`) it prints its usage and exits.

use std::path::Path;
use std::time::Instant;

use loom_wasm::gpu::mask_logits;
use loom_wasm::llm::constrain::{Constraint, GrammarVocab};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::generate::{GenerateOptions, Session};
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::SamplingParams;
use loom_wasm::llm::template::ChatMessage;
use serde_json::json;

fn main() {
    let Some(path) = std::env::args().skip(1).find(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench -p loom-wasm --bench constrain -- MODEL");
        return;
    };
    let model = LlmModel::open(Path::new(&path)).expect("a model");
    let tokenizer = model.tokenizer().expect("a tokenizer");
    let mut eos = model.eos_ids.clone();
    eos.extend(tokenizer.eos_ids());
    let t = Instant::now();
    let vocab = GrammarVocab::new(tokenizer.token_bytes(model.config.vocab), model.config.vocab, &eos).unwrap();
    let vocab_ms = t.elapsed().as_secs_f64() * 1e3;
    let cases = [
        (
            "json_schema",
            "Describe the capital of France.",
            Constraint::JsonSchema(json!({"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20},
            "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
            "required": ["city", "country", "population"], "additionalProperties": false})),
        ),
        ("json_object", "Describe a cat as JSON.", Constraint::JsonObject),
        (
            "regex",
            "When did World War II end?",
            Constraint::Regex("[0-9]{4}".into()),
        ),
    ];
    let mut out = Vec::new();
    for (name, user, c) in cases {
        let mut s = Session::new(&model, Box::new(model.cpu_engine())).unwrap();
        let prompt = s
            .format()
            .chat_prompt(&[ChatMessage {
                role: "user".into(),
                content: user.into(),
            }])
            .unwrap();
        let opts = GenerateOptions {
            sampling: SamplingParams::greedy(),
            max_tokens: 200,
            constraint: Some(c.clone()),
            ..GenerateOptions::default()
        };
        let g = s.generate(&prompt, &opts, &mut |_| true).unwrap();
        // Replay: each step's decode (one forward) and its mask, timed apart.
        let t = Instant::now();
        let mut grammar = vocab.start(&c).unwrap();
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut engine = model.cpu_engine();
        let mut logits = engine.forward(&prompt, false).unwrap();
        let (mut mask_us, mut max_mask_us, mut decode_us) = (Vec::new(), 0f64, Vec::new());
        for &id in &g.ids {
            let t = Instant::now();
            mask_logits(&mut logits, &grammar.mask_words().unwrap());
            grammar.accept(id).unwrap();
            let us = t.elapsed().as_secs_f64() * 1e6;
            mask_us.push(us);
            max_mask_us = max_mask_us.max(us);
            let t = Instant::now();
            logits = engine.forward(&[id], false).unwrap();
            decode_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        out.push(json!({
            "constraint": name, "tokens": g.ids.len(), "stop": g.stop_reason.name(), "compile_ms": compile_ms,
            "mask_mean_us": mean(&mask_us), "mask_max_us": max_mask_us, "decode_mean_us": mean(&decode_us),
            "mask_share_of_decode": mean(&mask_us) / mean(&decode_us),
        }));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({"model": path, "vocab": model.config.vocab,
        "grammar_vocab_ms": vocab_ms, "cases": out}))
        .unwrap()
    );
}
