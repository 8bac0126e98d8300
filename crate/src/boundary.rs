//! The data that crosses the wasm boundary and has no home of its own: what the JavaScript modules throw and hand
//! back (an error, a reply, a step, a fit check, a forward's output) and what they take (send options). With the
//! crate's other results that cross it ([`Inspection`](crate::inspect::Inspection),
//! [`TensorStats`](crate::stats::TensorStats), [`ChatMessage`](crate::llm::template::ChatMessage), ...) they are the
//! TypeScript types of `crate/ts/boundary.ts`: [`typescript`] writes it from these structs (ts-rs), both wasm modules
//! carry it in their `.d.ts` (`src/wasm.rs`), and the npm package re-exports it. A test fails when the committed
//! file is not what the structs give; `LOOM_WRITE_TS=1 cargo test -p loom-wasm --lib typescript` writes it.
//!
//! Typed arrays (`Float32Array`, `Uint32Array`) cannot come out of serde: those fields are set by the wasm module
//! after the rest is serialized, as each field's comment says.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::{TypeVisitor, TS};

use crate::error::LoomError;
use crate::llm::config::ModelConfig;
use crate::llm::generate::StopReason;
use crate::llm::openai::{ConstraintText, TokenLogprob, ToolCall};

/// Every error a wasm call throws: `code` is [`LoomError::code`]'s (`invalid_input`, `bad_format`, ...); `needed`
/// comes with `need_more` (call again with that many bytes of the file's start).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "LoomErrorObject")]
pub struct ErrorObject {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub needed: Option<u64>,
}

impl ErrorObject {
    pub fn of(e: &LoomError) -> ErrorObject {
        ErrorObject {
            code: e.code().to_string(),
            message: e.to_string(),
            needed: match e {
                LoomError::NeedMore { needed, .. } => Some(*needed),
                _ => None,
            },
        }
    }
}

/// Whether WebGPU works here, as the wasm module sees it (the package adds what the browser says of the adapter).
#[derive(Clone, Debug, Default, PartialEq, Serialize, TS)]
#[ts(rename = "RawGpuInfo")]
pub struct GpuInfo {
    pub available: bool,
    /// Why not, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub adapter: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub shader_f16: Option<bool>,
}

/// A chat model: its family, dimensions and quantization mix.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "ChatModelInfo")]
pub struct ChatInfo {
    #[ts(type = r#""gguf" | "hf" | "entity""#)]
    pub format: &'static str,
    pub arch: &'static str,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Context of the engine in use (the GPU's KV cache may be shorter than the model's).
    pub context: usize,
    pub weight_bytes: u64,
    /// Bytes of weight matrices per block type (Q4_K, Q6_K, F16 …): the quantization mix.
    pub block_types: BTreeMap<String, u64>,
    pub has_template: bool,
    /// The family's chat format in use because the files carry no template (`'gemma'`: Gemma's turns, as
    /// llama.cpp's built-in `gemma` template writes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub built_in_template: Option<&'static str>,
}

impl ChatInfo {
    pub fn new(format: &'static str, c: &ModelConfig, has_template: bool, built_in: Option<&'static str>) -> ChatInfo {
        ChatInfo {
            format,
            arch: c.arch.name(),
            layers: c.n_layers,
            hidden: c.hidden,
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            ffn: c.ffn,
            vocab: c.vocab,
            context: c.context,
            weight_bytes: 0,
            block_types: BTreeMap::new(),
            has_template,
            built_in_template: built_in,
        }
    }

    /// Counts `bytes` of a weight matrix of block type `ty` in the quantization mix.
    pub fn add(&mut self, ty: &str, bytes: u64) {
        *self.block_types.entry(ty.to_string()).or_insert(0) += bytes;
        self.weight_bytes += bytes;
    }
}

/// A reply's options as the package passes them to the chat module (camelCase, all optional).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, TS)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[ts(rename = "RawSendOptions", optional_fields)]
pub struct SendOptions {
    /// 0 is greedy (default 0.7).
    pub temperature: Option<f32>,
    /// 0 keeps all (default 40).
    pub top_k: Option<f64>,
    /// Default 0.95.
    pub top_p: Option<f32>,
    /// Default 0.05.
    pub min_p: Option<f32>,
    /// 1 is off (default).
    pub repetition_penalty: Option<f32>,
    /// Same seed, same options, same model: same reply (default: random).
    pub seed: Option<f64>,
    /// Most new tokens (default 256).
    pub max_tokens: Option<f64>,
    /// Texts that end the reply (cut before them).
    pub stop: Option<Vec<String>>,
    /// When the conversation and the reply outgrow the context: drop the oldest turns (true, default; the system
    /// message stays), or refuse with `context_full` (false).
    pub truncate: Option<bool>,
    /// Each step's ids are masked by a grammar the caller holds (`step(mask)`).
    pub constrained: Option<bool>,
    /// Each new token's log-probability with this many alternatives (0 to 20), as OpenAI's `top_logprobs`.
    pub logprobs: Option<f64>,
}

/// An ended reply (`Chat.finish()`).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(rename = "RawReply")]
pub struct Reply {
    pub text: String,
    /// The new tokens (set by the wasm module: a `Uint32Array`).
    #[serde(skip_serializing)]
    #[ts(type = "Uint32Array")]
    pub ids: Vec<u32>,
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV cache was kept from the turn before (not computed again).
    pub reused_tokens: usize,
    pub stop_reason: StopReason,
    /// Time to the first token.
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Decode speed: new tokens after the first, per second.
    pub tokens_per_second: f64,
    pub prefill_tokens_per_second: f64,
    /// With `logprobs`: each new token's (an end-of-turn token has none, as OpenAI's).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// An OpenAI request's tool calls, when the reply made some.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub tool_calls: Option<ToolCalls>,
}

/// The tool calls in a reply: the text before them, and the calls.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "RawToolCalls")]
pub struct ToolCalls {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

/// One step of a reply (`Chat.step()`): the text it adds, whether the reply ended, and the id it drew (none when
/// the reply ended instead).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "RawStep")]
pub struct Step {
    pub text: String,
    pub done: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub id: Option<u32>,
}

/// What `Chat.beginOpenAI` made of an OpenAI request.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(rename = "RawOpenAIPlan")]
pub struct OpenAIPlan {
    pub stream: bool,
    pub include_usage: bool,
    /// What the grammar module holds the reply to (`response_format`, or a required tool call).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub constraint: Option<ConstraintText>,
}

/// Whether a model fits this browser (`Chat.fit`), from its headers alone.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
#[ts(rename = "RawFit")]
pub struct Fit {
    pub arch: &'static str,
    pub file_bytes: u64,
    pub weight_bytes: u64,
    pub largest_tensor: FitTensor,
    /// On WebGPU: each tensor within the adapter's bindings, each layer's KV cache within one; `problems` names
    /// what does not fit (or why there is no WebGPU). Browsers do not say how much memory a GPU has:
    /// `weightBytes + kvCacheBytes` is what it needs.
    pub gpu: FitGpu,
    /// On the CPU engine: the files and the KV cache (for `positions` positions) in 32-bit WebAssembly memory.
    pub cpu: FitCpu,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, TS)]
pub struct FitTensor {
    pub name: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct FitGpu {
    pub fits: bool,
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub context: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub kv_cache_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub max_buffer_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub max_storage_buffer_binding_size: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, TS)]
#[serde(rename_all = "camelCase")]
pub struct FitCpu {
    pub fits: bool,
    pub needed_bytes: u64,
    pub available_bytes: u64,
    pub positions: usize,
}

/// A Loom network's output (`Model.forwardCpu`/`forwardGpu`).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
#[ts(rename = "RawForward")]
pub struct Forward {
    /// The values, row-major (set by the wasm module: a `Float32Array`).
    #[serde(skip_serializing)]
    #[ts(type = "Float32Array")]
    pub data: Vec<f32>,
    pub shape: Vec<usize>,
    /// On the GPU: the layers it computed on the CPU (no kernel for them), with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub cpu_layers: Option<BTreeMap<String, String>>,
}

/// A blob's absolute byte range in a `.entity` file, for streaming it to the GPU (`GpuStream.blobs()`).
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct BlobRange {
    pub path: String,
    pub offset: u64,
    pub length: u64,
    pub dtype: String,
}

/// `crate/ts/boundary.ts`: every type above and every result type they name, with their doc comments.
pub fn typescript() -> String {
    use crate::convert::LossReport;
    use crate::inspect::Inspection;
    use crate::llm::template::ChatMessage;
    use crate::stats::{Diff, Preview, TensorStats};

    let mut out = Declarations::default();
    out.visit::<ErrorObject>();
    out.visit::<GpuInfo>();
    out.visit::<Inspection>();
    out.visit::<TensorStats>();
    out.visit::<Preview>();
    out.visit::<Forward>();
    out.visit::<LossReport>();
    out.visit::<Diff>();
    out.visit::<BlobRange>();
    out.visit::<ChatMessage>();
    out.visit::<ChatInfo>();
    out.visit::<SendOptions>();
    out.visit::<Step>();
    out.visit::<Reply>();
    out.visit::<OpenAIPlan>();
    out.visit::<Fit>();
    format!(
        "// Generated from the Rust types by `typescript()` in crate/src/boundary.rs: do not edit.\n\
         // Field names are as the wasm modules hand them over; u64 byte counts are numbers (exact below 2^53).\n{}",
        out.by_name.into_values().collect::<String>()
    )
}

/// Each type once, by name (ts-rs visits a type's dependencies in no fixed order).
#[derive(Default)]
struct Declarations {
    seen: std::collections::HashSet<std::any::TypeId>,
    by_name: BTreeMap<String, String>,
}

impl TypeVisitor for Declarations {
    fn visit<T: TS + 'static + ?Sized>(&mut self) {
        if !self.seen.insert(std::any::TypeId::of::<T>()) {
            return;
        }
        // Only derived types have a file of their own to go to; the built-ins (String, Vec, maps) are inlined.
        if T::output_path().is_some() {
            let cfg = ts_rs::Config::new().with_large_int("number");
            let docs = T::docs().unwrap_or_default();
            let text = format!("\n{docs}export {}\n", T::decl(&cfg));
            self.by_name.insert(T::ident(&cfg), text);
        }
        T::visit_dependencies(self);
        T::visit_generics(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed file is what the structs give; `LOOM_WRITE_TS=1` writes it instead.
    #[test]
    fn typescript_file_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/ts/boundary.ts");
        let generated = typescript();
        if std::env::var_os("LOOM_WRITE_TS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == generated,
            "crate/ts/boundary.ts is not what the Rust types give: run `LOOM_WRITE_TS=1 cargo test -p loom-wasm --lib \
             typescript` and commit it"
        );
    }

    /// The stop reasons serialize as `StopReason::name` says (the CLI's and the package's words agree).
    #[test]
    fn stop_reasons_serialize_by_name() {
        use StopReason::*;
        for r in [Eos, StopString, MaxTokens, Cancelled, ContextFull, Complete, DeviceLost] {
            assert_eq!(serde_json::to_value(r).unwrap(), r.name());
        }
    }
}
