// Browser entry: every call runs in a module Web Worker this package starts on first use.
import { createApi } from './api.js';
import type { Transport } from './api.js';
import { LoomError, deserializeError } from './errors.js';
import type { Method } from './engine.js';
import type { FromWorker, ToWorker } from './protocol.js';
import type { Progress } from './types.js';

export { LoomError } from './errors.js';
export type { LoomErrorCode } from './errors.js';
export type { CacheBackend } from './cache.js';
export type * from './types.js';

interface Pending {
  resolve(v: unknown): void;
  reject(e: unknown): void;
  onProgress(p: Progress): void;
  onToken?(text: string): void;
}

class WorkerTransport implements Transport {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;

  private get(): Worker {
    if (this.worker) return this.worker;
    if (typeof Worker === 'undefined') {
      throw new LoomError('unsupported', 'loom-wasm needs Web Workers (or Node, which runs it in-thread)');
    }
    const w = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'loom-wasm' });
    w.onmessage = ({ data: msg }: MessageEvent<FromWorker>) => {
      const p = this.pending.get(msg.id);
      if (!p) return; // Aborted on the page already.
      if (msg.type === 'progress') return p.onProgress(msg.progress);
      if (msg.type === 'token') return p.onToken?.(msg.text);
      this.pending.delete(msg.id);
      if (msg.type === 'result') p.resolve(msg.value);
      else p.reject(deserializeError(msg.error));
    };
    w.onerror = (e) => {
      // The worker script failed to load or threw outside a call: fail everything, start anew next time.
      e.preventDefault();
      const why = e.message || 'the worker script could not be loaded (see the console; a bundler may need ' +
        "optimizeDeps.exclude: ['loom-wasm'])";
      for (const p of this.pending.values()) p.reject(new LoomError('internal', `loom-wasm worker failed: ${why}`));
      this.pending.clear();
      w.terminate();
      this.worker = undefined;
    };
    this.worker = w;
    return w;
  }

  start(method: Method, args: unknown[], onProgress: (p: Progress) => void, onToken?: (text: string) => void) {
    const id = this.nextId++;
    const result = new Promise<unknown>((resolve, reject) => {
      const w = this.get();
      this.pending.set(id, { resolve, reject, onProgress, onToken });
      // Arguments are copied, not transferred: the caller's buffers stay usable.
      w.postMessage({ type: 'call', id, method, args } satisfies ToWorker);
    });
    return {
      result,
      cancel: () => {
        if (this.pending.delete(id)) this.worker?.postMessage({ type: 'abort', id } satisfies ToWorker);
      },
      interrupt: () => {
        if (this.pending.has(id)) this.worker?.postMessage({ type: 'abort', id } satisfies ToWorker);
      },
    };
  }
}

const api = createApi(new WorkerTransport(), (url) => new URL(url, globalThis.location?.href).href);

export const { inspect, open, openChat, fitCheck, openFiles, gpuInfo, memoryBytes, cache, configure } = api;
