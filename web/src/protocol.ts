// Messages between the page and the worker.
import type { SerializedError } from './errors.js';
import type { Method } from './engine.js';
import type { Progress } from './types.js';

export type ToWorker = { type: 'call'; id: number; method: Method; args: unknown[] } | { type: 'abort'; id: number };
// 'abort' fires the call's AbortSignal: most calls reject at once on the page; a chat reply ends and resolves.

export type FromWorker =
  | { type: 'progress'; id: number; progress: Progress }
  | { type: 'token'; id: number; text: string }
  | { type: 'result'; id: number; value: unknown }
  | { type: 'error'; id: number; error: SerializedError };

/** Buffers of typed arrays in a result, moved instead of copied across postMessage. */
export function transferables(value: unknown): Transferable[] {
  const out = new Set<ArrayBuffer>();
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) {
      if (ArrayBuffer.isView(v) && v.buffer instanceof ArrayBuffer) out.add(v.buffer);
    }
  }
  return [...out];
}
