// The public API, the same in browsers and Node; `Transport` carries each call to the engine (worker or thread).
import type { CacheBackend } from './cache.js';
import type { Method } from './engine.js';
import { LoomError, abortError } from './errors.js';
import { openAIChat } from './openai.js';
import { pieceStream } from './stream.js';
import type { OpenAIReply } from './openai.js';
import type { WireSource } from './source.js';
import type { ChatInput, ChatOpenOptions, WireChatSource, WireSendOptions } from './engine.js';
import type {
  CacheEntry, ChatConstraint, ChatMessage, ConstraintText, ChatModelInfo, ChatReply, RestoredChat, ChatSession, ChatSource, ChatStream, ConvertOptions, FitCheckOptions, FitReport,
  ForwardOptions, ForwardResult, GpuInfo, Inspection, LoomModel, LossReport, ModelDiff, OpenAIChat, OpenChatOptions,
  OpenOptions, Progress, RawReply, SendOptions, Source, TensorPreview, TensorStats,
} from './types.js';

export interface CallOptions {
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
}

export interface Transport {
  /** Runs `method` on the engine; `cancel` tells the engine to stop the call and forgets it (the caller settles its
   * promise itself); `interrupt` fires the call's signal on the engine and still delivers its result. */
  start(method: Method, args: unknown[], onProgress: (p: Progress) => void, onToken?: (text: string) => void): {
    result: Promise<unknown>;
    cancel(): void;
    interrupt(): void;
  };
}

/** A call that settles at once when its signal fires, whatever the engine is doing. */
function call<T>(transport: Transport, method: Method, args: unknown[], opts: CallOptions = {}): Promise<T> {
  const { signal, onProgress } = opts;
  if (signal?.aborted) return Promise.reject(abortError(method));
  const report = (p: Progress) => {
    try {
      onProgress?.(p);
    } catch (e) {
      console.error('loom-wasm: an onProgress callback threw', e);
    }
  };
  const { result, cancel } = transport.start(method, args, report);
  if (!signal) return result as Promise<T>;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      cancel();
      reject(abortError(method));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    result.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v as T);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

function wireOptions(opts: OpenOptions | undefined) {
  const load = opts?.load ?? 'full';
  if (load !== 'full' && load !== 'gpu') {
    throw new LoomError('invalid_input', `load must be 'full' or 'gpu', got ${JSON.stringify(load)}`);
  }
  return { cache: opts?.cache ?? true, name: opts?.name, load };
}

function checkSource(source: Source): void {
  const ok =
    typeof source === 'string' ||
    source instanceof URL ||
    source instanceof Blob ||
    source instanceof ArrayBuffer ||
    source instanceof Uint8Array;
  if (!ok) {
    throw new LoomError('invalid_input', 'a model source must be a File, Blob, ArrayBuffer, Uint8Array, URL or URL string');
  }
}

class Model implements LoomModel {
  constructor(
    private readonly transport: Transport,
    readonly id: number,
    readonly name: string,
    readonly inspection: Inspection,
  ) {}

  tensorStats(name: string, opts?: { bins?: number }): Promise<TensorStats> {
    return call(this.transport, 'tensorStats', [this.id, name, opts?.bins ?? 32]);
  }

  tensorPreview(name: string, n = 64): Promise<TensorPreview> {
    return call(this.transport, 'tensorPreview', [this.id, name, n]);
  }

  async forward(input: Float32Array | number[], shape: number[], opts: ForwardOptions = {}): Promise<ForwardResult> {
    if (!Array.isArray(shape) || !shape.length || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new LoomError('invalid_input', `shape must be a non-empty array of sizes, got ${JSON.stringify(shape)}`);
    }
    const data = input instanceof Float32Array ? input : Float32Array.from(input);
    if (opts.device !== undefined && opts.device !== 'cpu' && opts.device !== 'gpu') {
      throw new LoomError('invalid_input', `device must be 'cpu' or 'gpu', got ${JSON.stringify(opts.device)}`);
    }
    return call(this.transport, 'forward', [this.id, data, shape, opts.device], opts);
  }

  lossReport(opts: ConvertOptions): Promise<LossReport> {
    return call(this.transport, 'lossReport', [this.id, plainConvertOptions(opts)]);
  }

  convert(
    opts: ConvertOptions & { allowLossy?: boolean; signal?: AbortSignal; onProgress?: (p: Progress) => void },
  ): Promise<{ blob: Blob; loss: LossReport }> {
    const wire = { ...plainConvertOptions(opts), allowLossy: opts.allowLossy ?? false };
    return call(this.transport, 'convert', [this.id, wire], opts);
  }

  async diff(other: LoomModel): Promise<ModelDiff> {
    if (!(other instanceof Model) || other.transport !== this.transport) {
      throw new LoomError('invalid_input', 'diff() needs another model opened with this package');
    }
    return call(this.transport, 'diff', [this.id, other.id]);
  }

  dispose(): Promise<void> {
    return call(this.transport, 'dispose', [this.id]);
  }
}

function plainConvertOptions(opts: ConvertOptions): ConvertOptions {
  return { format: opts.format, dtype: opts.dtype, layerDtypes: opts.layerDtypes };
}

function checkMessages(input: unknown): void {
  if (typeof input === 'string') return;
  const ok =
    Array.isArray(input) &&
    input.length > 0 &&
    input.every((m) => m && typeof m === 'object' && typeof m.role === 'string' && typeof m.content === 'string');
  if (!ok) {
    throw new LoomError('invalid_input', 'send() takes a string or a non-empty array of {role, content} messages');
  }
}

/** What `send` puts on the wire: the sampling options, type-checked here so mistakes name the option. */
function wireSendOptions(opts: SendOptions): WireSendOptions {
  const out: WireSendOptions = {};
  for (const key of ['temperature', 'topK', 'topP', 'minP', 'repetitionPenalty', 'seed', 'maxTokens'] as const) {
    const v = opts[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      throw new LoomError('invalid_input', `${key} must be a finite number, got ${JSON.stringify(v)}`);
    }
    out[key] = v;
  }
  if (opts.stop !== undefined) {
    if (!Array.isArray(opts.stop) || !opts.stop.every((s) => typeof s === 'string')) {
      throw new LoomError('invalid_input', 'stop must be an array of strings');
    }
    out.stop = [...opts.stop];
  }
  if (opts.truncate !== undefined) {
    if (typeof opts.truncate !== 'boolean') throw new LoomError('invalid_input', 'truncate must be true or false');
    out.truncate = opts.truncate;
  }
  if (opts.constraint !== undefined) out.constraint = wireConstraint(opts.constraint);
  const top = opts.topLogprobs ?? 0;
  if (typeof top !== 'number' || !Number.isInteger(top) || top < 0 || top > 20) {
    throw new LoomError('invalid_input', `topLogprobs must be a whole number from 0 to 20, got ${JSON.stringify(opts.topLogprobs)}`);
  }
  if (opts.logprobs) out.logprobs = top;
  else if (top > 0) throw new LoomError('invalid_input', 'topLogprobs needs logprobs: true');
  return out;
}

/** A constraint as the grammar module takes it: its kind and its text. */
function wireConstraint(c: ChatConstraint): ConstraintText {
  const text = (v: unknown, what: string): string => {
    if (typeof v !== 'string') throw new LoomError('invalid_input', `constraint.${what} must be a string`);
    return v;
  };
  switch (c?.type) {
    case 'json_schema':
      if (typeof c.schema !== 'boolean' && (typeof c.schema !== 'object' || c.schema === null)) {
        throw new LoomError('invalid_input', 'constraint.schema must be a JSON Schema (an object or a boolean)');
      }
      return { kind: 'json_schema', source: JSON.stringify(c.schema) };
    case 'json_object':
      return { kind: 'json_object', source: '' };
    case 'regex':
      return { kind: 'regex', source: text(c.pattern, 'pattern') };
    case 'lark':
      return { kind: 'lark', source: text(c.grammar, 'grammar') };
    default:
      throw new LoomError('invalid_input', `constraint.type must be json_schema, json_object, regex or lark, got ${JSON.stringify((c as { type?: unknown })?.type)}`);
  }
}

class Chat implements ChatSession {
  /** Calls on one session run in order: each waits for the one before. */
  private queue: Promise<unknown> = Promise.resolve();
  private messages: ChatMessage[] = [];
  restored?: RestoredChat;
  readonly chat: OpenAIChat = openAIChat(this);

  constructor(
    private readonly transport: Transport,
    private readonly id: number,
    readonly name: string,
    readonly device: 'gpu' | 'cpu',
    readonly info: ChatModelInfo,
    readonly adapter?: string,
    readonly fallbackReason?: string,
    readonly warning?: string,
  ) {}

  get history(): ChatMessage[] {
    return this.messages.map((m) => ({ ...m }));
  }

  private enqueue<T>(run: () => Promise<T>): Promise<T> {
    const next = this.queue.then(run, run);
    this.queue = next.catch(() => undefined);
    return next;
  }

  send(input: ChatMessage[] | string, opts: SendOptions = {}): Promise<ChatReply> {
    try {
      checkMessages(input);
      const wire = wireSendOptions(opts);
      const wireInput = typeof input === 'string' ? input : input.map((m) => ({ role: m.role, content: m.content }));
      return this.exchange(wireInput, wire, opts);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** `chat.completions.create`'s reply (src/openai.ts): the request's JSON, checked and begun by the chat module. */
  sendOpenAI(body: string, requestId: string, opts: { signal?: AbortSignal; onToken?: (text: string) => void }): Promise<OpenAIReply> {
    return this.exchange({ openai: body, requestId }, {}, opts);
  }

  /** Runs one reply in the worker, in turn with the session's other calls. */
  private exchange(
    wireInput: ChatInput,
    wire: WireSendOptions,
    opts: { signal?: AbortSignal; onToken?: (text: string) => void },
  ): Promise<OpenAIReply> {
    const { signal, onToken } = opts;
    return this.enqueue(async () => {
      if (signal?.aborted) throw abortError('send()');
      const report = (t: string) => {
        try {
          onToken?.(t);
        } catch (e) {
          console.error('loom-wasm: an onToken callback threw', e);
        }
      };
      const { result, interrupt } = this.transport.start('chatSend', [this.id, wireInput, wire], () => {}, report);
      signal?.addEventListener('abort', interrupt, { once: true });
      try {
        const { reply, history } = (await result) as { reply: RawReply & { devicesLost: number }; history: ChatMessage[] };
        this.messages = history;
        return reply;
      } finally {
        signal?.removeEventListener('abort', interrupt);
      }
    });
  }

  stream(input: ChatMessage[] | string, opts: Omit<SendOptions, 'onToken'> = {}): ChatStream {
    return pieceStream((signal, onToken) => this.send(input, { ...opts, signal, onToken }), opts.signal);
  }

  reset(): Promise<void> {
    return this.enqueue(async () => {
      await call(this.transport, 'chatReset', [this.id]);
      this.messages = [];
    });
  }

  tokenize(text: string, opts: { addSpecial?: boolean } = {}): Promise<Uint32Array> {
    if (typeof text !== 'string') return Promise.reject(new LoomError('invalid_input', 'tokenize() takes a string'));
    return this.enqueue(() => call(this.transport, 'chatTokenize', [this.id, text, opts.addSpecial ?? false]));
  }

  detokenize(ids: Uint32Array | number[], opts: { skipSpecial?: boolean } = {}): Promise<string> {
    const list = Array.from(ids as ArrayLike<number>);
    if (!list.every((i) => Number.isInteger(i) && i >= 0 && i < 2 ** 32)) {
      return Promise.reject(new LoomError('invalid_input', 'detokenize() takes token ids (whole numbers ≥ 0)'));
    }
    return this.enqueue(() =>
      call(this.transport, 'chatDetokenize', [this.id, Uint32Array.from(list), opts.skipSpecial ?? true]),
    );
  }

  applyTemplate(messages: ChatMessage[], opts: { addGenerationPrompt?: boolean } = {}): Promise<string> {
    try {
      checkMessages(messages);
    } catch (e) {
      return Promise.reject(e);
    }
    const plain = messages.map((m) => ({ role: m.role, content: m.content }));
    return this.enqueue(() =>
      call(this.transport, 'chatTemplate', [this.id, plain, opts.addGenerationPrompt ?? true]),
    );
  }

  save(opts: { meta?: unknown } = {}): Promise<Blob> {
    let meta: string | undefined;
    try {
      meta = opts.meta === undefined ? undefined : JSON.stringify(opts.meta);
    } catch (e) {
      return Promise.reject(new LoomError('invalid_input', `save(): meta must be a JSON value (${String(e)})`));
    }
    return this.enqueue(() => call<Blob>(this.transport, 'chatSave', [this.id, meta]));
  }

  restore(state: Blob | ArrayBuffer | Uint8Array): Promise<RestoredChat> {
    if (!(state instanceof Blob || state instanceof ArrayBuffer || state instanceof Uint8Array)) {
      return Promise.reject(new LoomError('invalid_input', 'restore() takes the Blob (or bytes) that save() made'));
    }
    return this.enqueue(async () => {
      const r = await call<RestoredChat>(this.transport, 'chatRestore', [this.id, state]);
      this.messages = r.history;
      return r;
    });
  }

  dispose(): Promise<void> {
    return this.enqueue(() => call(this.transport, 'chatDispose', [this.id]));
  }
}

/** Every file under a directory handle, with its path relative to it. */
async function directoryFiles(dir: FileSystemDirectoryHandle, prefix = ''): Promise<{ files: File[]; names: string[] }> {
  const files: File[] = [];
  const names: string[] = [];
  const entries = (dir as unknown as { values(): AsyncIterable<FileSystemHandle> }).values();
  for await (const entry of entries) {
    const path = `${prefix}${entry.name}`;
    if (entry.kind === 'file') {
      files.push(await (entry as FileSystemFileHandle).getFile());
      names.push(path);
    } else {
      const sub = await directoryFiles(entry as FileSystemDirectoryHandle, `${path}/`);
      files.push(...sub.files);
      names.push(...sub.names);
    }
  }
  return { files, names };
}

function isDirectoryHandle(x: unknown): x is FileSystemDirectoryHandle {
  return !!x && typeof x === 'object' && (x as { kind?: unknown }).kind === 'directory' &&
    typeof (x as { values?: unknown }).values === 'function';
}

function isFileList(x: unknown): x is FileList {
  return typeof FileList !== 'undefined' && x instanceof FileList;
}

export interface Api {
  inspect(source: Source, opts?: OpenOptions): Promise<Inspection>;
  open(source: Source, opts?: OpenOptions): Promise<LoomModel>;
  /** Opens an LLM to chat with (GGUF, HF folder, Loom transformer `.entity`), in the worker. */
  openChat(source: ChatSource, opts?: OpenChatOptions): Promise<ChatSession>;
  /**
   * Whether a model fits this browser before its weights are fetched: its headers only (a few Range reads of a URL),
   * against the WebGPU adapter's buffer and binding limits, 32-bit WebAssembly memory for the CPU engine, and the
   * storage quota for a download `openChat` would keep.
   */
  fitCheck(source: ChatSource, opts?: FitCheckOptions): Promise<FitReport>;
  openFiles(files: File[], opts?: OpenOptions): Promise<LoomModel>;
  gpuInfo(): Promise<GpuInfo>;
  /** Bytes of WebAssembly memory the engine holds (its high-water mark: wasm memory never shrinks). */
  memoryBytes(): Promise<number>;
  cache: { list(): Promise<CacheEntry[]>; delete(url: string): Promise<void>; clear(): Promise<void> };
  /**
   * `cacheBackend`: where downloads are kept. `testBreakGpuKernel` (tests only): every dispatch of the GPU kernels
   * whose pipeline name starts with it is skipped from here on (`null` mends them), to see the self-test at
   * `openChat` fall back to the CPU. `testLoseGpuDevice` (tests only): destroys the WebGPU device now, as a driver
   * reset would.
   */
  configure(opts: { cacheBackend?: CacheBackend; testBreakGpuKernel?: string | null; testLoseGpuDevice?: boolean }): Promise<void>;
}

/** `toWire` turns a URL or URL string into the absolute URL the engine fetches. */
export function createApi(transport: Transport, resolveUrl: (url: string | URL) => string): Api {
  const toWire = (source: Source): WireSource => {
    checkSource(source);
    return typeof source === 'string' || source instanceof URL ? { url: checkedUrl(source) } : source;
  };
  const checkedUrl = (url: string | URL): string => {
    try {
      return resolveUrl(url);
    } catch {
      throw new LoomError('invalid_input', `not a URL this page can fetch: ${String(url)}`);
    }
  };
  /** A chat source as it crosses to the worker: a folder's files with their names, or one source. */
  const toWireChat = async (source: ChatSource): Promise<WireChatSource> => {
    if (isDirectoryHandle(source)) return directoryFiles(source);
    if (isFileList(source) || Array.isArray(source)) {
      const files = Array.from(source as ArrayLike<File>);
      if (!files.length || !files.every((f) => f instanceof Blob)) {
        throw new LoomError('invalid_input', 'openChat() needs a non-empty list of Files (a model folder)');
      }
      const names = files.map((f) => (f as File & { webkitRelativePath?: string }).webkitRelativePath || f.name || 'model');
      return { files, names };
    }
    return toWire(source as Source);
  };
  return {
    inspect: async (source, opts) => call(transport, 'inspect', [toWire(source), wireOptions(opts)], opts),
    open: async (source, opts) => {
      const { id, name, inspection } = await call<{ id: number; name: string; inspection: Inspection }>(
        transport, 'open', [toWire(source), wireOptions(opts)], opts,
      );
      return new Model(transport, id, name, inspection);
    },
    openFiles: async (files, opts) => {
      if (!Array.isArray(files) || !files.length || !files.every((f) => f instanceof Blob)) {
        throw new LoomError('invalid_input', 'openFiles() needs a non-empty array of Files (a checkpoint folder)');
      }
      const { id, name, inspection } = await call<{ id: number; name: string; inspection: Inspection }>(
        transport, 'openFiles', [files, wireOptions(opts)], opts,
      );
      return new Model(transport, id, name, inspection);
    },
    fitCheck: async (source, opts = {}) => {
      if (opts.context !== undefined && !(Number.isInteger(opts.context) && opts.context > 0)) {
        throw new LoomError('invalid_input', `context must be a whole number of positions, got ${opts.context}`);
      }
      return call<FitReport>(transport, 'chatFit', [await toWireChat(source), { cache: opts.cache ?? true, context: opts.context }], opts);
    },
    openChat: async (source, opts = {}) => {
      const device = opts.device ?? 'auto';
      if (device !== 'auto' && device !== 'gpu' && device !== 'cpu') {
        throw new LoomError('invalid_input', `device must be 'auto', 'gpu' or 'cpu', got ${JSON.stringify(device)}`);
      }
      if (opts.context !== undefined && !(Number.isInteger(opts.context) && opts.context > 0)) {
        throw new LoomError('invalid_input', `context must be a whole number of positions, got ${opts.context}`);
      }
      const wire = await toWireChat(source);
      const wireOpts: ChatOpenOptions = {
        device,
        cache: opts.cache ?? true,
        integrity: opts.integrity,
        context: opts.context,
        name: opts.name,
      };
      const r = await call<{
        id: number; name: string; device: 'gpu' | 'cpu'; adapter?: string; fallbackReason?: string; warning?: string;
        info: ChatModelInfo;
      }>(transport, 'chatOpen', [wire, wireOpts], opts);
      const session = new Chat(transport, r.id, r.name, r.device, r.info, r.adapter, r.fallbackReason, r.warning);
      if (opts.restore !== undefined) {
        try {
          session.restored = await session.restore(opts.restore);
        } catch (e) {
          await session.dispose().catch(() => undefined);
          throw e;
        }
      }
      return session;
    },
    gpuInfo: () => call(transport, 'gpuInfo', []),
    memoryBytes: () => call(transport, 'memoryBytes', []),
    cache: {
      list: () => call(transport, 'cacheList', []),
      delete: async (url) => call(transport, 'cacheDelete', [checkedUrl(url)]),
      clear: () => call(transport, 'cacheClear', []),
    },
    configure: (opts) =>
      call(transport, 'configure', [opts.cacheBackend ?? 'auto', opts.testBreakGpuKernel, opts.testLoseGpuDevice]),
  };
}
