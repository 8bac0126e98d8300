// The built package (dist/) in Chromium: the worker, corpus inspection and forward, Range reads, progress,
// abort, the download cache with resume, and typed errors.
import { test, expect, type Page } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { cases, caseById, entityInspectionMismatches, forwardCases } from '../test/corpus.mjs';
import { elementValue, entity, safetensors } from './fixtures.mjs';
import { CATCH, gpuMismatches, ready, resetServer, serverLog } from './helpers';

const entityCases = cases.filter((c: any) => c.files?.['loom.entity'] && c.sizes?.entity_header_json !== undefined);
const url = (c: any, file = 'loom.entity') => `/testdata/conformance/${c.files[file]}`;

test.beforeEach(async ({ page }) => {
  await ready(page);
  await page.evaluate(CATCH);
  await resetServer(page);
});

test('inspects every corpus .entity opened as a File as Loom\'s manifest says, in a worker', async ({ page }) => {
  const results = await page.evaluate(async (urls) => {
    const out = [];
    for (const u of urls) {
      const file = new File([await (await fetch(u)).arrayBuffer()], 'loom.entity');
      out.push(await window.loom.inspect(file));
    }
    return out;
  }, entityCases.map((c: any) => url(c)));
  const bad = entityCases.flatMap((c: any, i: number) => entityInspectionMismatches(c, results[i]));
  expect(bad).toEqual([]);
  // The wasm ran in the package's module worker, never on the page's thread.
  expect(page.workers().map((w) => new URL(w.url()).pathname)).toContain('/dist/worker.js');
  expect(await page.evaluate(() => (window as any).__mainThreadWasm)).toBe(0);
});

test('a page fetches only the wasm module it uses: inspecting and running never the chat\'s, chatting never the inspector\'s', async ({ page }) => {
  const fetched = async () => (await page.request.get('/__wasm')).json();
  await page.evaluate(async (u) => {
    const model = await window.loom.open(new File([await (await fetch(u)).arrayBuffer()], 'loom.entity'));
    await model.dispose();
  }, url(entityCases[0]));
  expect(await fetched()).toEqual(['/dist/pkg/loom_wasm_bg.wasm']);

  await ready(page); // a new page: a new worker, nothing instantiated
  await resetServer(page);
  const ids = await page.evaluate(async () => {
    const chat = await window.loom.openChat('/golden/tiny-llama/model.q8_0.gguf', { device: 'cpu' });
    const ids = [...(await chat.tokenize('Hi'))];
    await chat.dispose();
    return ids;
  });
  expect(ids).toEqual([72, 105]);
  expect(await fetched()).toEqual(['/dist/pkg-chat/loom_chat_bg.wasm']);
});

test('CPU forward in the browser is bit-exact with Loom on every corpus case', async ({ page }) => {
  const got = await page.evaluate(async (items) => {
    const hex = (a: Float32Array) => [...new Uint8Array(a.buffer, a.byteOffset, a.byteLength)].map((b) => b.toString(16).padStart(2, '0')).join('');
    const out: Record<string, string> = {};
    for (const { id, u, input, shape } of items) {
      const bytes = new Uint8Array(input.match(/../g)!.map((h: string) => parseInt(h, 16)));
      const model = await window.loom.open(new File([await (await fetch(u)).arrayBuffer()], id));
      try {
        const r = await model.forward(new Float32Array(bytes.buffer), shape);
        out[id] = r.device === 'cpu' ? hex(r.data) : `device ${r.device}`;
      } catch (e: any) {
        out[id] = `${e.code}: ${e.message}`;
      }
      await model.dispose();
    }
    return out;
  }, forwardCases.map((c: any) => ({ id: c.id, u: url(c, c.forwardFile), input: c.input_f32_hex, shape: c.input_shape })));
  const bad = forwardCases.filter((c: any) => got[c.id] !== c.expected_output_f32_hex).map((c: any) => `${c.id}: ${got[c.id]}`);
  expect(bad).toEqual([]);
});

test('gpuInfo names the adapter and says when it is a software one (headless Chromium: SwiftShader)', async ({ page }) => {
  // What the browser itself reports for its adapter, read here without the package.
  const browser = await page.evaluate(async () => {
    const a = await (navigator as any).gpu.requestAdapter();
    return { architecture: a.info.architecture as string, fallback: a.info.isFallbackAdapter as boolean | undefined };
  });
  expect(browser.architecture).toBe('swiftshader');
  const info = await page.evaluate(() => window.loom.gpuInfo());
  expect(info.available, info.reason).toBe(true);
  expect(info.software).toBe(true);
  expect(info.adapter).toContain('swiftshader');
});

test('GPU forwards of two models at once both finish, each equal to its own forward alone', async ({ page }) => {
  // Two calls on one WebGPU device must not interleave their error scopes (wgpu panics on a scope popped out of
  // order), e.g. when the inspector opens and runs another model while the last one's GPU forward is in flight.
  const items = ['grid_2x1x2x2', 'nested_int8'].map((id) => {
    const c = caseById(id);
    return { u: url(c), input: c.input_f32_hex, shape: c.input_shape };
  });
  const r = await page.evaluate(async (items) => {
    const models = await Promise.all(items.map(async ({ u }) => window.loom.open(new File([await (await fetch(u)).arrayBuffer()], 'm.entity'))));
    const inputs = items.map(({ input }) => new Float32Array(new Uint8Array(input.match(/../g)!.map((h: string) => parseInt(h, 16))).buffer));
    const run = (i: number) => models[i].forward(inputs[i], items[i].shape, { device: 'gpu' }).then((o) => ({ data: Array.from(o.data), device: o.device }));
    const together = await Promise.all([run(0), run(1)]).catch((e) => String(e));
    const alone = [await run(0), await run(1)];
    for (const m of models) await m.dispose();
    return { together, alone };
  }, items);
  expect(typeof r.together, String(r.together)).toBe('object');
  const together = r.together as { data: number[]; device: string }[];
  expect(together.map((o) => o.device)).toEqual(['gpu', 'gpu']);
  expect(together).toEqual(r.alone);
});

test('GPU forward (WebGPU) agrees with Loom within the conformance tolerance, no layer on the CPU', async ({ page }) => {
  const info = await page.evaluate(() => window.loom.gpuInfo());
  expect(info.available, info.reason).toBe(true);
  // SwiftShader is slow: every 8th forward case covers each layer family and several dtypes.
  const sample = forwardCases.filter((_: any, i: number) => i % 8 === 0);
  const got = await page.evaluate(async (items) => {
    const out: Record<string, { data?: number[]; device?: string; cpuLayers?: unknown; error?: string }> = {};
    for (const { id, u, input, shape } of items) {
      const bytes = new Uint8Array(input.match(/../g)!.map((h: string) => parseInt(h, 16)));
      const model = await window.loom.open(new File([await (await fetch(u)).arrayBuffer()], id));
      try {
        const r = await model.forward(new Float32Array(bytes.buffer), shape, { device: 'gpu' });
        out[id] = { data: [...r.data], device: r.device, cpuLayers: r.cpu_layers };
      } catch (e: any) {
        out[id] = { error: `${e.code}: ${e.message}` };
      }
      await model.dispose();
    }
    return out;
  }, sample.map((c: any) => ({ id: c.id, u: url(c, c.forwardFile), input: c.input_f32_hex, shape: c.input_shape })));
  const bad: string[] = [];
  const worst = { abs: 0, rel: 0 };
  for (const c of sample) {
    const r = got[c.id];
    if (r.error || r.device !== 'gpu' || r.cpuLayers !== undefined) {
      bad.push(`${c.id}: ${r.error ?? r.device} ${JSON.stringify(r.cpuLayers)}`);
      continue;
    }
    bad.push(...gpuMismatches(c.id, r.data!, c.expected_output, worst));
  }
  console.log(`${sample.length} corpus cases on the GPU: max error ${worst.abs} (|loom| ≤ 1), ${worst.rel}·|loom| beyond`);
  expect(sample.length).toBeGreaterThan(40);
  expect(bad).toEqual([]);
});

for (const [path, make, format] of [
  ['/gen/big.safetensors', () => safetensors(4096, 4096), 'safetensors'],
  ['/gen/big.entity', () => entity(2048, 2048), 'entity'],
] as const) {
  test(`inspecting a ${format} URL transfers only its header (HTTP Range)`, async ({ page }) => {
    const { file, headerBytes } = make();
    const r = await page.evaluate((u) => window.loom.inspect(u), path);
    expect(r.format).toBe(format);
    expect(r.file_bytes).toBe(file.length);
    expect(r.header_bytes).toBe(headerBytes);
    expect(r.weight_bytes).toBe(file.length - headerBytes);
    const sent = (await serverLog(page)).filter((e) => e.path === path).reduce((s, e) => s + e.sent, 0);
    expect(sent).toBeGreaterThan(0);
    expect(sent / file.length).toBeLessThan(0.01);
  });
}

test('inspecting GGUF URLs reads their headers only and agrees with gguf-py', async ({ page }) => {
  const expected = JSON.parse(readFileSync(fileURLToPath(new URL('../../testdata/gguf/expected.json', import.meta.url)), 'utf8'));
  for (const [name, theirs] of Object.entries<any>(expected.gguf_files)) {
    await resetServer(page);
    const path = `/testdata/gguf/${name}`;
    const r = await page.evaluate((u) => window.loom.inspect(u), path);
    expect(r.format).toBe('gguf');
    expect(r.header_bytes).toBe(theirs.data_offset);
    expect(r.metadata['general.architecture']).toBe(theirs.metadata['general.architecture'].value);
    expect(r.tensors.map((t) => [t.name, t.dtype, t.shape, t.offset, t.bytes])).toEqual(
      theirs.tensors.map((t: any) => [t.name, t.type, [...t.ne].reverse(), t.offset, t.bytes]),
    );
    // One 64 KiB Range request covers these headers (the 367 KB f32 file is not read whole).
    const sent = (await serverLog(page)).reduce((sum, e) => sum + e.sent, 0);
    expect(sent).toBeLessThanOrEqual(64 * 1024);
  }
});

test('inspecting a 64 MiB File slices only its header out of it', async ({ page }) => {
  const { file, headerBytes } = safetensors(4096, 4096);
  const r = await page.evaluate(async () => {
    const f = new File([await (await fetch('/gen/big.safetensors')).blob()], 'big.safetensors');
    return window.loom.inspect(f);
  });
  expect(r).toMatchObject({ format: 'safetensors', file_bytes: file.length, header_bytes: headerBytes });
  expect(r.bytes_read).toBeLessThanOrEqual(64 * 1024);
});

/** Checks a downloaded copy of /gen/mid.safetensors against the generator, element by element (a preview). */
async function checkMid(page: Page, expr: string) {
  const values = await page.evaluate(`(async () => {
    const m = await ${expr};
    const p = await m.tensorPreview('w0', 300);
    await m.dispose();
    return [...p.values];
  })()`);
  expect(values).toEqual(Array.from({ length: 300 }, (_, i) => elementValue(i)));
}

for (const backend of ['opfs', 'cache-api'] as const) {
  test.describe(`download cache (${backend})`, () => {
    test.beforeEach(async ({ page }) => {
      await page.evaluate((b) => window.loom.configure({ cacheBackend: b }), backend);
      await page.evaluate(() => window.loom.cache.clear());
    });

    test('a fetched model is cached with progress, listed, reused, deleted', async ({ page }) => {
      const total = safetensors(1024, 1024).file.length;
      const events = await page.evaluate(async () => {
        const seen: any[] = [];
        const m = await window.loom.open('/gen/mid.safetensors', { onProgress: (p) => seen.push(p) });
        await m.dispose();
        return seen;
      });
      const downloads = events.filter((p: any) => p.phase === 'download');
      expect(downloads.length).toBeGreaterThan(2);
      expect(downloads.every((p: any) => p.total === total)).toBe(true);
      expect(downloads.map((p: any) => p.loaded)).toEqual([...downloads.map((p: any) => p.loaded)].sort((a, b) => a - b));
      expect(downloads.at(-1).loaded).toBe(total);
      expect(events.at(-1)).toEqual({ phase: 'parse', loaded: total, total });
      const list = await page.evaluate(() => window.loom.cache.list());
      expect(list).toHaveLength(1);
      expect(list[0]).toMatchObject({ url: new URL('/gen/mid.safetensors', page.url()).href, bytes: total, complete: true });
      // Second open and an inspect: served from storage, no request reaches the server.
      await resetServer(page);
      await checkMid(page, `window.loom.open('/gen/mid.safetensors')`);
      expect((await page.evaluate(() => window.loom.inspect('/gen/mid.safetensors'))).bytes_read).toBeLessThan(total);
      expect(await serverLog(page)).toEqual([]);
      await page.evaluate(() => window.loom.cache.delete('/gen/mid.safetensors'));
      expect(await page.evaluate(() => window.loom.cache.list())).toEqual([]);
      // {cache: false} fetches without storing.
      await checkMid(page, `window.loom.open('/gen/mid.safetensors', {cache: false})`);
      expect(await page.evaluate(() => window.loom.cache.list())).toEqual([]);
      expect((await serverLog(page)).map((e) => e.status)).toEqual([200]);
    });

    test('a cut download resumes where it stopped (Range + If-Range)', async ({ page }) => {
      const total = safetensors(1024, 1024).file.length;
      const cutAt = 1536 * 1024;
      await page.request.get(`/__cut?after=${cutAt}`);
      const first = await page.evaluate(() => (window as any).__try(() => window.loom.open('/gen/mid.safetensors')));
      expect(first.error).toMatchObject({ code: 'network', isLoomError: true });
      expect(first.error.message).toMatch(/resumes/);
      const list = await page.evaluate(() => window.loom.cache.list());
      expect(list).toHaveLength(1);
      expect(list[0].complete).toBe(false);
      const kept = list[0].bytes;
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThanOrEqual(cutAt);
      await checkMid(page, `window.loom.open('/gen/mid.safetensors')`);
      const log = await serverLog(page);
      expect(log).toHaveLength(2);
      expect(log[1]).toMatchObject({ range: `bytes=${kept}-`, ifRange: `"${total}"`, status: 206, sent: total - kept });
      expect(await page.evaluate(() => window.loom.cache.list())).toMatchObject([{ bytes: total, complete: true }]);
    });

    test('a full storage quota is a quota error that says what to do', async ({ page }) => {
      const cdp = await page.context().newCDPSession(page);
      const origin = new URL(page.url()).origin;
      await cdp.send('Storage.overrideQuotaForOrigin', { origin, quotaSize: 1024 * 1024 });
      const r = await page.evaluate(() => (window as any).__try(() => window.loom.open('/gen/mid.safetensors')));
      await cdp.send('Storage.overrideQuotaForOrigin', { origin });
      expect(r.error).toMatchObject({ code: 'quota', isLoomError: true });
      expect(r.error.message).toMatch(/cache\.delete|cache: false/);
    });
  });
}

test('abort stops a download at once; an aborted signal rejects before any work', async ({ page }) => {
  await page.evaluate(() => window.loom.configure({ cacheBackend: 'opfs' }));
  await page.request.get('/__slow');
  const r = await page.evaluate(async () => {
    const ac = new AbortController();
    const t0 = performance.now();
    const res = await (window as any).__try(() =>
      window.loom.open('/gen/big.safetensors', {
        signal: ac.signal,
        onProgress: (p) => p.phase === 'download' && p.loaded > 256 * 1024 && ac.abort(),
      }),
    );
    return { ...res, ms: performance.now() - t0 };
  });
  expect(r.error).toMatchObject({ code: 'aborted', isLoomError: true });
  await expect.poll(async () => (await serverLog(page))[0]?.sent).toBeLessThan(64 * 1024 * 1024);
  const pre = await page.evaluate(() => {
    const ac = new AbortController();
    ac.abort();
    return (window as any).__try(() => window.loom.inspect('/gen/big.entity', { signal: ac.signal }));
  });
  expect(pre.error).toMatchObject({ code: 'aborted', isLoomError: true });
});

test('errors are typed LoomErrors with a code and an actionable message', async ({ page }) => {
  const r = await page.evaluate(async () => {
    const t = (window as any).__try;
    const loom = window.loom;
    const json = await (await fetch('/testdata/conformance/cases/layer_Dense_float32/loom.entity')).arrayBuffer();
    const m = await loom.open(json);
    const out = {
      garbage: await t(() => loom.inspect(new File([new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9])], 'x.bin'))),
      truncated: await t(() => loom.open(new Blob([json.slice(0, json.byteLength - 8)]))),
      missing: await t(() => loom.open('/gen/none.entity', { cache: false })),
      badSource: await t(() => loom.open(42 as any)),
      lossy: await t(() => m.convert({ format: 'entity', dtype: 'int2' })),
      dtype: await t(() => m.lossReport({ format: 'entity', dtype: 'int3' })),
      chat: await t(() => loom.openChat(json)),
      shape: await t(() => m.forward([1, 2], [2])),
    };
    await m.dispose();
    return { ...out, disposed: await t(() => m.forward([1], [1])) };
  });
  expect(r.garbage.error).toMatchObject({ code: 'bad_format', isLoomError: true });
  expect(r.truncated.error).toMatchObject({ code: 'bad_format', isLoomError: true });
  expect(r.missing.error).toMatchObject({ code: 'network', isLoomError: true });
  expect(r.missing.error.message).toMatch(/404/);
  expect(r.badSource.error).toMatchObject({ code: 'invalid_input', isLoomError: true });
  expect(r.lossy.error).toMatchObject({ code: 'lossy', isLoomError: true });
  expect(r.dtype.error).toMatchObject({ code: 'unsupported_dtype', isLoomError: true });
  // A Loom network is not a language model to chat with.
  expect(r.chat.error).toMatchObject({ code: 'unsupported', isLoomError: true });
  expect(r.chat.error.message).toMatch(/not a language model/);
  expect(r.shape.error).toMatchObject({ code: 'invalid_input', isLoomError: true });
  expect(r.disposed.error).toMatchObject({ code: 'invalid_input', isLoomError: true });
});

test('convert in the browser gives Loom\'s JSON bytes', async ({ page }) => {
  const c = caseById('transformer_fp4'); // Loom's own .entity → JSON reload gives loom.json byte for byte
  const [got, want] = await page.evaluate(async ([e, j]) => {
    const m = await window.loom.open(e);
    const { blob } = await m.convert({ format: 'json' });
    await m.dispose();
    return [await blob.text(), await (await fetch(j)).text()];
  }, [url(c), url(c, 'loom.json')]);
  expect(got).toBe(want);
});
