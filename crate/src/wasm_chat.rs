//! The JavaScript chat API (wasm-bindgen): the `Chat` class runs an LLM (GGUF, HF folder, Loom transformer
//! `.entity`) on the CPU or WebGPU, one engine step per `step()` call so that the worker stays responsive (a stop
//! message is handled between tokens) and streams each token's text.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use js_sys::{Uint32Array, Uint8Array};
use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::boundary::{
    self, ChatInfo, ErrorObject, Fit, FitCpu, FitGpu, FitTensor, OpenAIPlan, SendOptions, ToolCalls,
};
use crate::error::LoomError;
use crate::formats::source::RangeReader;
use crate::llm::config::ModelConfig;
use crate::llm::engine::{CpuEngine, Engine, KvCache};
use crate::llm::generate::{ChatFormat, Conversation, GenerateOptions, Reply, Step, StopReason};
use crate::llm::gpu_engine::{engine_context, GpuEngine, GpuEngineBuilder, GpuFit};
use crate::llm::model::{LlmModel, ModelFormat};
use crate::llm::openai::{parse_chat_request, parse_tool_calls, token_logprobs, MAX_TOP_LOGPROBS};
use crate::llm::sampler::{SampleArgs, SamplingParams};
use crate::llm::saved::{Fingerprint, KvRows};
use crate::llm::streamed::StreamedModel;
use crate::llm::template::ChatMessage;
use crate::llm::weights::Matrix;
use crate::wasm::{byte_count, js_error, named_files, set, shared_gpu, to_js, JsResult};

/// The engine a chat runs on.
enum ChatEngine {
    Cpu(Box<CpuEngine>),
    Gpu(Box<GpuEngine>),
}

impl ChatEngine {
    fn config(&self) -> &ModelConfig {
        match self {
            ChatEngine::Cpu(e) => e.config(),
            ChatEngine::Gpu(e) => e.config(),
        }
    }

    fn context(&self) -> usize {
        self.config().context
    }

    async fn kv_rows(&self) -> crate::Result<KvRows> {
        match self {
            ChatEngine::Cpu(e) => e.kv_rows(),
            ChatEngine::Gpu(e) => e.kv_rows().await,
        }
    }

    async fn set_kv_rows(&mut self, kv: KvRows) -> crate::Result<()> {
        match self {
            ChatEngine::Cpu(e) => e.set_kv_rows(kv),
            ChatEngine::Gpu(e) => e.set_kv_rows(kv).await,
        }
    }

    fn truncate(&mut self, len: usize) -> usize {
        match self {
            ChatEngine::Cpu(e) => e.truncate(len),
            ChatEngine::Gpu(e) => e.truncate(len),
        }
    }

    /// Runs `tokens` and picks the next id per `draw` (`None`: the argmax), among the ids `allowed` when a grammar
    /// masks the step; the GPU is awaited (pollster cannot block in a browser) and picks on the device when it can
    /// (one id read back), the CPU engine hands a masked step's logits back. With `logits` (log-probabilities are
    /// asked for) it hands the logits back whatever the step.
    async fn step(
        &mut self,
        tokens: &[u32],
        draw: Option<&SampleArgs>,
        allowed: Option<&[u32]>,
        logits: bool,
    ) -> crate::Result<Step> {
        if logits {
            return Ok(Step::Logits(match self {
                ChatEngine::Cpu(e) => e.forward(tokens, false)?,
                ChatEngine::Gpu(e) => e.forward_logits(tokens, false).await?,
            }));
        }
        if let Some(allowed) = allowed {
            return Ok(match self {
                ChatEngine::Cpu(e) => Step::Logits(e.forward(tokens, false)?),
                ChatEngine::Gpu(e) if draw.is_none_or(GpuEngine::samples) => {
                    Step::Id(e.forward_masked(tokens, draw, allowed).await?)
                }
                ChatEngine::Gpu(e) => Step::Logits(e.forward_logits(tokens, false).await?),
            });
        }
        Ok(match (self, draw) {
            (ChatEngine::Cpu(e), None) => Step::Id(e.forward_greedy(tokens)?),
            (ChatEngine::Cpu(e), Some(args)) => e.forward_sample(tokens, args)?,
            (ChatEngine::Gpu(e), None) => Step::Id(e.forward_argmax(tokens).await?),
            (ChatEngine::Gpu(e), Some(args)) if GpuEngine::samples(args) => {
                Step::Id(e.forward_sampled(tokens, args).await?)
            }
            (ChatEngine::Gpu(e), Some(_)) => Step::Logits(e.forward_logits(tokens, false).await?),
        })
    }
}

/// A reply in progress and the history to restore if it fails.
struct Turn {
    reply: Reply,
    history_before: Vec<ChatMessage>,
    /// An OpenAI request's tools offered to the model and the request's id: the reply is read for calls at
    /// `finish`.
    calls: Option<(serde_json::Value, String)>,
}

struct ChatState {
    engine: ChatEngine,
    conversation: Conversation,
    turn: Option<Turn>,
    info: ChatInfo,
}

/// The model's description for `Chat.info()`.
fn model_info(format: ModelFormat, c: &ModelConfig, chat: &ChatFormat) -> ChatInfo {
    let format = match format {
        ModelFormat::Gguf => "gguf",
        ModelFormat::Entity => "entity",
        _ => "hf",
    };
    ChatInfo::new(format, c, chat.has_template(), chat.built_in_template())
}

/// Counts a weight matrix in the quantization mix.
fn add_matrix(info: &mut ChatInfo, m: &Matrix) {
    info.add(m.ty.name(), m.data.len() as u64);
}

/// The page's `read(file, offset, length)` over the picked files.
struct JsReader(js_sys::Function);

impl RangeReader for JsReader {
    async fn read(&self, file: usize, offset: u64, len: u64) -> crate::Result<Bytes> {
        let call = self
            .0
            .call3(
                &JsValue::NULL,
                &(file as f64).into(),
                &(offset as f64).into(),
                &(len as f64).into(),
            )
            .map_err(js_io)?;
        let bytes = wasm_bindgen_futures::JsFuture::from(js_sys::Promise::from(call))
            .await
            .map_err(js_io)?;
        let bytes = Uint8Array::new(&bytes);
        if u64::from(bytes.length()) != len {
            return Err(LoomError::Truncated {
                what: format!("file {file} at {offset}"),
                needed: len,
                available: u64::from(bytes.length()),
            });
        }
        Ok(Bytes::from(bytes.to_vec()))
    }
}

/// A failed read in the page, as an error that keeps its message.
fn js_io(e: JsValue) -> LoomError {
    let msg = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"));
    LoomError::Io(msg)
}

/// `openGpu` and `fit`'s file lengths and KV positions (0 or none: the engine's default).
fn stream_args(sizes: Vec<f64>, context: Option<f64>) -> JsResult<(Vec<u64>, Option<usize>)> {
    let sizes = sizes
        .into_iter()
        .map(|s| byte_count(s, "sizes"))
        .collect::<JsResult<Vec<u64>>>()?;
    let context = count(context, "context", 0).map_err(js_error)?;
    Ok((sizes, (context > 0).then_some(context)))
}

/// A non-negative whole number from JavaScript.
fn count(n: Option<f64>, what: &str, default: usize) -> crate::Result<usize> {
    match n {
        None => Ok(default),
        Some(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => Ok(n as usize),
        Some(n) => Err(LoomError::InvalidInput(format!(
            "{what} must be a whole number ≥ 0, got {n}"
        ))),
    }
}

impl SendOptions {
    fn generate_options(&self) -> crate::Result<GenerateOptions> {
        let d = SamplingParams::default();
        let seed = match self.seed {
            None => (js_sys::Math::random() * 4_294_967_296.0) as u64,
            Some(_) => count(self.seed, "seed", 0)? as u64,
        };
        let sampling = SamplingParams {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_k: count(self.top_k, "topK", d.top_k)?,
            top_p: self.top_p.unwrap_or(d.top_p),
            min_p: self.min_p.unwrap_or(d.min_p),
            repetition_penalty: self.repetition_penalty.unwrap_or(d.repetition_penalty),
            seed,
            ..d
        };
        sampling.validate()?;
        Ok(GenerateOptions {
            sampling,
            max_tokens: count(self.max_tokens, "maxTokens", GenerateOptions::default().max_tokens)?,
            stop_strings: self.stop.clone().unwrap_or_default(),
            masked: self.constrained.unwrap_or(false),
            logprobs: match self.logprobs {
                None => None,
                Some(_) => match count(self.logprobs, "logprobs", 0)? {
                    n @ 0..=MAX_TOP_LOGPROBS => Some(n),
                    n => {
                        return Err(LoomError::InvalidInput(format!(
                            "logprobs: at most {MAX_TOP_LOGPROBS} alternatives, got {n}"
                        )))
                    }
                },
            },
            ..GenerateOptions::default()
        })
    }
}

fn from_js<T: for<'de> Deserialize<'de>>(value: JsValue, what: &str) -> JsResult<T> {
    serde_wasm_bindgen::from_value(value).map_err(|e| js_error(LoomError::InvalidInput(format!("{what}: {e}"))))
}

/// A model to chat with and its conversation. The state is out of the slot (`None`) while a step runs.
#[wasm_bindgen(js_name = Chat)]
pub struct JsChat {
    slot: Rc<RefCell<Option<ChatState>>>,
}

fn busy() -> JsValue {
    js_error(LoomError::InvalidInput(
        "this chat is busy with a reply; wait for it to finish".into(),
    ))
}

#[wasm_bindgen(js_class = Chat)]
impl JsChat {
    /// Opens a model from the files a person picked: one GGUF, a `.entity` with `tokenizer.json` beside it, or an
    /// HF folder (`config.json`, `.safetensors`, `tokenizer.json`, ...), on the CPU (`openGpu` opens one on WebGPU).
    pub fn open(names: Vec<String>, files: Vec<Uint8Array>) -> JsResult<JsChat> {
        let files = named_files(names, files)?
            .into_iter()
            .map(|(n, f)| (n, Bytes::from(f)))
            .collect();
        let model = LlmModel::from_files(files).map_err(js_error)?;
        let conversation = Conversation::new(&model).map_err(js_error)?;
        let mut info = model_info(model.format, &model.config, conversation.format());
        for m in model.weights.matrices() {
            add_matrix(&mut info, m);
        }
        Ok(JsChat::new(ChatState {
            engine: ChatEngine::Cpu(Box::new(model.cpu_engine())),
            conversation,
            turn: None,
            info,
        }))
    }

    /// Opens a model straight onto WebGPU from the files a person picked (as `open` takes them): `sizes` are
    /// their lengths and `read(file, offset, length)` resolves to any byte range of one. The headers come first,
    /// then the tensors are read, uploaded and freed a block at a time (the globals, then each decoder block), so
    /// wasm memory never holds the model.
    #[wasm_bindgen(js_name = openGpu, unchecked_return_type = "Promise<Chat>")]
    pub fn open_gpu(
        names: Vec<String>,
        sizes: Vec<f64>,
        #[wasm_bindgen(unchecked_param_type = "(file: number, offset: number, length: number) => Promise<Uint8Array>")]
        read: js_sys::Function,
        context: Option<f64>,
    ) -> js_sys::Promise {
        wasm_bindgen_futures::future_to_promise(async move {
            let (sizes, context) = stream_args(sizes, context)?;
            let reader = JsReader(read);
            let model = StreamedModel::open(&names, &sizes, &reader).await.map_err(js_error)?;
            let format = ChatFormat::of(model.tokenizer().map_err(js_error)?, model.config.arch).map_err(js_error)?;
            let mut info = model_info(model.format, &model.config, &format);
            let mut fingerprint = Fingerprint::new(&model.config);
            let gpu = shared_gpu().await.map_err(js_error)?;
            let mut builder = GpuEngineBuilder::new(gpu, &model.config, context);
            let lost = |e: LoomError| {
                if matches!(e, LoomError::GpuDeviceLost(_)) {
                    crate::wasm::forget_gpu();
                }
                js_error(e)
            };
            let g = model.globals(&reader).await.map_err(js_error)?;
            for m in std::iter::once(&g.embed).chain(&g.head) {
                add_matrix(&mut info, m);
                fingerprint.matrix(m);
            }
            builder
                .globals(&g.embed, g.head.as_ref(), &g.final_norm)
                .await
                .map_err(lost)?;
            drop(g);
            for i in 0..model.config.n_layers {
                let b = model.block(&reader, i).await.map_err(js_error)?;
                for m in b.matrices() {
                    add_matrix(&mut info, m);
                    fingerprint.matrix(m);
                }
                info.arch = model.arch_with(&b).name();
                builder.block(&b).await.map_err(lost)?;
            }
            let mut engine = builder.finish().await.map_err(lost)?;
            // Each kernel against its CPU twin before any token: a mismatch is `gpu_self_test`, and the caller
            // opens the model on the CPU instead.
            engine.self_test().await.map_err(lost)?;
            info.context = engine.config().context;
            let conversation =
                Conversation::of(format, &model.eos_ids, model.config.vocab, fingerprint.finish()).map_err(js_error)?;
            Ok(JsChat::new(ChatState {
                engine: ChatEngine::Gpu(Box::new(engine)),
                conversation,
                turn: None,
                info,
            })
            .into())
        })
    }

    /// Whether the model among `names` (of lengths `sizes`, read through `read` as `openGpu` reads them) fits this
    /// browser, from the headers alone (no weights are read): on WebGPU (each tensor and KV cache within the
    /// adapter's buffer and binding limits; a KV cache of `context` positions, the engine's default when absent)
    /// and on the CPU engine (the files and the KV cache within 32-bit WebAssembly memory).
    #[wasm_bindgen(unchecked_return_type = "Promise<RawFit>")]
    pub fn fit(
        names: Vec<String>,
        sizes: Vec<f64>,
        #[wasm_bindgen(unchecked_param_type = "(file: number, offset: number, length: number) => Promise<Uint8Array>")]
        read: js_sys::Function,
        context: Option<f64>,
    ) -> js_sys::Promise {
        wasm_bindgen_futures::future_to_promise(async move {
            let (sizes, context) = stream_args(sizes, context)?;
            let model = StreamedModel::open(&names, &sizes, &JsReader(read))
                .await
                .map_err(js_error)?;
            let tensors = model.tensor_bytes();
            let file_bytes: u64 = sizes.iter().sum();
            let gpu = match shared_gpu().await {
                Ok(gpu) => {
                    let fit = GpuFit::of(&model.config, &tensors, context, &gpu.limits);
                    FitGpu {
                        fits: fit.problems.is_empty(),
                        problems: fit.problems,
                        context: Some(fit.context),
                        kv_cache_bytes: Some(fit.kv_cache_bytes),
                        max_buffer_size: Some(gpu.limits.max_buffer_size),
                        max_storage_buffer_binding_size: Some(gpu.limits.max_storage_buffer_binding_size),
                    }
                }
                Err(e) => FitGpu {
                    problems: vec![e.to_string()],
                    ..FitGpu::default()
                },
            };
            // The CPU engine holds the files whole and grows its cache per position, all in 32-bit memory.
            let positions = engine_context(&model.config, context);
            let needed_bytes = file_bytes + KvCache::max_bytes(&model.config, positions);
            let available_bytes = (4u64 << 30).saturating_sub(crate::wasm::memory_bytes() as u64);
            let (name, bytes) = tensors.iter().max_by_key(|(_, b)| *b).cloned().unwrap_or_default();
            let out = Fit {
                arch: model.config.arch.name(),
                file_bytes,
                weight_bytes: tensors.iter().map(|(_, b)| b).sum(),
                largest_tensor: FitTensor { name, bytes },
                gpu,
                cpu: FitCpu {
                    fits: needed_bytes <= available_bytes,
                    needed_bytes,
                    available_bytes,
                    positions,
                },
            };
            to_js(&out)
        })
    }

    /// `"cpu"` or the GPU adapter's name.
    pub fn device(&self) -> JsResult<String> {
        self.with(|s| {
            Ok(match &s.engine {
                ChatEngine::Cpu(_) => "cpu".into(),
                ChatEngine::Gpu(e) => e.adapter(),
            })
        })
    }

    #[wasm_bindgen(unchecked_return_type = "ChatModelInfo")]
    pub fn info(&self) -> JsResult<JsValue> {
        self.with(|s| Ok(s.info.clone())).and_then(|i| to_js(&i))
    }

    /// Token ids of `text` (special tokens in it recognised; `addSpecial` adds BOS/EOS as the tokenizer says).
    pub fn tokenize(&self, text: &str, #[wasm_bindgen(js_name = addSpecial)] add_special: bool) -> JsResult<Vec<u32>> {
        self.with(|s| s.conversation.format().tokenizer()?.encode(text, add_special))
    }

    /// The text of `ids`.
    pub fn detokenize(
        &self,
        ids: Vec<u32>,
        #[wasm_bindgen(js_name = skipSpecial)] skip_special: bool,
    ) -> JsResult<String> {
        self.with(|s| s.conversation.format().tokenizer()?.decode(&ids, skip_special))
    }

    /// The chat template applied to `messages`, with the assistant's turn opened when `addGenerationPrompt`.
    #[wasm_bindgen(js_name = applyTemplate)]
    pub fn apply_template(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ChatMessage[]")] messages: JsValue,
        #[wasm_bindgen(js_name = addGenerationPrompt)] add_generation_prompt: bool,
    ) -> JsResult<String> {
        let messages: Vec<ChatMessage> = from_js(messages, "messages")?;
        self.with(|s| s.conversation.format().apply_template(&messages, add_generation_prompt))
    }

    /// The conversation so far.
    #[wasm_bindgen(unchecked_return_type = "ChatMessage[]")]
    pub fn history(&self) -> JsResult<JsValue> {
        self.with(|s| Ok(s.conversation.history.clone()))
            .and_then(|h| to_js(&h))
    }

    /// Forgets the conversation and the KV cache.
    pub fn reset(&self) -> JsResult<()> {
        self.with(|s| {
            s.turn = None;
            s.conversation.reset();
            s.engine.truncate(0);
            Ok(())
        })
    }

    /// The conversation and the KV cache that holds it, as bytes that `restore` takes on this model (on either
    /// engine), with `meta` (JSON text) kept as given. Not while a reply runs.
    #[wasm_bindgen(unchecked_return_type = "Promise<Uint8Array>")]
    pub fn save(&self, meta: Option<String>) -> js_sys::Promise {
        let slot = self.slot.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let meta = match meta {
                Some(m) => serde_json::from_str(&m).map_err(|e| js_error(crate::error::json_err("meta", e)))?,
                None => serde_json::Value::Null,
            };
            let mut state = take(&slot)?;
            let result = async {
                let s = &mut state;
                if s.turn.is_some() {
                    return Err(LoomError::InvalidInput(
                        "a reply is in progress: save the chat after it".into(),
                    ));
                }
                // A stop during a step leaves the engine a position ahead of the conversation: keep what the ids say.
                let kept = s.engine.truncate(s.conversation.cached_ids().len());
                s.conversation.keep_cached(kept);
                let kv = s.engine.kv_rows().await?;
                s.conversation.save(kv, s.engine.config(), meta)
            }
            .await;
            put(&slot, state);
            let bytes = result.map_err(js_error)?;
            Ok(Uint8Array::from(bytes.as_slice()).into())
        })
    }

    /// Continues a chat `save` wrote on this model: its messages, and its KV cache so that the next reply computes
    /// only the new message. Resolves to the saved `meta` (JSON text). A chat of another model (`model_mismatch`) or
    /// damaged bytes change nothing; a device lost while taking the cache leaves this chat empty.
    #[wasm_bindgen(unchecked_return_type = "Promise<string>")]
    pub fn restore(&self, bytes: Uint8Array) -> js_sys::Promise {
        let slot = self.slot.clone();
        let bytes = bytes.to_vec();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut state = take(&slot)?;
            let result = async {
                let s = &mut state;
                if s.turn.is_some() {
                    return Err(LoomError::InvalidInput(
                        "a reply is in progress: restore a chat after it".into(),
                    ));
                }
                let cfg = s.engine.config().clone();
                let (kv, meta) = s.conversation.restore(&bytes, &cfg, cfg.context)?;
                drop(bytes);
                if let Err(e) = s.engine.set_kv_rows(kv).await {
                    s.conversation.reset();
                    s.engine.truncate(0);
                    return Err(e);
                }
                Ok(meta.to_string())
            }
            .await;
            let lost = matches!(result, Err(LoomError::GpuDeviceLost(_)));
            put(&slot, state);
            if lost {
                crate::wasm::forget_gpu();
            }
            Ok(result.map_err(js_error)?.into())
        })
    }

    /// Starts a reply: to `messages` (the whole conversation, replacing the history) or to `text` (a user message
    /// added to the history). Resolves nothing yet: call `step()` until it says `done`, then `finish()`. Returns
    /// the prompt's token count.
    pub fn begin(
        &self,
        #[wasm_bindgen(unchecked_param_type = "ChatMessage[] | string")] input: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RawSendOptions | undefined")] options: JsValue,
    ) -> JsResult<u32> {
        let opts: SendOptions = if options.is_undefined() || options.is_null() {
            SendOptions::default()
        } else {
            from_js(options, "send options")?
        };
        let generate = opts.generate_options().map_err(js_error)?;
        let (messages, text) = match input.as_string() {
            Some(text) => (None, text),
            None => (Some(from_js::<Vec<ChatMessage>>(input, "messages")?), String::new()),
        };
        self.with(|s| {
            let history_before = s.conversation.history.clone();
            match messages {
                Some(m) => s.conversation.history = m,
                None => s.conversation.history.push(ChatMessage {
                    role: "user".into(),
                    content: text,
                }),
            }
            let limit = s.engine.context();
            let started = s
                .conversation
                .chat_prompt(generate.max_tokens, limit, opts.truncate.unwrap_or(true))
                .and_then(|prompt| s.conversation.begin(&prompt, &generate, limit));
            match started {
                Ok((mut reply, keep)) => {
                    reply.resume_from(s.engine.truncate(keep));
                    let n = reply.prompt_len() as u32;
                    s.turn = Some(Turn {
                        reply,
                        history_before,
                        calls: None,
                    });
                    Ok(n)
                }
                Err(e) => {
                    s.conversation.history = history_before;
                    Err(e)
                }
            }
        })
    }

    /// Begins the reply to an OpenAI Chat Completions request (its JSON body), checked as `loom serve` checks one
    /// (what cannot be honoured is `unsupported`, what is malformed `invalid_input`, each naming the field): its
    /// messages (tool calls and results included) replace the conversation, its tools go to the chat template, its
    /// sampling and limits apply. Returns `{stream, includeUsage, constraint?}`: the worker holds the reply to
    /// `constraint` (`{kind, source}`, for the grammar module: `response_format`, or a required tool call) with
    /// `step(mask)`; `finish` reads tool calls out of the reply, named after `id`.
    #[wasm_bindgen(js_name = beginOpenAI)]
    #[wasm_bindgen(unchecked_return_type = "RawOpenAIPlan")]
    pub fn begin_openai(&self, body: &str, id: String) -> JsResult<JsValue> {
        let job = parse_chat_request(body.as_bytes()).and_then(|r| r.job()).map_err(|e| {
            let e = ErrorObject {
                code: e.code.to_string(),
                message: e.message,
                needed: None,
            };
            to_js(&e).unwrap_or_else(|e| e)
        })?;
        let out = self.with(|s| {
            let constraint = job.constraint(s.conversation.format().tags_tool_calls());
            let options = GenerateOptions {
                masked: constraint.is_some(),
                ..job.options.clone()
            };
            let prompt = s
                .conversation
                .format()
                .chat_prompt_json(&job.messages, job.tools.as_ref())?;
            let history_before = std::mem::replace(
                &mut s.conversation.history,
                job.messages
                    .iter()
                    .map(|m| ChatMessage {
                        role: m["role"].as_str().unwrap_or_default().into(),
                        content: m["content"].as_str().unwrap_or_default().into(),
                    })
                    .collect(),
            );
            match s.conversation.begin(&prompt, &options, s.engine.context()) {
                Ok((mut reply, keep)) => {
                    reply.resume_from(s.engine.truncate(keep));
                    s.turn = Some(Turn {
                        reply,
                        history_before,
                        calls: job.tools.clone().map(|t| (t, id)),
                    });
                    Ok(constraint)
                }
                Err(e) => {
                    s.conversation.history = history_before;
                    Err(e)
                }
            }
        })?;
        to_js(&OpenAIPlan {
            stream: job.stream,
            include_usage: job.include_usage,
            constraint: out,
        })
    }

    /// What the grammar module needs of the model, packed for `GrammarVocab`'s constructor (grammar/src/wasm.rs):
    /// little-endian u32s `rows`, the count of end ids, those ids, then each row's id as its length and bytes.
    #[wasm_bindgen(js_name = grammarWords)]
    pub fn grammar_words(&self) -> JsResult<Vec<u8>> {
        self.with(|s| {
            let (words, eos) = s.conversation.grammar_words()?;
            let mut out = Vec::new();
            let mut put = |n: usize| out.extend_from_slice(&(n as u32).to_le_bytes());
            put(words.len());
            put(eos.len());
            eos.iter().for_each(|&id| put(id as usize));
            for w in &words {
                out.extend_from_slice(&(w.len() as u32).to_le_bytes());
                out.extend_from_slice(w);
            }
            Ok(out)
        })
    }

    /// Drops the reply in progress after an error outside the engine (its grammar failed): the conversation goes
    /// back to before its message, as after a failed step.
    pub fn abandon(&self) -> JsResult<()> {
        self.with(|s| {
            if let Some(turn) = s.turn.take() {
                s.conversation.settle(&turn.reply);
                s.conversation.history = turn.history_before;
            }
            Ok(())
        })
    }

    /// Ends a constrained reply whose grammar is complete; returns text still held back.
    pub fn complete(&self) -> JsResult<String> {
        self.with(|s| {
            Ok(s.turn
                .as_mut()
                .map(|t| t.reply.stop_for(StopReason::Complete))
                .unwrap_or_default())
        })
    }

    /// Runs one engine step of the reply: resolves to `{text, done, id}`, the text that step adds and the id it
    /// drew (none when the reply ended instead). A constrained reply (`constrained` in `begin`'s options) passes its
    /// grammar's `mask` (bit `id % 32` of word `id / 32`: the ids allowed next).
    #[wasm_bindgen(unchecked_return_type = "Promise<RawStep>")]
    pub fn step(&self, mask: Option<Vec<u32>>) -> js_sys::Promise {
        let slot = self.slot.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            let mut state = take(&slot)?;
            let result = async {
                let s = &mut state;
                let turn = s
                    .turn
                    .as_mut()
                    .ok_or_else(|| LoomError::InvalidInput("no reply was begun".into()))?;
                if turn.reply.input().is_none() {
                    return Ok((String::new(), true, None));
                }
                if turn.reply.caller_masks() != mask.is_some() {
                    return Err(LoomError::InvalidInput(
                        "a mask goes with each step of a constrained reply, and only there".into(),
                    ));
                }
                let drawn = turn.reply.new_ids().len();
                let draw = turn.reply.draw();
                let input = turn.reply.input().unwrap_or_default();
                let logits = turn.reply.needs_logits();
                let step = s.engine.step(input, draw.as_ref(), mask.as_deref(), logits).await?;
                let text = match &mask {
                    Some(mask) => turn.reply.accept_masked(step, mask)?,
                    None => turn.reply.accept(step)?,
                };
                s.conversation.settle(&turn.reply);
                let ids = turn.reply.new_ids();
                let id = (ids.len() > drawn).then(|| ids[ids.len() - 1]);
                Ok((text, turn.reply.input().is_none(), id))
            }
            .await;
            let lost = matches!(result, Err(LoomError::GpuDeviceLost(_)));
            // A lost device keeps the reply for `adoptEngine` (it goes on on a new device) or `loseDevice` (it ends
            // there). After another error the engine left its cache as it was, and the conversation goes back to
            // before this message.
            if result.is_err() && !lost {
                if let Some(turn) = state.turn.take() {
                    state.conversation.settle(&turn.reply);
                    state.conversation.history = turn.history_before;
                }
            }
            put(&slot, state);
            if lost {
                crate::wasm::forget_gpu();
            }
            let (text, done, id) = result.map_err(js_error)?;
            to_js(&boundary::Step { text, done, id })
        })
    }

    /// Takes `other`'s engine (the same model opened again on a new device after this one's was lost): the
    /// conversation and the reply so far run again on it at the next `step()`. `other` is left with the dead engine.
    #[wasm_bindgen(js_name = adoptEngine)]
    pub fn adopt_engine(&self, other: &JsChat) -> JsResult<()> {
        let mut theirs = take(&other.slot)?;
        let adopted = self.with(|s| {
            std::mem::swap(&mut s.engine, &mut theirs.engine);
            s.info.context = theirs.info.context;
            s.conversation.reset_cache();
            if let Some(turn) = &mut s.turn {
                turn.reply.resume_from(0);
            }
            Ok(())
        });
        put(&other.slot, theirs);
        adopted
    }

    /// Ends the reply whose device was lost (none came back); returns text still held back. `finish()` then
    /// reports `device_lost` with the text so far.
    #[wasm_bindgen(js_name = loseDevice)]
    pub fn lose_device(&self) -> JsResult<String> {
        self.with(|s| {
            s.conversation.reset_cache();
            Ok(s.turn
                .as_mut()
                .map(|t| t.reply.stop_for(StopReason::DeviceLost))
                .unwrap_or_default())
        })
    }

    /// Ends the reply now (a stop button); returns text still held back. `finish()` then reports `cancelled`.
    pub fn cancel(&self) -> JsResult<String> {
        self.with(|s| Ok(s.turn.as_mut().map(|t| t.reply.cancel()).unwrap_or_default()))
    }

    /// The ended reply, added to the history as the assistant's message.
    #[wasm_bindgen(unchecked_return_type = "RawReply")]
    pub fn finish(&self) -> JsResult<JsValue> {
        let (g, calls) = self.with(|s| {
            let mut turn = s
                .turn
                .take()
                .ok_or_else(|| LoomError::InvalidInput("no reply was begun".into()))?;
            turn.reply.cancel();
            s.conversation.settle(&turn.reply);
            let g = s.conversation.generation(&turn.reply);
            s.conversation.history.push(ChatMessage {
                role: "assistant".into(),
                content: g.text.clone(),
            });
            let calls = turn
                .calls
                .and_then(|(tools, id)| parse_tool_calls(&g.text, &tools, &id));
            Ok((g, calls))
        })?;
        let reply = boundary::Reply {
            text: g.text.clone(),
            ids: Vec::new(),
            prompt_tokens: g.prompt_ids.len(),
            reused_tokens: g.reused_tokens,
            stop_reason: g.stop_reason,
            prefill_ms: g.prefill_s * 1000.0,
            decode_ms: g.decode_s * 1000.0,
            tokens_per_second: g.tokens_per_s(),
            prefill_tokens_per_second: g.prefill_tokens_per_s(),
            logprobs: token_logprobs(&g),
            tool_calls: calls.map(|(content, calls)| ToolCalls { content, calls }),
        };
        let o = to_js(&reply)?;
        set(o.unchecked_ref(), "ids", &Uint32Array::from(g.ids.as_slice()).into());
        Ok(o)
    }
}

impl JsChat {
    fn new(state: ChatState) -> JsChat {
        JsChat {
            slot: Rc::new(RefCell::new(Some(state))),
        }
    }

    /// Runs `f` on the state, unless a step holds it.
    fn with<T>(&self, f: impl FnOnce(&mut ChatState) -> crate::Result<T>) -> JsResult<T> {
        let mut slot = self.slot.borrow_mut();
        let state = slot.as_mut().ok_or_else(busy)?;
        f(state).map_err(js_error)
    }
}

/// Takes the state out of the slot for an async call.
fn take(slot: &RefCell<Option<ChatState>>) -> JsResult<ChatState> {
    slot.borrow_mut().take().ok_or_else(busy)
}

fn put(slot: &RefCell<Option<ChatState>>, state: ChatState) {
    *slot.borrow_mut() = Some(state);
}
