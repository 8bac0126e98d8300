// Public data shapes. What the wasm modules hand over is generated from the Rust types (crate/ts/boundary.ts, copied
// to src/generated/ by scripts/build.mjs) and re-exported here; field names stay as the Rust structs serialize them.
import type {
  ChatMessage, ChatModelInfo, ChatTokenLogprob, Inspection, LossReport, ModelDiff, OpenAIToolCall, RawFit, RawForward,
  RawGpuInfo, RawReply, RawSendOptions, TensorPreview, TensorStats,
} from './generated/boundary.js';
export type {
  ChatMessage, ChatModelInfo, ChatTokenLogprob, ClippedHistogram, CodeGroup, ConstraintText, DiffEntry, FitCpu, FitGpu,
  FitTensor, FunctionCall, Grid, Histogram, InputSpec, Inspection, LayerLoss, LayerRow, LlmSummary, LossReport,
  ModelDiff, OpenAIToolCall, PartRow, RawFit, RawForward, RawGpuInfo, RawReply, RawSendOptions, StopReason,
  TensorPreview, TensorRow, TensorStats, TopLogprob,
} from './generated/boundary.js';

/** What `inspect`/`open` accept: a file or bytes, or a URL to fetch (in Node also a file path or `file:` URL). */
export type Source = File | Blob | ArrayBuffer | Uint8Array | string | URL;

export interface Progress {
  phase: 'download' | 'read' | 'parse' | 'upload' | 'forward' | 'convert';
  loaded: number;
  total?: number;
}

export interface OpenOptions {
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
  /** Keep fetched URLs in browser storage (OPFS, else the Cache API) and resume cut downloads. Default true. */
  cache?: boolean;
  /** Shown as `LoomModel.name`; defaults to the file name or the last URL segment. */
  name?: string;
  /**
   * How `open` loads the weights. `'full'` (default): the whole file into the worker's WebAssembly memory; every
   * call works. `'gpu'` (`.entity` files only): each blob is read from the source and goes straight to a WebGPU
   * buffer, so WebAssembly memory holds the header and one blob, never the model; `forward` runs on the GPU,
   * `tensorStats`/`tensorPreview` read that layer's blob again, and `convert`/`lossReport`/`diff` reject with
   * `unsupported`. Without WebGPU it rejects with `no_webgpu`; other formats reject with `unsupported`.
   */
  load?: 'full' | 'gpu';
}

export interface ForwardOptions {
  /** Default `'cpu'`; `'gpu'` (the only device) for a model opened with `load: 'gpu'`. */
  device?: 'cpu' | 'gpu';
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
}

export interface ForwardResult extends RawForward {
  device: 'cpu' | 'gpu';
  /** Set when the GPU was asked for but the forward ran on the CPU, and why. */
  fallbackReason?: string;
  ms: number;
}

export interface ConvertOptions {
  format: 'entity' | 'json' | 'safetensors' | 'safetensors-f16' | 'safetensors-bf16';
  dtype?: string;
  layerDtypes?: Record<string, string>;
}

/**
 * What `openChat` accepts: a GGUF or `.entity` file (File, Blob, bytes, or a URL to fetch), the files of an HF
 * folder (`config.json`, `*.safetensors` or the shards `model.safetensors.index.json` names, `tokenizer.json`,
 * `tokenizer_config.json`, `generation_config.json`) as a `FileList`, an array of Files or a directory handle, or
 * a `.entity` with its `tokenizer.json` beside it the same way.
 */
export type ChatSource = Source | File[] | FileList | FileSystemDirectoryHandle;

export interface OpenChatOptions {
  /** `'auto'` (default): WebGPU on a hardware adapter, else the CPU; `'gpu'`: WebGPU (even a software one), falling
   * back to the CPU only without WebGPU; `'cpu'`: the wasm CPU engine. `ChatSession.fallbackReason` says why a
   * GPU was not used. */
  device?: 'auto' | 'gpu' | 'cpu';
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
  /** Keep a downloaded URL in browser storage, resuming a cut download (default true). */
  cache?: boolean;
  /** The file's SHA-256, as SRI (`sha256-<base64>`) or hex: a download that does not match is deleted and
   * rejected with `bad_format`. */
  integrity?: string;
  /** KV-cache positions on the GPU (default: the model's context, at most 4096). */
  context?: number;
  name?: string;
  /** A chat `ChatSession.save()` wrote on this model: the session starts with its conversation and KV cache
   * (`ChatSession.restored`), on either device. Another model's is refused with `model_mismatch`, damaged bytes
   * with `bad_format`, and no session opens then. */
  restore?: Blob | ArrayBuffer | Uint8Array;
}

/** What a restored chat brought back. */
export interface RestoredChat {
  /** The conversation, as `history` now holds it. */
  history: ChatMessage[];
  /** What `save({meta})` was given (`null` without). */
  meta: unknown;
}

/** A reply's options: the sampling, limits and `truncate` of `RawSendOptions` (their defaults there), and what the
 * package adds. */
export interface SendOptions extends Omit<RawSendOptions, 'constrained' | 'logprobs'> {
  /** Each piece of the reply's text as it is generated. */
  onToken?: (text: string) => void;
  /** Stops the reply: `send` resolves at once with the text so far and `stopReason: 'cancelled'`. */
  signal?: AbortSignal;
  /** What the reply must be: each token is drawn from those the grammar allows, and the reply ends
   * (`stopReason: 'complete'`) where nothing more can follow. The grammar engine (llguidance) is a WebAssembly module
   * of its own, loaded on the first constrained reply. A schema or grammar it cannot compile is `invalid_input`
   * before any token. */
  constraint?: ChatConstraint;
  /** Each new token's log-probability under the model (the log-softmax of its logits, before penalties, temperature,
   * filters or a constraint) in the reply's `logprobs`. */
  logprobs?: boolean;
  /** With `logprobs`, the likeliest alternatives of each token to list too (0 to 20). */
  topLogprobs?: number;
}

/** A JSON Schema (draft 2020-12; an unknown keyword is refused by name, never ignored), any JSON object, a regular
 * expression the whole reply matches, or a Lark grammar (llguidance's dialect). */
export type ChatConstraint =
  | { type: 'json_schema'; schema: object | boolean }
  | { type: 'json_object' }
  | { type: 'regex'; pattern: string }
  | { type: 'lark'; grammar: string };

/** An ended reply (`stopReason` `device_lost`: the GPU device was lost and none came back; the text so far is the
 * reply). */
export interface ChatReply extends Omit<RawReply, 'toolCalls'> {
  /** GPU devices lost during the reply: each time the model was opened again on a new one (its weights uploaded
   * again from the source) and the conversation and the reply so far computed again before it went on. */
  devicesLost: number;
}

/** An async iterator of a reply's text pieces; `reply` resolves when it ends. */
export interface ChatStream extends AsyncIterable<string> {
  reply: Promise<ChatReply>;
}

/** A message of OpenAI's Chat Completions request: any role (only system, developer, user and assistant are
 * read), text or parts (only text parts are read). Typed loosely enough that the `openai` package's
 * `ChatCompletionMessageParam` is one. */
export interface OpenAIMessageParam {
  role: string;
  content?: string | ReadonlyArray<{ type: string; text?: string }> | null;
  name?: string;
  /** An assistant message's calls (function calls are read), and a tool message's answer to one. */
  tool_calls?: ReadonlyArray<{ id: string; type: string; function?: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

/** OpenAI's Chat Completions request, as far as it is read: the `openai` package's
 * `ChatCompletionCreateParams` is one. The chat module checks it as `loom serve` does: `response_format`
 * `json_object` and `json_schema` hold the reply to JSON (`constraint`); `tools` go to the model's chat template and
 * its calls come back as `tool_calls` (`tool_choice` `required` or a named function holds the reply to a valid
 * call); a field this runtime cannot honour (`n` > 1, penalties, a logit bias) is refused with `unsupported`. */
export interface OpenAIChatParams {
  messages: ReadonlyArray<OpenAIMessageParam>;
  model?: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  seed?: number | null;
  stop?: string | ReadonlyArray<string> | null;
  n?: number | null;
  frequency_penalty?: number | null;
  presence_penalty?: number | null;
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  logit_bias?: Record<string, number> | null;
  tools?: ReadonlyArray<unknown>;
  tool_choice?: unknown;
  parallel_tool_calls?: boolean | null;
  user?: string;
  metadata?: Record<string, string> | null;
  store?: boolean | null;
  response_format?:
    | { type: 'text' }
    | { type: 'json_object' }
    | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown>; strict?: boolean | null; description?: string } }
    | { type: string };
}

export type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls';

/** A whole reply in OpenAI's shape (assignable to the `openai` package's `ChatCompletion`). */
export interface OpenAIChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    message: { role: 'assistant'; content: string | null; refusal: string | null; tool_calls?: OpenAIToolCall[] };
    logprobs: { content: ChatTokenLogprob[] | null; refusal: null } | null;
    finish_reason: OpenAIFinishReason;
  }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** One streamed piece in OpenAI's shape (assignable to the `openai` package's `ChatCompletionChunk`): the first
 * carries the role, the last the finish reason; with `stream_options.include_usage` a final one carries the usage
 * and no choices. */
export interface OpenAIChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: 'assistant'; content?: string | null; tool_calls?: Array<OpenAIToolCall & { index: number }> };
    logprobs: { content: ChatTokenLogprob[] | null; refusal: null } | null;
    finish_reason: OpenAIFinishReason | null;
  }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
}

/** `chat.completions.create` as OpenAI's client has it, over one open model. */
export interface OpenAIChat {
  completions: {
    create(params: OpenAIChatParams & { stream?: false | null }, opts?: { signal?: AbortSignal }): Promise<OpenAIChatCompletion>;
    create(params: OpenAIChatParams & { stream: true }, opts?: { signal?: AbortSignal }): Promise<AsyncIterable<OpenAIChatCompletionChunk>>;
    create(params: OpenAIChatParams, opts?: { signal?: AbortSignal }): Promise<OpenAIChatCompletion | AsyncIterable<OpenAIChatCompletionChunk>>;
  };
}

export interface ChatSession {
  readonly name: string;
  /** OpenAI's Chat Completions over this model (`session.chat.completions.create({messages, stream, ...})`): each
   * call replaces the conversation with its `messages`, so the KV cache of what they share with the last call is
   * reused. */
  readonly chat: OpenAIChat;
  /** Where it runs. */
  readonly device: 'gpu' | 'cpu';
  /** The GPU adapter's name when `device` is `'gpu'`. */
  readonly adapter?: string;
  /** Why the CPU runs it when a GPU was asked for (`device: 'auto' | 'gpu'`). */
  readonly fallbackReason?: string;
  /** What to know about where it runs: `device: 'gpu'` on a software adapter (WebGPU on the CPU, slower than the
   * CPU engine). */
  readonly warning?: string;
  readonly info: ChatModelInfo;
  /** The conversation so far (a copy). */
  readonly history: ChatMessage[];
  /** Sends a user message (a string, added to the history) or a whole conversation (replacing it) and resolves to
   * the reply, which joins the history. Calls on one session run one after another. */
  send(input: ChatMessage[] | string, opts?: SendOptions): Promise<ChatReply>;
  /** `send` as an async iterator of text pieces. */
  stream(input: ChatMessage[] | string, opts?: Omit<SendOptions, 'onToken'>): ChatStream;
  /** Forgets the conversation and the KV cache. */
  reset(): Promise<void>;
  tokenize(text: string, opts?: { addSpecial?: boolean }): Promise<Uint32Array>;
  detokenize(ids: Uint32Array | number[], opts?: { skipSpecial?: boolean }): Promise<string>;
  /** The model's chat template applied to `messages` (the assistant's turn opened unless told otherwise). */
  applyTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean }): Promise<string>;
  /** The conversation and the KV cache that holds it, as a Blob (`application/x-loom-chat`) that `restore` or
   * `openChat(source, {restore})` continues later on this model, on either device, without computing the
   * conversation again (a page reload, another tab). `meta` (any JSON value: an app's settings) is kept with it.
   * Its size is the KV cache's: layers × 2 × KV width × 4 bytes a position. */
  save(opts?: { meta?: unknown }): Promise<Blob>;
  /** Continues a saved chat of this model in this session, replacing its conversation. Another model's is refused
   * with `model_mismatch` and damaged bytes with `bad_format`; either leaves the session as it was. */
  restore(state: Blob | ArrayBuffer | Uint8Array): Promise<RestoredChat>;
  /** What `openChat(…, {restore})` brought back. */
  readonly restored?: RestoredChat;
  /** Frees the model (wasm memory or GPU buffers); later calls reject with `invalid_input`. */
  dispose(): Promise<void>;
}

export interface GpuInfo extends RawGpuInfo {
  /** The adapter's vendor and architecture as the browser names them (`GPUAdapter.info`; may be empty). */
  vendor?: string;
  architecture?: string;
  shader_f16?: boolean;
  /** The adapter offers WebGPU subgroups (the kernels do not use them in browsers yet). */
  subgroups?: boolean;
  /** True when the browser's adapter is a software rasterizer (SwiftShader, lavapipe): WebGPU runs on the CPU. */
  software?: boolean;
}

export interface CacheEntry {
  url: string;
  /** Bytes stored so far. */
  bytes: number;
  /** False for a download that was cut; the next `open`/`inspect` of the URL resumes it. */
  complete: boolean;
  /** When the download started (ms since the epoch). */
  storedAt: number;
}

export interface LoomModel {
  readonly name: string;
  readonly inspection: Inspection;
  tensorStats(name: string, opts?: { bins?: number }): Promise<TensorStats>;
  tensorPreview(name: string, n?: number): Promise<TensorPreview>;
  forward(input: Float32Array | number[], shape: number[], opts?: ForwardOptions): Promise<ForwardResult>;
  /** What `convert` would change, layer by layer (empty `layers` = lossless). */
  lossReport(opts: ConvertOptions): Promise<LossReport>;
  convert(
    opts: ConvertOptions & { allowLossy?: boolean; signal?: AbortSignal; onProgress?: (p: Progress) => void },
  ): Promise<{ blob: Blob; loss: LossReport }>;
  diff(other: LoomModel): Promise<ModelDiff>;
  /** Frees the model's memory in the worker; later calls reject with code `invalid_input`. */
  dispose(): Promise<void>;
}

export interface FitCheckOptions {
  /** KV cache positions to plan for (default: the GPU engine's, 4,096 or the model's context when shorter). */
  context?: number;
  /** Whether `openChat` would keep a URL's download (default true): then the storage quota counts. */
  cache?: boolean;
  signal?: AbortSignal;
}

/** What `fitCheck` found, from the model's headers alone. */
export interface FitReport extends RawFit {
  /** Bytes read from the source to find this out. */
  bytesRead: number;
  /** The download `openChat` would keep, against `navigator.storage.estimate()`; null when nothing would be stored
   * (local files, a download already kept, `cache: false`, or no storage here). */
  storage: { fits: boolean; neededBytes: number; availableBytes: number } | null;
}
