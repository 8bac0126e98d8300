//! Generation over any [`Engine`]: a prompt prefilled in one batched pass (reusing whatever prefix the KV cache
//! already holds), then tokens sampled one at a time and streamed as text, until EOS, a stop string, the token
//! limit, the context limit or cancellation. [`Session`] adds multi-turn chat through the model's template.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::engine::Engine;
use super::model::LlmModel;
use super::sampler::{Sampler, SamplingParams};
use super::template::{ChatMessage, ChatTemplate};
use super::tokenizer::Tokenizer;
use crate::error::{LoomError, Result};

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
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampling: SamplingParams::default(),
            max_tokens: 256,
            stop_ids: Vec::new(),
            stop_strings: Vec::new(),
            cancel: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Eos,
    StopString,
    MaxTokens,
    Cancelled,
    /// The KV cache reached the model's context.
    ContextFull,
}

impl StopReason {
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::StopString => "stop",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Cancelled => "cancelled",
            StopReason::ContextFull => "context_full",
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

/// A model's tokenizer and chat template: messages to prompt ids.
#[derive(Clone)]
pub struct ChatFormat {
    tokenizer: Arc<Tokenizer>,
    template: Option<Arc<ChatTemplate>>,
}

impl ChatFormat {
    pub fn new(model: &LlmModel) -> Result<ChatFormat> {
        let tokenizer = model.tokenizer()?;
        let template = match tokenizer.chat_template() {
            Some(t) => Some(Arc::new(ChatTemplate::new(t)?)),
            None => None,
        };
        Ok(ChatFormat { tokenizer, template })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template applied to `messages` (with the assistant's turn opened when `add_generation_prompt`).
    pub fn apply_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let t = self
            .template
            .as_ref()
            .ok_or_else(|| LoomError::Unsupported("the model has no chat template: use a raw prompt".into()))?;
        t.render(
            messages,
            add_generation_prompt,
            self.tokenizer.bos_token().as_deref(),
            self.tokenizer.eos_token().as_deref(),
        )
    }

    /// Token ids of a prompt text: special tokens in it are recognised, and BOS is put first when the
    /// tokenizer asks for it and the text does not start with it already (llama.cpp's rule).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.tokenizer.encode(text, false)?;
        if let (true, Some(bos)) = (self.tokenizer.add_bos(), self.tokenizer.bos_id()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        Ok(ids)
    }

    /// The templated ids of `messages` with the assistant's turn opened.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        self.encode_prompt(&self.apply_template(messages, true)?)
    }
}

/// What a forward hands the sampler: the next id when the engine picked it, else the logits.
enum Step {
    Id(u32),
    Logits(Vec<f32>),
}

/// Runs `tokens`; a greedy sampler lets the engine pick the next id itself.
fn step(engine: &mut dyn Engine, tokens: &[u32], greedy: bool) -> Result<Step> {
    Ok(if greedy {
        Step::Id(engine.forward_greedy(tokens)?)
    } else {
        Step::Logits(engine.forward(tokens, false)?)
    })
}

/// An engine, the chat format, and the ids the engine's KV cache holds.
pub struct Session {
    engine: Box<dyn Engine>,
    format: ChatFormat,
    eos_ids: Vec<u32>,
    /// Ids whose keys and values are in the engine's cache, in order.
    cached: Vec<u32>,
    /// The conversation so far ([`Session::chat`]).
    pub history: Vec<ChatMessage>,
}

impl Session {
    pub fn new(model: &LlmModel, engine: Box<dyn Engine>) -> Result<Session> {
        let format = ChatFormat::new(model)?;
        let mut eos_ids = model.eos_ids.clone();
        for id in format.tokenizer().eos_ids() {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
        Ok(Session {
            engine,
            format,
            eos_ids,
            cached: Vec::new(),
            history: Vec::new(),
        })
    }

    pub fn format(&self) -> &ChatFormat {
        &self.format
    }

    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// Forgets the conversation and the cache.
    pub fn reset(&mut self) {
        self.history.clear();
        self.cached.clear();
        self.engine.truncate(0);
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
        self.history.push(ChatMessage {
            role: "user".into(),
            content: text.into(),
        });
        let result = self.chat_turn(opts, truncate, on_text);
        match &result {
            Ok(g) => self.history.push(ChatMessage {
                role: "assistant".into(),
                content: g.text.clone(),
            }),
            Err(_) => {
                self.history.pop();
            }
        }
        result
    }

    fn chat_turn(
        &mut self,
        opts: &GenerateOptions,
        truncate: bool,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        let limit = self.engine.config().context;
        loop {
            let prompt = self.format.chat_prompt(&self.history)?;
            let needed = prompt.len() + opts.max_tokens.min(limit);
            if needed <= limit {
                return self.generate(&prompt, opts, on_text);
            }
            let first = usize::from(self.history.first().is_some_and(|m| m.role == "system"));
            // Keep at least the newest message.
            if !truncate || self.history.len() - first < 2 {
                return Err(LoomError::ContextFull { needed, limit });
            }
            self.history.remove(first);
        }
    }

    /// Generates from `prompt` (ids), streaming text to `on_text` (return `false` to stop).
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(LoomError::InvalidInput("an empty prompt".into()));
        }
        let limit = self.engine.config().context;
        if prompt.len() > limit {
            return Err(LoomError::ContextFull {
                needed: prompt.len(),
                limit,
            });
        }
        let mut sampler = Sampler::new(opts.sampling.clone())?;
        // Reuse the cached prefix; at least the last prompt token runs again, for its logits.
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        self.engine.truncate(common);
        self.cached.truncate(common);
        let t0 = now_s();
        let greedy = sampler.is_plain_argmax();
        let mut next_step = step(self.engine.as_mut(), &prompt[common..], greedy)?;
        self.cached.extend_from_slice(&prompt[common..]);
        let t1 = now_s();

        let mut context = prompt.to_vec();
        let mut ids = Vec::new();
        let mut text = String::new();
        let mut emitted = 0;
        let mut stream = self.format.tokenizer.stream();
        let cancelled = || opts.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed));
        let stop_reason = loop {
            if cancelled() {
                break StopReason::Cancelled;
            }
            if ids.len() >= opts.max_tokens {
                break StopReason::MaxTokens;
            }
            let next = match &mut next_step {
                Step::Id(id) => *id,
                Step::Logits(logits) => sampler.sample(logits, &context),
            };
            if self.eos_ids.contains(&next) || opts.stop_ids.contains(&next) {
                break StopReason::Eos;
            }
            ids.push(next);
            context.push(next);
            text.push_str(&stream.push(next)?);
            if let Some(at) = opts
                .stop_strings
                .iter()
                .filter_map(|s| text[emitted..].find(s.as_str()))
                .min()
            {
                text.truncate(emitted + at);
                if !on_text(&text[emitted..]) {
                    break StopReason::Cancelled;
                }
                emitted = text.len();
                break StopReason::StopString;
            }
            let safe = text.len() - held_back(&text[emitted..], &opts.stop_strings);
            if safe > emitted {
                let go_on = on_text(&text[emitted..safe]);
                emitted = safe;
                if !go_on {
                    break StopReason::Cancelled;
                }
            }
            if self.engine.cached() >= limit {
                break StopReason::ContextFull;
            }
            next_step = step(self.engine.as_mut(), &[next], greedy)?;
            self.cached.push(next);
        };
        if stop_reason != StopReason::StopString {
            text.push_str(&stream.finish());
            if text.len() > emitted {
                on_text(&text[emitted..]);
            }
        }
        Ok(Generation {
            prompt_ids: prompt.to_vec(),
            ids,
            text,
            stop_reason,
            reused_tokens: common,
            prefill_s: t1 - t0,
            decode_s: now_s() - t1,
        })
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
