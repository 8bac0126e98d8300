//! Hostile model files for the LLM loader: truncated and lying GGUF headers, broken config.json, and bad
//! requests (token ids outside the vocabulary, a full context). Every one is a typed error, never a panic, and
//! no allocation exceeds what the file's size justifies.

mod common;

use bytes::Bytes;
use common::{peak_alloc, Tracking};
use loom_wasm::formats::gguf::{read_header_bytes, GgufHeader, GgufValue};
use loom_wasm::llm::engine::Engine;
use loom_wasm::llm::model::{HfFiles, LlmModel};
use loom_wasm::LoomError;

#[global_allocator]
static ALLOC: Tracking = Tracking;

fn tiny(name: &str) -> Vec<u8> {
    let path = format!("{}/../../shared/golden/tiny-llama/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// GGUF v3 writer for edited copies of a real file: metadata as given, tensors with their original data.
fn write_gguf(h: &GgufHeader, file: &[u8], metadata: &[(String, GgufValue)]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    fn type_id(v: &GgufValue) -> u32 {
        match v {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::String(_) => 8,
            GgufValue::Array(..) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }
    fn value(out: &mut Vec<u8>, v: &GgufValue) {
        match v {
            GgufValue::U8(x) => out.push(*x),
            GgufValue::I8(x) => out.push(*x as u8),
            GgufValue::U16(x) => out.extend(x.to_le_bytes()),
            GgufValue::I16(x) => out.extend(x.to_le_bytes()),
            GgufValue::U32(x) => out.extend(x.to_le_bytes()),
            GgufValue::I32(x) => out.extend(x.to_le_bytes()),
            GgufValue::F32(x) => out.extend(x.to_le_bytes()),
            GgufValue::Bool(x) => out.push(u8::from(*x)),
            GgufValue::String(s) => string(out, s),
            GgufValue::Array(t, items) => {
                out.extend(t.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                items.iter().for_each(|i| value(out, i));
            }
            GgufValue::U64(x) => out.extend(x.to_le_bytes()),
            GgufValue::I64(x) => out.extend(x.to_le_bytes()),
            GgufValue::F64(x) => out.extend(x.to_le_bytes()),
        }
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((h.tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        string(&mut out, k);
        out.extend(type_id(v).to_le_bytes());
        value(&mut out, v);
    }
    for t in &h.tensors {
        string(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(t.ggml_type.id().unwrap().to_le_bytes());
        out.extend(t.offset.to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(h.alignment as usize), 0);
    out.extend(&file[h.data_start as usize..]);
    out
}

/// A copy of the tiny Q4_0 GGUF with metadata key `key` set to `v` (added when absent, removed when `None`).
fn with_key(key: &str, v: Option<GgufValue>) -> Vec<u8> {
    let file = tiny("model.q4_0.gguf");
    let h = read_header_bytes(&file).unwrap();
    let mut md: Vec<(String, GgufValue)> = h.metadata.iter().filter(|(k, _)| k != key).cloned().collect();
    if let Some(v) = v {
        md.push((key.to_string(), v));
    }
    write_gguf(&h, &file, &md)
}

fn open(bytes: Vec<u8>) -> (Result<LlmModel, LoomError>, usize) {
    let len = bytes.len();
    let (r, peak) = peak_alloc(|| LlmModel::from_gguf(Bytes::from(bytes)));
    // The file is already in memory; nothing a header claims may cost more than the file again.
    assert!(peak <= len.max(1 << 20), "peak allocation {peak} for a {len}-byte file");
    (r, peak)
}

fn err(bytes: Vec<u8>) -> LoomError {
    match open(bytes).0 {
        Ok(_) => panic!("a hostile file opened"),
        Err(e) => e,
    }
}

#[test]
fn the_rewritten_file_still_opens() {
    // The writer itself is faithful: an unedited copy opens and runs.
    let m = open(with_key("general.name", Some(GgufValue::String("copy".into()))))
        .0
        .unwrap();
    assert_eq!(m.config.n_layers, 2);
    assert_eq!(m.cpu_engine().forward(&[72, 101], false).unwrap().len(), 256);
}

/// A vocabulary that lists a piece twice (one text, two ids) is refused by name, as llama.cpp refuses it.
#[test]
fn a_vocabulary_with_a_duplicate_piece_is_refused() {
    let file = tiny("model.q4_0.gguf");
    let h = read_header_bytes(&file).unwrap();
    let Some(GgufValue::Array(item, tokens)) = h.get("tokenizer.ggml.tokens").cloned() else {
        panic!("the tiny GGUF has a token list");
    };
    let mut tokens = tokens;
    tokens[200] = tokens[100].clone();
    match err(with_key("tokenizer.ggml.tokens", Some(GgufValue::Array(item, tokens)))) {
        LoomError::Tokenizer(m) => assert!(m.contains("twice") && m.contains("id 200"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// One rule for model files: a GGUF's token list has exactly the embedding's rows, every id the tokenizer can produce
/// (BOS, EOS, the vocabulary) has a row, and every merge names two tokens and makes one. Each break is refused at
/// load by name (llama.cpp refuses the first; HF's BPE the last), never run to print garbage later.
#[test]
fn vocabulary_and_embedding_disagreements_are_refused() {
    let file = tiny("model.q4_0.gguf");
    let h = read_header_bytes(&file).unwrap();
    let Some(GgufValue::Array(item, tokens)) = h.get("tokenizer.ggml.tokens").cloned() else {
        panic!("the tiny GGUF has a token list");
    };
    let short = GgufValue::Array(item, tokens[..255].to_vec());
    match err(with_key("tokenizer.ggml.tokens", Some(short))) {
        LoomError::InvalidNetwork(m) => assert!(m.contains("255 tokens") && m.contains("256 rows"), "{m}"),
        other => panic!("{other:?}"),
    }
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
    ] {
        let e = err(with_key(key, Some(GgufValue::U32(300))));
        assert_eq!(e.code(), "bad_format", "{key}: {e}");
        assert!(e.to_string().contains("300"), "{key}: {e}");
    }
    let merges = |m: &[&str]| {
        let items = m.iter().map(|m| GgufValue::String(m.to_string())).collect();
        with_key("tokenizer.ggml.merges", Some(GgufValue::Array(8, items)))
    };
    // "a" and "b" are tokens of the byte-level vocabulary, "ab" and "zz" are not.
    for bad in ["a b", "a zz"] {
        match err(merges(&[bad])) {
            LoomError::Tokenizer(m) => assert!(m.contains("merge") && m.contains("not a token"), "{bad}: {m}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    // An HF folder whose tokenizer has an id past the embedding's 256 rows.
    let st = Bytes::from(tiny("model.f32.safetensors"));
    let mut tokenizer: serde_json::Value = serde_json::from_slice(&tiny("tokenizer.json")).unwrap();
    tokenizer["added_tokens"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "id": 300, "content": "<extra>", "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": true
        }));
    let files = HfFiles {
        config_json: tiny("config.json"),
        safetensors: vec![("model.safetensors".into(), st)],
        tokenizer_json: Some(serde_json::to_vec(&tokenizer).unwrap()),
        ..HfFiles::default()
    };
    match LlmModel::from_hf(&files) {
        // tokenizers gives an added token that is not in the vocabulary the next id (256), whatever its "id" says.
        Err(LoomError::InvalidNetwork(m)) => assert!(m.contains("highest id 256") && m.contains("256 rows"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn every_truncation_is_a_typed_error() {
    let file = tiny("model.q4_0.gguf");
    let mut cuts: Vec<usize> = (0..2048).step_by(7).collect();
    cuts.extend((2048..file.len()).step_by(997));
    cuts.push(file.len() - 1);
    for cut in cuts {
        let e = err(file[..cut].to_vec());
        assert_eq!(e.code(), "bad_format", "cut at {cut}: {e}");
    }
}

#[test]
fn lying_dimensions_are_refused_before_any_allocation() {
    let u32v = |v: u32| Some(GgufValue::U32(v));
    let cases: Vec<(&str, Option<GgufValue>, &str)> = vec![
        ("llama.embedding_length", u32v(65), "shape"),
        ("llama.embedding_length", u32v(0), "hidden size"),
        ("llama.attention.head_count", u32v(0), "heads"),
        ("llama.attention.head_count_kv", u32v(3), "multiple"),
        ("llama.block_count", u32v(3), "missing tensor blk.2"),
        ("llama.block_count", Some(GgufValue::U64(1 << 40)), "layers"),
        ("llama.feed_forward_length", u32v(1 << 30), "intermediate"),
        ("llama.feed_forward_length", u32v(129), "shape"),
        ("llama.attention.key_length", u32v(1 << 30), "head_dim"),
        ("llama.rope.dimension_count", u32v(17), "RoPE"),
        ("llama.rope.freq_base", Some(GgufValue::F32(f32::NAN)), "rope_theta"),
        (
            "llama.block_count",
            Some(GgufValue::String("2".into())),
            "not an unsigned integer",
        ),
        ("llama.block_count", None, "block_count is missing"),
        (
            "general.architecture",
            Some(GgufValue::String("gpt-neox".into())),
            "architecture",
        ),
        ("general.architecture", None, "architecture"),
    ];
    for (key, v, says) in cases {
        let e = err(with_key(key, v.clone()));
        assert!(e.to_string().contains(says), "{key} = {v:?}: {e}");
    }
}

#[test]
fn hostile_config_json() {
    let st = Bytes::from(tiny("model.f32.safetensors"));
    let good = String::from_utf8(tiny("config.json")).unwrap();
    let files = |config: &str| HfFiles {
        config_json: config.as_bytes().to_vec(),
        safetensors: vec![("model.safetensors".into(), st.clone())],
        ..HfFiles::default()
    };
    assert!(LlmModel::from_hf(&files(&good)).is_ok());
    for (edit, says) in [
        (
            good.replace("\"hidden_size\": 64", "\"hidden_size\": \"64\""),
            "hidden_size",
        ),
        (good.replace("\"hidden_size\": 64,", ""), "hidden_size is missing"),
        (
            good.replace("\"num_attention_heads\": 4", "\"num_attention_heads\": 5"),
            "multiple",
        ),
        (
            good.replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 99999999"),
            "layers",
        ),
        (good.replace("\"vocab_size\": 256", "\"vocab_size\": 300"), "shape"),
        (
            good.replace("\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"")
                .replace("LlamaForCausalLM", "GPT2LMHeadModel"),
            "model_type",
        ),
        (
            good.replace("\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"yarn\"}"),
            "rope_scaling",
        ),
        (good[..good.len() / 2].to_string(), "config.json"),
        ("[1, 2]".to_string(), "hidden_size"),
    ] {
        let e = LlmModel::from_hf(&files(&edit)).err().expect("a hostile config opened");
        assert!(e.to_string().contains(says), "{says}: {e}");
    }
    // A truncated safetensors file.
    let mut f = files(&good);
    f.safetensors[0].1 = st.slice(..st.len() - 1);
    assert_eq!(LlmModel::from_hf(&f).err().unwrap().code(), "bad_format");
}

#[test]
fn bad_requests() {
    let m = LlmModel::from_gguf(Bytes::from(tiny("model.q8_0.gguf"))).unwrap();
    let mut e = m.cpu_engine();
    assert_eq!(e.forward(&[256], false).unwrap_err().code(), "invalid_input");
    assert_eq!(e.forward(&[], false).unwrap_err().code(), "invalid_input");
    assert_eq!(e.cached(), 0);
    let long = vec![65u32; m.config.context + 1];
    assert_eq!(e.forward(&long, false).unwrap_err().code(), "context_full");
    e.forward(&vec![65u32; m.config.context], false).unwrap();
    assert_eq!(e.forward(&[65], false).unwrap_err().code(), "context_full");
}

/// Found by `fuzz/fuzz_targets/tokenizer_template.rs`: a `tokenizer.json` whose `decoder` value is not JSON made
/// tokenizers 0.23 panic (`expect("Helper")` in `DecoderWrapper`'s deserializer). The first input is the
/// fuzzer's first artifact cut to its broken decoder, the second the same minimized by hand to 12 bytes; then the
/// second artifact (invalid UTF-8 in a decoder string, which a syntax-only check let through) and a lone surrogate.
#[test]
fn a_tokenizer_json_with_a_broken_decoder_is_an_error() {
    use loom_wasm::llm::tokenizer::Tokenizer;
    let good = tiny("tokenizer.json");
    let at = std::str::from_utf8(&good)
        .unwrap()
        .find("\"decoder\"")
        .expect("the tiny tokenizer has a decoder");
    let mut cut = good[..at].to_vec();
    cut.extend_from_slice(
        br#""decoder": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": tru{"version": "1.0"}"#,
    );
    // The second artifact: a byte that is not UTF-8 inside a string of the decoder (`trim_off\x85ets`).
    let mut bad_utf8 = good.clone();
    let key = at + std::str::from_utf8(&good[at..]).unwrap().find("trim_offsets").unwrap();
    bad_utf8[key + 8] = 0x85;
    for bytes in [
        cut,
        br#"{"decoder":}"#.to_vec(),
        bad_utf8,
        br#"{"decoder":"\ud800"}"#.to_vec(),
    ] {
        let e = Tokenizer::from_json(&bytes).err().expect("refused");
        assert_eq!(e.code(), "bad_format", "{e}");
    }
    assert!(Tokenizer::from_json(&good).is_ok());
}

/// Found by `fuzz/fuzz_targets/tokenizer_template.rs` (run 8): a `Strip` decoder with `stop > 0` makes tokenizers
/// 0.23 index before a token's first character when the token is shorter than `stop` and made of its `content`
/// (`" "`, or the empty decode of no ids): a panic, which aborts the wasm module. Such a decoder is refused when the
/// file loads, inside a `Sequence` or alone; `stop: 0` (Llama's) still loads and decodes.
#[test]
fn a_strip_decoder_with_a_stop_is_refused() {
    use loom_wasm::llm::tokenizer::Tokenizer;
    let good = tiny("tokenizer.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&good).unwrap();
    let with_decoder = |doc: &mut serde_json::Value, decoder: serde_json::Value| {
        doc["decoder"] = decoder;
        serde_json::to_vec(doc).unwrap()
    };
    let strip = |stop: u64| serde_json::json!({"type": "Strip", "content": " ", "start": 1, "stop": stop});
    for decoder in [
        strip(1),
        strip(5),
        serde_json::json!({"type": "Sequence", "decoders": [{"type": "Fuse"}, strip(5)]}),
        serde_json::json!({"type": "Sequence", "decoders": [{"type": "Sequence", "decoders": [strip(2)]}]}),
        // tokenizers reads decoders as an untagged enum, so Strip's fields make a Strip whatever the "type" says
        // (the fuzzer's second Strip crash had its "type" key mangled).
        serde_json::json!({"tyXpe": "Strip", "content": " ", "start": 1, "stop": 5}),
        serde_json::json!({"type": "Sequence", "decoders": [{"type": "Fuse", "content": " ", "start": 0, "stop": 3}]}),
    ] {
        let e = Tokenizer::from_json(&with_decoder(&mut doc, decoder.clone()))
            .err()
            .expect("refused");
        assert_eq!(e.code(), "bad_format", "{decoder}: {e}");
        assert!(e.to_string().contains("Strip"), "{e}");
    }
    let byte_level =
        serde_json::json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
    let llama = serde_json::json!({"type": "Sequence", "decoders": [byte_level, {"type": "Fuse"}, strip(0)]});
    let t = Tokenizer::from_json(&with_decoder(&mut doc, llama)).unwrap();
    assert_eq!(t.decode(&[], false).unwrap(), "");
    let ids = t.encode("  hi", false).unwrap();
    assert_eq!(t.decode(&ids, false).unwrap(), " hi");
}

/// Components tokenizers 0.23 reads without the checks its builders make, and then panics on when it encodes: a
/// `FixedLength` pre-tokenizer of length 0 (`chunks(0)`), and SentencePiece's `Precompiled` normalizer, whose charsmap
/// trie it walks without bounds checks (an empty one: index 0 of nothing) and whose length field sizes a buffer. Each
/// is refused at load, with or without its "type", alone or inside a `Sequence`.
#[test]
fn components_tokenizers_would_panic_on_are_refused() {
    use loom_wasm::llm::tokenizer::Tokenizer;
    let good = tiny("tokenizer.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&good).unwrap();
    let fixed = serde_json::json!({"type": "FixedLength", "length": 0});
    // Base64 of [0, 0, 0, 0]: a trie of no units.
    let precompiled = serde_json::json!({"type": "Precompiled", "precompiled_charsmap": "AAAAAA=="});
    for (key, list, node) in [
        ("pre_tokenizer", "pretokenizers", fixed),
        ("normalizer", "normalizers", precompiled),
    ] {
        let mut untyped = node.clone();
        untyped.as_object_mut().unwrap().remove("type");
        for wrapped in [
            node.clone(),
            untyped,
            serde_json::json!({"type": "Sequence", list: [{"type": "Sequence", list: [node.clone()]}]}),
        ] {
            let mut d = doc.clone();
            d[key] = wrapped.clone();
            let e = Tokenizer::from_json(&serde_json::to_vec(&d).unwrap())
                .err()
                .unwrap_or_else(|| panic!("{key} {wrapped}: loaded"));
            assert!(matches!(e.code(), "bad_format" | "unsupported"), "{wrapped}: {e}");
        }
    }
    doc["pre_tokenizer"] = serde_json::json!({"type": "FixedLength", "length": 3});
    assert!(Tokenizer::from_json(&serde_json::to_vec(&doc).unwrap()).is_ok());
}

/// Found by `fuzz/fuzz_targets/tokenizer_template.rs` (run 8, T5): tokenizers 0.23 builds a BPE model by copying
/// each merge's two parts into a buffer as long as the longest token, before it checks that the result is a token:
/// a result longer than every token overran it (a panic), and a right part shorter than the continuing-subword
/// prefix underflowed. Such merges are refused at load, as strings or as pairs; merges that make tokens still load.
#[test]
fn a_bpe_merge_that_makes_no_token_is_refused() {
    use loom_wasm::llm::tokenizer::Tokenizer;
    let bpe = |vocab: serde_json::Value, merges: serde_json::Value, prefix: Option<&str>| {
        serde_json::to_vec(&serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": null, "post_processor": null, "decoder": null,
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": prefix,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": merges}
        }))
        .unwrap()
    };
    let ab = serde_json::json!({"a": 0, "b": 1, "ab": 2});
    for (what, file) in [
        (
            "a result longer than every token",
            bpe(serde_json::json!({"a": 0, "b": 1}), serde_json::json!(["a b"]), None),
        ),
        (
            "the same as a pair",
            bpe(
                serde_json::json!({"a": 0, "b": 1}),
                serde_json::json!([["a", "b"]]),
                None,
            ),
        ),
        (
            "a result that is not a token",
            bpe(
                serde_json::json!({"a": 0, "b": 1, "ba": 2}),
                serde_json::json!(["a b"]),
                None,
            ),
        ),
        (
            "a right part shorter than the prefix",
            bpe(ab.clone(), serde_json::json!([["a", "b"]]), Some("##")),
        ),
        (
            "a prefix that cuts a character",
            // "é" is two bytes: without a one-byte prefix its second byte alone is not UTF-8.
            bpe(
                serde_json::json!({"a": 0, "é": 1, "a\u{e9}": 2}),
                serde_json::json!([["a", "é"]]),
                Some("#"),
            ),
        ),
    ] {
        let e = Tokenizer::from_json(&file)
            .err()
            .unwrap_or_else(|| panic!("{what}: loaded"));
        assert_eq!(e.code(), "bad_format", "{what}: {e}");
    }
    let t = Tokenizer::from_json(&bpe(ab, serde_json::json!(["a b"]), None)).unwrap();
    assert_eq!(t.encode("ab", false).unwrap(), vec![2]);
    let prefixed = serde_json::json!({"a": 0, "##b": 1, "ab": 2});
    assert!(Tokenizer::from_json(&bpe(prefixed, serde_json::json!([["a", "##b"]]), Some("##"))).is_ok());
}

/// Found by `fuzz/fuzz_targets/tokenizer_template.rs` (run 8, T3): tokenizers 0.23 checks a `TemplateProcessing`
/// post-processor only when it is built in code, so one read from a file whose single-sequence template names
/// sequence B made encoding index past the one sequence (a panic). That, a special token missing from its
/// `special_tokens`, and a special token with more ids than tokens are refused at load, alone or inside a
/// `Sequence` of processors; the tiny tokenizer's own processors still load.
#[test]
fn a_template_post_processor_that_encoding_would_index_past_is_refused() {
    use loom_wasm::llm::tokenizer::Tokenizer;
    let good = tiny("tokenizer.json");
    let mut doc: serde_json::Value = serde_json::from_slice(&good).unwrap();
    let bos = serde_json::json!({"SpecialToken": {"id": "<s>", "type_id": 0}});
    let seq = |id: &str| serde_json::json!({"Sequence": {"id": id, "type_id": 0}});
    let specials = serde_json::json!({"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}});
    let template = |single: serde_json::Value, specials: &serde_json::Value| {
        serde_json::json!({"type": "TemplateProcessing", "single": single,
            "pair": [bos.clone(), seq("A"), seq("B")], "special_tokens": specials})
    };
    let ok = template(serde_json::json!([bos.clone(), seq("A")]), &specials);
    let cases = [
        template(serde_json::json!([bos.clone(), seq("B")]), &specials),
        template(
            serde_json::json!([seq("A"), {"SpecialToken": {"id": "</s>", "type_id": 0}}]),
            &specials,
        ),
        template(
            serde_json::json!([bos.clone(), seq("A")]),
            &serde_json::json!({"<s>": {"id": "<s>", "ids": [1, 2], "tokens": ["<s>"]}}),
        ),
    ];
    for processor in cases {
        // Post-processors are an untagged enum too: without its "type" the node is still a TemplateProcessing.
        let mut untyped = processor.clone();
        untyped.as_object_mut().unwrap().remove("type");
        for wrapped in [
            processor.clone(),
            serde_json::json!({"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": true,
                "trim_offsets": false, "use_regex": true}, processor.clone()]}),
            untyped,
        ] {
            doc["post_processor"] = wrapped.clone();
            let e = Tokenizer::from_json(&serde_json::to_vec(&doc).unwrap())
                .err()
                .expect("refused");
            assert_eq!(e.code(), "bad_format", "{wrapped}: {e}");
            assert!(e.to_string().contains("TemplateProcessing"), "{e}");
        }
    }
    doc["post_processor"] = ok;
    let t = Tokenizer::from_json(&serde_json::to_vec(&doc).unwrap()).unwrap();
    assert!(!t.encode("hi", true).unwrap().is_empty());
    assert!(Tokenizer::from_json(&good).is_ok());
}
