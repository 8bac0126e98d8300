//! LLM tokenizers on HF `tokenizers`: from a `tokenizer.json` (optionally with `tokenizer_config.json`) or from
//! the `tokenizer.ggml.*` vocabulary of a GGUF file.
//!
//! A GGUF vocabulary is turned into the tokenizer HF would build for the same model:
//! - `gpt2`: byte-level BPE over `tokenizer.ggml.merges`, pre-tokenized with llama.cpp's regexes for
//!   `tokenizer.ggml.pre` (see [`pre_tokenizer_regexes`]); an unknown `pre` is an `unsupported` error.
//! - `llama` (SentencePiece): BPE whose merges come from the vocabulary ordered by score (HF's
//!   `SentencePieceExtractor`), byte fallback to `<0xXX>` tokens, spaces as `▁` and a prefix space when
//!   `tokenizer.ggml.add_space_prefix` (default true).
//!
//! Token types 3 (control) become special added tokens, 4 (user-defined) plain added tokens, so both are matched
//! whole in text. BOS/EOS are added by [`Tokenizer::encode`] itself (HF's post-processor is not used): the
//! tokenizer's own padding and truncation are switched off, so encoding never grows beyond its input.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Deserialize;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
};

use crate::error::{LoomError, Result};
use crate::formats::gguf::{GgufHeader, GgufValue};

/// GGUF `token_type` values (llama.cpp's `llama_token_type`).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// GGUF metadata value type ids of array items.
const GGUF_TYPE_U32: u32 = 4;
const GGUF_TYPE_I32: u32 = 5;
const GGUF_TYPE_F32: u32 = 6;
const GGUF_TYPE_STRING: u32 = 8;

/// SentencePiece's space marker.
const SPM_SPACE: &str = "\u{2581}";

fn tok_err(msg: impl Into<String>) -> LoomError {
    LoomError::Tokenizer(msg.into())
}

/// A text ↔ token-id tokenizer with the model's special tokens and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    vocab_size: usize,
    special_ids: HashSet<u32>,
    bos: Option<u32>,
    eos: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// A tokenizer from a HF `tokenizer.json`. BOS is added when its post-processor template starts with a
    /// special token (as Llama's does); EOS ids are unknown without `tokenizer_config.json`.
    pub fn from_json(bytes: &[u8]) -> Result<Tokenizer> {
        Self::from_json_with_config(bytes, None)
    }

    /// A tokenizer from a HF folder's `tokenizer.json` and `tokenizer_config.json`: the config's `bos_token`,
    /// `eos_token`, `add_bos_token`, `add_eos_token` and `chat_template` override what `tokenizer.json` implies.
    pub fn from_json_with_config(tokenizer_json: &[u8], tokenizer_config_json: Option<&[u8]>) -> Result<Tokenizer> {
        // tokenizers 0.23 panics (`expect("Helper")`) on a `decoder` value that is not valid JSON (bad syntax, a
        // string with invalid UTF-8 or a bad escape), so the whole file is parsed first, strings included
        // (`IgnoredAny` would skip them unchecked): on valid JSON its decoder fallback (any value) always matches.
        let doc = serde_json::from_slice::<serde_json::Value>(tokenizer_json)
            .map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
        let checks: [(&str, &str, ComponentCheck); 4] = [
            ("normalizer", "normalizers", check_normalizer),
            ("pre_tokenizer", "pretokenizers", check_pre_tokenizer),
            ("decoder", "decoders", check_decoder),
            ("post_processor", "processors", check_post_processor),
        ];
        for (key, list, check) in checks {
            if let Some(node) = doc.get(key) {
                each_component(node, list, check)?;
            }
        }
        if let Some(model) = doc.get("model") {
            check_bpe_merges(model)?;
        }
        let inner =
            tokenizers::Tokenizer::from_bytes(tokenizer_json).map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
        let (template_bos, template_eos) = post_processor_specials(tokenizer_json)?;
        let vocab_size = inner
            .get_vocab(true)
            .values()
            .map(|&id| id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut tokenizer = Tokenizer::wrap(inner, vocab_size);
        let lookup = |t: &str| tokenizer.inner.token_to_id(t);
        let mut bos = template_bos.as_deref().and_then(lookup);
        let mut eos = template_eos.as_deref().and_then(lookup);
        let mut add_bos = bos.is_some();
        let mut add_eos = eos.is_some();
        let mut chat_template = None;
        if let Some(config_bytes) = tokenizer_config_json {
            let config = TokenizerConfig::parse(config_bytes)?;
            let required = |name: &str, token: &str| {
                lookup(token).ok_or_else(|| {
                    tok_err(format!(
                        "tokenizer_config.json: {name} {token:?} is not in the vocabulary"
                    ))
                })
            };
            if let Some(token) = &config.bos_token {
                bos = Some(required("bos_token", token)?);
            }
            if let Some(token) = &config.eos_token {
                eos = Some(required("eos_token", token)?);
            }
            add_bos = config.add_bos_token.unwrap_or(add_bos);
            add_eos = config.add_eos_token.unwrap_or(add_eos);
            chat_template = config.chat_template;
        }
        tokenizer.bos = bos;
        tokenizer.eos = eos.into_iter().collect();
        tokenizer.add_bos = add_bos && bos.is_some();
        tokenizer.add_eos = add_eos && eos.is_some();
        tokenizer.chat_template = chat_template;
        Ok(tokenizer)
    }

    /// A tokenizer from a GGUF file's `tokenizer.ggml.*` vocabulary and `tokenizer.chat_template`.
    pub fn from_gguf(header: &GgufHeader) -> Result<Tokenizer> {
        let model =
            string_key(header, "tokenizer.ggml.model")?.ok_or_else(|| tok_err("GGUF has no tokenizer.ggml.model"))?;
        let tokens = string_array(header, "tokenizer.ggml.tokens")?
            .ok_or_else(|| tok_err("GGUF has no tokenizer.ggml.tokens"))?;
        if tokens.is_empty() {
            return Err(tok_err("tokenizer.ggml.tokens is empty"));
        }
        // A piece listed twice gives one text two ids (llama.cpp refuses such a vocabulary too).
        let mut seen = std::collections::HashSet::with_capacity(tokens.len());
        if let Some((id, piece)) = tokens.iter().enumerate().find(|(_, t)| !seen.insert(**t)) {
            return Err(tok_err(format!(
                "tokenizer.ggml.tokens lists {piece:?} twice (again at id {id})"
            )));
        }
        let n = tokens.len();
        let token_types = int_array(header, "tokenizer.ggml.token_type", n)?;
        let spm = match model {
            "llama" => true,
            "gpt2" => false,
            other => return Err(LoomError::Unsupported(format!("GGUF tokenizer model {other:?}"))),
        };
        let pre = string_key(header, "tokenizer.ggml.pre")?.unwrap_or("default");
        let mut inner = if spm {
            let scores = float_array(header, "tokenizer.ggml.scores", n)?;
            let add_space_prefix = bool_key(header, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
            let unk = id_key(header, "tokenizer.ggml.unknown_token_id", n)?.unwrap_or(0);
            spm_tokenizer(
                &tokens,
                scores.as_deref(),
                tokens.get(unk as usize).copied(),
                add_space_prefix,
            )?
        } else {
            let merges = string_array(header, "tokenizer.ggml.merges")?
                .ok_or_else(|| tok_err("GGUF gpt2 vocabulary has no tokenizer.ggml.merges"))?;
            let (regexes, ignore_merges, _) = pre_tokenizer_regexes(pre)?;
            byte_level_tokenizer(&tokens, &merges, regexes, ignore_merges)?
        };
        // Control and user-defined tokens are matched whole in text, as llama.cpp and HF do.
        if let Some(types) = &token_types {
            let added: Vec<AddedToken> = types
                .iter()
                .zip(&tokens)
                .filter(|(t, _)| **t == TOKEN_TYPE_CONTROL || **t == TOKEN_TYPE_USER_DEFINED)
                .map(|(t, s)| AddedToken::from(s.to_string(), *t == TOKEN_TYPE_CONTROL).normalized(false))
                .collect();
            inner
                .add_tokens(added)
                .map_err(|e| tok_err(format!("added tokens: {e}")))?;
        }
        // Every id, added tokens included, indexes `tokens`.
        let mut tokenizer = Tokenizer::wrap(inner, n);
        // llama.cpp's defaults: SentencePiece vocabularies have BOS 1 / EOS 2 and add BOS; BPE ones add BOS
        // only for the Llama-3 family (the third value of `pre_tokenizer_regexes`).
        let default_add_bos = if spm { true } else { pre_tokenizer_regexes(pre)?.2 };
        let bos =
            id_key(header, "tokenizer.ggml.bos_token_id", n)?.or(if spm { Some(1).filter(|_| n > 1) } else { None });
        let mut eos: Vec<u32> = Vec::new();
        let default_eos = if spm { Some(2).filter(|_| n > 2) } else { None };
        for key in [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ] {
            let id = id_key(header, key, n)?.or(if key.ends_with("eos_token_id") {
                default_eos
            } else {
                None
            });
            if let Some(id) = id.filter(|id| !eos.contains(id)) {
                eos.push(id);
            }
        }
        tokenizer.add_bos =
            bos.is_some() && bool_key(header, "tokenizer.ggml.add_bos_token")?.unwrap_or(default_add_bos);
        tokenizer.add_eos = !eos.is_empty() && bool_key(header, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
        tokenizer.bos = bos;
        tokenizer.eos = eos;
        tokenizer.chat_template = string_key(header, "tokenizer.chat_template")?.map(str::to_string);
        Ok(tokenizer)
    }

    /// Wraps a loaded HF tokenizer of `vocab_size` ids: padding and truncation off (they could make encodings
    /// arbitrarily long), special ids read off. BOS/EOS and the template are filled in by the caller.
    fn wrap(mut inner: tokenizers::Tokenizer, vocab_size: usize) -> Tokenizer {
        inner.with_padding(None);
        let _ = inner.with_truncation(None);
        let special_ids = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        Tokenizer {
            inner,
            vocab_size,
            special_ids,
            bos: None,
            eos: Vec::new(),
            add_bos: false,
            add_eos: false,
            chat_template: None,
        }
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) are recognised as such, as HF
    /// does; `add_special_tokens` adds BOS (and EOS) where the model asks for them ([`Tokenizer::add_bos`]).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| tok_err(format!("encode: {e}")))?;
        let ids = encoding.get_ids();
        let mut out = Vec::with_capacity(ids.len() + 2);
        if add_special_tokens && self.add_bos {
            out.extend(self.bos);
        }
        out.extend_from_slice(ids);
        if add_special_tokens && self.add_eos {
            out.extend(self.eos.first());
        }
        Ok(out)
    }

    /// The text of `ids`; ids outside the vocabulary are an `invalid_input` error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(LoomError::InvalidInput(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.vocab_size
            )));
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| tok_err(format!("decode: {e}")))
    }

    /// Rows of the vocabulary: the highest id + 1, special and reserved tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// Ids that end generation: EOS first, then EOT/EOM where the GGUF names them.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos.clone()
    }

    /// Whether [`Tokenizer::encode`] with `add_special_tokens` puts BOS first.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    pub fn bos_token(&self) -> Option<String> {
        self.bos.and_then(|id| self.id_to_token(id))
    }

    pub fn eos_token(&self) -> Option<String> {
        self.eos.first().and_then(|&id| self.id_to_token(id))
    }

    /// Whether `id` is a special (control) token, which `decode(_, true)` leaves out.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The tokenizer as an HF folder holds it: `tokenizer.json` (tokenizers' own serialisation) and
    /// `tokenizer_config.json` (BOS, EOS, whether each is added, the chat template), which
    /// [`Tokenizer::from_json_with_config`] reads back as this tokenizer. A `.entity` carries no vocabulary: these
    /// go beside it.
    pub fn hf_files(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let json = self
            .inner
            .to_string(false)
            .map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
        let config = serde_json::json!({
            "bos_token": self.bos_token(),
            "eos_token": self.eos_token(),
            "add_bos_token": self.add_bos,
            "add_eos_token": self.add_eos,
            "chat_template": self.chat_template,
        });
        Ok((json.into_bytes(), config.to_string().into_bytes()))
    }

    /// Each of the first `rows` ids as the bytes it adds to decoded text, for a grammar engine: byte-level tokens
    /// through GPT-2's byte map, SentencePiece `<0xNN>` byte tokens as their byte and `▁` as a space, added tokens
    /// as their text. Special tokens are `0xFF` then their text (llguidance's marker: they never match grammar
    /// text); ids past the vocabulary (padding rows) are empty, which a grammar never allows.
    pub fn token_bytes(&self, rows: usize) -> Vec<Vec<u8>> {
        self.bytes_of(&(0..rows as u32).collect::<Vec<u32>>())
    }

    /// What each of `ids` adds to decoded text, as [`Tokenizer::token_bytes`] reads it.
    pub fn bytes_of(&self, ids: &[u32]) -> Vec<Vec<u8>> {
        let byte_level = self.inner.get_decoder().is_some_and(has_byte_level);
        let from_unicode: HashMap<char, u8> = gpt2_byte_chars().into_iter().map(|(b, c)| (c, b)).collect();
        let added = self.inner.get_added_tokens_decoder();
        ids.iter()
            .map(|&id| {
                if let Some(t) = added.get(&id) {
                    let marker = if t.special { &[0xFFu8][..] } else { &[] };
                    return [marker, t.content.as_bytes()].concat();
                }
                let Some(token) = self.inner.id_to_token(id) else {
                    return Vec::new();
                };
                if byte_level {
                    let mut out = Vec::with_capacity(token.len());
                    for c in token.chars() {
                        match from_unicode.get(&c) {
                            Some(&b) => out.push(b),
                            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    return out;
                }
                match token.strip_prefix("<0x").and_then(|t| t.strip_suffix('>')) {
                    Some(hex) if hex.len() == 2 => match u8::from_str_radix(hex, 16) {
                        Ok(b) => vec![b],
                        Err(_) => token.into_bytes(),
                    },
                    _ => token.replace(SPM_SPACE, " ").into_bytes(),
                }
            })
            .collect()
    }

    /// The Jinja chat template shipped with the tokenizer, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Incremental decoding of generated ids (special tokens skipped).
    pub fn stream(self: &Arc<Self>) -> TokenStream {
        TokenStream {
            tokenizer: self.clone(),
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }
}

/// Whether `d` (or a decoder of its sequence) maps GPT-2's byte characters back to bytes.
fn has_byte_level(d: &DecoderWrapper) -> bool {
    match d {
        DecoderWrapper::ByteLevel(_) => true,
        DecoderWrapper::Sequence(s) => s.get_decoders().iter().any(has_byte_level),
        _ => false,
    }
}

/// A UTF-8 character spans at most 4 bytes, so at most 4 tokens can hold back one incomplete character; a
/// replacement character still trailing after that many is real and gets emitted.
const MAX_PENDING_TOKENS: usize = 4;

/// Incremental decoding: each [`TokenStream::push`] returns the text the new id completes. Text is decoded over
/// a short window of recent ids (the ids since the last emitted text plus the ones before it), so that decoders
/// that depend on context (SentencePiece's leading space) and byte tokens that only form a character together
/// come out as the full decode would.
pub struct TokenStream {
    tokenizer: Arc<Tokenizer>,
    ids: Vec<u32>,
    /// Start of the window: the first id of the last emitted chunk.
    prefix_offset: usize,
    /// End of the emitted ids.
    read_offset: usize,
}

impl TokenStream {
    /// The new text `id` completes: never half a character, holding bytes back until they form one.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.tokenizer.decode(&[id], true)?; // rejects ids outside the vocabulary before they enter the window
        self.ids.push(id);
        let prefix = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..self.read_offset], true)?;
        let full = self.tokenizer.decode(&self.ids[self.prefix_offset..], true)?;
        let pending = self.ids.len() - self.read_offset;
        if full.ends_with('\u{FFFD}') && pending < MAX_PENDING_TOKENS {
            return Ok(String::new());
        }
        let start = common_prefix_len(&prefix, &full);
        if full.len() <= start {
            return Ok(String::new());
        }
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        // Keep the window short: the ids before `prefix_offset` are no longer needed.
        self.ids.drain(..self.prefix_offset);
        self.read_offset -= self.prefix_offset;
        self.prefix_offset = 0;
        Ok(full[start..].to_string())
    }

    /// The text still held back (an incomplete character shows as U+FFFD); the stream starts afresh after it.
    pub fn finish(&mut self) -> String {
        let prefix = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..self.read_offset], true)
            .unwrap_or_default();
        let full = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..], true)
            .unwrap_or_default();
        self.ids.clear();
        self.prefix_offset = 0;
        self.read_offset = 0;
        full[common_prefix_len(&prefix, &full)..].to_string()
    }
}

/// Length in bytes of the longest common prefix of `a` and `b` that ends on a character boundary.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map(|((i, _), _)| i)
        .unwrap_or_else(|| a.len().min(b.len()))
}

// tokenizers reads a component without a "type" as an untagged enum: the node becomes whichever variant its fields
// fit (the fuzzer's second Strip crash had its "type" key mangled). So the checks below go by fields, on every node
// of a chain.

type ComponentCheck = fn(&serde_json::Value) -> Result<()>;

/// Calls `check` on `node` and on every component of its `list` (a `Sequence`'s), at any depth.
fn each_component(node: &serde_json::Value, list: &str, check: ComponentCheck) -> Result<()> {
    for inner in node
        .get(list)
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
    {
        each_component(inner, list, check)?;
    }
    check(node)
}

/// Refuses SentencePiece's `Precompiled` normalizer: tokenizers 0.23 walks its charsmap's trie and slices its
/// strings without bounds checks, and sizes a buffer by the charsmap's own length field, so a bad charsmap panics
/// or allocates gigabytes. The Llama-family tokenizers this runtime serves do not use it.
fn check_normalizer(normalizer: &serde_json::Value) -> Result<()> {
    if normalizer.get("precompiled_charsmap").is_some() {
        return Err(LoomError::Unsupported(
            "tokenizer.json: a Precompiled (SentencePiece charsmap) normalizer".into(),
        ));
    }
    Ok(())
}

/// Refuses a `FixedLength` pre-tokenizer of length 0 (tokenizers 0.23 splits the text into chunks of that
/// length, which panics).
fn check_pre_tokenizer(pre_tokenizer: &serde_json::Value) -> Result<()> {
    if pre_tokenizer.get("length").and_then(serde_json::Value::as_u64) == Some(0) {
        return Err(tok_err("tokenizer.json: a FixedLength pre-tokenizer of length 0"));
    }
    Ok(())
}

/// Refuses the decoders tokenizers 0.23 cannot run on every token: a `Strip` with `stop > 0` indexes before the
/// token's first character when the token is shorter than `stop` and made of its `content` (an empty decode
/// included), and panics (found by `fuzz/fuzz_targets/tokenizer_template.rs`). HF's converters write `Strip` with
/// `stop: 0` only (Llama's leading space).
fn check_decoder(decoder: &serde_json::Value) -> Result<()> {
    let stop = decoder.get("stop").and_then(serde_json::Value::as_u64).unwrap_or(0);
    if stop > 0 {
        return Err(tok_err(format!(
            "tokenizer.json: a Strip decoder with stop {stop} is not supported (only stop 0)"
        )));
    }
    Ok(())
}

/// Refuses the `TemplateProcessing` post-processors tokenizers 0.23 indexes out of bounds with when it encodes
/// (it checks them only when built in code, not when read): a single-sequence template that names sequence B (found
/// by `fuzz/fuzz_targets/tokenizer_template.rs`), a special token the `special_tokens` map lacks, or one whose ids
/// and tokens differ in number.
fn check_post_processor(processor: &serde_json::Value) -> Result<()> {
    use serde_json::Value;
    let bad = |what: String| {
        Err(tok_err(format!(
            "tokenizer.json: TemplateProcessing post-processor: {what}"
        )))
    };
    let specials = processor.get("special_tokens").and_then(Value::as_object);
    for (name, template) in [("single", processor.get("single")), ("pair", processor.get("pair"))] {
        for piece in template.and_then(Value::as_array).into_iter().flatten() {
            if name == "single" && piece.pointer("/Sequence/id").and_then(Value::as_str) == Some("B") {
                return bad("its single-sequence template names sequence B".into());
            }
            if let Some(id) = piece.pointer("/SpecialToken/id").and_then(Value::as_str) {
                if !specials.is_some_and(|s| s.contains_key(id)) {
                    return bad(format!("special token {id:?} is not in its special_tokens"));
                }
            }
        }
    }
    for (id, token) in specials.into_iter().flatten() {
        let len = |key: &str| token.get(key).and_then(Value::as_array).map(Vec::len);
        if len("ids") != len("tokens") {
            return bad(format!(
                "special token {id:?} has {:?} ids for {:?} tokens",
                len("ids"),
                len("tokens")
            ));
        }
    }
    Ok(())
}

/// Refuses a BPE merge whose result (left, then right without the continuing-subword prefix) is not a token.
/// tokenizers 0.23 refuses those too, but only after copying the pair into a buffer as long as the longest token:
/// a result longer than every token overruns it (a panic, found by `fuzz/fuzz_targets/tokenizer_template.rs`), and
/// a right part shorter than the prefix underflows.
fn check_bpe_merges(model: &serde_json::Value) -> Result<()> {
    use serde_json::Value;
    let vocab = model.get("vocab").and_then(Value::as_object);
    let (Some(vocab), Some(merges)) = (vocab, model.get("merges").and_then(Value::as_array)) else {
        return Ok(());
    };
    let prefix = model
        .get("continuing_subword_prefix")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut joined = Vec::new();
    for merge in merges {
        let (left, right) = match merge {
            Value::String(line) if !line.starts_with("#version") => match line.split_once(' ') {
                Some(pair) => pair,
                None => continue, // tokenizers refuses a line that is not two parts
            },
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(l), Value::String(r)] => (l.as_str(), r.as_str()),
                _ => continue,
            },
            _ => continue,
        };
        // Only a merge of two tokens reaches the copy.
        if !vocab.contains_key(left) || !vocab.contains_key(right) {
            continue;
        }
        joined.clear();
        joined.extend_from_slice(left.as_bytes());
        let made = right.as_bytes().get(prefix.len()..).and_then(|r| {
            joined.extend_from_slice(r);
            std::str::from_utf8(&joined).ok()
        });
        if !made.is_some_and(|token| vocab.contains_key(token)) {
            return Err(tok_err(format!(
                "tokenizer.json: BPE merge {left:?} {right:?} makes a token that is not in the vocabulary"
            )));
        }
    }
    Ok(())
}

/// The special tokens HF's post-processor puts first and last for a single sequence, read from `tokenizer.json`'s
/// `post_processor` (a `TemplateProcessing`, possibly inside a `Sequence`).
fn post_processor_specials(tokenizer_json: &[u8]) -> Result<(Option<String>, Option<String>)> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        post_processor: Option<serde_json::Value>,
    }
    let head: Head = serde_json::from_slice(tokenizer_json).map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
    let mut processors = vec![];
    if let Some(pp) = &head.post_processor {
        match pp.get("type").and_then(|t| t.as_str()) {
            Some("Sequence") => {
                if let Some(list) = pp.get("processors").and_then(|p| p.as_array()) {
                    processors.extend(list.iter());
                }
            }
            _ => processors.push(pp),
        }
    }
    let special_of = |piece: Option<&serde_json::Value>| {
        piece
            .and_then(|p| p.get("SpecialToken"))
            .and_then(|s| s.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_string)
    };
    for pp in processors {
        if pp.get("type").and_then(|t| t.as_str()) != Some("TemplateProcessing") {
            continue;
        }
        if let Some(single) = pp.get("single").and_then(|s| s.as_array()) {
            let first = special_of(single.first());
            let last = if single.len() > 1 {
                special_of(single.last())
            } else {
                None
            };
            return Ok((first, last));
        }
    }
    Ok((None, None))
}

/// The fields of `tokenizer_config.json` the tokenizer uses. Wrong types are errors; absent or null ones are
/// `None`.
struct TokenizerConfig {
    bos_token: Option<String>,
    eos_token: Option<String>,
    add_bos_token: Option<bool>,
    add_eos_token: Option<bool>,
    chat_template: Option<String>,
}

impl TokenizerConfig {
    fn parse(bytes: &[u8]) -> Result<TokenizerConfig> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| crate::error::json_err("tokenizer_config.json", e))?;
        let obj = value
            .as_object()
            .ok_or_else(|| tok_err("tokenizer_config.json is not a JSON object"))?;
        let wrong = |key: &str, want: &str| tok_err(format!("tokenizer_config.json: {key} is not {want}"));
        // A token is a string or an AddedToken object {"content": ...}.
        let token = |key: &str| -> Result<Option<String>> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                Some(serde_json::Value::Object(o)) => match o.get("content") {
                    Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                    _ => Err(wrong(key, "a string or {\"content\": string}")),
                },
                Some(_) => Err(wrong(key, "a string or {\"content\": string}")),
            }
        };
        let flag = |key: &str| -> Result<Option<bool>> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(wrong(key, "a boolean")),
            }
        };
        // A string, or a list of {name, template} where "default" is the one used.
        let chat_template = match obj.get("chat_template") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(list)) => {
                let mut found = None;
                for item in list {
                    let name = item.get("name").and_then(|n| n.as_str());
                    let template = item.get("template").and_then(|t| t.as_str());
                    match (name, template) {
                        (Some("default"), Some(t)) => found = Some(t.to_string()),
                        (Some(_), Some(_)) => {}
                        _ => return Err(wrong("chat_template", "a list of {name, template} strings")),
                    }
                }
                found
            }
            Some(_) => return Err(wrong("chat_template", "a string or a list of {name, template}")),
        };
        Ok(TokenizerConfig {
            bos_token: token("bos_token")?,
            eos_token: token("eos_token")?,
            add_bos_token: flag("add_bos_token")?,
            add_eos_token: flag("add_eos_token")?,
            chat_template,
        })
    }
}

/// The split regexes llama.cpp applies (in order) before byte-level BPE for `tokenizer.ggml.pre`, whether it
/// takes whole words found in the vocabulary before merging (`ignore_merges`), and whether BOS is added by
/// default (llama-vocab.cpp, llama.cpp as vendored by llama-cpp-python 0.3.36).
pub fn pre_tokenizer_regexes(pre: &str) -> Result<(&'static [&'static str], bool, bool)> {
    const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
    const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"];
    // Written as in llama.cpp; the \u{..} escapes keep Greek letters that Unicode normalization would change.
    const DEEPSEEK_LLM: &[&str] = &[
        "[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1f7d}ᾀ-ᾴᾶ-ᾼ\u{1fbe}ῂ-ῄῆ-ῌῐ-\u{1fd3}ῖ-\u{1fdb}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212a}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
        "\\s+$",
        "[一-龥ࠀ-一가-퟿]+",
        "\\p{N}+",
    ];
    const DEEPSEEK_CODER: &[&str] = &["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"];
    const FALCON: &[&str] = &[
        r"[\p{P}\$\+<=>\^~\|`]+",
        r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        "[0-9][0-9][0-9]",
    ];
    const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
    Ok(match pre {
        "default" => (DEFAULT, false, false),
        "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" | "jina-es" | "jina-de" | "jina-v2-es" | "jina-v2-de"
        | "gigachat" => (&[GPT2], false, false),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" => (&[LLAMA3], true, true),
        "dbrx" | "smaug-bpe" => (&[LLAMA3], false, false),
        "chatglm-bpe" => (&[LLAMA3], false, false),
        "glm4" => (&[LLAMA3], true, false),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" => (&[QWEN2], false, false),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            (&[r"\p{N}", GPT2], false, false)
        }
        "deepseek-llm" => (DEEPSEEK_LLM, false, false),
        "deepseek-coder" => (DEEPSEEK_CODER, false, false),
        "falcon" => (FALCON, false, false),
        "poro-chat" | "bloom" | "gpt3-finnish" => (&[BLOOM], false, false),
        "viking" => (&[BLOOM, r"\p{N}"], false, false),
        other => {
            return Err(LoomError::Unsupported(format!(
                "GGUF pre-tokenizer {other:?} (tokenizer.ggml.pre)"
            )))
        }
    })
}

/// Byte-level BPE (GPT-2 style) over GGUF tokens and "left right" merges, split first by `regexes`.
fn byte_level_tokenizer(
    tokens: &[&str],
    merges: &[&str],
    regexes: &[&str],
    ignore_merges: bool,
) -> Result<tokenizers::Tokenizer> {
    let vocab = vocab_map(tokens);
    let mut pairs = Vec::with_capacity(merges.len());
    let mut joined = String::new(); // one buffer for every merge's result, not an allocation each
    for merge in merges {
        // llama.cpp splits at the first space after the first byte (a token may start with a space).
        let split = merge.bytes().skip(1).position(|b| b == b' ').map(|i| i + 1);
        let (left, right) = match split {
            Some(i) => (&merge[..i], &merge[i + 1..]),
            None => return Err(tok_err(format!("merge {merge:?} is not \"left right\""))),
        };
        // A merge names two tokens and makes a token (HF's BPE refuses the vocabulary otherwise; llama.cpp would
        // fall back to bytes mid-word): a file that breaks this is refused, not tokenized some other way.
        joined.clear();
        joined.push_str(left);
        joined.push_str(right);
        if let Some(missing) = [left, right, joined.as_str()]
            .into_iter()
            .find(|t| !vocab.contains_key(*t))
        {
            return Err(tok_err(format!(
                "merge {merge:?}: {missing:?} is not a token of the vocabulary"
            )));
        }
        pairs.push((left.to_string(), right.to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| tok_err(format!("BPE: {e}")))?;
    let mut pre: Vec<PreTokenizerWrapper> = Vec::with_capacity(regexes.len() + 1);
    for regex in regexes {
        let split = Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| tok_err(format!("pre-tokenizer regex: {e}")))?;
        pre.push(split.into());
    }
    pre.push(ByteLevel::new(false, true, false).into());
    let mut inner = tokenizers::Tokenizer::new(ModelWrapper::BPE(bpe));
    inner.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(PreSequence::new(pre))));
    inner.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevelDecoder::default())));
    Ok(inner)
}

/// SentencePiece as HF's Llama converter builds it: BPE with byte fallback, merges from the vocabulary by score.
fn spm_tokenizer(
    tokens: &[&str],
    scores: Option<&[f32]>,
    unk: Option<&str>,
    add_space_prefix: bool,
) -> Result<tokenizers::Tokenizer> {
    let vocab = vocab_map(tokens);
    let merges = spm_merges(tokens, scores, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk.to_string());
    }
    let bpe = builder.build().map_err(|e| tok_err(format!("BPE: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(ModelWrapper::BPE(bpe));
    let replace = Replace::new(" ", SPM_SPACE).map_err(|e| tok_err(e.to_string()))?;
    let normalizer = if add_space_prefix {
        NormalizerWrapper::Sequence(tokenizers::normalizers::Sequence::new(vec![
            NormalizerWrapper::Prepend(Prepend::new(SPM_SPACE.to_string())),
            NormalizerWrapper::Replace(replace),
        ]))
    } else {
        NormalizerWrapper::Replace(replace)
    };
    inner
        .with_normalizer(Some(normalizer))
        .map_err(|e| tok_err(e.to_string()))?;
    let mut decoders = vec![
        DecoderWrapper::Replace(Replace::new(SPM_SPACE, " ").map_err(|e| tok_err(e.to_string()))?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if add_space_prefix {
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    inner.with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(decoders))));
    Ok(inner)
}

/// HF's `SentencePieceExtractor`: every split of a piece into two pieces is a merge, ranked by the piece's score
/// (highest first; pieces without scores rank by id), ties by the ids of the two parts.
fn spm_merges(tokens: &[&str], scores: Option<&[f32]>, vocab: &Vocab) -> Vec<(String, String)> {
    let mut merges: Vec<(u32, u32, usize, &str, &str)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        let start = merges.len();
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                merges.push((l, r, id, left, right));
            }
        }
        merges[start..].sort_by_key(|m| (m.0, m.1));
    }
    // A stable sort keeps the order of equal scores, as Python's `sorted` does.
    match scores {
        Some(scores) => merges.sort_by(|a, b| scores[b.2].total_cmp(&scores[a.2])),
        None => merges.sort_by_key(|m| m.2),
    }
    merges
        .into_iter()
        .map(|(_, _, _, l, r)| (l.to_string(), r.to_string()))
        .collect()
}

/// Token → id; a token listed twice keeps its first id, as llama.cpp's lookup does.
fn vocab_map(tokens: &[&str]) -> Vocab {
    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate().rev() {
        vocab.insert(token.to_string(), id as u32);
    }
    vocab
}

fn string_key<'a>(header: &'a GgufHeader, key: &str) -> Result<Option<&'a str>> {
    match header.get(key) {
        None => Ok(None),
        Some(GgufValue::String(s)) => Ok(Some(s)),
        Some(_) => Err(tok_err(format!("{key} is not a string"))),
    }
}

fn bool_key(header: &GgufHeader, key: &str) -> Result<Option<bool>> {
    match header.get(key) {
        None => Ok(None),
        Some(GgufValue::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(tok_err(format!("{key} is not a boolean"))),
    }
}

/// A token id key, which must lie inside the vocabulary of `n` tokens.
fn id_key(header: &GgufHeader, key: &str, n: usize) -> Result<Option<u32>> {
    match header.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(id) if (id as usize) < n && id <= u32::MAX as u64 => Ok(Some(id as u32)),
            Some(id) => Err(tok_err(format!("{key} = {id} is outside the vocabulary of {n}"))),
            None => Err(tok_err(format!("{key} is not an integer"))),
        },
    }
}

fn string_array<'a>(header: &'a GgufHeader, key: &str) -> Result<Option<Vec<&'a str>>> {
    match header.get(key) {
        None => Ok(None),
        Some(GgufValue::Array(GGUF_TYPE_STRING, items)) => items
            .iter()
            .map(|v| match v {
                GgufValue::String(s) => Ok(s.as_str()),
                _ => Err(tok_err(format!("{key} holds a non-string"))),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Some(_) => Err(tok_err(format!("{key} is not an array of strings"))),
    }
}

/// An integer array (`token_type`), which must have one entry per token.
fn int_array(header: &GgufHeader, key: &str, n: usize) -> Result<Option<Vec<i64>>> {
    let items = match header.get(key) {
        None => return Ok(None),
        Some(GgufValue::Array(GGUF_TYPE_I32 | GGUF_TYPE_U32, items)) => items,
        Some(_) => return Err(tok_err(format!("{key} is not an array of 32-bit integers"))),
    };
    if items.len() != n {
        return Err(tok_err(format!("{key} has {} entries for {n} tokens", items.len())));
    }
    items
        .iter()
        .map(|v| match v {
            GgufValue::I32(x) => Ok(i64::from(*x)),
            GgufValue::U32(x) => Ok(i64::from(*x)),
            _ => Err(tok_err(format!("{key} holds a non-integer"))),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// A float array (`scores`), which must have one entry per token.
fn float_array(header: &GgufHeader, key: &str, n: usize) -> Result<Option<Vec<f32>>> {
    let items = match header.get(key) {
        None => return Ok(None),
        Some(GgufValue::Array(GGUF_TYPE_F32, items)) => items,
        Some(_) => return Err(tok_err(format!("{key} is not an array of f32"))),
    };
    if items.len() != n {
        return Err(tok_err(format!("{key} has {} entries for {n} tokens", items.len())));
    }
    items
        .iter()
        .map(|v| match v {
            GgufValue::F32(x) => Ok(*x),
            _ => Err(tok_err(format!("{key} holds a non-f32"))),
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// GPT-2's byte ↔ character map (`bytes_to_unicode`): printable bytes stand for themselves, the others for the
/// characters from U+0100 on, in byte order.
fn gpt2_byte_chars() -> Vec<(u8, char)> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (b, char::from(b))
            } else {
                let c = char::from_u32(next).expect("below U+0200");
                next += 1;
                (b, c)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pre_tokenizer_regex_compiles() {
        let names = [
            "default",
            "gpt-2",
            "llama-bpe",
            "dbrx",
            "chatglm-bpe",
            "glm4",
            "qwen2",
            "smollm",
            "deepseek-llm",
            "deepseek-coder",
            "falcon",
            "bloom",
            "viking",
        ];
        for name in names {
            let (regexes, _, _) = pre_tokenizer_regexes(name).unwrap();
            for regex in regexes {
                let split = Split::new(
                    SplitPattern::Regex(regex.to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                );
                assert!(split.is_ok(), "{name}: {regex}");
            }
        }
    }
}
