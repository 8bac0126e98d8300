//! Constrained decoding on the real SmolLM2-135M-Instruct (the Q4_1 GGUF setup fetches): replies held to JSON
//! Schemas are checked by PyPI `jsonschema` (outside truth, not our grammar engine), regex replies by Python's `re`,
//! and a schema or regex the engine cannot compile is a typed error before any token. The tiny Llama on the GPU
//! engine (lavapipe) gives the CPU engine's constrained reply.

mod llm_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use llm_util::smollm2;
use loom_wasm::llm::constrain::Constraint;
use loom_wasm::llm::generate::{GenerateOptions, Session, StopReason};
use loom_wasm::llm::model::LlmModel;
use loom_wasm::llm::sampler::SamplingParams;
use loom_wasm::llm::template::ChatMessage;
use serde_json::{json, Value};

fn options(constraint: Constraint, max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        sampling: SamplingParams::greedy(),
        max_tokens,
        constraint: Some(constraint),
        ..GenerateOptions::default()
    }
}

/// A greedy constrained reply to `user`, and the text its stream handed out.
fn reply(model: &LlmModel, user: &str, constraint: Constraint, max_tokens: usize) -> (String, StopReason, String) {
    let mut s = Session::new(model, Box::new(model.cpu_engine())).unwrap();
    let prompt = s
        .format()
        .chat_prompt(&[ChatMessage {
            role: "user".into(),
            content: user.into(),
        }])
        .unwrap();
    let mut streamed = String::new();
    let g = s
        .generate(&prompt, &options(constraint, max_tokens), &mut |t| {
            streamed.push_str(t);
            true
        })
        .unwrap();
    (g.text, g.stop_reason, streamed)
}

/// Runs `script` with PyPI `jsonschema` on `input` (JSON on stdin); returns its stdout as JSON.
fn python(script: &str, input: &Value) -> Value {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path: PathBuf = dir.join("constrain_input.json");
    std::fs::write(&path, serde_json::to_vec(input).unwrap()).unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Schemas of every shape the rule covers (objects, nesting, arrays, enums, patterns, bounded numbers, anyOf,
/// `$ref`): each greedy reply parses as JSON and `jsonschema` finds it valid; the stream hands out the same text.
/// Every string and number is bounded, so that a 135M model that would repeat a digit forever still completes
/// within the token limit (a reply cut by it stops with `max_tokens`, a prefix of valid JSON, as OpenAI's `length`).
#[test]
fn json_schema_replies_are_valid_for_jsonschema() {
    let cases = [
        (
            "Describe the capital of France.",
            json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                "country": {"type": "string", "maxLength": 20},
                "population": {"type": "integer", "minimum": 0, "maximum": 99999999}},
                "required": ["city", "country", "population"], "additionalProperties": false}),
        ),
        (
            "List three fruits.",
            json!({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 16}, "minItems": 3,
                "maxItems": 3}),
        ),
        (
            "What color is the sky? Give the color and how sure you are.",
            json!({"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["color", "confidence"]}),
        ),
        (
            "Make up a product code and a person.",
            json!({"type": "object", "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "owner": {"$ref": "#/$defs/person"}},
                "required": ["code", "owner"], "additionalProperties": false,
                "$defs": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 18, "maximum": 99}}, "required": ["name", "age"],
                    "additionalProperties": false}}}),
        ),
        (
            "Answer with a number or with the word none: how many legs does a spider have?",
            json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"const": "none"}]}),
        ),
        (
            "Give a tiny address book.",
            json!({"type": "object", "properties": {"entries": {"type": "array", "maxItems": 2, "items": {
                "type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                "phone": {"type": "string", "pattern": "^[0-9]{3}-[0-9]{4}$"}}, "required": ["name", "phone"],
                "additionalProperties": false}}}, "required": ["entries"], "additionalProperties": false}),
        ),
    ];
    let model = smollm2();
    let mut checks = Vec::new();
    for (user, schema) in &cases {
        let (text, stop, streamed) = reply(model, user, Constraint::JsonSchema(schema.clone()), 160);
        assert_eq!(streamed, text, "{user}");
        assert_eq!(stop, StopReason::Complete, "{user}: {text}");
        checks.push(json!({"schema": schema, "text": text}));
    }
    let verdicts = python(
        "import json, sys, jsonschema\n\
         out = []\n\
         for c in json.load(open(sys.argv[1])):\n\
         \x20   try:\n\
         \x20       jsonschema.validate(json.loads(c['text']), c['schema'])\n\
         \x20       out.append('ok')\n\
         \x20   except Exception as e:\n\
         \x20       out.append(repr(e)[:300] + ' in ' + c['text'])\n\
         print(json.dumps(out))",
        &Value::Array(checks),
    );
    for v in verdicts.as_array().unwrap() {
        assert_eq!(v, "ok");
    }
}

/// A regex reply matches the regex whole by Python's `re`; any JSON object parses as one; a Lark grammar's reply
/// is one of its sentences.
#[test]
fn regex_json_object_and_lark_replies() {
    let model = smollm2();
    let regexes = ["[0-9]{4}", "(yes|no)", "[A-Z][a-z]{1,11}, [A-Z][a-z]{1,11}"];
    let mut texts = Vec::new();
    for rx in regexes {
        let (text, stop, _) = reply(
            model,
            "When did World War II end, and where?",
            Constraint::Regex(rx.into()),
            24,
        );
        assert_eq!(stop, StopReason::Complete, "{rx}: {text}");
        texts.push(json!({"regex": rx, "text": text}));
    }
    let verdicts = python(
        "import json, re, sys\n\
         print(json.dumps([bool(re.fullmatch(c['regex'], c['text'])) for c in json.load(open(sys.argv[1]))]))",
        &Value::Array(texts),
    );
    assert_eq!(verdicts, json!([true, true, true]));
    let (text, stop, _) = reply(model, "Describe a cat as JSON.", Constraint::JsonObject, 200);
    assert_eq!(stop, StopReason::Complete, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap().is_object(), "{text}");
    let lark = "start: answer \".\"\nanswer: \"Paris\" | \"London\" | \"Rome\"\n";
    let (text, stop, _) = reply(
        model,
        "What is the capital of France?",
        Constraint::Lark(lark.into()),
        8,
    );
    assert!(["Paris.", "London.", "Rome."].contains(&text.as_str()), "{text}");
    assert_eq!(stop, StopReason::Complete);
}

/// What cannot be compiled is a typed error before any token: an unknown keyword (named, even nested), a schema
/// that is not an object, a broken regex, a broken grammar; the session stays usable.
#[test]
fn bad_constraints_are_typed_errors_before_any_token() {
    let model = smollm2();
    let mut s = Session::new(model, Box::new(model.cpu_engine())).unwrap();
    let prompt = s.format().encode_prompt("Hello").unwrap();
    for (c, says) in [
        (
            Constraint::JsonSchema(json!({"type": "object", "frobnicate": 1})),
            "\"frobnicate\"",
        ),
        (
            Constraint::JsonSchema(json!({"type": "object", "properties": {"a": {"type": "string", "minLenght": 3}}})),
            "#/properties/a: unknown JSON Schema keyword \"minLenght\"",
        ),
        (Constraint::JsonSchema(json!([1, 2])), "a schema is an object"),
        (Constraint::JsonSchema(json!({"type": "strnig"})), "strnig"),
        (Constraint::Regex("[0-9".into()), "regex"),
        (Constraint::Lark("start: (".into()), "constraint"),
    ] {
        let e = s.generate(&prompt, &options(c, 8), &mut |_| true).unwrap_err();
        assert_eq!(e.code(), "invalid_input", "{e}");
        assert!(e.to_string().contains(says), "{says}: {e}");
        assert_eq!(s.engine().cached(), 0, "no token ran");
    }
    let g = s
        .generate(&prompt, &options(Constraint::Regex("[a-z]+".into()), 4), &mut |_| true)
        .unwrap();
    assert!(!g.ids.is_empty());
}

/// The tiny Llama (no end token: its replies end where the grammar completes) on the GPU engine gives the CPU
/// engine's constrained greedy reply.
#[test]
fn the_gpu_engine_gives_the_cpu_engines_constrained_reply() {
    let model = LlmModel::open(&llm_util::golden().join("tiny-llama/model.f32.gguf")).unwrap();
    let gpu = Arc::new(pollster::block_on(loom_wasm::gpu::Gpu::new()).expect("a wgpu adapter"));
    let prompt: Vec<u32> = "Hello".bytes().map(u32::from).collect();
    let run = |engine: Box<dyn loom_wasm::llm::engine::Engine>| {
        let mut s = Session::new(&model, engine).unwrap();
        let g = s
            .generate(&prompt, &options(Constraint::Regex("[a-z]{5}".into()), 16), &mut |_| {
                true
            })
            .unwrap();
        (g.text, g.ids, g.stop_reason)
    };
    let cpu = run(Box::new(model.cpu_engine()));
    let engine = pollster::block_on(loom_wasm::llm::gpu_engine::GpuEngine::new(
        gpu.clone(),
        &model.config,
        &model.weights,
        None,
    ))
    .unwrap();
    let on_gpu = run(Box::new(engine));
    assert_eq!(cpu.2, StopReason::Complete);
    assert!(
        cpu.0.len() == 5 && cpu.0.bytes().all(|b| b.is_ascii_lowercase()),
        "{:?}",
        cpu.0
    );
    assert_eq!(on_gpu, cpu);

    // A masked decode step on the GPU is one submit and one id read back, greedy or sampled; the id is the CPU's
    // pick from the masked logits.
    let mut engine = pollster::block_on(loom_wasm::llm::gpu_engine::GpuEngine::new(
        gpu.clone(),
        &model.config,
        &model.weights,
        None,
    ))
    .unwrap();
    let mut cpu_engine = model.cpu_engine();
    let mut logits = loom_wasm::llm::engine::Engine::forward(&mut cpu_engine, &prompt, false).unwrap();
    pollster::block_on(engine.forward_logits(&prompt[..prompt.len() - 1], false)).unwrap();
    let vowels: Vec<u32> = (0..model.config.vocab.div_ceil(32))
        .map(|w| {
            (0..32)
                .filter(|b| b"aeiou".contains(&((w * 32 + b) as u8)) && w < 8)
                .fold(0, |m, b| m | 1 << b)
        })
        .collect();
    let last = &prompt[prompt.len() - 1..];
    let id = pollster::block_on(engine.forward_masked(last, None, &vowels)).unwrap();
    let stats = engine.last_call();
    // One submit where a decode step is not submitted in parts (CPU adapters; `set_decode_submit_blocks`).
    let one_submit = engine.decode_submit_blocks() == 0;
    assert!(!one_submit || stats.submits == 1, "{stats:?}");
    assert_eq!(stats.bytes_read_back, 4, "{stats:?}");
    loom_wasm::gpu::mask_logits(&mut logits, &vowels);
    assert_eq!(id, loom_wasm::gpu::first_argmax(&logits));
    assert!(b"aeiou".contains(&(id as u8)), "{id}");
    engine.truncate(prompt.len() - 1);
    let args = loom_wasm::gpu::SampleArgs {
        temperature: 1.5,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.0,
        u: 9_000_000,
        repetition_penalty: 1.0,
        penalized: Vec::new(),
    };
    let drawn = pollster::block_on(engine.forward_masked(last, Some(&args), &vowels)).unwrap();
    let stats = engine.last_call();
    assert!(!one_submit || stats.submits == 1, "{stats:?}");
    assert_eq!(stats.bytes_read_back, 4, "{stats:?}");
    assert_eq!(drawn, loom_wasm::llm::sampler::Sampler::sample_with(&mut logits, &args));
}

/// The bytes each id stands for (what the grammar engine matches text against) equal llguidance's own reading of
/// a tokenizer.json: SmolLM2's byte-level vocabulary (HF's file) and a SentencePiece one with byte fallback
/// (llama.cpp's llama-spm vocabulary, written as HF files by the tokenizer).
#[test]
fn token_bytes_agree_with_llguidances_tokenizer_json_reader() {
    use loom_wasm::formats::gguf::read_header_bytes;
    use loom_wasm::llm::tokenizer::Tokenizer;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let smol_json = std::fs::read(root.join("models/smollm2-hf/tokenizer.json")).unwrap();
    let smol = Tokenizer::from_json(&smol_json).unwrap();
    let spm = Tokenizer::from_gguf(
        &read_header_bytes(&std::fs::read(root.join("testdata/llm/vocab/ggml-vocab-llama-spm.gguf")).unwrap()).unwrap(),
    )
    .unwrap();
    let spm_json = spm.hf_files().unwrap().0;
    for (name, tok, json) in [("smollm2", &smol, &smol_json), ("llama-spm", &spm, &spm_json)] {
        let theirs = llguidance::token_bytes_from_tokenizer_json(&serde_json::from_slice(json).unwrap()).unwrap();
        let ours = tok.token_bytes(tok.vocab_size());
        assert_eq!(ours.len(), theirs.len(), "{name}");
        let differ: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
        assert!(
            differ.is_empty(),
            "{name}: {} ids differ, first {:?}",
            differ.len(),
            &differ[..differ.len().min(5)]
        );
    }
}
