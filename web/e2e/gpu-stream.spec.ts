// open(…, {load: 'gpu'}) in Chromium (SwiftShader WebGPU): a .entity file's blobs go from the source straight to GPU
// buffers, so the worker's WebAssembly memory holds the header and one blob, never the model.
import { readFileSync } from 'node:fs';
import { test, expect } from '@playwright/test';
import { forwardCases } from '../test/corpus.mjs';
import { CHAIN_INT8_SCALE, STREAM_DTYPES, STREAM_WIDTH, chainCode, denseChain } from './fixtures.mjs';
import { CATCH, gpuMismatches, ready, resetServer } from './helpers';

test.beforeEach(async ({ page }) => {
  await ready(page);
  await page.evaluate(CATCH);
  await resetServer(page);
});

test('a 52 MiB .entity streams to the GPU holding one blob in wasm memory; outputs equal the full load', async ({ page }) => {
  const { file, headerBytes, blobs } = denseChain(STREAM_WIDTH, STREAM_DTYPES);
  const weightBytes = file.length - headerBytes;
  const largest = Math.max(...blobs.map((b) => b.length));
  const r = await page.evaluate(async (n) => {
    const loom = window.loom;
    const t = (window as any).__try;
    const memoryAtStart = await loom.memoryBytes();
    const x = Float32Array.from({ length: n }, (_, i) => ((i % 17) - 8) / 16);
    const progress: any[] = [];
    const g = await loom.open('/gen/stream.entity', { load: 'gpu', cache: false, onProgress: (p) => progress.push(p) });
    const gpu = await g.forward(x, [1, n]);
    const memoryGpu = await loom.memoryBytes();
    const log = await (await fetch('/__log')).json();
    const refused = {
      cpu: await t(() => g.forward(x, [1, n], { device: 'cpu' })),
      convert: await t(() => g.convert({ format: 'json' })),
      lossReport: await t(() => g.lossReport({ format: 'entity', dtype: 'int8' })),
      diff: await t(() => g.diff(g)),
      unknown: await t(() => g.tensorStats('layers.99')),
    };
    const streamedStats = await g.tensorStats('layers.3');
    const previews = [await g.tensorPreview('layers.0', 8), await g.tensorPreview('layers.3', 8)];
    await g.dispose();
    const f = await loom.open('/gen/stream.entity', { cache: false });
    const full = await f.forward(x, [1, n], { device: 'gpu' });
    const cpu = await f.forward(x, [1, n]);
    const fullStats = await f.tensorStats('layers.3');
    const memoryFull = await loom.memoryBytes();
    await f.dispose();
    return {
      progress, memoryAtStart, memoryGpu, memoryFull, log, refused, streamedStats, fullStats,
      previews: previews.map((p) => ({ dtype: p.dtype, values: [...p.values], codes: p.codes && [...p.codes] })),
      gpu: { device: gpu.device, data: [...gpu.data], cpuLayers: gpu.cpu_layers },
      full: { device: full.device, data: [...full.data], cpuLayers: full.cpu_layers },
      cpu: { device: cpu.device, data: [...cpu.data] },
    };
  }, STREAM_WIDTH);
  console.log(
    `stream.entity: ${file.length} bytes, header ${headerBytes}, largest blob ${largest}; wasm memory at start ` +
      `${r.memoryAtStart}, after load + forward: load 'gpu' ${r.memoryGpu}, then load 'full' ${r.memoryFull}`,
  );

  // Weights went up blob by blob, with upload progress in bytes of weights.
  const uploads = r.progress.filter((p: any) => p.phase === 'upload');
  expect(uploads.map((p: any) => p.loaded)).toEqual([0, ...blobs.map((_, i) => blobs.slice(0, i + 1).reduce((s, b) => s + b.length, 0))]);
  expect(uploads.every((p: any) => p.total === weightBytes)).toBe(true);
  // From the server: Range requests, the file read once (plus the first 64 KiB header read).
  expect(r.log.every((e: any) => e.status === 206)).toBe(true);
  expect(r.log.reduce((s: number, e: any) => s + e.sent, 0)).toBeLessThanOrEqual(file.length + 64 * 1024);

  // The wasm heap held the header and about one blob; the full load held the whole file.
  expect(file.length).toBeGreaterThanOrEqual(48 * 1024 * 1024);
  expect(r.memoryGpu).toBeLessThan(headerBytes + largest + 4 * 1024 * 1024);
  expect(r.memoryGpu).toBeLessThan(0.25 * file.length);
  expect(r.memoryFull).toBeGreaterThan(file.length);

  // Same kernels on the same packed weights: the streamed model's output is the full load's, exactly, and the
  // CPU's (bit-exact with Loom) within the conformance tolerance.
  expect([r.gpu.device, r.full.device, r.cpu.device]).toEqual(['gpu', 'gpu', 'cpu']);
  // No layer handed to the CPU (`device` says where the call ran, `cpuLayers` which layers left the GPU).
  expect([r.gpu.cpuLayers, r.full.cpuLayers]).toEqual([undefined, undefined]);
  expect(r.gpu.data).toEqual(r.full.data);
  const worst = { abs: 0, rel: 0 };
  expect(r.cpu.data).toHaveLength(STREAM_WIDTH);
  expect(gpuMismatches('streamed', r.gpu.data, r.cpu.data, worst)).toEqual([]);
  console.log(`streamed chain on the GPU: max error ${worst.abs} (|cpu| ≤ 1), ${worst.rel}·|cpu| beyond`);

  // Statistics and previews read the layer's blob again; the values are the generator's.
  expect(r.streamedStats).toEqual(r.fullStats);
  const codes = (l: number) => Array.from({ length: 8 }, (_, k) => chainCode(l, k));
  expect(r.previews[0]).toEqual({ dtype: 'float32', values: codes(0).map((c) => c / 8192), codes: undefined });
  expect(r.previews[1]).toEqual({ dtype: 'int8', values: codes(3).map((c) => c * CHAIN_INT8_SCALE), codes: codes(3) });

  // What needs the weights in memory says to open with load 'full'.
  for (const what of ['cpu', 'convert', 'lossReport', 'diff'] as const) {
    expect(r.refused[what].error, what).toMatchObject({ code: 'unsupported', isLoomError: true });
    expect(r.refused[what].error.message, what).toMatch(/load: 'full'/);
  }
  expect(r.refused.unknown.error).toMatchObject({ code: 'unsupported', isLoomError: true });
});

test('corpus networks streamed to the GPU from Files agree with Loom within the conformance tolerance, no layer on the CPU', async ({ page }) => {
  // Every 6th case Loom reloads from its .entity: each layer family, nested layers, several dtypes.
  const sample = forwardCases.filter((c: any) => c.forwardFile === 'loom.entity').filter((_: any, i: number) => i % 6 === 0);
  const got = await page.evaluate(async (items) => {
    const out: Record<string, { data?: number[]; device?: string; cpuLayers?: unknown; error?: string }> = {};
    for (const { id, u, input, shape } of items) {
      const bytes = new Uint8Array(input.match(/../g)!.map((h: string) => parseInt(h, 16)));
      try {
        const m = await window.loom.open(new File([await (await fetch(u)).arrayBuffer()], id), { load: 'gpu' });
        const r = await m.forward(new Float32Array(bytes.buffer), shape);
        out[id] = { data: [...r.data], device: r.device, cpuLayers: r.cpu_layers };
        await m.dispose();
      } catch (e: any) {
        out[id] = { error: `${e.code}: ${e.message}` };
      }
    }
    return out;
  }, sample.map((c: any) => ({ id: c.id, u: `/testdata/conformance/${c.files['loom.entity']}`, input: c.input_f32_hex, shape: c.input_shape })));
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
  console.log(`${sample.length} streamed corpus cases on the GPU: max error ${worst.abs} (|loom| ≤ 1), ${worst.rel}·|loom| beyond`);
  expect(sample.length).toBeGreaterThan(40);
  expect(bad).toEqual([]);
});

test('a URL streams to the GPU through the download cache once its header is checked; other formats are refused', async ({ page }) => {
  const u = '/testdata/conformance/cases/grid_2x1x2x2/loom.entity';
  await page.evaluate(() => window.loom.configure({ cacheBackend: 'opfs' }));
  await page.evaluate(() => window.loom.cache.clear());
  const r = await page.evaluate(async (u) => {
    const t = (window as any).__try;
    const phases: string[] = [];
    const m = await window.loom.open(u, { load: 'gpu', onProgress: (p) => phases.push(p.phase) });
    const list = await window.loom.cache.list();
    await m.dispose();
    await fetch('/__reset');
    const again = await window.loom.open(u, { load: 'gpu' });
    await again.dispose();
    return {
      phases: [...new Set(phases)],
      list,
      requestsAgain: (await (await fetch('/__log')).json()).length,
      json: await t(() => window.loom.open('/testdata/conformance/cases/grid_2x1x2x2/loom.json', { load: 'gpu' })),
      badLoad: await t(() => window.loom.open(u, { load: 'vram' as any })),
      // The JSON file was refused from its first bytes: nothing was downloaded into the cache.
      cachedAfter: (await window.loom.cache.list()).length,
      aborted: await t(() => {
        const ac = new AbortController();
        const onProgress = (p: any) => p.phase === 'upload' && p.loaded > 0 && ac.abort();
        return window.loom.open(u, { load: 'gpu', signal: ac.signal, onProgress });
      }),
    };
  }, u);
  expect(r.phases).toEqual(['parse', 'download', 'upload']);
  expect(r.list).toMatchObject([{ url: new URL(u, page.url()).href, complete: true }]);
  expect(r.requestsAgain).toBe(0);
  expect(r.json.error).toMatchObject({ code: 'unsupported', isLoomError: true });
  expect(r.json.error.message).toMatch(/\.entity/);
  expect(r.cachedAfter).toBe(1);
  expect(r.aborted.error).toMatchObject({ code: 'aborted', isLoomError: true });
  expect(r.badLoad.error).toMatchObject({ code: 'invalid_input', isLoomError: true });
});

test('a streamed layer reads one part of its combined store (path#part), the master values Loom was fed', async ({ page }) => {
  // layer_MultiHeadAttention_float32: d_model 4, 2 heads over 1 kv head (head_dim 2), so Wq is 4×4 and Wk 2×4
  // (spec §6.2: Wq, Wk, Wv, Wo, then biases); spec.json holds the float32 master Loom was fed.
  const spec = JSON.parse(readFileSync(new URL('../../testdata/conformance/cases/layer_MultiHeadAttention_float32/spec.json', import.meta.url), 'utf8'));
  const master = Buffer.from(spec.layers[0].weights, 'base64');
  const values = Array.from({ length: master.length / 4 }, (_, i) => master.readFloatLE(4 * i));
  const u = '/testdata/conformance/cases/layer_MultiHeadAttention_float32/loom.entity';
  const r = await page.evaluate(async (u) => {
    const g = await window.loom.open(u, { load: 'gpu', cache: false });
    const p = await g.tensorPreview('layers.0#k_weight', 64);
    const s = await g.tensorStats('layers.0#o_bias');
    const missing = await g.tensorPreview('layers.0#nope', 4).then(() => null, (e: any) => e.code);
    await g.dispose();
    return { k: [...p.values], shape: p.shape, biasCount: s.count, missing };
  }, u);
  expect(r.shape).toEqual([2, 4]);
  expect(r.k).toEqual(values.slice(16, 24));
  expect(r.biasCount).toBe(4);
  expect(r.missing).toBe('unsupported');
});
