// Random access to a model's bytes without reading all of them: Blob.slice for files, HTTP Range for URLs.
import { LoomError, throwIfAborted, toLoomError } from './errors.js';
import type { Progress } from './types.js';

/** A source as it crosses into the worker: bytes and Blobs clone cheaply, URLs are resolved on the page. */
export type WireSource = Blob | ArrayBuffer | Uint8Array | { url: string };

export interface ByteReader {
  readonly size: number;
  /** Bytes handed out (for Blobs) or received over the network (for URLs) so far. */
  readonly bytesRead: number;
  read(offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array>;
}

export class BytesReader implements ByteReader {
  bytesRead = 0;
  constructor(private readonly bytes: Uint8Array) {}
  get size(): number {
    return this.bytes.length;
  }
  async read(offset: number, length: number): Promise<Uint8Array> {
    const out = this.bytes.subarray(offset, offset + length);
    this.bytesRead += out.length;
    return out;
  }
}

export class BlobReader implements ByteReader {
  bytesRead = 0;
  constructor(private readonly blob: Blob) {}
  get size(): number {
    return this.blob.size;
  }
  async read(offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array> {
    throwIfAborted(signal);
    const out = new Uint8Array(await this.blob.slice(offset, offset + length).arrayBuffer());
    this.bytesRead += out.length;
    return out;
  }
}

/** The first request also learns the size (from Content-Range), so its bytes are kept for the first read. */
const FIRST_RANGE = 64 * 1024;

/** Reads a URL with HTTP Range requests; a server that ignores Range is read only as far as needed. */
export class HttpReader implements ByteReader {
  bytesRead = 0;
  private constructor(
    private readonly url: string,
    readonly size: number,
    private readonly first: Uint8Array,
  ) {}

  static async open(url: string, signal?: AbortSignal): Promise<HttpReader> {
    const { bytes, size } = await fetchRange(url, 0, FIRST_RANGE, signal);
    if (!Number.isFinite(size)) {
      throw new LoomError('network', `${url}: the server did not say how long the file is; open() downloads it whole`);
    }
    const reader = new HttpReader(url, size, bytes);
    reader.bytesRead = bytes.length;
    return reader;
  }

  async read(offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array> {
    if (offset + length <= this.first.length) return this.first.subarray(offset, offset + length);
    const { bytes } = await fetchRange(this.url, offset, length, signal);
    this.bytesRead += bytes.length;
    return bytes;
  }
}

async function fetchRange(
  url: string,
  offset: number,
  length: number,
  signal?: AbortSignal,
): Promise<{ bytes: Uint8Array; size: number }> {
  const res = await httpGet(url, { Range: `bytes=${offset}-${offset + length - 1}` }, signal);
  if (res.status === 416) {
    // Asked past the end: an empty file, or one shorter than the header says.
    await res.body?.cancel();
    const total = /\/(\d+)$/.exec(res.headers.get('Content-Range') ?? '')?.[1];
    return { bytes: new Uint8Array(0), size: total ? Number(total) : 0 };
  }
  if (res.status === 206) {
    const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(res.headers.get('Content-Range') ?? '');
    if (!range || Number(range[1]) !== offset) {
      await res.body?.cancel();
      throw new LoomError(
        'network',
        `${url}: the answer to a Range request has no usable Content-Range header (a server on another origin ` +
          'must list it in Access-Control-Expose-Headers)',
      );
    }
    const bytes = await readBody(res, signal);
    return { bytes, size: range[3] === '*' ? Number.NaN : Number(range[3]) };
  }
  // 200: the whole file follows; read only up to what was asked, then hang up.
  const size = Number(res.headers.get('Content-Length') ?? Number.NaN);
  const bytes = await readBody(res, signal, offset + length);
  return { bytes: bytes.subarray(offset, offset + length), size };
}

/** fetch() with errors a person can act on. */
export async function httpGet(url: string, headers: Record<string, string>, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { headers, signal });
  } catch (e) {
    const err = toLoomError(e);
    if (err.code === 'aborted') throw err;
    throw new LoomError('network', `could not fetch ${url}: ${err.message} (offline, or the server refused?)`, {
      cause: e,
    });
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new LoomError('network', `could not fetch ${url}: HTTP ${res.status} ${res.statusText}`.trimEnd());
  }
  return res;
}

/** Reads a response body, stopping early after `limit` bytes. */
async function readBody(res: Response, signal?: AbortSignal, limit = Infinity): Promise<Uint8Array> {
  const reader = res.body!.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  try {
    while (n < limit) {
      throwIfAborted(signal);
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      n += value.length;
    }
  } catch (e) {
    throw toLoomError(e);
  } finally {
    if (n >= limit) await reader.cancel().catch(() => {});
  }
  return concat(chunks, n);
}

export function concat(chunks: Uint8Array[], total = chunks.reduce((s, c) => s + c.length, 0)): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

const READ_CHUNK = 8 * 1024 * 1024;

/** All the bytes of a reader, in chunks, reporting `read` progress. */
export async function readAll(
  reader: ByteReader,
  onProgress?: (p: Progress) => void,
  signal?: AbortSignal,
): Promise<Uint8Array> {
  const out = allocate(reader.size);
  for (let at = 0; at < reader.size; at += READ_CHUNK) {
    throwIfAborted(signal);
    out.set(await reader.read(at, Math.min(READ_CHUNK, reader.size - at), signal), at);
    onProgress?.({ phase: 'read', loaded: Math.min(at + READ_CHUNK, reader.size), total: reader.size });
  }
  return out;
}

export function allocate(size: number): Uint8Array {
  try {
    return new Uint8Array(size);
  } catch (e) {
    throw new LoomError('out_of_memory', `cannot hold ${size} bytes in memory: ${(e as Error).message}`);
  }
}

/** The name a model gets when none is given. */
export function defaultName(source: WireSource): string {
  if (typeof File !== 'undefined' && source instanceof File) return source.name;
  if ('url' in source && typeof source.url === 'string') {
    const path = new URL(source.url).pathname;
    return decodeURIComponent(path.slice(path.lastIndexOf('/') + 1)) || source.url;
  }
  return 'model';
}
