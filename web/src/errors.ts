// The one error type the package throws, with a machine-readable code and a message a person can act on.

export type LoomErrorCode =
  | 'bad_format'
  | 'unsupported_dtype'
  | 'unsupported'
  | 'invalid_input'
  | 'invalid_network'
  | 'lossy'
  | 'no_webgpu'
  | 'device_lost'
  | 'out_of_memory'
  | 'gpu'
  | 'gpu_self_test'
  | 'template'
  | 'context_full'
  | 'model_mismatch'
  | 'aborted'
  | 'quota'
  | 'network'
  | 'internal';

const CODES: ReadonlySet<string> = new Set<LoomErrorCode>([
  'bad_format', 'unsupported_dtype', 'unsupported', 'invalid_input', 'invalid_network', 'lossy', 'no_webgpu',
  'device_lost', 'out_of_memory', 'gpu', 'gpu_self_test', 'template', 'context_full', 'model_mismatch', 'aborted', 'quota', 'network', 'internal',
]);

export class LoomError extends Error {
  readonly code: LoomErrorCode;

  constructor(code: LoomErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LoomError';
    this.code = code;
  }
}

export function isLoomErrorCode(code: unknown): code is LoomErrorCode {
  return typeof code === 'string' && CODES.has(code);
}

export function abortError(what = 'the operation'): LoomError {
  return new LoomError('aborted', `${what} was aborted`);
}

/** Rejects with `aborted` when the signal has fired. */
export function throwIfAborted(signal: AbortSignal | undefined, what?: string): void {
  if (signal?.aborted) throw abortError(what);
}

/**
 * Any thrown value as a LoomError: wasm errors (`{code, message}` objects), DOM errors (abort, quota), fetch
 * failures (TypeError) and plain Errors (internal).
 */
export function toLoomError(e: unknown): LoomError {
  if (e instanceof LoomError) return e;
  if (e && typeof e === 'object') {
    const { code, message, name } = e as { code?: unknown; message?: unknown; name?: unknown };
    const text = typeof message === 'string' && message ? message : String(e);
    if (isLoomErrorCode(code)) return new LoomError(code, text, { cause: e });
    if (name === 'AbortError') return new LoomError('aborted', 'the operation was aborted', { cause: e });
    if (name === 'QuotaExceededError') {
      return new LoomError(
        'quota',
        'browser storage is full: free space with cache.delete()/cache.clear(), or pass {cache: false}',
        { cause: e },
      );
    }
    if (e instanceof TypeError && /fetch|network/i.test(text)) return new LoomError('network', text, { cause: e });
    if (typeof WebAssembly !== 'undefined' && e instanceof WebAssembly.RuntimeError) {
      // A trap (a Rust panic or a failed allocation) leaves the module's state undefined.
      return new LoomError(
        'internal',
        `loom-wasm crashed inside WebAssembly (${text}); often the model needs more memory than the page has. ` +
          'Reload the page before opening models again',
        { cause: e },
      );
    }
    if (e instanceof RangeError && /memory|allocation|Array buffer/i.test(text)) {
      return new LoomError('out_of_memory', `out of memory: ${text}`, { cause: e });
    }
    if (typeof code === 'string') return new LoomError('internal', `${code}: ${text}`, { cause: e });
    return new LoomError('internal', text, { cause: e });
  }
  return new LoomError('internal', String(e));
}

/** The plain object that crosses the worker boundary. */
export interface SerializedError {
  code: LoomErrorCode;
  message: string;
}

export function serializeError(e: unknown): SerializedError {
  const err = toLoomError(e);
  return { code: err.code, message: err.message };
}

export function deserializeError(e: SerializedError): LoomError {
  return new LoomError(isLoomErrorCode(e.code) ? e.code : 'internal', e.message);
}
