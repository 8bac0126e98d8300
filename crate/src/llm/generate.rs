//! Generation over any [`Engine`]: a prompt prefilled in one batched pass (reusing whatever prefix the KV cache
//! already holds), then tokens sampled one at a time and streamed as text, until EOS, a stop string, the token
//! limit, the context limit or cancellation. [`Session`] adds multi-turn chat through the model's template.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config::Arch;
#[cfg(not(target_arch = "wasm32"))]
use super::constrain::{Constraint, Grammar, GrammarVocab};
use super::engine::Engine;
use super::model::{no_tokenizer, LlmModel, ModelFormat};
use super::sampler::{SampleArgs, Sampler, SamplingParams};
use super::saved::{Fingerprint, SavedChat};
use super::template::{ChatMessage, ChatTemplate};
use super::tokenizer::Tokenizer;
use crate::error::{LoomError, Result};
use crate::gpu::{is_allowed, mask_logits};

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub sampling: SamplingParams,
    /// Most new tokens.
    pub max_tokens: usize,
    /// Ids that end the reply besides the model's EOS ids.
    pub stop_ids: Vec<u32>,
    /// Texts that end the reply (the reply is cut before them).
    pub stop_strings: Vec<String>,
    /// Set from another thread (Ctrl-C, a stop button) to end the reply after the current token.
    pub cancel: Option<Arc<AtomicBool>>,
    /// What the reply must be (a JSON Schema, a regex, a grammar), natively.
    #[cfg(not(target_arch = "wasm32"))]
    pub constraint: Option<Constraint>,
    /// Record each new token's log-probability with this many of the likeliest alternatives (OpenAI's `logprobs`
    /// and `top_logprobs`).
    pub logprobs: Option<usize>,
    /// The caller masks each step's logits itself ([`Reply::accept_masked`]: the browser's grammar module), so the
    /// engine hands back logits, never an id it picked.
    pub masked: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop_ids: Vec::new(),
            stop_strings: Vec::new(),
            cancel: None,
            #[cfg(not(target_arch = "wasm32"))]
            constraint: None,
            logprobs: None,
            masked: false,
        }
    }
}

/// How a reply ended (serialized as [`StopReason::name`] says).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, ts_rs::TS)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Eos,
    #[serde(rename = "stop")]
    StopString,
    MaxTokens,
    Cancelled,
    /// The KV cache reached the model's context.
    ContextFull,
    /// The reply's constraint is complete: nothing more can follow (a closed JSON value, a whole match).
    Complete,
    /// The GPU device was lost and none came back: the text so far is the reply.
    DeviceLost,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::StopString => "stop",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Cancelled => "cancelled",
            StopReason::ContextFull => "context_full",
            StopReason::Complete => "complete",
            StopReason::DeviceLost => "device_lost",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    /// New tokens (without the EOS that ended them).
    pub ids: Vec<u32>,
    pub text: String,
    pub stop_reason: StopReason,
    /// Prompt tokens whose keys and values were already cached (not computed again).
    pub reused_tokens: usize,
    /// Seconds spent on the prompt (the time to the first token's logits).
    pub prefill_s: f64,
    /// Seconds spent producing the new tokens after the first.
    pub decode_s: f64,
    /// Each new token's log-probability, when [`GenerateOptions::logprobs`] asked for them.
    pub logprobs: Option<Vec<TokenLogprob>>,
}

/// A new token's log-probability under the model: the log-softmax of the step's logits as the model gives them
/// (before penalties, temperature, filters or a grammar), with the likeliest ids and theirs, most likely first. The
/// bytes are what each id adds to the text ([`Tokenizer::token_bytes`]; empty without a tokenizer).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<(u32, Vec<u8>, f32)>,
}

/// The log-softmax of `logits` at `id` and at the `k` likeliest ids (ties: the lower id first), in f64.
fn log_softmax_at(logits: &[f32], id: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    let lp = |i: usize| (logits[i] as f64 - lse) as f32;
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let k = k.min(order.len());
    if k > 0 {
        order.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        order.truncate(k);
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    }
    TokenLogprob {
        id,
        bytes: Vec::new(),
        logprob: lp(id as usize),
        top: order
            .into_iter()
            .take(k)
            .map(|i| (i as u32, Vec::new(), lp(i)))
            .collect(),
    }
}

impl Generation {
    /// Decode speed: new tokens after the first per second.
    pub fn tokens_per_s(&self) -> f64 {
        if self.ids.len() < 2 || self.decode_s <= 0.0 {
            return 0.0;
        }
        (self.ids.len() - 1) as f64 / self.decode_s
    }

    /// Prompt tokens computed per second.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        let n = self.prompt_ids.len() - self.reused_tokens;
        if self.prefill_s <= 0.0 {
            return 0.0;
        }
        n as f64 / self.prefill_s
    }
}

/// Seconds on a monotonic clock (`Instant` does not exist in wasm32-unknown-unknown).
pub fn now_s() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        js_sys::Date::now() / 1000.0
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64()
    }
}

/// Length of the longest end of `text` that is the start of some stop string: text that must be held back
/// until the next token says whether a stop string begins there.
fn held_back(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if i > hold && text.ends_with(&s[..i]) {
                hold = i;
            }
        }
    }
    hold
}

/// A model's tokenizer and chat template: messages to prompt ids. A model without a tokenizer (a `.entity` with
/// no `tokenizer.json` beside it) still generates from ids: only what needs text fails, saying what is missing.
#[derive(Clone)]
pub struct ChatFormat {
    tokenizer: std::result::Result<Arc<Tokenizer>, ModelFormat>,
    template: Option<Arc<ChatTemplate>>,
    /// The family template used because the files carry none ([`BUILT_IN_GEMMA`]'s name), and the id that ends its
    /// turns.
    built_in: Option<(&'static str, u32)>,
}

/// Gemma's chat format, for a Gemma model whose files carry no template (the real Gemma 3 270M GGUF): the turns as
/// llama.cpp's built-in `gemma` template writes them (`llama_chat_apply_template`; a system message opens the next
/// user turn, both trimmed), BOS left to the tokenizer. Its replies end at `<end_of_turn>`.
const BUILT_IN_GEMMA: &str = "{%- set system = namespace(text='') -%}\
{%- for m in messages -%}\
{%- if m.role == 'system' -%}{%- set system.text = system.text + (m.content | trim) -%}\
{%- else -%}\
{%- set role = 'model' if m.role == 'assistant' else m.role -%}\
{{- '<start_of_turn>' + role + '\\n' -}}\
{%- if system.text and role != 'model' -%}{{- system.text + '\\n\\n' -}}{%- set system.text = '' -%}{%- endif -%}\
{{- (m.content | trim) + '<end_of_turn>\\n' -}}\
{%- endif -%}\
{%- endfor -%}\
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}";

impl ChatFormat {
    pub fn new(model: &LlmModel) -> Result<ChatFormat> {
        match &model.tokenizer {
            Some(t) => ChatFormat::of(t.clone(), model.config.arch),
            None => Ok(ChatFormat {
                tokenizer: Err(model.format),
                template: None,
                built_in: None,
            }),
        }
    }

    /// The tokenizer and the chat template it carries; for a Gemma model (`arch`) whose tokenizer carries none but
    /// has Gemma's turn tokens, Gemma's format.
    pub fn of(tokenizer: Arc<Tokenizer>, arch: Arch) -> Result<ChatFormat> {
        let mut built_in = None;
        let source = match tokenizer.chat_template() {
            Some(t) => Some(t),
            None => {
                let gemma = matches!(arch, Arch::Gemma2 | Arch::Gemma3);
                let turns = (
                    tokenizer.token_to_id("<start_of_turn>"),
                    tokenizer.token_to_id("<end_of_turn>"),
                );
                match (gemma, turns) {
                    (true, (Some(_), Some(end))) => {
                        built_in = Some(("gemma", end));
                        Some(BUILT_IN_GEMMA)
                    }
                    _ => None,
                }
            }
        };
        let template = match source {
            Some(t) => Some(Arc::new(ChatTemplate::new(t)?)),
            None => None,
        };
        Ok(ChatFormat {
            tokenizer: Ok(tokenizer),
            template,
            built_in,
        })
    }

    /// The name of the family template in use because the files carry none (`"gemma"`), if one is.
    pub fn built_in_template(&self) -> Option<&'static str> {
        self.built_in.map(|(name, _)| name)
    }

    /// The tokenizer, or an error that says what is missing.
    pub fn tokenizer(&self) -> Result<&Arc<Tokenizer>> {
        self.tokenizer.as_ref().map_err(|&format| no_tokenizer(format))
    }

    pub fn has_template(&self) -> bool {
        self.template.is_some()
    }

    /// The chat template applied to `messages` (with the assistant's turn opened when `add_generation_prompt`).
    pub fn apply_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let tokenizer = self.tokenizer()?;
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| LoomError::Unsupported("the model has no chat template: use a raw prompt".into()))?;
        t.render(
            messages,
            add_generation_prompt,
            tokenizer.bos_token().as_deref(),
            tokenizer.eos_token().as_deref(),
        )
    }

    /// Token ids of a prompt text: special tokens in it are recognised, and BOS is put first when the
    /// tokenizer asks for it and the text does not start with it already (llama.cpp's rule).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let tokenizer = self.tokenizer()?;
        let mut ids = tokenizer.encode(text, false)?;
        if let (true, Some(bos)) = (tokenizer.add_bos(), tokenizer.bos_id()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        Ok(ids)
    }

    /// The templated ids of messages given as JSON objects (tool calls and tool results in transformers'
    /// convention) with `tools` offered, the assistant's turn opened.
    pub fn chat_prompt_json(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
    ) -> Result<Vec<u32>> {
        let tokenizer = self.tokenizer()?;
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| LoomError::Unsupported("the model has no chat template: use a raw prompt".into()))?;
        let text = t.render_json(
            messages,
            tools,
            true,
            tokenizer.bos_token().as_deref(),
            tokenizer.eos_token().as_deref(),
        )?;
        self.encode_prompt(&text)
    }

    /// Whether the chat template writes tool calls in `<tool_call>` tags (Hermes, Qwen 2.5/3).
    pub fn tags_tool_calls(&self) -> bool {
        self.tokenizer()
            .ok()
            .and_then(|t| t.chat_template())
            .is_some_and(|t| t.contains("<tool_call>"))
    }

    /// The templated ids of `messages` with the assistant's turn opened.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        self.encode_prompt(&self.apply_template(messages, true)?)
    }
}

/// What a forward hands the sampler: the next id when the engine picked it, else the logits.
pub enum Step {
    Id(u32),
    Logits(Vec<f32>),
}

/// Runs `tokens`; the engine picks the next id itself for a plain argmax (`draw` is `None`), and draws it on its
/// device where it can.
fn step(engine: &mut dyn Engine, tokens: &[u32], draw: Option<&SampleArgs>) -> Result<Step> {
    match draw {
        None => Ok(Step::Id(engine.forward_greedy(tokens)?)),
        Some(args) => engine.forward_sample(tokens, args),
    }
}

/// A reply being generated, one engine step at a time, without owning the engine: a synchronous loop
/// ([`Session::generate`]) and an asynchronous one (the GPU in a browser, which yields between tokens) drive it
/// the same way: run [`Reply::input`] on the engine, hand the result to [`Reply::accept`], until `input` is `None`.
pub struct Reply {
    sampler: Sampler,
    greedy: bool,
    /// The draw handed out for the step in flight.
    drawn: Option<SampleArgs>,
    max_tokens: usize,
    /// The model's EOS ids and the caller's stop ids.
    stop_ids: Vec<u32>,
    stop_strings: Vec<String>,
    limit: usize,
    prompt_len: usize,
    reused: usize,
    /// The prompt, then the new ids.
    context: Vec<u32>,
    /// Leading ids of `context` whose keys and values are in the engine's cache.
    computed: usize,
    text: String,
    /// Bytes of `text` already handed out.
    emitted: usize,
    /// The text of the new ids; `None` for a model without a tokenizer (ids only, `text` stays empty).
    stream: Option<super::tokenizer::TokenStream>,
    /// The constraint's state, when the reply has one.
    #[cfg(not(target_arch = "wasm32"))]
    grammar: Option<Grammar>,
    /// How many alternatives each token's log-probability keeps, and those so far, when asked for.
    logprobs: Option<(usize, Vec<TokenLogprob>)>,
    /// The caller masks the logits ([`GenerateOptions::masked`]).
    masked: bool,
    stop: Option<StopReason>,
    t0: f64,
    t1: Option<f64>,
}

impl Reply {
    /// Ids the engine must run next (the uncached part of the prompt, then each new id); `None` once ended.
    pub fn input(&self) -> Option<&[u32]> {
        match self.stop {
            None => Some(&self.context[self.computed..]),
            Some(_) => None,
        }
    }

    /// How the engine picks the next step's id: `None`, a plain argmax; else this draw (its random bits drawn now,
    /// once per step), which an engine runs on its device or answers with the logits for [`Reply::accept`].
    pub fn draw(&mut self) -> Option<SampleArgs> {
        if self.greedy {
            return None;
        }
        let args = self.sampler.draw(&self.context);
        self.drawn = Some(args.clone());
        Some(args)
    }

    /// Whether the engine must hand back the logits (log-probabilities are taken from them), never an id it picked
    /// itself.
    pub fn needs_logits(&self) -> bool {
        self.logprobs.is_some()
    }

    /// Whether the caller passes each step's mask ([`GenerateOptions::masked`]).
    pub fn caller_masks(&self) -> bool {
        self.masked
    }

    /// The ids the reply's grammar allows next (bit `id % 32` of word `id / 32`), for the engine to pick among
    /// ([`Engine::forward_masked`]) and [`Reply::accept_masked`]; `None` without a grammar here (in the browser the
    /// grammar module has the mask).
    pub fn allowed(&mut self) -> Result<Option<Vec<u32>>> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(g) = &mut self.grammar {
            return g.mask_words().map(Some);
        }
        Ok(None)
    }

    /// [`Reply::accept`] for a step taken under the mask `allowed` ([`Reply::allowed`], or the browser's grammar
    /// module's): an id the engine picked must be one it allows; from logits, every other id's is −∞ before the
    /// draw.
    pub fn accept_masked(&mut self, step: Step, allowed: &[u32]) -> Result<String> {
        self.take(step, Some(allowed))
    }

    /// Runs the prompt from position `kept` (what the engine still holds after its truncation: fewer than the
    /// shared prefix where a windowed cache lost what the prompt's next position reads).
    pub fn resume_from(&mut self, kept: usize) {
        self.computed = self.computed.min(kept);
        self.reused = self.reused.min(kept);
    }

    /// Ids in the engine's cache once the steps so far ran.
    pub fn cached_ids(&self) -> &[u32] {
        &self.context[..self.computed]
    }

    /// Tokens in the prompt.
    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// Takes the engine's output for [`Reply::input`] and returns the text that can be shown now (text that may
    /// be the start of a stop string is held back until the next token says).
    pub fn accept(&mut self, step: Step) -> Result<String> {
        let allowed = self.allowed()?;
        self.take(step, allowed.as_deref())
    }

    fn take(&mut self, step: Step, allowed: Option<&[u32]>) -> Result<String> {
        if self.stop.is_some() {
            return Err(LoomError::InvalidInput("this reply has ended".into()));
        }
        self.computed = self.context.len();
        self.t1.get_or_insert_with(now_s);
        if self.new_ids().len() >= self.max_tokens {
            return Ok(self.end(StopReason::MaxTokens));
        }
        let next = match step {
            Step::Id(_) if self.needs_logits() => {
                return Err(LoomError::InvalidInput(
                    "log-probabilities are taken from the logits".into(),
                ))
            }
            Step::Id(id) => {
                if allowed.is_some_and(|a| !is_allowed(a, id as usize)) {
                    return Err(LoomError::Gpu(format!(
                        "the device picked id {id}, which the constraint does not allow"
                    )));
                }
                id
            }
            Step::Logits(mut logits) => {
                // The model's own distribution, before the grammar and the sampler change the logits.
                let raw = self.logprobs.as_ref().map(|_| logits.clone());
                if let Some(allowed) = allowed {
                    mask_logits(&mut logits, allowed);
                    if logits.iter().all(|&l| l == f32::NEG_INFINITY) {
                        return Err(LoomError::InvalidInput(
                            "constraint: no token can continue the reply".into(),
                        ));
                    }
                }
                let next = match self.drawn.take() {
                    Some(args) => Sampler::sample_with(&mut logits, &args),
                    None => self.sampler.sample(&mut logits, &self.context),
                };
                if let (Some(raw), Some((k, seen))) = (raw, &mut self.logprobs) {
                    if !self.stop_ids.contains(&next) {
                        seen.push(log_softmax_at(&raw, next, *k));
                    }
                }
                next
            }
        };
        if self.stop_ids.contains(&next) {
            return Ok(self.end(StopReason::Eos));
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(g) = &mut self.grammar {
            g.accept(next)?;
        }
        self.context.push(next);
        if let Some(stream) = &mut self.stream {
            self.text.push_str(&stream.push(next)?);
        }
        let fresh = &self.text[self.emitted..];
        if let Some(at) = self.stop_strings.iter().filter_map(|s| fresh.find(s.as_str())).min() {
            self.text.truncate(self.emitted + at);
            let out = self.text[self.emitted..].to_string();
            self.emitted = self.text.len();
            self.stop = Some(StopReason::StopString);
            return Ok(out);
        }
        let safe = self.text.len() - held_back(fresh, &self.stop_strings);
        let mut out = self.text[self.emitted..safe].to_string();
        self.emitted = safe;
        if self.constraint_done() {
            out.push_str(&self.end(StopReason::Complete));
        } else if self.new_ids().len() >= self.max_tokens {
            out.push_str(&self.end(StopReason::MaxTokens));
        } else if self.computed >= self.limit {
            out.push_str(&self.end(StopReason::ContextFull));
        }
        Ok(out)
    }

    /// Ends the reply (a stop button, a dropped stream) and returns the text still held back.
    pub fn cancel(&mut self) -> String {
        self.stop_for(StopReason::Cancelled)
    }

    /// Ends the reply for `reason` (a cancel, a device that did not come back) with the text held back so far.
    pub fn stop_for(&mut self, reason: StopReason) -> String {
        match self.stop {
            None => self.end(reason),
            Some(_) => String::new(),
        }
    }

    fn constraint_done(&self) -> bool {
        #[cfg(not(target_arch = "wasm32"))]
        return self.grammar.as_ref().is_some_and(Grammar::is_done);
        #[cfg(target_arch = "wasm32")]
        false
    }

    /// The new ids so far.
    pub fn new_ids(&self) -> &[u32] {
        &self.context[self.prompt_len..]
    }

    fn end(&mut self, reason: StopReason) -> String {
        self.stop = Some(reason);
        if let Some(stream) = &mut self.stream {
            let tail = stream.finish();
            // Bytes held back for a character the cut reply never finished are not text (its ids keep them); a
            // reply the model ended keeps what its last tokens decode to.
            let cut = matches!(
                reason,
                StopReason::MaxTokens | StopReason::ContextFull | StopReason::Cancelled
            );
            self.text
                .push_str(if cut { tail.trim_end_matches('\u{FFFD}') } else { &tail });
        }
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }

    /// The reply so far, with its timings.
    pub fn generation(&self) -> Generation {
        let t1 = self.t1.unwrap_or_else(now_s);
        Generation {
            prompt_ids: self.context[..self.prompt_len].to_vec(),
            ids: self.new_ids().to_vec(),
            text: self.text.clone(),
            stop_reason: self.stop.unwrap_or(StopReason::Cancelled),
            reused_tokens: self.reused,
            prefill_s: t1 - self.t0,
            decode_s: now_s() - t1,
            logprobs: self.logprobs.as_ref().map(|(_, seen)| seen.clone()),
        }
    }
}

/// A conversation with a model, apart from the engine that runs it: the chat format, the ids the engine's KV
/// cache holds (so a new prompt recomputes only what changed) and the messages so far.
pub struct Conversation {
    format: ChatFormat,
    eos_ids: Vec<u32>,
    /// Logits per step (the model's vocabulary rows), which a grammar's vocabulary spans.
    rows: usize,
    /// The vocabulary as the grammar engine sees it, built by the first constrained reply.
    #[cfg(not(target_arch = "wasm32"))]
    grammar_vocab: Option<GrammarVocab>,
    /// Ids whose keys and values are in the engine's cache, in order.
    cached: Vec<u32>,
    pub history: Vec<ChatMessage>,
    /// The model's [`Fingerprint`], which a saved chat must carry to be restored on it.
    fingerprint: String,
}

impl Conversation {
    pub fn new(model: &LlmModel) -> Result<Conversation> {
        let mut fingerprint = Fingerprint::new(&model.config);
        for m in model.weights.matrices() {
            fingerprint.matrix(m);
        }
        Conversation::of(
            ChatFormat::new(model)?,
            &model.eos_ids,
            model.config.vocab,
            fingerprint.finish(),
        )
    }

    /// A conversation in `format` whose replies also end at `eos_ids` (the model's own, besides the tokenizer's), on
    /// a model of `rows` logits whose [`Fingerprint`] is `fingerprint`.
    pub fn of(format: ChatFormat, eos_ids: &[u32], rows: usize, fingerprint: String) -> Result<Conversation> {
        let mut eos_ids = eos_ids.to_vec();
        let mut tokenizer_eos = format.tokenizer().map(|t| t.eos_ids()).unwrap_or_default();
        tokenizer_eos.extend(format.built_in.map(|(_, end)| end));
        for id in tokenizer_eos {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
        Ok(Conversation {
            format,
            eos_ids,
            rows,
            #[cfg(not(target_arch = "wasm32"))]
            grammar_vocab: None,
            cached: Vec::new(),
            history: Vec::new(),
            fingerprint,
        })
    }

    pub fn format(&self) -> &ChatFormat {
        &self.format
    }

    /// The reply's result, its log-probabilities' tokens written out as bytes.
    pub fn generation(&self, reply: &Reply) -> Generation {
        let mut g = reply.generation();
        if let (Some(seen), Ok(tokenizer)) = (&mut g.logprobs, self.format.tokenizer()) {
            let ids: Vec<u32> = seen
                .iter()
                .flat_map(|t| std::iter::once(t.id).chain(t.top.iter().map(|a| a.0)))
                .collect();
            let mut bytes = tokenizer.bytes_of(&ids).into_iter();
            for t in seen.iter_mut() {
                t.bytes = bytes.next().unwrap_or_default();
                for alt in &mut t.top {
                    alt.1 = bytes.next().unwrap_or_default();
                }
            }
        }
        g
    }

    /// What a grammar engine needs of the model: each of its rows' ids as bytes
    /// ([`Tokenizer::token_bytes`]) and the ids that end a reply.
    pub fn grammar_words(&self) -> Result<(Vec<Vec<u8>>, &[u32])> {
        Ok((self.format.tokenizer()?.token_bytes(self.rows), &self.eos_ids))
    }

    /// The grammar engine's view of the vocabulary, built once.
    #[cfg(not(target_arch = "wasm32"))]
    fn grammar_vocab(&mut self) -> Result<GrammarVocab> {
        if self.grammar_vocab.is_none() {
            let (words, eos_ids) = self.grammar_words()?;
            self.grammar_vocab = Some(GrammarVocab::new(words, self.rows, eos_ids)?);
        }
        Ok(self.grammar_vocab.clone().expect("built above"))
    }

    /// Forgets the messages and the cached ids (the caller empties the engine's cache).
    pub fn reset(&mut self) {
        self.history.clear();
        self.cached.clear();
    }

    /// The templated prompt of the history for a reply of up to `max_tokens` in a `limit`-token context. When
    /// `truncate` is set, the oldest turns (after a system message) are dropped until it fits; otherwise a prompt
    /// that does not fit is [`LoomError::ContextFull`].
    pub fn chat_prompt(&mut self, max_tokens: usize, limit: usize, truncate: bool) -> Result<Vec<u32>> {
        loop {
            let prompt = self.format.chat_prompt(&self.history)?;
            let needed = prompt.len() + max_tokens.min(limit);
            if needed <= limit {
                return Ok(prompt);
            }
            let first = usize::from(self.history.first().is_some_and(|m| m.role == "system"));
            // Keep at least the newest message.
            if !truncate || self.history.len() - first < 2 {
                return Err(LoomError::ContextFull { needed, limit });
            }
            self.history.remove(first);
        }
    }

    /// Starts a reply to `prompt` (ids) on an engine whose cache holds this conversation's cached ids and has a
    /// `limit`-token context. Returns the reply and how many cached ids the engine must keep (truncate it to that
    /// before the first step): the prefix shared with the prompt, less at least its last id (run again for its
    /// logits).
    pub fn begin(&mut self, prompt: &[u32], opts: &GenerateOptions, limit: usize) -> Result<(Reply, usize)> {
        if prompt.is_empty() {
            return Err(LoomError::InvalidInput("an empty prompt".into()));
        }
        if prompt.len() > limit {
            return Err(LoomError::ContextFull {
                needed: prompt.len(),
                limit,
            });
        }
        let sampler = Sampler::new(opts.sampling.clone())?;
        #[cfg(not(target_arch = "wasm32"))]
        let grammar = match &opts.constraint {
            None => None,
            Some(c) => Some(self.grammar_vocab()?.start(c)?),
        };
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        self.cached.truncate(common);
        let mut stop_ids = self.eos_ids.clone();
        stop_ids.extend_from_slice(&opts.stop_ids);
        let reply = Reply {
            greedy: sampler.is_plain_argmax(),
            drawn: None,
            sampler,
            max_tokens: opts.max_tokens,
            stop_ids,
            stop_strings: opts.stop_strings.iter().filter(|s| !s.is_empty()).cloned().collect(),
            limit,
            prompt_len: prompt.len(),
            reused: common,
            context: prompt.to_vec(),
            computed: common,
            text: String::new(),
            emitted: 0,
            stream: self.format.tokenizer().ok().map(|t| t.stream()),
            #[cfg(not(target_arch = "wasm32"))]
            grammar,
            logprobs: opts.logprobs.map(|k| (k, Vec::new())),
            masked: opts.masked,
            stop: None,
            t0: now_s(),
            t1: None,
        };
        Ok((reply, common))
    }

    /// The conversation with the keys and values of its cached ids, `kv` (what the engine holds of them), as
    /// bytes for [`Conversation::restore`] on the same model, with the caller's `meta`.
    pub fn save(
        &self,
        kv: super::saved::KvRows,
        cfg: &super::config::ModelConfig,
        meta: serde_json::Value,
    ) -> Result<Vec<u8>> {
        let cached = self.cached[..kv.len.min(self.cached.len())].to_vec();
        SavedChat::new(self.fingerprint.clone(), self.history.clone(), cached, kv, meta).encode(cfg)
    }

    /// Reads a chat saved from this model (of `cfg`) for an engine of `context` positions: checked whole (bytes,
    /// fingerprint, shape), and only then taken as this conversation's messages and cached ids. Returns what the
    /// engine's cache must then hold.
    pub fn restore(
        &mut self,
        bytes: &[u8],
        cfg: &super::config::ModelConfig,
        context: usize,
    ) -> Result<(super::saved::KvRows, serde_json::Value)> {
        let saved = SavedChat::decode(bytes)?;
        saved.check(&self.fingerprint, cfg, context)?;
        self.history = saved.history;
        self.cached = saved.cached;
        Ok((saved.kv, saved.meta))
    }

    /// Ids whose keys and values the engine's cache holds.
    pub fn cached_ids(&self) -> &[u32] {
        &self.cached
    }

    /// Keeps the first `len` cached ids (what the engine still holds after a truncation).
    pub fn keep_cached(&mut self, len: usize) {
        self.cached.truncate(len);
    }

    /// Forgets the cached ids (the engine changed, its cache is empty).
    pub fn reset_cache(&mut self) {
        self.cached.clear();
    }

    /// Records what the engine's cache holds after `reply`'s steps (also after a failed step: engines leave
    /// their cache as it was when a step fails).
    pub fn settle(&mut self, reply: &Reply) {
        self.cached = reply.cached_ids().to_vec();
    }
}

/// An engine and a conversation on it.
pub struct Session {
    engine: Box<dyn Engine>,
    pub conversation: Conversation,
    /// Opens the model again on a new device after the GPU's was lost (see [`Session::on_device_lost`]).
    reopen: Option<Reopen>,
    /// Devices lost, and engines opened again, since the session began.
    pub devices_lost: usize,
}

/// Makes a fresh engine for the session's model (a new GPU device, or the CPU).
pub type Reopen = Box<dyn FnMut() -> Result<Box<dyn Engine>>>;

/// Devices a reply may lose, one after another, before it ends with [`StopReason::DeviceLost`].
const REOPENS_PER_REPLY: usize = 3;

impl Session {
    pub fn new(model: &LlmModel, engine: Box<dyn Engine>) -> Result<Session> {
        Ok(Session {
            engine,
            conversation: Conversation::new(model)?,
            reopen: None,
            devices_lost: 0,
        })
    }

    /// What to do when the GPU device is lost: `reopen` makes a new engine (the weights uploaded again to a new
    /// device), the conversation and the reply so far are computed on it again, and the reply goes on. Without it,
    /// or when it fails, the reply ends with [`StopReason::DeviceLost`] and the text so far.
    pub fn on_device_lost(&mut self, reopen: Reopen) {
        self.reopen = Some(reopen);
    }

    pub fn format(&self) -> &ChatFormat {
        self.conversation.format()
    }

    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// Forgets the conversation and the cache.
    pub fn reset(&mut self) {
        self.conversation.reset();
        self.engine.truncate(0);
    }

    /// The conversation and the KV cache that holds it, as bytes ([`super::saved`]); `meta` is kept as given.
    pub fn save(&mut self, meta: serde_json::Value) -> Result<Vec<u8>> {
        // A stop during a step leaves the engine a position ahead of the conversation: keep what the ids say.
        let kept = self.engine.truncate(self.conversation.cached_ids().len());
        self.conversation.keep_cached(kept);
        let kv = self.engine.kv_rows()?;
        self.conversation.save(kv, self.engine.config(), meta)
    }

    /// Continues a chat [`Session::save`] wrote on this model (on any engine): its messages, and its KV cache so
    /// that the next reply computes only the new message. A chat of another model, or damaged bytes, is an error
    /// and changes nothing; an engine that fails taking the cache is left empty with the conversation forgotten.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<serde_json::Value> {
        let cfg = self.engine.config().clone();
        let (kv, meta) = self.conversation.restore(bytes, &cfg, cfg.context)?;
        if let Err(e) = self.engine.set_kv_rows(kv) {
            self.reset();
            return Err(e);
        }
        Ok(meta)
    }

    /// Sends the user's `text` in the running conversation and returns the reply (added to the history).
    /// When `truncate` is set, the oldest turns (after a system message) are dropped while the prompt plus
    /// `max_tokens` exceed the context; otherwise that is a [`LoomError::ContextFull`].
    pub fn chat(
        &mut self,
        text: &str,
        opts: &GenerateOptions,
        truncate: bool,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let history = &mut self.conversation.history;
        history.push(ChatMessage {
            role: "user".into(),
            content: text.into(),
        });
        let limit = self.engine.config().context;
        let result = self
            .conversation
            .chat_prompt(opts.max_tokens, limit, truncate)
            .and_then(|prompt| self.generate(&prompt, opts, on_text));
        let history = &mut self.conversation.history;
        match &result {
            Ok(g) => history.push(ChatMessage {
                role: "assistant".into(),
                content: g.text.clone(),
            }),
            Err(_) => {
                history.pop();
            }
        }
        result
    }

    /// Generates from `prompt` (ids), streaming text to `on_text` (return `false` to stop).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let (mut reply, keep) = self.conversation.begin(prompt, opts, self.engine.config().context)?;
        reply.resume_from(self.engine.truncate(keep));
        let result = self.drive(&mut reply, opts, on_text);
        self.conversation.settle(&reply);
        result.map(|()| self.conversation.generation(&reply))
    }

    fn drive(
        &mut self,
        reply: &mut Reply,
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<()> {
        let cancelled = || opts.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed));
        let mut reopened = 0;
        while reply.input().is_some() {
            let text = if cancelled() {
                reply.cancel()
            } else {
                let draw = reply.draw();
                let allowed = reply.allowed()?;
                let logits = reply.needs_logits();
                let Some(input) = reply.input() else { break };
                let out = match (logits, &allowed) {
                    (true, _) => self.engine.forward(input, false).map(Step::Logits),
                    (false, Some(allowed)) => self.engine.forward_masked(input, draw.as_ref(), allowed),
                    (false, None) => step(self.engine.as_mut(), input, draw.as_ref()),
                };
                let out = match out {
                    Err(LoomError::GpuDeviceLost(_)) => {
                        self.devices_lost += 1;
                        reopened += 1;
                        let fresh = match &mut self.reopen {
                            Some(reopen) if reopened <= REOPENS_PER_REPLY => reopen().ok(),
                            _ => None,
                        };
                        let text = match fresh {
                            // The new engine's cache is empty: the prompt and the reply so far run again.
                            Some(engine) => {
                                self.engine = engine;
                                self.conversation.reset_cache();
                                reply.resume_from(0);
                                String::new()
                            }
                            None => reply.stop_for(StopReason::DeviceLost),
                        };
                        if !text.is_empty() && !on_text(&text) {
                            reply.cancel();
                        }
                        continue;
                    }
                    out => out?,
                };
                // A stop that came while the step ran drops its token: nothing shows after the stop. (The engine
                // cached more than the reply says; the next turn's truncation drops it.)
                match (cancelled(), &allowed) {
                    (true, _) => reply.cancel(),
                    (false, Some(allowed)) => reply.accept_masked(out, allowed)?,
                    (false, None) => reply.accept(out)?,
                }
            };
            if !text.is_empty() && !on_text(&text) {
                reply.cancel();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn held_back_is_the_longest_partial_stop() {
        let stops = vec!["</s>".to_string(), "User:".to_string()];
        assert_eq!(held_back("Hello </", &stops), 2);
        assert_eq!(held_back("Hello Use", &stops), 3);
        assert_eq!(held_back("Hello", &stops), 0);
        assert_eq!(held_back("Hello <", &stops), 1);
    }
}
