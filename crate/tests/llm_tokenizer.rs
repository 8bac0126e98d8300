//! The LLM tokenizer against outside truth: HF `tokenizers` ids for SmolLM2 and tiny-llama (from their
//! tokenizer.json and from their GGUF vocabularies alike), llama.cpp's own golden ids for its vocab-only GGUFs,
//! and the SmolLM2 chat prompts rendered with the GGUF's template. Hostile inputs give typed errors.

use loom_wasm::formats::gguf::{read_header, GgufHeader};
use loom_wasm::formats::source::FileSource;
use loom_wasm::llm::template::{ChatMessage, ChatTemplate};
use loom_wasm::llm::tokenizer::Tokenizer;
use serde_json::Value;
use std::sync::Arc;

const SMOL_GGUF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
);
const SMOL_HF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/smollm2-hf");
const SMOL_GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/golden/smollm2");
const TINY_GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/golden/tiny-llama");
const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/llm");
const LLAMA_VOCAB_FETCHED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/llama-vocab");

/// A file the tests read: setup.sh makes it (or, for llama.cpp's larger vocabularies, fetch-llama-vocab.sh); a
/// test never passes without it.
fn require(path: &str) {
    assert!(
        std::path::Path::new(path).exists(),
        "{path} is missing: run scripts/setup.sh (scripts/fetch-llama-vocab.sh for models/llama-vocab)"
    );
}

fn gguf_header(path: &str) -> GgufHeader {
    let mut src = FileSource::open(std::path::Path::new(path)).unwrap();
    read_header(&mut src, Vec::new()).unwrap().0
}

fn read_json(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Every case's ids and decoded text, all mismatches listed in one message.
fn check_cases(name: &str, tok: &Tokenizer, cases: &[Value]) {
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids_of(&case["ids"]);
        let got = tok.encode(text, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}: ids {got:?}, want {want:?}"));
            continue;
        }
        let decoded = tok.decode(&got, false).unwrap();
        if decoded != case["decoded"].as_str().unwrap() {
            failures.push(format!("{text:?}: decoded {decoded:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

fn smol_from_hf() -> Tokenizer {
    let json = std::fs::read(format!("{SMOL_HF}/tokenizer.json")).unwrap();
    let config = std::fs::read(format!("{SMOL_HF}/tokenizer_config.json")).unwrap();
    Tokenizer::from_json_with_config(&json, Some(&config)).unwrap()
}

#[test]
fn smollm2_cases_from_tokenizer_json() {
    require(SMOL_HF);
    let tok = smol_from_hf();
    let cases = read_json(&format!("{SMOL_GOLDEN}/tokenizer_cases.json"));
    check_cases("smollm2 tokenizer.json", &tok, cases["cases"].as_array().unwrap());
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_ids(), vec![2]);
    assert_eq!(tok.eos_token().as_deref(), Some("<|im_end|>"));
    assert!(tok.is_special(0) && tok.is_special(2) && !tok.is_special(1000));
    assert!(tok.chat_template().unwrap().contains("<|im_start|>"));
}

#[test]
fn smollm2_cases_from_gguf() {
    require(SMOL_GGUF);
    let tok = Tokenizer::from_gguf(&gguf_header(SMOL_GGUF)).unwrap();
    let cases = read_json(&format!("{SMOL_GOLDEN}/tokenizer_cases.json"));
    check_cases("smollm2 GGUF", &tok, cases["cases"].as_array().unwrap());
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos_id(), tok.eos_ids(), tok.add_bos()), (Some(1), vec![2], false));
    assert_eq!(tok.bos_token().as_deref(), Some("<|im_start|>"));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert_eq!(tok.id_to_token(19556).as_deref(), Some("Hello"));
    assert!(tok.is_special(1) && !tok.is_special(19556));
    // Special tokens drop out of decoding when asked to.
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", false).unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "user\nHi");
}

#[test]
fn smollm2_chat_prompts_from_gguf_template() {
    require(SMOL_GGUF);
    let tok = Tokenizer::from_gguf(&gguf_header(SMOL_GGUF)).unwrap();
    let template = ChatTemplate::new(tok.chat_template().unwrap()).unwrap();
    let expected = read_json(&format!("{SMOL_GOLDEN}/expected.json"));
    let cases = expected["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let messages = [ChatMessage {
            role: "user".into(),
            content: case["user_message"].as_str().unwrap().into(),
        }];
        let text = template
            .render(&messages, true, tok.bos_token().as_deref(), tok.eos_token().as_deref())
            .unwrap();
        assert_eq!(text, case["templated_text"].as_str().unwrap());
        assert_eq!(
            tok.encode(&text, false).unwrap(),
            ids_of(&case["prompt_ids"]),
            "{text:?}"
        );
    }
}

#[test]
fn tiny_llama_json_and_gguf_agree_with_hf() {
    let cases = read_json(&format!("{TESTDATA}/tiny_llama_tokenizer_cases.json"));
    let cases = cases["cases"].as_array().unwrap();
    let json = std::fs::read(format!("{TINY_GOLDEN}/tokenizer.json")).unwrap();
    let from_json = Tokenizer::from_json(&json).unwrap();
    check_cases("tiny-llama tokenizer.json", &from_json, cases);
    let from_gguf = Tokenizer::from_gguf(&gguf_header(&format!("{TINY_GOLDEN}/model.f32.gguf"))).unwrap();
    check_cases("tiny-llama GGUF (0 merges)", &from_gguf, cases);
    assert_eq!(from_gguf.vocab_size(), 256);
    assert_eq!(
        (from_gguf.bos_id(), from_gguf.eos_ids(), from_gguf.add_bos()),
        (None, vec![], false)
    );
}

/// llama.cpp's golden files: `.inp` holds the texts separated by `__ggml_vocab_test__` lines, `.out` one line of
/// ids per text (HF `tokenizers`, no special tokens added).
fn check_llama_cpp_vocab(dir: &str, name: &str) {
    let path = format!("{dir}/ggml-vocab-{name}.gguf");
    require(&path);
    let tok = Tokenizer::from_gguf(&gguf_header(&path)).unwrap_or_else(|e| panic!("{name}: {e}"));
    check_llama_cpp_texts(&tok, &path, name);
}

fn check_llama_cpp_texts(tok: &Tokenizer, path: &str, name: &str) {
    let inp = std::fs::read_to_string(format!("{path}.inp")).unwrap();
    let out = std::fs::read_to_string(format!("{path}.out")).unwrap();
    // Every text is followed by the separator line, the last one too.
    let inp = inp.strip_suffix("\n__ggml_vocab_test__\n").unwrap_or(&inp);
    let texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let expected: Vec<&str> = out.lines().collect();
    assert_eq!(texts.len(), expected.len(), "{name}: .inp and .out disagree in length");
    let mut failures = Vec::new();
    for (text, line) in texts.iter().zip(&expected) {
        let want: Vec<u32> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let got = tok.encode(text, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}: {got:?}, want {want:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} differ:\n{}",
        failures.len(),
        texts.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_cpp_vocab_llama_spm() {
    check_llama_cpp_vocab(&format!("{TESTDATA}/vocab"), "llama-spm");
}

#[test]
fn llama_cpp_vocab_gpt2() {
    check_llama_cpp_vocab(&format!("{TESTDATA}/vocab"), "gpt-2");
}

/// The larger vocabularies come from scripts/fetch-llama-vocab.sh (llama.cpp's source, which setup and CI never
/// fetch): run by hand, `cargo test --test llm_tokenizer -- --ignored`, after that script.
#[test]
#[ignore = "needs scripts/fetch-llama-vocab.sh"]
fn llama_cpp_vocab_fetched() {
    let names = ["llama-bpe", "qwen2", "deepseek-llm"];
    let failed: Vec<String> = names
        .iter()
        .filter_map(|name| {
            std::panic::catch_unwind(|| check_llama_cpp_vocab(LLAMA_VOCAB_FETCHED, name))
                .err()
                .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn llama_spm_specials_and_bos() {
    let tok = Tokenizer::from_gguf(&gguf_header(&format!("{TESTDATA}/vocab/ggml-vocab-llama-spm.gguf"))).unwrap();
    assert_eq!(tok.vocab_size(), 32000);
    assert_eq!((tok.bos_id(), tok.eos_ids(), tok.add_bos()), (Some(1), vec![2], true));
    // HF LlamaTokenizerFast("hf-internal-testing/llama-tokenizer") gives [1, 15043, 3186] here.
    let ids = tok.encode("Hello world", true).unwrap();
    assert_eq!(ids, vec![1, 15043, 3186]);
    assert_eq!(tok.decode(&ids, true).unwrap(), "Hello world");
    assert_eq!(tok.decode(&ids, false).unwrap(), "<s> Hello world");
}

/// Streaming a string token by token gives back exactly the text, and no chunk ends inside a character even
/// where single tokens hold parts of one (byte-level BPE with emoji and CJK; SentencePiece byte fallback).
#[test]
fn stream_emits_whole_characters() {
    let spm = Tokenizer::from_gguf(&gguf_header(&format!("{TESTDATA}/vocab/ggml-vocab-llama-spm.gguf"))).unwrap();
    let tiny = Tokenizer::from_json(&std::fs::read(format!("{TINY_GOLDEN}/tokenizer.json")).unwrap()).unwrap();
    let mut tokenizers = vec![("llama-spm", Arc::new(spm)), ("tiny-llama bytes", Arc::new(tiny))];
    if std::path::Path::new(SMOL_GGUF).exists() {
        let smol = Tokenizer::from_gguf(&gguf_header(SMOL_GGUF)).unwrap();
        tokenizers.push(("smollm2", Arc::new(smol)));
    }
    let text = "Emoji 👋🏽 and 🦙, CJK 日本語のテキスト, accents naïve — done.";
    for (name, tok) in &tokenizers {
        let ids = tok.encode(text, false).unwrap();
        let mut stream = tok.stream();
        let mut chunks = Vec::new();
        for &id in &ids {
            let chunk = stream.push(id).unwrap();
            assert!(
                !chunk.contains('\u{FFFD}'),
                "{name}: chunk {chunk:?} holds a replacement character"
            );
            chunks.push(chunk);
        }
        chunks.push(stream.finish());
        assert_eq!(chunks.concat(), tok.decode(&ids, true).unwrap(), "{name}");
        assert_eq!(chunks.concat().trim_start(), text, "{name}");
    }
    // An incomplete character at the end comes out of finish() as U+FFFD.
    let (_, tiny) = &tokenizers[1];
    let mut stream = tiny.stream();
    assert_eq!(stream.push(0xF0).unwrap(), "");
    assert_eq!(stream.push(0x9F).unwrap(), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert!(stream.push(100_000).is_err());
}

mod hostile {
    use super::*;
    use loom_wasm::formats::gguf::GgufValue;

    fn code(r: Result<Tokenizer, loom_wasm::LoomError>) -> &'static str {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.code(),
        }
    }

    #[test]
    fn bad_tokenizer_json() {
        let json = std::fs::read(format!("{TINY_GOLDEN}/tokenizer.json")).unwrap();
        for cut in [0, 1, 10, json.len() / 2, json.len() - 1] {
            assert_eq!(code(Tokenizer::from_json(&json[..cut])), "bad_format", "cut at {cut}");
        }
        for bad in [
            &b"[]"[..],
            b"{}",
            b"{\"model\": 3}",
            b"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
            b"\xff\xfe",
        ] {
            assert_eq!(
                code(Tokenizer::from_json(bad)),
                "bad_format",
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // A tokenizer.json asking for padding to a huge length must not make encode allocate it.
        let mut value: Value = serde_json::from_slice(&json).unwrap();
        value["padding"] = serde_json::json!({"strategy": {"Fixed": 1u64 << 40}, "direction": "Right",
            "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "a"});
        let tok = Tokenizer::from_json(&serde_json::to_vec(&value).unwrap()).unwrap();
        assert_eq!(tok.encode("ab", true).unwrap(), vec![97, 98]);
    }

    #[test]
    fn bad_tokenizer_config() {
        let json = std::fs::read(format!("{TINY_GOLDEN}/tokenizer.json")).unwrap();
        for config in [
            &br#"{"bos_token": 3}"#[..],
            br#"{"eos_token": ["a"]}"#,
            br#"{"eos_token": {"content": 1}}"#,
            br#"{"add_bos_token": "yes"}"#,
            br#"{"chat_template": 5}"#,
            br#"{"chat_template": [{"name": "default"}]}"#,
            br#"{"bos_token": "<not in vocab>"}"#,
            b"[1]",
            b"{",
        ] {
            let r = Tokenizer::from_json_with_config(&json, Some(config));
            assert_eq!(code(r), "bad_format", "{}", String::from_utf8_lossy(config));
        }
        // AddedToken objects, null and a named list of templates are accepted.
        let config = br#"{"bos_token": {"content": "a", "lstrip": false}, "eos_token": null, "add_bos_token": true,
            "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "y"}]}"#;
        let tok = Tokenizer::from_json_with_config(&json, Some(config)).unwrap();
        assert_eq!(
            (tok.bos_id(), tok.add_bos(), tok.chat_template()),
            (Some(97), true, Some("y"))
        );
        assert_eq!(tok.encode("b", true).unwrap(), vec![97, 98]);
    }

    /// The SmolLM2-free way to a valid GGUF vocabulary: llama.cpp's committed llama-spm one, edited.
    fn spm_header() -> GgufHeader {
        gguf_header(&format!("{TESTDATA}/vocab/ggml-vocab-llama-spm.gguf"))
    }

    fn set(h: &mut GgufHeader, key: &str, value: GgufValue) {
        match h.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => h.metadata.push((key.to_string(), value)),
        }
    }

    fn truncate_array(h: &mut GgufHeader, key: &str, len: usize) {
        if let Some((_, GgufValue::Array(_, items))) = h.metadata.iter_mut().find(|(k, _)| k == key) {
            items.truncate(len);
        }
    }

    type Edit = Box<dyn Fn(&mut GgufHeader)>;

    #[test]
    fn bad_gguf_vocabularies() {
        let edits: Vec<(&str, Edit)> = vec![
            (
                "no model",
                Box::new(|h| h.metadata.retain(|(k, _)| k != "tokenizer.ggml.model")),
            ),
            (
                "model not a string",
                Box::new(|h| set(h, "tokenizer.ggml.model", GgufValue::U32(1))),
            ),
            (
                "no tokens",
                Box::new(|h| h.metadata.retain(|(k, _)| k != "tokenizer.ggml.tokens")),
            ),
            (
                "tokens of u32",
                Box::new(|h| set(h, "tokenizer.ggml.tokens", GgufValue::Array(4, vec![GgufValue::U32(1)]))),
            ),
            (
                "empty tokens",
                Box::new(|h| set(h, "tokenizer.ggml.tokens", GgufValue::Array(8, vec![]))),
            ),
            (
                "short scores",
                Box::new(|h| truncate_array(h, "tokenizer.ggml.scores", 100)),
            ),
            (
                "short token_type",
                Box::new(|h| truncate_array(h, "tokenizer.ggml.token_type", 31999)),
            ),
            (
                "short tokens",
                Box::new(|h| truncate_array(h, "tokenizer.ggml.tokens", 5)),
            ),
            (
                "scores of strings",
                Box::new(|h| set(h, "tokenizer.ggml.scores", GgufValue::Array(8, vec![]))),
            ),
            (
                "token_type of f32",
                Box::new(|h| set(h, "tokenizer.ggml.token_type", GgufValue::Array(6, vec![]))),
            ),
            (
                "bos outside",
                Box::new(|h| set(h, "tokenizer.ggml.bos_token_id", GgufValue::U32(32000))),
            ),
            (
                "eos not an integer",
                Box::new(|h| set(h, "tokenizer.ggml.eos_token_id", GgufValue::F32(2.0))),
            ),
            (
                "add_bos not a bool",
                Box::new(|h| set(h, "tokenizer.ggml.add_bos_token", GgufValue::U8(1))),
            ),
            (
                "template not a string",
                Box::new(|h| set(h, "tokenizer.chat_template", GgufValue::U8(1))),
            ),
            (
                "gpt2 without merges",
                Box::new(|h| set(h, "tokenizer.ggml.model", GgufValue::String("gpt2".into()))),
            ),
            (
                "gpt2 bad merge",
                Box::new(|h| {
                    set(h, "tokenizer.ggml.model", GgufValue::String("gpt2".into()));
                    set(
                        h,
                        "tokenizer.ggml.merges",
                        GgufValue::Array(8, vec![GgufValue::String("nospace".into())]),
                    );
                }),
            ),
        ];
        for (name, edit) in &edits {
            let mut h = spm_header();
            edit(&mut h);
            assert_eq!(code(Tokenizer::from_gguf(&h)), "bad_format", "{name}");
        }
        let mut h = spm_header();
        set(&mut h, "tokenizer.ggml.model", GgufValue::String("rwkv".into()));
        assert_eq!(code(Tokenizer::from_gguf(&h)), "unsupported");
        let mut h = gguf_header(&format!("{TESTDATA}/vocab/ggml-vocab-gpt-2.gguf"));
        set(&mut h, "tokenizer.ggml.pre", GgufValue::String("no-such-pre".into()));
        assert_eq!(code(Tokenizer::from_gguf(&h)), "unsupported");
    }

    #[test]
    fn decode_rejects_ids_outside_the_vocabulary() {
        let tok = Tokenizer::from_json(&std::fs::read(format!("{TINY_GOLDEN}/tokenizer.json")).unwrap()).unwrap();
        assert_eq!(tok.decode(&[97, 256], false).unwrap_err().code(), "invalid_input");
        assert_eq!(tok.decode(&[u32::MAX], true).unwrap_err().code(), "invalid_input");
    }
}

/// The tokenizer written as an HF folder's files (what `loom convert` puts beside a `.entity`) and read back.
fn through_hf_files(tok: &Tokenizer) -> Tokenizer {
    let (json, config) = tok.hf_files().unwrap();
    Tokenizer::from_json_with_config(&json, Some(&config)).unwrap()
}

fn same_settings(name: &str, a: &Tokenizer, b: &Tokenizer) {
    assert_eq!(
        (
            a.vocab_size(),
            a.bos_id(),
            a.eos_token(),
            a.add_bos(),
            a.chat_template()
        ),
        (
            b.vocab_size(),
            b.bos_id(),
            b.eos_token(),
            b.add_bos(),
            b.chat_template()
        ),
        "{name}"
    );
    let special = |t: &Tokenizer| {
        (0..t.vocab_size() as u32)
            .filter(|&i| t.is_special(i))
            .collect::<Vec<_>>()
    };
    assert_eq!(special(a), special(b), "{name}: special tokens");
}

/// A `.entity` holds no vocabulary, so `loom convert` writes a GGUF's tokenizer beside it as `tokenizer.json` and
/// `tokenizer_config.json`. Read back, it still encodes llama.cpp's golden texts to llama.cpp's ids (a
/// SentencePiece and a byte-level vocabulary), SmolLM2's cases to HF's ids, and keeps BOS, EOS, whether each is
/// added, the special tokens and the chat template.
#[test]
fn a_gguf_tokenizer_written_as_hf_files_reads_back_the_same() {
    for name in ["llama-spm", "gpt-2"] {
        let path = format!("{TESTDATA}/vocab/ggml-vocab-{name}.gguf");
        let tok = Tokenizer::from_gguf(&gguf_header(&path)).unwrap();
        let back = through_hf_files(&tok);
        check_llama_cpp_texts(&back, &path, name);
        same_settings(name, &tok, &back);
    }
    let tok = Tokenizer::from_gguf(&gguf_header(SMOL_GGUF)).unwrap();
    let back = through_hf_files(&tok);
    let cases = read_json(&format!("{SMOL_GOLDEN}/tokenizer_cases.json"));
    check_cases(
        "smollm2 GGUF through HF files",
        &back,
        cases["cases"].as_array().unwrap(),
    );
    same_settings("smollm2", &tok, &back);
}
