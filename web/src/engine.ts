// The side that holds the wasm: a module Web Worker in browsers, the calling thread in Node. Every public call
// arrives here as (method, args) and runs with its own progress callback and abort signal.
import initInspector, * as inspectorGlue from './pkg/loom_wasm.js';
import initChat, * as chatGlue from './pkg-chat/loom_chat.js';
import initGrammar, * as grammarGlue from './pkg-grammar/loom_grammar.js';
import { cacheAvailable, download, cachedBlob, listCache, deleteCached, clearCache, setCacheBackend } from './cache.js';
import type { CacheBackend } from './cache.js';
import { LoomError, throwIfAborted, toLoomError } from './errors.js';
import { BlobReader, BytesReader, HttpReader, concat, defaultName, readAll } from './source.js';
import type { ByteReader, WireSource } from './source.js';
import type { BlobRange, RawOpenAIPlan, RawStep } from './generated/boundary.js';
import type {
  ChatMessage, ConstraintText, ConvertOptions, FitReport, ForwardResult, GpuInfo, Inspection, LossReport, ModelDiff,
  Progress, RawForward, SendOptions, TensorPreview, TensorStats,
} from './types.js';

// The wasm modules' classes and results, typed by their glue's .d.ts (wasm-bindgen, with crate/ts/boundary.ts).
/** A Loom network held in the inspector module (crate/src/wasm_inspector.rs). Errors are thrown as
 * `LoomErrorObject`s. */
type RawModel = inspectorGlue.Model;
/** A `.entity` file's weights streamed to the GPU blob by blob (`open(…, {load: 'gpu'})`). */
type RawGpuStream = inspectorGlue.GpuStream;
/** A model to chat with (crate/src/wasm_chat.rs): `begin`, then `step` until done, then `finish`. */
type RawChat = chatGlue.Chat;
/** A reply's input: a user message, a whole conversation, or an OpenAI Chat Completions request (its JSON). */
export type ChatInput = ChatMessage[] | string | { openai: string; requestId: string };
export type WireSendOptions = Omit<SendOptions, 'onToken' | 'signal' | 'constraint' | 'logprobs' | 'topLogprobs'> & {
  /** Log-probabilities with this many alternatives a token. */
  logprobs?: number;
  /** The grammar module's kind and text (`json_schema`, `json_object`, `regex`, `lark`). */
  constraint?: ConstraintText;
};
/** The grammar engine's module, `loom_grammar` (grammar/: llguidance), for constrained replies. */
type GrammarModule = typeof grammarGlue;
type GrammarVocab = InstanceType<GrammarModule['GrammarVocab']>;
type Grammar = ReturnType<GrammarVocab['start']>;
interface RawModules {
  inspector: typeof inspectorGlue;
  chat: typeof chatGlue;
  grammar: GrammarModule;
}
export type WasmName = keyof RawModules;

export interface CallContext {
  onProgress: (p: Progress) => void;
  /** A chat reply's text, piece by piece. */
  onToken?: (text: string) => void;
  signal: AbortSignal;
}

export interface EngineOptions {
  cache?: boolean;
  name?: string;
  load?: 'full' | 'gpu';
}

/** The package's wasm modules (scripts/build-pkg.sh), each instantiated on first use: a page that only inspects
 * never fetches the chat's, a chat never the inspector's, and only a constrained reply the grammar engine. Their
 * glue is imported statically (15 kB gzipped at most), so that bundlers need no code splitting in the worker. */
const glue: { [K in WasmName]: { init: () => Promise<unknown>; bindings: unknown } } = {
  inspector: { init: () => initInspector(), bindings: inspectorGlue },
  chat: { init: () => initChat(), bindings: chatGlue },
  grammar: { init: () => initGrammar(), bindings: grammarGlue },
};
/** How a wasm module is obtained: the default fetches it next to its glue (`new URL(…, import.meta.url)`). */
let loadWasm: (name: WasmName) => Promise<unknown> = (name) => glue[name].init();
const wasmReady: Partial<Record<WasmName, Promise<unknown>>> = {};
/** Node: `file:` URLs and paths become lazily read Blobs (fs.openAsBlob). */
let openFileUrl: ((url: string) => Promise<Blob>) | undefined;

export function configureEngine(opts: {
  loadWasm?: (name: WasmName) => Promise<unknown>;
  openFileUrl?: (url: string) => Promise<Blob>;
  cacheBackend?: CacheBackend;
}): void {
  if (opts.loadWasm) loadWasm = opts.loadWasm;
  if (opts.openFileUrl) openFileUrl = opts.openFileUrl;
  if (opts.cacheBackend) setCacheBackend(opts.cacheBackend);
}

function ready<K extends WasmName>(name: K): Promise<RawModules[K]> {
  let loading = wasmReady[name];
  if (!loading) {
    loading = loadWasm(name).then(
      () => glue[name].bindings,
      (e) => {
        delete wasmReady[name];
        throw new LoomError('internal', `could not load loom-wasm's ${name} WebAssembly module: ${toLoomError(e).message}`);
      },
    );
    wasmReady[name] = loading;
  }
  return loading as Promise<RawModules[K]>;
}

/** The modules instantiated so far. */
async function loadedModules(): Promise<{ memoryBytes(): number }[]> {
  const loaded = await Promise.allSettled(Object.values(wasmReady) as Promise<{ memoryBytes(): number }>[]);
  return loaded.flatMap((m) => (m.status === 'fulfilled' ? [m.value] : []));
}

/** A model held whole in WebAssembly memory, or one whose weights were streamed to the GPU (read again from
 * `reader` for statistics). */
type OpenModel =
  | { kind: 'full'; model: RawModel; name: string }
  | { kind: 'gpu'; stream: RawGpuStream; blobs: BlobRange[]; reader: ByteReader; name: string };
const models = new Map<number, OpenModel>();
let nextId = 1;

function getModel(id: number): OpenModel {
  const m = models.get(id);
  if (!m) throw new LoomError('invalid_input', 'this model was disposed; open it again');
  return m;
}

/** The whole-file model, for the calls a model streamed to the GPU cannot make. */
function fullModel(id: number, what: string): RawModel {
  const m = getModel(id);
  if (m.kind === 'full') return m.model;
  throw new LoomError(
    'unsupported',
    `${what} needs the weights in memory, and ${m.name} was opened with load: 'gpu' (they are on the GPU only); ` +
      "open it with load: 'full' (the default)",
  );
}

async function fileUrlBlob(url: string): Promise<Blob | undefined> {
  if (!url.startsWith('file:')) return undefined;
  if (!openFileUrl) throw new LoomError('invalid_input', `${url}: file: URLs can only be read under Node`);
  try {
    return await openFileUrl(url);
  } catch (e) {
    throw new LoomError('invalid_input', `cannot read ${url}: ${(e as Error).message}`);
  }
}

/** Random access for header-only reads: never downloads a whole URL. */
async function openReader(src: WireSource, opts: EngineOptions, signal: AbortSignal): Promise<ByteReader> {
  if (src instanceof Blob) return new BlobReader(src);
  if (src instanceof ArrayBuffer) return new BytesReader(new Uint8Array(src));
  if (ArrayBuffer.isView(src)) return new BytesReader(src);
  const local = (await fileUrlBlob(src.url)) ?? (opts.cache !== false ? await cachedBlob(src.url) : undefined);
  return local ? new BlobReader(local) : HttpReader.open(src.url, signal);
}

/** All the bytes of a source; URLs are downloaded (through the cache unless `cache: false`). */
async function loadBytes(src: WireSource, opts: EngineOptions, ctx: CallContext): Promise<Uint8Array> {
  if (src instanceof ArrayBuffer) return new Uint8Array(src);
  if (ArrayBuffer.isView(src)) return src;
  const data =
    src instanceof Blob
      ? src
      : ((await fileUrlBlob(src.url)) ??
        (await download(src.url, { cache: opts.cache !== false, signal: ctx.signal, onProgress: ctx.onProgress })));
  return data instanceof Blob ? readAll(new BlobReader(data), ctx.onProgress, ctx.signal) : data;
}

/** Random access for the header of a load to the GPU: local bytes, a file, a cached download, else HTTP Range. */
async function gpuHeaderReader(src: WireSource, opts: EngineOptions, ctx: CallContext): Promise<ByteReader> {
  if (!(src instanceof Blob || src instanceof ArrayBuffer || ArrayBuffer.isView(src)) && opts.cache !== false) {
    const cached = await cachedBlob(src.url);
    if (cached) return new BlobReader(cached);
  }
  return openReader(src, opts, ctx.signal);
}

async function inspect(src: WireSource, opts: EngineOptions, ctx: CallContext): Promise<Inspection> {
  const [reader, wasm] = await Promise.all([openReader(src, opts, ctx.signal), ready('inspector')]);
  const out = await withHeader(reader, ctx, (prefix) => wasm.inspectHeader(prefix, reader.size));
  out.bytes_read = reader.bytesRead;
  return out;
}

/** Calls `parse` on the file's first bytes until they hold its header. Most headers fit in the first 64 KiB; the
 * parser says exactly how much more it needs otherwise (`need_more`). */
async function withHeader<T>(reader: ByteReader, ctx: CallContext, parse: (prefix: Uint8Array) => T | Promise<T>): Promise<T> {
  let prefix = await reader.read(0, Math.min(reader.size, 64 * 1024), ctx.signal);
  for (;;) {
    ctx.onProgress({ phase: 'parse', loaded: prefix.length, total: reader.size });
    try {
      return await parse(prefix);
    } catch (e) {
      const needed = (e as { code?: string; needed?: number }).code === 'need_more' && (e as { needed: number }).needed;
      if (!needed) throw e;
      if (needed > reader.size || needed <= prefix.length) {
        throw new LoomError('bad_format', `the file is truncated: its header needs ${needed} bytes, it has ${reader.size}`);
      }
      throwIfAborted(ctx.signal);
      prefix = concat([prefix, await reader.read(prefix.length, needed - prefix.length, ctx.signal)]);
    }
  }
}

async function open(src: WireSource, opts: EngineOptions, ctx: CallContext) {
  if (opts.load === 'gpu') return openGpu(src, opts, ctx);
  const [bytes, wasm] = await Promise.all([loadBytes(src, opts, ctx), ready('inspector')]);
  throwIfAborted(ctx.signal);
  const name = opts.name ?? defaultName(src);
  ctx.onProgress({ phase: 'parse', loaded: 0, total: bytes.length });
  const model = wasm.Model.fromBytes(bytes, name);
  ctx.onProgress({ phase: 'parse', loaded: bytes.length, total: bytes.length });
  return register(model, name);
}

// One GPU call at a time: every model shares one WebGPU device, whose error scopes form a single stack, and wgpu
// panics (killing the worker) when two calls that await in between pop their scopes out of order.
let gpuQueue: Promise<unknown> = Promise.resolve();

/** Runs `call` once every GPU call queued before it has settled. */
function gpuTurn<T>(call: () => Promise<T>): Promise<T> {
  const turn = gpuQueue.then(call);
  gpuQueue = turn.catch(() => undefined);
  return turn;
}

/** `load: 'gpu'`: the header, then each blob read from the source and fed to the GPU (`upload` progress in bytes
 * of weights); the wasm heap holds the header and one blob at a time. */
async function openGpu(src: WireSource, opts: EngineOptions, ctx: CallContext) {
  const [header, wasm] = await Promise.all([gpuHeaderReader(src, opts, ctx), ready('inspector')]);
  const name = opts.name ?? defaultName(src);
  // The header first: another format, a bad header or no WebGPU is refused before any weights are read.
  const stream = await withHeader(header, ctx, (prefix) => gpuTurn(() => wasm.GpuStream.begin(prefix, header.size, name))).catch((e) => {
    const err = toLoomError(e);
    if (err.code !== 'no_webgpu') throw err;
    throw new LoomError('no_webgpu', `load: 'gpu' needs WebGPU (${err.message}); open with load: 'full' to run on the CPU`);
  });
  try {
    // A URL read over HTTP Range goes through the download cache, when there is one, and is read from there.
    let reader = header;
    if (header instanceof HttpReader && opts.cache !== false && (await cacheAvailable())) {
      const url = (src as { url: string }).url;
      const data = await download(url, { cache: true, signal: ctx.signal, onProgress: ctx.onProgress });
      reader = data instanceof Blob ? new BlobReader(data) : new BytesReader(data);
    }
    const blobs = stream.blobs();
    const total = blobs.reduce((sum, b) => sum + b.length, 0);
    let loaded = 0;
    ctx.onProgress({ phase: 'upload', loaded, total });
    for (const b of blobs) {
      throwIfAborted(ctx.signal);
      const bytes = await reader.read(b.offset, b.length, ctx.signal);
      await gpuTurn(() => stream.feed(b.path, bytes));
      loaded += b.length;
      ctx.onProgress({ phase: 'upload', loaded, total });
    }
    throwIfAborted(ctx.signal);
    const inspection = stream.inspection();
    inspection.bytes_read = header.bytesRead + (reader === header ? 0 : reader.bytesRead);
    const id = nextId++;
    models.set(id, { kind: 'gpu', stream, blobs, reader, name });
    return { id, name, inspection };
  } catch (e) {
    stream.free();
    throw e;
  }
}

/** The bytes of layer `name`'s blob, read again from a GPU-loaded model's source (empty when it has none: the
 * wasm side then says the layer is unknown). */
async function blobBytes(m: Extract<OpenModel, { kind: 'gpu' }>, name: string, signal: AbortSignal): Promise<Uint8Array> {
  const layer = name.split('#')[0]; // `path#part` reads one part of the layer's blob
  const b = m.blobs.find((b) => b.path === layer);
  return b ? m.reader.read(b.offset, b.length, signal) : new Uint8Array(0);
}

/** Every file's bytes, with `read` progress over all of them. */
async function readFiles(files: File[], ctx: CallContext): Promise<Uint8Array[]> {
  const total = files.reduce((s, f) => s + f.size, 0);
  let before = 0;
  const contents: Uint8Array[] = [];
  for (const f of files) {
    const bytes = await readAll(new BlobReader(f), (p) => ctx.onProgress({ ...p, loaded: before + p.loaded, total }), ctx.signal);
    contents.push(bytes);
    before += f.size;
  }
  return contents;
}

async function openFiles(files: File[], opts: EngineOptions, ctx: CallContext) {
  const wasm = await ready('inspector');
  const total = files.reduce((s, f) => s + f.size, 0);
  const contents = await readFiles(files, ctx);
  const names = files.map((f) => (f as File & { webkitRelativePath?: string }).webkitRelativePath || f.name);
  const name = opts.name ?? commonFolder(names);
  ctx.onProgress({ phase: 'parse', loaded: 0, total });
  const model = wasm.Model.fromFiles(names, contents);
  ctx.onProgress({ phase: 'parse', loaded: total, total });
  return register(model, name);
}

function commonFolder(names: string[]): string {
  const first = names[0]?.split('/') ?? [];
  return first.length > 1 && names.every((n) => n.startsWith(`${first[0]}/`)) ? first[0] : 'checkpoint';
}

function register(model: RawModel, name: string) {
  try {
    const inspection = model.inspection();
    const id = nextId++;
    models.set(id, { kind: 'full', model, name });
    return { id, name, inspection };
  } catch (e) {
    model.free();
    throw e;
  }
}

async function forward(
  id: number,
  input: Float32Array,
  shape: number[],
  asked: 'cpu' | 'gpu' | undefined,
  ctx: CallContext,
): Promise<ForwardResult> {
  const m = getModel(id);
  const dims = Uint32Array.from(shape);
  throwIfAborted(ctx.signal);
  if (m.kind === 'gpu') {
    if (asked === 'cpu') {
      throw new LoomError(
        'unsupported',
        `${m.name} was opened with load: 'gpu', so it runs on the GPU only; open it with load: 'full' to run it on the CPU`,
      );
    }
    ctx.onProgress({ phase: 'forward', loaded: 0, total: 1 });
    const t0 = performance.now();
    const out = await gpuTurn(() => m.stream.forward(input, dims));
    const ms = performance.now() - t0;
    ctx.onProgress({ phase: 'forward', loaded: 1, total: 1 });
    const result: ForwardResult = { data: out.data, shape: Array.from(out.shape), device: 'gpu', ms };
    if (out.cpu_layers && Object.keys(out.cpu_layers).length) result.cpu_layers = out.cpu_layers;
    return result;
  }
  const { model } = m;
  const device = asked ?? 'cpu';
  ctx.onProgress({ phase: 'forward', loaded: 0, total: 1 });
  const t0 = performance.now();
  let fallbackReason: string | undefined;
  let out: RawForward | undefined;
  if (device === 'gpu') {
    const info = await gpuInfo('inspector');
    if (!info.available) fallbackReason = info.reason ?? 'WebGPU is not available';
  }
  if (device === 'gpu' && fallbackReason === undefined) {
    try {
      out = await gpuTurn(() => model.forwardGpu(input, dims));
    } catch (e) {
      const err = toLoomError(e);
      if (err.code !== 'no_webgpu') throw err;
      fallbackReason = err.message;
    }
  }
  out ??= model.forwardCpu(input, dims);
  const ms = performance.now() - t0;
  ctx.onProgress({ phase: 'forward', loaded: 1, total: 1 });
  const result: ForwardResult = {
    data: out.data,
    shape: Array.from(out.shape),
    device: fallbackReason === undefined ? device : 'cpu',
    ms,
  };
  if (fallbackReason !== undefined) result.fallbackReason = fallbackReason;
  if (out.cpu_layers && Object.keys(out.cpu_layers).length) result.cpu_layers = out.cpu_layers;
  return result;
}

function lossReport(id: number, opts: ConvertOptions): LossReport {
  return fullModel(id, 'lossReport()').lossReport(opts.format, opts.dtype, opts.layerDtypes);
}

function convert(id: number, opts: ConvertOptions & { allowLossy?: boolean }, ctx: CallContext) {
  const model = fullModel(id, 'convert()');
  throwIfAborted(ctx.signal);
  ctx.onProgress({ phase: 'convert', loaded: 0, total: 1 });
  const loss = model.lossReport(opts.format, opts.dtype, opts.layerDtypes);
  const bytes = model.convert(opts.format, opts.dtype, opts.layerDtypes, opts.allowLossy ?? false);
  ctx.onProgress({ phase: 'convert', loaded: 1, total: 1 });
  const type = opts.format === 'json' ? 'application/json' : 'application/octet-stream';
  return { blob: new Blob([bytes as Uint8Array<ArrayBuffer>], { type }), loss };
}

/** Whether WebGPU works for `module`'s device (each module holds its own). */
async function gpuInfo(module: 'inspector' | 'chat'): Promise<GpuInfo> {
  const gpu = (globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu;
  if (!gpu) return { available: false, reason: 'WebGPU is not available here (navigator.gpu is missing)' };
  const wasm = await ready(module);
  let info: GpuInfo;
  try {
    info = await wasm.gpuInfo();
  } catch (e) {
    return { available: false, reason: toLoomError(e).message };
  }
  if (!info.available) return info;
  // wgpu's adapter info is mostly empty in browsers: the browser's own says what the adapter is. Asked once, since
  // every GPU forward checks gpuInfo first.
  adapterInfo ??= browserAdapter(gpu as BrowserGpu);
  const browser = await adapterInfo;
  if (!browser) return info;
  // wgpu names a browser adapter by its backend only ("… (BrowserWebGpu)"): the browser's name says which it is.
  const { name, ...rest } = browser;
  return { ...info, ...rest, adapter: name || info.adapter };
}

interface BrowserGpu {
  requestAdapter(): Promise<{
    info?: { vendor: string; architecture: string; description: string; isFallbackAdapter?: boolean };
    isFallbackAdapter?: boolean;
    features?: { has(name: string): boolean };
  } | null>;
}

let adapterInfo: ReturnType<typeof browserAdapter> | undefined;

/** Software rasterizers that WebGPU falls back to (Chromium's SwiftShader, Mesa's lavapipe/llvmpipe). */
const SOFTWARE_ADAPTER = /swiftshader|lavapipe|llvmpipe/i;

/** The browser's name for its WebGPU adapter (`GPUAdapter.info`), its vendor and architecture, whether it has
 * subgroups, and whether it is a software one rather than a GPU. */
async function browserAdapter(
  gpu: BrowserGpu,
): Promise<{ name: string; vendor: string; architecture: string; subgroups: boolean; software: boolean } | undefined> {
  const adapter = await gpu.requestAdapter().catch(() => null);
  const i = adapter?.info;
  if (!adapter || !i) return undefined;
  const name = i.description || [i.vendor, i.architecture].filter(Boolean).join(' ');
  const software = i.isFallbackAdapter === true || adapter.isFallbackAdapter === true || SOFTWARE_ADAPTER.test(`${name} ${i.architecture}`);
  const subgroups = adapter.features?.has('subgroups') === true;
  return { name, vendor: i.vendor, architecture: i.architecture, subgroups, software };
}


/** A chat source as it crosses postMessage: one file or URL, or the files of a folder with their relative names. */
export type WireChatSource = WireSource | { files: File[]; names: string[] };

export interface ChatOpenOptions {
  device: 'auto' | 'gpu' | 'cpu';
  cache: boolean;
  integrity?: string;
  context?: number;
  name?: string;
}

interface OpenChat {
  chat: RawChat;
  device: 'gpu' | 'cpu';
  name: string;
  /** Opens the model again on a new GPU device (after this one was lost), read again from its source. */
  reopen?: () => Promise<RawChat>;
  /** The model's vocabulary in the grammar module, built by its first constrained reply. */
  vocab?: GrammarVocab;
}

/** Devices a reply may lose, one after another, before it ends with `device_lost`. */
const REOPENS_PER_REPLY = 3;
const chats = new Map<number, OpenChat>();

function getChat(id: number): OpenChat {
  const c = chats.get(id);
  if (!c) throw new LoomError('invalid_input', 'this chat was disposed; open it again');
  return c;
}

/** The SHA-256 an `integrity` string names, as lowercase hex (SRI `sha256-<base64>`, or 64 hex digits). */
function expectedSha256(integrity: string): string {
  const sri = /^sha256-([A-Za-z0-9+/]{43}=)$/.exec(integrity.trim());
  if (sri) return [...atob(sri[1])].map((c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join('');
  const hex = /^(?:sha256:)?([0-9a-fA-F]{64})$/.exec(integrity.trim());
  if (hex) return hex[1].toLowerCase();
  throw new LoomError('invalid_input', `integrity must be 'sha256-<base64>' or 64 hex digits, got ${JSON.stringify(integrity)}`);
}

async function checkIntegrity(bytes: Uint8Array, integrity: string, src: WireChatSource): Promise<void> {
  const want = expectedSha256(integrity);
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
  const got = [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
  if (got === want) return;
  if ('url' in src && typeof src.url === 'string') await deleteCached(src.url).catch(() => {});
  throw new LoomError('bad_format', `the file's SHA-256 is ${got}, not the ${want} its integrity names: it was not used (and not kept)`);
}

/** Hands control back to the event loop (without setTimeout's clamping), so a stop message is seen between tokens. */
function yieldToEvents(): Promise<void> {
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => {
      ch.port1.close();
      resolve();
    };
    ch.port2.postMessage(null);
  });
}

/** Where a chat may run, asked before anything is read: the GPU with its adapter, or the CPU and why. */
async function chatDevice(opts: ChatOpenOptions): Promise<{ gpu: boolean; reason?: string }> {
  if (opts.device === 'cpu') return { gpu: false };
  const info = await gpuInfo('chat');
  if (!info.available) return { gpu: false, reason: info.reason ?? 'WebGPU is not available' };
  if (opts.device === 'auto' && info.software) {
    return { gpu: false, reason: `WebGPU runs on a software adapter here (${info.adapter ?? 'unknown'}), slower than the CPU engine` };
  }
  return { gpu: true };
}

/** Errors of the GPU itself: with `device: 'auto'` the chat falls back to the CPU on these. Any other error is the
 * file's, and the CPU would meet it too. */
const GPU_ERRORS = new Set(['no_webgpu', 'gpu', 'out_of_memory', 'device_lost', 'gpu_self_test']);

/** A model opened straight onto the GPU from its source (a URL, a file, or an HF folder's files): the headers, then
 * each block's tensors read from the source, uploaded and freed (`upload` progress in bytes of the files), so
 * WebAssembly memory never holds the model. */
async function chatStreamGpu(src: WireChatSource, opts: ChatOpenOptions, ctx: CallContext): Promise<RawChat> {
  let names: string[];
  let readers: ByteReader[];
  if ('files' in src && Array.isArray(src.files)) {
    names = src.names;
    readers = src.files.map((f) => new BlobReader(f));
  } else {
    const one = src as WireSource;
    let reader: ByteReader;
    if (one instanceof ArrayBuffer || ArrayBuffer.isView(one)) reader = new BytesReader(one instanceof ArrayBuffer ? new Uint8Array(one) : (one as Uint8Array));
    else if (one instanceof Blob) reader = new BlobReader(one);
    else {
      const data =
        (await fileUrlBlob(one.url)) ??
        (await download(one.url, { cache: opts.cache, signal: ctx.signal, onProgress: ctx.onProgress }));
      reader = data instanceof Blob ? new BlobReader(data) : new BytesReader(data);
    }
    if (opts.integrity !== undefined) await checkIntegrity(await readAll(reader, () => {}, ctx.signal), opts.integrity, one);
    names = [defaultName(one)];
    readers = [reader];
  }
  const total = readers.reduce((s, r) => s + r.size, 0);
  let loaded = 0;
  ctx.onProgress({ phase: 'upload', loaded, total });
  const read = async (file: number, offset: number, length: number) => {
    throwIfAborted(ctx.signal);
    const bytes = await readers[file].read(offset, length, ctx.signal);
    loaded += length;
    ctx.onProgress({ phase: 'upload', loaded: Math.min(loaded, total), total });
    return bytes;
  };
  const wasm = await ready('chat');
  return gpuTurn(() =>
    wasm.Chat.openGpu(
      names,
      readers.map((r) => r.size),
      read,
      opts.context,
    ),
  );
}

/** The fit check: the model's headers through header-only readers (a URL by Range, never downloaded), then the
 * storage a kept download would need. */
async function chatFit(src: WireChatSource, opts: { cache: boolean; context?: number }, ctx: CallContext): Promise<FitReport> {
  const wasm = await ready('chat');
  let names: string[];
  let readers: ByteReader[];
  let storageNeeded = 0;
  if ('files' in src && Array.isArray(src.files)) {
    names = src.names;
    readers = src.files.map((f) => new BlobReader(f));
  } else {
    const one = src as WireSource;
    const reader = await openReader(one, { cache: opts.cache }, ctx.signal);
    // Only a URL that is not kept yet (its reader reads the network) would take storage.
    if (reader instanceof HttpReader && opts.cache) storageNeeded = reader.size;
    names = [defaultName(one)];
    readers = [reader];
  }
  let bytesRead = 0;
  const read = async (file: number, offset: number, length: number) => {
    throwIfAborted(ctx.signal);
    bytesRead += length;
    return readers[file].read(offset, length, ctx.signal);
  };
  const fit = await gpuTurn(() => wasm.Chat.fit(names, readers.map((r) => r.size), read, opts.context));
  let storage: FitReport['storage'] = null;
  const estimate = (globalThis as { navigator?: { storage?: { estimate?(): Promise<{ quota?: number; usage?: number }> } } })
    .navigator?.storage?.estimate;
  if (storageNeeded > 0 && estimate) {
    const { quota = 0, usage = 0 } = await estimate.call((globalThis as any).navigator.storage);
    const availableBytes = Math.max(0, quota - usage);
    storage = { fits: storageNeeded <= availableBytes, neededBytes: storageNeeded, availableBytes };
  }
  return { ...fit, bytesRead, storage };
}

async function chatOpen(src: WireChatSource, opts: ChatOpenOptions, ctx: CallContext) {
  const wasm = await ready('chat');
  const files = 'files' in src && Array.isArray(src.files) ? src : undefined;
  const name = opts.name ?? (files ? (files.names.length === 1 ? files.names[0] : commonFolder(files.names)) : defaultName(src as WireSource));
  const where = await chatDevice(opts);
  let fallbackReason = where.reason;
  // On the GPU the model streams there block by block; on the CPU it is read whole into wasm memory.
  if (where.gpu) {
    try {
      // Reopened without the open call's progress or signal: it runs inside a reply, which has its own.
      const quiet: CallContext = { onProgress: () => {}, signal: new AbortController().signal };
      const reopen = () => chatStreamGpu(src, opts, quiet);
      return await registerChat(await chatStreamGpu(src, opts, ctx), 'gpu', name, undefined, reopen);
    } catch (e) {
      const err = toLoomError(e);
      // A GPU that computes wrong (the self-test at open) is passed by even when asked for: its replies would be.
      const always = err.code === 'no_webgpu' || err.code === 'gpu_self_test';
      if (!GPU_ERRORS.has(err.code) || (opts.device === 'gpu' && !always)) throw err;
      fallbackReason = err.message;
    }
  }
  let names: string[];
  let contents: Uint8Array[];
  if (files) {
    contents = await readFiles(files.files, ctx);
    names = files.names;
  } else {
    const one = src as WireSource;
    const bytes = await loadBytes(one, { cache: opts.cache }, ctx);
    if (opts.integrity !== undefined) await checkIntegrity(bytes, opts.integrity, one);
    names = [defaultName(one)];
    contents = [bytes];
  }
  throwIfAborted(ctx.signal);
  const total = contents.reduce((s, b) => s + b.length, 0);
  ctx.onProgress({ phase: 'parse', loaded: 0, total });
  const chat = wasm.Chat.open(names, contents);
  contents = [];
  ctx.onProgress({ phase: 'parse', loaded: total, total });
  if (ctx.signal.aborted) {
    chat.free();
    throwIfAborted(ctx.signal);
  }
  return await registerChat(chat, 'cpu', name, fallbackReason);
}

async function registerChat(
  chat: RawChat,
  device: 'gpu' | 'cpu',
  name: string,
  fallbackReason: string | undefined,
  reopen?: () => Promise<RawChat>,
) {
  const id = nextId++;
  chats.set(id, { chat, device, name, reopen });
  let adapter: string | undefined;
  let warning: string | undefined;
  if (device === 'gpu') {
    const gpu = await gpuInfo('chat');
    adapter = gpu.adapter || chat.device();
    // Asked for by name ('gpu'), a software adapter runs; say what that costs, as 'auto' does when it passes it by.
    if (gpu.software) warning = `WebGPU runs on a software adapter here (${adapter}), slower than the CPU engine`;
  }
  return { id, name, device, adapter, fallbackReason, warning, info: chat.info() };
}

/** A grammar error as the package's: the grammar module throws plain Errors. */
function constraintError(e: unknown): LoomError {
  return new LoomError('invalid_input', `constraint: ${e instanceof Error ? e.message : String(e)}`);
}

/** A grammar for one reply of `c`, compiled before any token (the module and the model's vocabulary load once). */
async function startGrammar(c: OpenChat, constraint: { kind: string; source: string }): Promise<Grammar> {
  const g = await ready('grammar');
  try {
    c.vocab ??= new g.GrammarVocab(c.chat.grammarWords());
    return c.vocab.start(constraint.kind, constraint.source);
  } catch (e) {
    throw constraintError(e);
  }
}

/** Generates a reply, streaming its text through `ctx.onToken`; an aborted signal ends it (`cancelled`). A
 * constrained one takes its grammar's mask into each step and hands the drawn id back to the grammar. */
async function chatSend(id: number, input: ChatInput, wire: WireSendOptions, ctx: CallContext) {
  const c = getChat(id);
  const { constraint, ...opts } = wire;
  let grammar: Grammar | undefined;
  let plan: RawOpenAIPlan | undefined;
  if (typeof input === 'object' && 'openai' in input) {
    // The chat module checks the request and begins its reply; its constraint comes from the request.
    plan = c.chat.beginOpenAI(input.openai, input.requestId);
    if (plan.constraint) {
      try {
        grammar = await startGrammar(c, plan.constraint);
      } catch (e) {
        c.chat.abandon();
        throw e;
      }
    }
  } else {
    grammar = constraint ? await startGrammar(c, constraint) : undefined;
    c.chat.begin(input, grammar ? { ...opts, constrained: true } : opts);
  }
  const step = (mask?: Uint32Array) => (c.device === 'gpu' ? gpuTurn(() => c.chat.step(mask)) : c.chat.step(mask));
  let devicesLost = 0;
  try {
    for (;;) {
      if (ctx.signal.aborted) {
        const rest = c.chat.cancel();
        if (rest) ctx.onToken?.(rest);
        break;
      }
      let stepped: RawStep;
      try {
        let mask: Uint32Array | undefined;
        try {
          mask = grammar?.mask();
        } catch (e) {
          c.chat.abandon();
          throw constraintError(e);
        }
        stepped = await step(mask);
      } catch (e) {
        if (toLoomError(e).code !== 'device_lost' || c.device !== 'gpu') throw e;
        // A new device with the weights uploaded again: the conversation and the reply so far run again on it and
        // the reply goes on; with none, it ends here with the text so far.
        devicesLost++;
        const fresh = devicesLost <= REOPENS_PER_REPLY && c.reopen ? await c.reopen().catch(() => undefined) : undefined;
        if (fresh) {
          c.chat.adoptEngine(fresh);
          fresh.free();
          continue;
        }
        const rest = c.chat.loseDevice();
        if (rest) ctx.onToken?.(rest);
        break;
      }
      let { text, done } = stepped;
      if (grammar && stepped.id !== undefined) {
        try {
          grammar.accept(stepped.id);
        } catch (e) {
          c.chat.abandon();
          throw constraintError(e);
        }
        if (grammar.isDone()) {
          text += c.chat.complete();
          done = true;
        }
      }
      if (text) ctx.onToken?.(text);
      if (done) break;
      if (c.device === 'cpu') await yieldToEvents();
    }
  } finally {
    grammar?.free();
  }
  const reply = { ...c.chat.finish(), devicesLost };
  return { reply, history: c.chat.history() };
}

/** A chat's conversation and KV cache as a Blob (crate/src/llm/saved.rs). */
async function chatSave(id: number, meta: string | undefined): Promise<Blob> {
  const c = getChat(id);
  const bytes = await (c.device === 'gpu' ? gpuTurn(() => c.chat.save(meta)) : c.chat.save(meta));
  return new Blob([bytes as Uint8Array<ArrayBuffer>], { type: 'application/x-loom-chat' });
}

async function chatRestore(id: number, state: Blob | ArrayBuffer | Uint8Array) {
  const c = getChat(id);
  const bytes =
    state instanceof Blob ? new Uint8Array(await state.arrayBuffer()) : state instanceof ArrayBuffer ? new Uint8Array(state) : state;
  const meta = await (c.device === 'gpu' ? gpuTurn(() => c.chat.restore(bytes)) : c.chat.restore(bytes));
  return { history: c.chat.history(), meta: JSON.parse(meta) as unknown };
}

/** Every call the page can make. Arguments are what crosses postMessage (structured clone). */
const methods = {
  inspect: (ctx: CallContext, src: WireSource, opts: EngineOptions) => inspect(src, opts, ctx),
  open: (ctx: CallContext, src: WireSource, opts: EngineOptions) => open(src, opts, ctx),
  openFiles: (ctx: CallContext, files: File[], opts: EngineOptions) => openFiles(files, opts, ctx),
  tensorStats: async (ctx: CallContext, id: number, name: string, bins: number) => {
    const m = getModel(id);
    if (m.kind === 'full') return m.model.tensorStats(name, bins);
    return m.stream.tensorStats(name, await blobBytes(m, name, ctx.signal), bins);
  },
  tensorPreview: async (ctx: CallContext, id: number, name: string, n: number) => {
    const m = getModel(id);
    if (m.kind === 'full') return m.model.tensorPreview(name, n);
    return m.stream.tensorPreview(name, await blobBytes(m, name, ctx.signal), n);
  },
  forward: (ctx: CallContext, id: number, input: Float32Array, shape: number[], device?: 'cpu' | 'gpu') =>
    forward(id, input, shape, device, ctx),
  lossReport: async (_: CallContext, id: number, opts: ConvertOptions) => lossReport(id, opts),
  convert: async (ctx: CallContext, id: number, opts: ConvertOptions & { allowLossy?: boolean }) => convert(id, opts, ctx),
  diff: async (_: CallContext, id: number, other: number) =>
    fullModel(id, 'diff()').diff(fullModel(other, 'diff()')),
  dispose: async (_: CallContext, id: number) => {
    const m = models.get(id);
    if (m?.kind === 'full') m.model.free();
    if (m?.kind === 'gpu') m.stream.free();
    models.delete(id);
  },
  chatOpen: (ctx: CallContext, src: WireChatSource, opts: ChatOpenOptions) => chatOpen(src, opts, ctx),
  chatFit: (ctx: CallContext, src: WireChatSource, opts: { cache: boolean; context?: number }) => chatFit(src, opts, ctx),
  chatSend: (ctx: CallContext, id: number, input: ChatInput, opts: WireSendOptions) =>
    chatSend(id, input, opts, ctx),
  chatTokenize: async (_: CallContext, id: number, text: string, addSpecial: boolean) =>
    getChat(id).chat.tokenize(text, addSpecial),
  chatDetokenize: async (_: CallContext, id: number, ids: Uint32Array, skipSpecial: boolean) =>
    getChat(id).chat.detokenize(ids, skipSpecial),
  chatTemplate: async (_: CallContext, id: number, messages: ChatMessage[], addGenerationPrompt: boolean) =>
    getChat(id).chat.applyTemplate(messages, addGenerationPrompt),
  chatReset: async (_: CallContext, id: number) => getChat(id).chat.reset(),
  chatSave: (_: CallContext, id: number, meta?: string) => chatSave(id, meta),
  chatRestore: (_: CallContext, id: number, state: Blob | ArrayBuffer | Uint8Array) => chatRestore(id, state),
  chatDispose: async (_: CallContext, id: number) => {
    chats.get(id)?.vocab?.free();
    chats.get(id)?.chat.free();
    chats.delete(id);
  },
  // The module already working (chat first), else the chat's: the one a GPU check is mostly for.
  gpuInfo: () => gpuInfo(wasmReady.chat || !wasmReady.inspector ? 'chat' : 'inspector'),
  memoryBytes: async () => (await loadedModules()).reduce((sum, m) => sum + m.memoryBytes(), 0),
  cacheList: () => listCache(),
  cacheDelete: (_: CallContext, url: string) => deleteCached(url),
  cacheClear: () => clearCache(),
  configure: async (
    _: CallContext,
    cacheBackend: CacheBackend,
    testBreakGpuKernel?: string | null,
    testLoseGpuDevice?: boolean,
  ) => {
    setCacheBackend(cacheBackend);
    // The test hooks reach both modules' devices.
    const both = testBreakGpuKernel !== undefined || testLoseGpuDevice ? await Promise.all([ready('inspector'), ready('chat')]) : [];
    for (const wasm of both) {
      if (testBreakGpuKernel !== undefined) await wasm.breakGpuKernel(testBreakGpuKernel);
      if (testLoseGpuDevice) wasm.loseGpuDevice();
    }
  },
};
export type Method = keyof typeof methods;

export async function handle(method: Method, args: unknown[], ctx: CallContext): Promise<unknown> {
  const fn = methods[method] as ((ctx: CallContext, ...a: unknown[]) => Promise<unknown>) | undefined;
  if (!fn) throw new LoomError('internal', `unknown method ${String(method)}`);
  try {
    return await fn(ctx, ...args);
  } catch (e) {
    throw toLoomError(e);
  }
}
