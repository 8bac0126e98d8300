// Downloads kept in browser storage (OPFS, else the Cache API), resumed with an HTTP Range request after a cut.
import { LoomError, throwIfAborted, toLoomError } from './errors.js';
import { concat, httpGet } from './source.js';
import type { CacheEntry, Progress } from './types.js';

/** What is stored beside the bytes of one URL. */
interface Meta {
  url: string;
  /** Full length, when the server said. */
  total: number | null;
  /** Validators sent back with If-Range, so a changed file is fetched anew instead of being spliced. */
  etag: string | null;
  lastModified: string | null;
  storedAt: number;
  complete: boolean;
  /** Cache API only: the stored segments as [start, length]. */
  segments?: [number, number][];
}

interface Writer {
  write(chunk: Uint8Array): Promise<void>;
  /** Commits the bytes written so far and the meta (also after a cut, so the next attempt resumes). */
  finish(meta: Meta): Promise<void>;
}

interface Store {
  readonly kind: 'opfs' | 'cache-api';
  get(url: string): Promise<{ meta: Meta; bytes: number } | undefined>;
  /** Starts writing at `from`, dropping anything stored past it. */
  begin(meta: Meta, from: number): Promise<Writer>;
  blob(url: string): Promise<Blob>;
  list(): Promise<CacheEntry[]>;
  delete(url: string): Promise<void>;
  clear(): Promise<void>;
}

export type CacheBackend = 'auto' | 'opfs' | 'cache-api' | 'none';
let backend: CacheBackend = 'auto';
let store: Promise<Store | null> | undefined;

/** Chooses where downloads are kept ('auto': OPFS, else the Cache API, else nowhere). */
export function setCacheBackend(b: CacheBackend): void {
  backend = b;
  store = undefined;
}

function getStore(): Promise<Store | null> {
  store ??= pickStore().catch(() => null);
  return store;
}

async function pickStore(): Promise<Store | null> {
  if (backend === 'none') return null;
  const storage = (globalThis as { navigator?: Navigator }).navigator?.storage;
  if ((backend === 'auto' || backend === 'opfs') && storage?.getDirectory) {
    try {
      const root = await storage.getDirectory();
      return new OpfsStore(await root.getDirectoryHandle('loom-wasm-cache', { create: true }));
    } catch (e) {
      if (backend === 'opfs') throw e; // OPFS refused (private mode in some browsers): fall through.
    }
  }
  if ((backend === 'auto' || backend === 'cache-api') && typeof caches !== 'undefined') {
    return new CacheApiStore(await caches.open('loom-wasm-v1'));
  }
  return null;
}

/** A short stable file name for a URL (FNV-1a, 2 × 32 bits). */
function keyOf(url: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ url.length;
  for (let i = 0; i < url.length; i++) {
    const c = url.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
  }
  return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
}

// Declared here: the DOM lib types OPFS's sync access handle only for workers.
interface SyncAccessHandle {
  write(buf: Uint8Array, opts: { at: number }): number;
  truncate(size: number): void;
  flush(): void;
  close(): void;
}

class OpfsStore implements Store {
  readonly kind = 'opfs';
  constructor(private readonly dir: FileSystemDirectoryHandle) {}

  private async handle(name: string, create = false): Promise<FileSystemFileHandle | undefined> {
    try {
      return await this.dir.getFileHandle(name, { create });
    } catch (e) {
      if ((e as DOMException).name === 'NotFoundError') return undefined;
      throw e;
    }
  }

  private async readMeta(name: string): Promise<Meta | undefined> {
    const h = await this.handle(name);
    if (!h) return undefined;
    try {
      return JSON.parse(await (await h.getFile()).text()) as Meta;
    } catch {
      return undefined; // A meta file torn by a crash: the entry starts over.
    }
  }

  private async writeMeta(meta: Meta): Promise<void> {
    const w = await (await this.handle(`${keyOf(meta.url)}.json`, true))!.createWritable();
    await w.write(JSON.stringify(meta));
    await w.close();
  }

  async get(url: string) {
    const meta = await this.readMeta(`${keyOf(url)}.json`);
    const bin = meta && (await this.handle(`${keyOf(url)}.bin`));
    if (!meta || !bin || meta.url !== url) return undefined;
    // The file's own length is what survived; the meta may be older than the last write.
    return { meta, bytes: (await bin.getFile()).size };
  }

  async begin(meta: Meta, from: number): Promise<Writer> {
    await this.writeMeta(meta);
    const file = (await this.handle(`${keyOf(meta.url)}.bin`, true))!;
    const sync = (file as { createSyncAccessHandle?: () => Promise<SyncAccessHandle> }).createSyncAccessHandle;
    if (sync) {
      // In a worker: writes land in place at once, so even a closed tab keeps what arrived.
      const h = await sync.call(file);
      h.truncate(from);
      let at = from;
      return {
        write: async (chunk) => {
          at += h.write(chunk, { at });
        },
        finish: async (m) => {
          h.flush();
          h.close();
          await this.writeMeta(m);
        },
      };
    }
    const w = await file.createWritable({ keepExistingData: true });
    await w.truncate(from);
    await w.seek(from);
    return {
      write: (chunk) => w.write(chunk as Uint8Array<ArrayBuffer>),
      finish: async (m) => {
        await w.close();
        await this.writeMeta(m);
      },
    };
  }

  async blob(url: string): Promise<Blob> {
    return (await this.handle(`${keyOf(url)}.bin`))!.getFile();
  }

  async list(): Promise<CacheEntry[]> {
    const out: CacheEntry[] = [];
    for await (const name of (this.dir as unknown as { keys(): AsyncIterable<string> }).keys()) {
      if (!name.endsWith('.json')) continue;
      const meta = await this.readMeta(name);
      const got = meta && (await this.get(meta.url));
      if (got) out.push(entry(got.meta, got.bytes));
    }
    return out;
  }

  async delete(url: string): Promise<void> {
    for (const name of [`${keyOf(url)}.bin`, `${keyOf(url)}.json`]) {
      await this.dir.removeEntry(name).catch((e: DOMException) => {
        if (e.name !== 'NotFoundError') throw e;
      });
    }
  }

  async clear(): Promise<void> {
    const names: string[] = [];
    for await (const name of (this.dir as unknown as { keys(): AsyncIterable<string> }).keys()) names.push(name);
    for (const name of names) await this.dir.removeEntry(name);
  }
}

/** Cache API fallback: responses cannot be appended to, so a download is stored as segments of ≤ 8 MiB. */
const SEGMENT = 8 * 1024 * 1024;
const CACHE_BASE = 'https://loom-wasm.cache/';

class CacheApiStore implements Store {
  readonly kind = 'cache-api';
  constructor(private readonly cache: Cache) {}

  private metaKey(url: string): string {
    return `${CACHE_BASE}${keyOf(url)}/meta`;
  }

  private segmentKey(url: string, start: number): string {
    return `${CACHE_BASE}${keyOf(url)}/${start}`;
  }

  private async putMeta(meta: Meta): Promise<void> {
    await this.cache.put(this.metaKey(meta.url), new Response(JSON.stringify(meta)));
  }

  async get(url: string) {
    const res = await this.cache.match(this.metaKey(url));
    const meta = res && ((await res.json()) as Meta);
    if (!meta || meta.url !== url) return undefined;
    return { meta, bytes: (meta.segments ?? []).reduce((s, [, n]) => s + n, 0) };
  }

  async begin(meta: Meta, from: number): Promise<Writer> {
    const old = await this.get(meta.url);
    const keep = (old?.meta.segments ?? []).filter(([start, n]) => start + n <= from);
    for (const [start] of old?.meta.segments ?? []) {
      if (!keep.some(([s]) => s === start)) await this.cache.delete(this.segmentKey(meta.url, start));
    }
    meta.segments = keep;
    await this.putMeta(meta);
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    let at = from;
    const flush = async (m: Meta) => {
      if (!pendingBytes) return;
      await this.cache.put(this.segmentKey(m.url, at), new Response(new Blob(pending as Uint8Array<ArrayBuffer>[])));
      m.segments = [...(m.segments ?? keep), [at, pendingBytes]];
      at += pendingBytes;
      pending = [];
      pendingBytes = 0;
      await this.putMeta(m);
    };
    return {
      write: async (chunk) => {
        pending.push(chunk);
        pendingBytes += chunk.length;
        if (pendingBytes >= SEGMENT) await flush(meta);
      },
      finish: async (m) => {
        m.segments = meta.segments;
        await flush(m);
        await this.putMeta(m);
      },
    };
  }

  async blob(url: string): Promise<Blob> {
    const { meta } = (await this.get(url))!;
    const parts = await Promise.all(
      (meta.segments ?? []).map(async ([start]) => (await this.cache.match(this.segmentKey(url, start)))!.blob()),
    );
    return new Blob(parts);
  }

  async list(): Promise<CacheEntry[]> {
    const out: CacheEntry[] = [];
    for (const req of await this.cache.keys()) {
      if (!req.url.endsWith('/meta')) continue;
      const meta = (await (await this.cache.match(req))!.json()) as Meta;
      out.push(entry(meta, (meta.segments ?? []).reduce((s, [, n]) => s + n, 0)));
    }
    return out;
  }

  async delete(url: string): Promise<void> {
    const old = await this.get(url);
    for (const [start] of old?.meta.segments ?? []) await this.cache.delete(this.segmentKey(url, start));
    await this.cache.delete(this.metaKey(url));
  }

  async clear(): Promise<void> {
    for (const req of await this.cache.keys()) await this.cache.delete(req);
  }
}

function entry(meta: Meta, bytes: number): CacheEntry {
  return { url: meta.url, bytes, complete: meta.complete, storedAt: meta.storedAt };
}

export async function listCache(): Promise<CacheEntry[]> {
  return (await getStore())?.list() ?? [];
}

export async function deleteCached(url: string): Promise<void> {
  await (await getStore())?.delete(url);
}

export async function clearCache(): Promise<void> {
  await (await getStore())?.clear();
}

/** Whether downloads can be kept here (a storage backend is configured and works). */
export async function cacheAvailable(): Promise<boolean> {
  return (await getStore()) !== null;
}

/** The bytes of a completely cached URL, without touching the network; undefined when not (fully) cached. */
export async function cachedBlob(url: string): Promise<Blob | undefined> {
  const s = await getStore();
  const got = await s?.get(url);
  return got?.meta.complete ? s!.blob(url) : undefined;
}

/** Downloads under way, per URL: a second call for the same URL waits for the first, then reads the cache. */
const inflight = new Map<string, Promise<unknown>>();

/**
 * Fetches a URL with `download` progress. With a store, the bytes go to storage as they arrive; a cut download
 * keeps what arrived and the next call asks only for the rest (Range + If-Range).
 */
export async function download(
  url: string,
  opts: { cache: boolean; signal?: AbortSignal; onProgress?: (p: Progress) => void },
): Promise<Blob | Uint8Array> {
  const s = opts.cache ? await getStore() : null;
  if (!s) return downloadToMemory(url, opts);
  while (inflight.has(url)) await inflight.get(url)!.catch(() => {});
  const run = downloadToStore(s, url, opts);
  inflight.set(url, run);
  try {
    return await run;
  } finally {
    inflight.delete(url);
  }
}

async function downloadToStore(
  s: Store,
  url: string,
  opts: { signal?: AbortSignal; onProgress?: (p: Progress) => void },
): Promise<Blob> {
  const old = await s.get(url);
  if (old?.meta.complete) {
    opts.onProgress?.({ phase: 'download', loaded: old.bytes, total: old.bytes });
    return s.blob(url);
  }
  let from = old && old.bytes > 0 ? old.bytes : 0;
  const headers: Record<string, string> = {};
  if (from > 0) {
    headers.Range = `bytes=${from}-`;
    const validator = old!.meta.etag ?? old!.meta.lastModified;
    if (validator) headers['If-Range'] = validator;
  }
  const res = await httpGet(url, headers, opts.signal);
  let total: number | null = Number(res.headers.get('Content-Length') ?? Number.NaN);
  if (res.status === 206) {
    const range = /^bytes (\d+)-\d+\/(\d+)$/.exec(res.headers.get('Content-Range') ?? '');
    if (!range || Number(range[1]) !== from || (old!.meta.total !== null && Number(range[2]) !== old!.meta.total)) {
      await res.body?.cancel();
      await s.delete(url);
      throw new LoomError('network', `${url}: the server resumed the download at the wrong place; try again`);
    }
    total = Number(range[2]);
  } else {
    from = 0; // 200: no Range support, or the file changed (If-Range failed): start over.
  }
  if (!Number.isFinite(total)) total = null;
  const meta: Meta = {
    url,
    total,
    etag: res.headers.get('ETag'),
    lastModified: res.headers.get('Last-Modified'),
    storedAt: from > 0 ? old!.meta.storedAt : Date.now(),
    complete: false,
  };
  let writer: Writer;
  try {
    writer = await s.begin(meta, from);
  } catch (e) {
    await res.body?.cancel();
    throw storageError(e, url, total);
  }
  let loaded = from;
  const reader = res.body!.getReader();
  try {
    for (;;) {
      throwIfAborted(opts.signal, `download of ${url}`);
      const { done, value } = await reader.read();
      if (done) break;
      await writer.write(value);
      loaded += value.length;
      opts.onProgress?.({ phase: 'download', loaded, total: total ?? undefined });
    }
  } catch (e) {
    await reader.cancel().catch(() => {});
    await writer.finish(meta).catch(() => {});
    const err = storageError(e, url, total);
    if (err.code === 'network') {
      throw new LoomError(
        'network',
        `download of ${url} was cut at ${loaded}${total ? ` of ${total}` : ''} bytes (${err.message}); ` +
          'opening it again resumes where it stopped',
        { cause: e },
      );
    }
    throw err;
  }
  if (total !== null && loaded !== total) {
    await writer.finish(meta);
    throw new LoomError('network', `download of ${url} ended at ${loaded} of ${total} bytes; open it again to resume`);
  }
  meta.total = loaded;
  meta.complete = true;
  await writer.finish(meta);
  return s.blob(url);
}

function storageError(e: unknown, url: string, total: number | null): LoomError {
  const err = toLoomError(e);
  if (err.code !== 'quota') return err;
  const size = total ? ` (${(total / 1e6).toFixed(1)} MB)` : '';
  return new LoomError(
    'quota',
    `not enough browser storage to cache ${url}${size}: free space with cache.delete(url) or cache.clear(), ` +
      'or open it with {cache: false}',
    { cause: e },
  );
}

async function downloadToMemory(
  url: string,
  opts: { signal?: AbortSignal; onProgress?: (p: Progress) => void },
): Promise<Uint8Array> {
  const res = await httpGet(url, {}, opts.signal);
  const total = Number(res.headers.get('Content-Length') ?? Number.NaN);
  const reader = res.body!.getReader();
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  try {
    for (;;) {
      throwIfAborted(opts.signal, `download of ${url}`);
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      loaded += value.length;
      opts.onProgress?.({ phase: 'download', loaded, total: Number.isFinite(total) ? total : undefined });
    }
  } catch (e) {
    await reader.cancel().catch(() => {});
    throw toLoomError(e);
  }
  return concat(chunks, loaded);
}
