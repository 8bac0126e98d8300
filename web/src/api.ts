// The public API, the same in browsers and Node; `Transport` carries each call to the engine (worker or thread).
import type { CacheBackend } from './cache.js';
import type { Method } from './engine.js';
import { LoomError, abortError } from './errors.js';
import type { WireSource } from './source.js';
import type {
  CacheEntry, ChatMessage, ConvertOptions, ForwardOptions, ForwardResult, GpuInfo, Inspection, LoomModel, LossReport,
  ModelDiff, OpenOptions, Progress, Source, TensorPreview, TensorStats,
} from './types.js';

export interface CallOptions {
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
}

export interface Transport {
  /** Runs `method` on the engine; `cancel` tells the engine to stop the call (the promise is already settled). */
  start(method: Method, args: unknown[], onProgress: (p: Progress) => void): {
    result: Promise<unknown>;
    cancel(): void;
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

  async chat(_messages: ChatMessage[], _opts?: { onToken?: (t: string) => void; signal?: AbortSignal }): Promise<string> {
    throw new LoomError('unsupported', 'chat() needs the LLM runtime, which is not part of this version of loom-wasm');
  }

  dispose(): Promise<void> {
    return call(this.transport, 'dispose', [this.id]);
  }
}

function plainConvertOptions(opts: ConvertOptions): ConvertOptions {
  return { format: opts.format, dtype: opts.dtype, layerDtypes: opts.layerDtypes };
}

export interface Api {
  inspect(source: Source, opts?: OpenOptions): Promise<Inspection>;
  open(source: Source, opts?: OpenOptions): Promise<LoomModel>;
  openFiles(files: File[], opts?: OpenOptions): Promise<LoomModel>;
  gpuInfo(): Promise<GpuInfo>;
  /** Bytes of WebAssembly memory the engine holds (its high-water mark: wasm memory never shrinks). */
  memoryBytes(): Promise<number>;
  cache: { list(): Promise<CacheEntry[]>; delete(url: string): Promise<void>; clear(): Promise<void> };
  configure(opts: { cacheBackend?: CacheBackend }): Promise<void>;
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
    gpuInfo: () => call(transport, 'gpuInfo', []),
    memoryBytes: () => call(transport, 'memoryBytes', []),
    cache: {
      list: () => call(transport, 'cacheList', []),
      delete: async (url) => call(transport, 'cacheDelete', [checkedUrl(url)]),
      clear: () => call(transport, 'cacheClear', []),
    },
    configure: (opts) => call(transport, 'configure', [opts.cacheBackend ?? 'auto']),
  };
}
