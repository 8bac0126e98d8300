// Generated from the Rust types by `typescript()` in crate/src/boundary.rs: do not edit.
// Field names are as the wasm modules hand them over; u64 byte counts are numbers (exact below 2^53).

/**
 * A blob's absolute byte range in a `.entity` file, for streaming it to the GPU (`GpuStream.blobs()`).
 */
export type BlobRange = { path: string, offset: number, length: number, dtype: string, };

/**
 * One message of a conversation.
 */
export type ChatMessage = { role: 'system' | 'user' | 'assistant' | (string & {}), content: string, };

/**
 * A chat model: its family, dimensions and quantization mix.
 */
export type ChatModelInfo = { format: "gguf" | "hf" | "entity", arch: string, layers: number, hidden: number, heads: number, kv_heads: number, head_dim: number, ffn: number, vocab: number, 
/**
 * Context of the engine in use (the GPU's KV cache may be shorter than the model's).
 */
context: number, weight_bytes: number, 
/**
 * Bytes of weight matrices per block type (Q4_K, Q6_K, F16 …): the quantization mix.
 */
block_types: { [key in string]: number }, has_template: boolean, 
/**
 * The family's chat format in use because the files carry no template (`'gemma'`: Gemma's turns, as
 * llama.cpp's built-in `gemma` template writes them).
 */
built_in_template?: string, };

/**
 * A token's log-probability and its likeliest alternatives', as OpenAI's `ChatCompletionTokenLogprob` (the bytes
 * are what the token adds to the text; `token` is them as UTF-8, lossily).
 */
export type ChatTokenLogprob = { token: string, logprob: number, bytes: Array<number>, top_logprobs: Array<TopLogprob>, };

/**
 * A histogram of the values between two percentiles, for tensors whose few outliers would squeeze the rest into
 * one bin; `below` and `above` count the values left out.
 */
export type ClippedHistogram = { 
/**
 * The percentiles (0 to 100) the range was cut at.
 */
percentiles: [number, number], histogram: Histogram, below: number, above: number, };

/**
 * Elements sharing one scale in a block's stored codes: value = `scale`·(code − `zero`) + `min`, in float32 in
 * that order (for the ggml types, as gguf-py computes them).
 */
export type CodeGroup = { len: number, scale: number, min: number, zero: number, };

/**
 * A constraint as the grammar engine reads it: its kind (`json_schema`, `json_object`, `regex`, `lark`) and its text
 * (natively `Constraint::parse`; in the browser the grammar module, which the chat module does not link).
 */
export type ConstraintText = { kind: "json_schema" | "json_object" | "regex" | "lark", source: string, };

/**
 * How one layer or tensor differs between two models.
 */
export type DiffEntry = { name: string, 
/**
 * `same`, `changed`, `added` or `removed`.
 */
status: "same" | "changed" | "added" | "removed", dtype_before: string | null, dtype_after: string | null, 
/**
 * Largest and mean absolute difference of the values, when both sides have as many values and they can be
 * dequantized.
 */
max_abs: number | null, mean_abs: number | null, };

export type FitCpu = { fits: boolean, neededBytes: number, availableBytes: number, positions: number, };

export type FitGpu = { fits: boolean, problems: Array<string>, context?: number, kvCacheBytes?: number, maxBufferSize?: number, maxStorageBufferBindingSize?: number, };

export type FitTensor = { name: string, bytes: number, };

/**
 * The function a [`ToolCall`] calls: `arguments` is JSON text.
 */
export type FunctionCall = { name: string, arguments: string, };

/**
 * The grid of a Loom network.
 */
export type Grid = { depth: number, rows: number, cols: number, layers_per_cell: number, };

/**
 * Counts of values in equal bins over `[min, max]` (numpy's `histogram`: the last bin includes `max`).
 */
export type Histogram = { min: number, max: number, counts: Array<number>, };

/**
 * The input a network expects.
 */
export type InputSpec = { 
/**
 * `"float"` or `"token_ids"`.
 */
kind: "float" | "token_ids", 
/**
 * A shape that fits, batch 1 (for token ids: a sequence of `seq_length`, at least one).
 */
shape: Array<number>, 
/**
 * Token ids must be integers below this (Embedding's `vocab_size`).
 */
vocab: number | null, 
/**
 * The first layer the spec comes from (`layers.0`, `layers.1.parallel_branches.0`).
 */
layer: string, };

/**
 * What [`inspect`] finds.
 */
export type Inspection = { 
/**
 * `entity`, `json`, `safetensors`, `gguf` or `checkpoint`.
 */
format: "entity" | "json" | "safetensors" | "gguf" | "checkpoint", file_bytes: number, header_bytes: number, weight_bytes: number, 
/**
 * Bytes read from the source to produce this.
 */
bytes_read: number, total_params: number, grid: Grid | null, layers: Array<LayerRow>, tensors: Array<TensorRow>, 
/**
 * Weight bytes per dtype.
 */
bytes_by_dtype: { [key in string]: number }, metadata: { [key in string]: string }, 
/**
 * The decoder a GGUF file or an HF folder holds, when it is one the LLM runtime runs.
 */
llm?: LlmSummary, 
/**
 * Why a GGUF file's decoder does not run (an architecture or a feature the runtime lacks), for the app's
 * "Chat with this model".
 */
llm_unsupported?: string, 
/**
 * What a Loom network takes as input, when its first layer says (see [`Network::input_spec`]).
 */
input: InputSpec | null, };

/**
 * What changed in one layer's weights.
 */
export type LayerLoss = { path: string, from: string, to: string, 
/**
 * Weights whose value changed.
 */
changed: number, total: number, max_abs_error: number, };

/**
 * One layer, nested ones included (`nesting` > 0).
 */
export type LayerRow = { 
/**
 * Blob path, e.g. `layers.1.sequential_layers.0`.
 */
path: string, nesting: number, z: number, y: number, x: number, l: number, type: string, activation: string, dtype: string, 
/**
 * The weight scale, for layers with weights.
 */
scale: number | null, params: number, 
/**
 * Bytes of this layer's weights in the file.
 */
bytes: number, disabled: boolean, 
/**
 * The shape of its weights when they form one tensor (`[out, in]` for Dense); empty otherwise.
 */
shape: Array<number>, 
/**
 * The parts of a combined store (MHA's Q/K/V/O weights and biases, SwiGLU's gate/up/down, LSTM's gates),
 * each readable as the tensor `path#name`; empty for single-tensor layers.
 */
parts: Array<PartRow>, 
/**
 * One input row's shape and the output row's (see [`Layer::io_shapes`]), when the layer's config says.
 */
input: Array<number> | null, output: Array<number> | null, };

/**
 * What `loom inspect` says of an LLM: its architecture and dimensions, the block types of its tensors, and
 * whether it carries a chat template.
 */
export type LlmSummary = { architecture: string, layers: number, hidden: number, heads: number, kv_heads: number, head_dim: number, intermediate: number, vocab: number, context: number, rope_theta: number, tied_embeddings: boolean, 
/**
 * Tensor count per block type (`Q4_1: 210, F32: 61, ...`).
 */
quantization: { [key in string]: number }, chat_template: boolean, };

/**
 * Every error a wasm call throws: `code` is [`LoomError::code`]'s (`invalid_input`, `bad_format`, ...); `needed`
 * comes with `need_more` (call again with that many bytes of the file's start).
 */
export type LoomErrorObject = { code: string, message: string, needed?: number, };

/**
 * Every layer whose weights a conversion changes; empty when it is lossless.
 */
export type LossReport = { layers: Array<LayerLoss>, };

export type ModelDiff = { entries: Array<DiffEntry>, };

/**
 * A function call the model made (`message.tool_calls`), as OpenAI writes one.
 */
export type OpenAIToolCall = { id: string, type: "function", function: FunctionCall, };

/**
 * One part of a layer's combined weight store.
 */
export type PartRow = { name: string, shape: Array<number>, };

/**
 * Whether a model fits this browser (`Chat.fit`), from its headers alone.
 */
export type RawFit = { arch: string, fileBytes: number, weightBytes: number, largestTensor: FitTensor, 
/**
 * On WebGPU: each tensor within the adapter's bindings, each layer's KV cache within one; `problems` names
 * what does not fit (or why there is no WebGPU). Browsers do not say how much memory a GPU has:
 * `weightBytes + kvCacheBytes` is what it needs.
 */
gpu: FitGpu, 
/**
 * On the CPU engine: the files and the KV cache (for `positions` positions) in 32-bit WebAssembly memory.
 */
cpu: FitCpu, };

/**
 * A Loom network's output (`Model.forwardCpu`/`forwardGpu`).
 */
export type RawForward = { 
/**
 * The values, row-major (set by the wasm module: a `Float32Array`).
 */
data: Float32Array, shape: Array<number>, 
/**
 * On the GPU: the layers it computed on the CPU (no kernel for them), with the reason.
 */
cpu_layers?: { [key in string]: string }, };

/**
 * Whether WebGPU works here, as the wasm module sees it (the package adds what the browser says of the adapter).
 */
export type RawGpuInfo = { available: boolean, 
/**
 * Why not, when it does not.
 */
reason?: string, adapter?: string, shader_f16?: boolean, };

/**
 * What `Chat.beginOpenAI` made of an OpenAI request.
 */
export type RawOpenAIPlan = { stream: boolean, includeUsage: boolean, 
/**
 * What the grammar module holds the reply to (`response_format`, or a required tool call).
 */
constraint?: ConstraintText, };

/**
 * An ended reply (`Chat.finish()`).
 */
export type RawReply = { text: string, 
/**
 * The new tokens (set by the wasm module: a `Uint32Array`).
 */
ids: Uint32Array, promptTokens: number, 
/**
 * Prompt tokens whose KV cache was kept from the turn before (not computed again).
 */
reusedTokens: number, stopReason: StopReason, 
/**
 * Time to the first token.
 */
prefillMs: number, decodeMs: number, 
/**
 * Decode speed: new tokens after the first, per second.
 */
tokensPerSecond: number, prefillTokensPerSecond: number, 
/**
 * With `logprobs`: each new token's (an end-of-turn token has none, as OpenAI's).
 */
logprobs?: Array<ChatTokenLogprob>, 
/**
 * An OpenAI request's tool calls, when the reply made some.
 */
toolCalls?: RawToolCalls, };

/**
 * A reply's options as the package passes them to the chat module (camelCase, all optional).
 */
export type RawSendOptions = { 
/**
 * 0 is greedy (default 0.7).
 */
temperature?: number, 
/**
 * 0 keeps all (default 40).
 */
topK?: number, 
/**
 * Default 0.95.
 */
topP?: number, 
/**
 * Default 0.05.
 */
minP?: number, 
/**
 * 1 is off (default).
 */
repetitionPenalty?: number, 
/**
 * Same seed, same options, same model: same reply (default: random).
 */
seed?: number, 
/**
 * Most new tokens (default 256).
 */
maxTokens?: number, 
/**
 * Texts that end the reply (cut before them).
 */
stop?: Array<string>, 
/**
 * When the conversation and the reply outgrow the context: drop the oldest turns (true, default; the system
 * message stays), or refuse with `context_full` (false).
 */
truncate?: boolean, 
/**
 * Each step's ids are masked by a grammar the caller holds (`step(mask)`).
 */
constrained?: boolean, 
/**
 * Each new token's log-probability with this many alternatives (0 to 20), as OpenAI's `top_logprobs`.
 */
logprobs?: number, };

/**
 * One step of a reply (`Chat.step()`): the text it adds, whether the reply ended, and the id it drew (none when
 * the reply ended instead).
 */
export type RawStep = { text: string, done: boolean, id?: number, };

/**
 * The tool calls in a reply: the text before them, and the calls.
 */
export type RawToolCalls = { content: string, calls: Array<OpenAIToolCall>, };

/**
 * How a reply ended (serialized as [`StopReason::name`] says).
 */
export type StopReason = "eos" | "stop" | "max_tokens" | "cancelled" | "context_full" | "complete" | "device_lost";

/**
 * The first values of a tensor next to its stored codes.
 * In JavaScript `values` and `codes` are typed arrays, and `codes`/`groups` are absent rather than null.
 */
export type TensorPreview = { name: string, dtype: string, scale: number | null, shape: Array<number>, 
/**
 * Dequantized values.
 */
values: Float32Array, 
/**
 * The stored integer codes of narrow dtypes (int4 nibbles, fp8 bytes, f16 bits, ggml quants).
 */
codes?: Int32Array, 
/**
 * For ggml block types, the block (or sub-block) scales and mins turning `codes` into `values`
 * (value = scale·(code − zero) + min), in order.
 */
groups?: Array<CodeGroup>, };

/**
 * One tensor of a safetensors file.
 */
export type TensorRow = { name: string, dtype: string, shape: Array<number>, bytes: number, 
/**
 * Byte offset of its data in the file.
 */
offset: number, };

/**
 * Summary of a tensor's values. Non-finite values are counted (`non_finite` = `nan` + `pos_inf` + `neg_inf`),
 * and left out of everything else.
 */
export type TensorStats = { count: number, min: number, max: number, mean: number, 
/**
 * Population standard deviation.
 */
std: number, 
/**
 * Share of values that are exactly zero.
 */
sparsity: number, non_finite: number, nan: number, pos_inf: number, neg_inf: number, 
/**
 * Over every finite value, as numpy's `histogram`.
 */
histogram: Histogram, 
/**
 * Present when outliers stretch the full range more than [`OUTLIER_SPREAD`] times the central range.
 */
clipped: ClippedHistogram | null, };

/**
 * One of a token's likeliest alternatives.
 */
export type TopLogprob = { token: string, logprob: number, bytes: Array<number>, };
