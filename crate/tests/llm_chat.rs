//! Generation and chat on the real SmolLM2-135M-Instruct (the Q4_1 GGUF setup fetches) and tiny-llama, against
//! the numpy reference's templated ids and replies in `../shared/golden`: streaming, prefix reuse across turns,
//! seeded sampling, stop strings, token limits, cancellation and the context limit.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use loom_wasm::llm::engine::{CpuEngine, Engine};
use loom_wasm::llm::generate::{GenerateOptions, Session, StopReason};
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::SamplingParams;
use loom_wasm::llm::template::ChatMessage;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn smollm2() -> &'static LlmModel {
    static MODEL: OnceLock<LlmModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = root().join("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(path.exists(), "{} is missing: run scripts/setup.sh", path.display());
        LlmModel::open(&path).unwrap()
    })
}

fn expected() -> Value {
    let path = root().join("../shared/golden/smollm2/expected.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn session(model: &LlmModel) -> Session {
    Session::new(model, Box::new(model.cpu_engine())).unwrap()
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ..GenerateOptions::default()
    }
}

fn user(text: &str) -> ChatMessage {
    ChatMessage {
        role: "user".into(),
        content: text.into(),
    }
}

#[test]
fn templated_ids_and_the_capital_of_france() {
    let golden = expected();
    let mut s = session(smollm2());
    for case in golden["cases"].as_array().unwrap() {
        let msg = case["user_message"].as_str().unwrap();
        let prompt = s.format().chat_prompt(&[user(msg)]).unwrap();
        assert_eq!(prompt, ids(&case["prompt_ids"]), "{msg}: templated ids");
    }
    let mut pieces = Vec::new();
    let g = s
        .chat("What is the capital of France?", &greedy(32), false, &mut |t| {
            pieces.push(t.to_string());
            true
        })
        .unwrap();
    assert!(g.text.contains("Paris"), "{:?}", g.text);
    assert_eq!(g.stop_reason, StopReason::Eos);
    assert!(pieces.len() > 3, "the reply streamed in {} pieces", pieces.len());
    assert_eq!(pieces.concat(), g.text);
    let reference = &golden["cases"][0]["results"]["gguf_dequant_f32"];
    assert_eq!(g.text, reference["greedy_text"].as_str().unwrap());
}

#[test]
fn a_second_turn_reuses_the_cache_and_equals_a_fresh_run() {
    let model = smollm2();
    let mut s = session(model);
    let first = s.chat("Name a fruit.", &greedy(12), false, &mut |_| true).unwrap();
    let second = s.chat("And a vegetable?", &greedy(12), false, &mut |_| true).unwrap();
    assert!(
        second.reused_tokens >= first.prompt_ids.len(),
        "reused {} of the first turn's {} prompt tokens",
        second.reused_tokens,
        first.prompt_ids.len()
    );
    assert_eq!(s.conversation.history.len(), 4);
    // The same conversation from an empty cache gives the same reply.
    let mut fresh = session(model);
    let g = fresh.generate(&second.prompt_ids, &greedy(12), &mut |_| true).unwrap();
    assert_eq!(g.reused_tokens, 0);
    assert_eq!(g.ids, second.ids);
}

#[test]
fn seeded_sampling_stop_strings_limits_and_cancellation() {
    let model = smollm2();
    let prompt = session(model)
        .format()
        .chat_prompt(&[user("Tell me a story about a cat.")])
        .unwrap();
    let sampled = |seed: u64| {
        let opts = GenerateOptions {
            sampling: SamplingParams {
                temperature: 0.9,
                seed,
                ..SamplingParams::default()
            },
            max_tokens: 16,
            ..GenerateOptions::default()
        };
        session(model).generate(&prompt, &opts, &mut |_| true).unwrap()
    };
    let (a, b, c) = (sampled(1), sampled(1), sampled(2));
    assert_eq!(a.ids, b.ids);
    assert_ne!(a.ids, c.ids);

    let mut s = session(model);
    let france = s
        .format()
        .chat_prompt(&[user("What is the capital of France?")])
        .unwrap();
    let mut opts = greedy(32);
    opts.stop_strings = vec![" Paris".into()];
    let mut streamed = String::new();
    let g = s
        .generate(&france, &opts, &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    assert_eq!(g.stop_reason, StopReason::StopString);
    assert_eq!(g.text, "The capital of France is");
    assert_eq!(streamed, g.text);

    let g = s.generate(&france, &greedy(3), &mut |_| true).unwrap();
    assert_eq!((g.ids.len(), g.stop_reason), (3, StopReason::MaxTokens));
    assert_eq!(g.reused_tokens, france.len() - 1);

    let mut calls = 0;
    let g = s
        .generate(&france, &greedy(32), &mut |_| {
            calls += 1;
            false
        })
        .unwrap();
    assert_eq!((calls, g.stop_reason), (1, StopReason::Cancelled));
}

/// The CPU engine, raising a stop flag while its `stop_at`-th forward runs (a Ctrl-C that lands mid-step).
struct StopsMidStep {
    inner: CpuEngine,
    calls: usize,
    stop_at: usize,
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Engine for StopsMidStep {
    fn config(&self) -> &loom_wasm::llm::config::ModelConfig {
        self.inner.config()
    }
    fn device(&self) -> String {
        self.inner.device()
    }
    fn cached(&self) -> usize {
        self.inner.cached()
    }
    fn truncate(&mut self, len: usize) -> usize {
        self.inner.truncate(len)
    }
    fn forward(&mut self, tokens: &[u32], all_logits: bool) -> loom_wasm::Result<Vec<f32>> {
        self.calls += 1;
        if self.calls == self.stop_at {
            self.flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.forward(tokens, all_logits)
    }
    fn kv_rows(&self) -> loom_wasm::Result<loom_wasm::llm::saved::KvRows> {
        self.inner.kv_rows()
    }
    fn set_kv_rows(&mut self, kv: loom_wasm::llm::saved::KvRows) -> loom_wasm::Result<()> {
        self.inner.set_kv_rows(kv)
    }
}

/// A stop that comes while a step runs ends the reply without that step's token: nothing shows after the stop,
/// the reply is what was shown, and the next turn on the same engine still gives the reference's ids.
#[test]
fn a_stop_during_a_step_shows_nothing_after_it() {
    let model = smollm2();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let engine = StopsMidStep {
        inner: model.cpu_engine(),
        calls: 0,
        stop_at: 4,
        flag: flag.clone(),
    };
    let mut s = Session::new(model, Box::new(engine)).unwrap();
    let france = s
        .format()
        .chat_prompt(&[user("What is the capital of France?")])
        .unwrap();
    let mut opts = greedy(32);
    opts.cancel = Some(flag.clone());
    let mut streamed = String::new();
    let g = s
        .generate(&france, &opts, &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    // Forward 1 is the prompt (its id is the first token), forwards 2 and 3 give two more; forward 4's is dropped.
    assert_eq!((g.ids.len(), g.stop_reason), (3, StopReason::Cancelled));
    assert_eq!(streamed, g.text);
    flag.store(false, std::sync::atomic::Ordering::SeqCst);
    let again = s.generate(&france, &greedy(8), &mut |_| true).unwrap();
    let reference = session(model).generate(&france, &greedy(8), &mut |_| true).unwrap();
    assert_eq!(again.ids, reference.ids);
}

#[test]
fn the_context_limit_is_an_error_or_a_truncation() {
    let mut model = smollm2().clone();
    model.config.context = 96;
    let engine = || Box::new(CpuEngine::new(model.config.clone(), model.weights.clone()));
    let mut s = Session::new(&model, engine()).unwrap();
    let long = "Say hello. ".repeat(40);
    let e = s.chat(&long, &greedy(8), false, &mut |_| true).unwrap_err();
    assert_eq!(e.code(), "context_full");
    assert!(
        s.conversation.history.is_empty(),
        "a refused turn leaves the history as it was"
    );
    // With truncation the oldest turns go; the system message stays.
    let mut s = Session::new(&model, engine()).unwrap();
    s.conversation.history.push(ChatMessage {
        role: "system".into(),
        content: "Be brief.".into(),
    });
    let questions = ["colour", "animal", "city", "river", "tree", "planet"].map(|w| format!("Name a {w} and say why."));
    for q in &questions {
        s.chat(q, &greedy(8), true, &mut |_| true).unwrap();
    }
    assert_eq!(s.conversation.history[0].role, "system");
    assert!(
        s.conversation.history.len() < 1 + 2 * questions.len(),
        "{} messages kept",
        s.conversation.history.len()
    );
    assert_eq!(
        s.conversation.history[s.conversation.history.len() - 2].content,
        questions[5]
    );
    // Generation that reaches the context stops there.
    let prompt = s.format().chat_prompt(&[user("Count to one hundred.")]).unwrap();
    let g = s.generate(&prompt, &greedy(500), &mut |_| true).unwrap();
    assert_eq!(g.stop_reason, StopReason::ContextFull);
    assert_eq!(prompt.len() + g.ids.len(), 96 + 1);
}

#[test]
fn tiny_llama_generate_matches_the_golden_greedy_ids() {
    let dir = root().join("../shared/golden/tiny-llama");
    let golden: Value = serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let prompts: Vec<Vec<u32>> = golden["prompts"].as_array().unwrap().iter().map(ids).collect();
    for file in ["model.q4_1.gguf", "model.f16.safetensors"] {
        let model = LlmModel::open(&dir.join(file)).unwrap();
        let set = golden["weight_sets"]
            .as_object()
            .unwrap()
            .values()
            .find(|s| s["file"] == file)
            .unwrap();
        let mut s = session(&model);
        for (p, prompt) in prompts.iter().enumerate() {
            let g = s.generate(prompt, &greedy(16), &mut |_| true).unwrap();
            assert_eq!(g.ids, ids(&set["results"][p]["greedy_ids"]), "{file} prompt {p}");
            // What streamed is what the tokenizer decodes. These random bytes are often not UTF-8: a stream
            // cannot know how many U+FFFD a whole decode would put where, so those are left out of the comparison.
            let valid = |t: &str| t.replace('\u{FFFD}', "");
            assert_eq!(
                valid(&g.text),
                valid(&s.format().tokenizer().unwrap().decode(&g.ids, false).unwrap())
            );
        }
    }
}
