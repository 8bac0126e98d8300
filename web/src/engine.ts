// The side that holds the wasm: a module Web Worker in browsers, the calling thread in Node. Every public call
// arrives here as (method, args) and runs with its own progress callback and abort signal.
import initWasm, * as bindings from './pkg/loom_wasm.js';
import { download, cachedBlob, listCache, deleteCached, clearCache, setCacheBackend } from './cache.js';
import type { CacheBackend } from './cache.js';
import { LoomError, throwIfAborted, toLoomError } from './errors.js';
import { BlobReader, BytesReader, HttpReader, concat, defaultName, readAll } from './source.js';
import type { ByteReader, WireSource } from './source.js';
import type {
  ConvertOptions, ForwardResult, GpuInfo, Inspection, LossReport, ModelDiff, Progress, TensorPreview, TensorStats,
} from './types.js';

/** The wasm-bindgen exports this file uses (crate/src/wasm.rs). Errors are thrown as `{code, message}`. */
interface RawModel {
  inspection(): Inspection;
  tensorStats(name: string, bins: number): TensorStats;
  tensorPreview(name: string, n: number): TensorPreview;
  forwardCpu(input: Float32Array, shape: Uint32Array): RawForward;
  forwardGpu(input: Float32Array, shape: Uint32Array): Promise<RawForward>;
  lossReport(format: string, dtype?: string, layerDtypes?: Record<string, string>): LossReport;
  convert(format: string, dtype?: string, layerDtypes?: Record<string, string>, allowLossy?: boolean): Uint8Array;
  diff(other: RawModel): ModelDiff;
  free(): void;
}
interface RawForward {
  data: Float32Array;
  shape: number[] | Uint32Array;
  cpu_layers?: Record<string, string>;
}
interface Raw {
  inspectHeader(prefix: Uint8Array, totalLen: number): Inspection;
  gpuInfo(): Promise<GpuInfo>;
  Model: {
    fromBytes(bytes: Uint8Array, name?: string): RawModel;
    fromFiles(names: string[], files: Uint8Array[]): RawModel;
  };
}
const raw = bindings as unknown as Raw;

export interface CallContext {
  onProgress: (p: Progress) => void;
  signal: AbortSignal;
}

export interface EngineOptions {
  cache?: boolean;
  name?: string;
}

/** How the wasm module is obtained: the default fetches it next to the glue (`new URL(…, import.meta.url)`). */
let loadWasm: () => Promise<unknown> = () => initWasm();
let wasmReady: Promise<unknown> | undefined;
/** Node: `file:` URLs and paths become lazily read Blobs (fs.openAsBlob). */
let openFileUrl: ((url: string) => Promise<Blob>) | undefined;

export function configureEngine(opts: {
  loadWasm?: () => Promise<unknown>;
  openFileUrl?: (url: string) => Promise<Blob>;
  cacheBackend?: CacheBackend;
}): void {
  if (opts.loadWasm) loadWasm = opts.loadWasm;
  if (opts.openFileUrl) openFileUrl = opts.openFileUrl;
  if (opts.cacheBackend) setCacheBackend(opts.cacheBackend);
}

function ready(): Promise<unknown> {
  wasmReady ??= loadWasm().catch((e) => {
    wasmReady = undefined;
    throw new LoomError('internal', `could not load loom-wasm's WebAssembly module: ${toLoomError(e).message}`);
  });
  return wasmReady;
}

interface OpenModel {
  model: RawModel;
  name: string;
}
const models = new Map<number, OpenModel>();
let nextId = 1;

function getModel(id: number): OpenModel {
  const m = models.get(id);
  if (!m) throw new LoomError('invalid_input', 'this model was disposed; open it again');
  return m;
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

async function inspect(src: WireSource, opts: EngineOptions, ctx: CallContext): Promise<Inspection> {
  const [reader] = await Promise.all([openReader(src, opts, ctx.signal), ready()]);
  // Most headers fit in the first 64 KiB; the parser says exactly how much more it needs otherwise.
  let prefix = await reader.read(0, Math.min(reader.size, 64 * 1024), ctx.signal);
  for (;;) {
    ctx.onProgress({ phase: 'parse', loaded: prefix.length, total: reader.size });
    try {
      const out = raw.inspectHeader(prefix, reader.size);
      out.bytes_read = reader.bytesRead;
      return out;
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
  const [bytes] = await Promise.all([loadBytes(src, opts, ctx), ready()]);
  throwIfAborted(ctx.signal);
  const name = opts.name ?? defaultName(src);
  ctx.onProgress({ phase: 'parse', loaded: 0, total: bytes.length });
  const model = raw.Model.fromBytes(bytes, name);
  ctx.onProgress({ phase: 'parse', loaded: bytes.length, total: bytes.length });
  return register(model, name);
}

async function openFiles(files: File[], opts: EngineOptions, ctx: CallContext) {
  await ready();
  const total = files.reduce((s, f) => s + f.size, 0);
  let before = 0;
  const contents: Uint8Array[] = [];
  for (const f of files) {
    const bytes = await readAll(new BlobReader(f), (p) => ctx.onProgress({ ...p, loaded: before + p.loaded, total }), ctx.signal);
    contents.push(bytes);
    before += f.size;
  }
  const names = files.map((f) => (f as File & { webkitRelativePath?: string }).webkitRelativePath || f.name);
  const name = opts.name ?? commonFolder(names);
  ctx.onProgress({ phase: 'parse', loaded: 0, total });
  const model = raw.Model.fromFiles(names, contents);
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
    models.set(id, { model, name });
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
  device: 'cpu' | 'gpu',
  ctx: CallContext,
): Promise<ForwardResult> {
  const { model } = getModel(id);
  const dims = Uint32Array.from(shape);
  throwIfAborted(ctx.signal);
  ctx.onProgress({ phase: 'forward', loaded: 0, total: 1 });
  const t0 = performance.now();
  let fallbackReason: string | undefined;
  let out: RawForward | undefined;
  if (device === 'gpu') {
    const info = await gpuInfo();
    if (!info.available) fallbackReason = info.reason ?? 'WebGPU is not available';
  }
  if (device === 'gpu' && fallbackReason === undefined) {
    try {
      out = await model.forwardGpu(input, dims);
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
  return getModel(id).model.lossReport(opts.format, opts.dtype, opts.layerDtypes);
}

function convert(id: number, opts: ConvertOptions & { allowLossy?: boolean }, ctx: CallContext) {
  const { model } = getModel(id);
  throwIfAborted(ctx.signal);
  ctx.onProgress({ phase: 'convert', loaded: 0, total: 1 });
  const loss = model.lossReport(opts.format, opts.dtype, opts.layerDtypes);
  const bytes = model.convert(opts.format, opts.dtype, opts.layerDtypes, opts.allowLossy ?? false);
  ctx.onProgress({ phase: 'convert', loaded: 1, total: 1 });
  const type = opts.format === 'json' ? 'application/json' : 'application/octet-stream';
  return { blob: new Blob([bytes as Uint8Array<ArrayBuffer>], { type }), loss };
}

async function gpuInfo(): Promise<GpuInfo> {
  const gpu = (globalThis as { navigator?: { gpu?: unknown } }).navigator?.gpu;
  if (!gpu) return { available: false, reason: 'WebGPU is not available here (navigator.gpu is missing)' };
  await ready();
  try {
    return await raw.gpuInfo();
  } catch (e) {
    return { available: false, reason: toLoomError(e).message };
  }
}

/** Every call the page can make. Arguments are what crosses postMessage (structured clone). */
const methods = {
  inspect: (ctx: CallContext, src: WireSource, opts: EngineOptions) => inspect(src, opts, ctx),
  open: (ctx: CallContext, src: WireSource, opts: EngineOptions) => open(src, opts, ctx),
  openFiles: (ctx: CallContext, files: File[], opts: EngineOptions) => openFiles(files, opts, ctx),
  tensorStats: async (_: CallContext, id: number, name: string, bins: number) => getModel(id).model.tensorStats(name, bins),
  tensorPreview: async (_: CallContext, id: number, name: string, n: number) => getModel(id).model.tensorPreview(name, n),
  forward: (ctx: CallContext, id: number, input: Float32Array, shape: number[], device: 'cpu' | 'gpu') =>
    forward(id, input, shape, device, ctx),
  lossReport: async (_: CallContext, id: number, opts: ConvertOptions) => lossReport(id, opts),
  convert: async (ctx: CallContext, id: number, opts: ConvertOptions & { allowLossy?: boolean }) => convert(id, opts, ctx),
  diff: async (_: CallContext, id: number, other: number) => getModel(id).model.diff(getModel(other).model),
  dispose: async (_: CallContext, id: number) => {
    models.get(id)?.model.free();
    models.delete(id);
  },
  gpuInfo: () => gpuInfo(),
  cacheList: () => listCache(),
  cacheDelete: (_: CallContext, url: string) => deleteCached(url),
  cacheClear: () => clearCache(),
  configure: async (_: CallContext, cacheBackend: CacheBackend) => setCacheBackend(cacheBackend),
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
