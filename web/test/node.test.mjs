// The package's public API under Node (in-thread engine) on Loom's conformance corpus.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rejectsWith } from './assert.mjs';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { execFileSync, spawn } from 'node:child_process';
import { inspect, open, openFiles, gpuInfo, memoryBytes } from 'loom-wasm';
import { cases, caseById, casePath, entityInspectionMismatches, f32FromHex, forwardCases, hexFromF32 } from './corpus.mjs';
import { safetensors } from '../e2e/fixtures.mjs';

const entityCases = cases.filter((c) => c.files?.['loom.entity'] && c.sizes?.entity_header_json !== undefined);

test('inspect of every corpus .entity agrees with the manifest', async () => {
  assert.ok(entityCases.length > 350, `only ${entityCases.length} corpus cases`);
  const bad = [];
  for (const c of entityCases) bad.push(...entityInspectionMismatches(c, await inspect(casePath(c, 'loom.entity'))));
  assert.deepEqual(bad, []);
});

test('every kind of source gives the same inspection', async () => {
  const c = caseById('nested_int4');
  const path = casePath(c, 'loom.entity');
  const bytes = readFileSync(path);
  const want = await inspect(path);
  const strip = ({ bytes_read, ...r }) => r;
  for (const src of [
    pathToFileURL(path),
    pathToFileURL(path).href,
    new Uint8Array(bytes),
    bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length),
    new Blob([bytes]),
    new File([bytes], 'x.entity'),
  ]) {
    assert.deepEqual(strip(await inspect(src)), strip(want), String(src.constructor.name));
  }
  assert.deepEqual(entityInspectionMismatches(c, want), []);
});

test('a 64 MiB safetensors file is inspected from its header alone', async () => {
  const { file, headerBytes } = safetensors(4096, 4096);
  const path = join(mkdtempSync(join(tmpdir(), 'loom-wasm-')), 'big.safetensors');
  writeFileSync(path, file);
  const r = await inspect(path);
  assert.equal(r.format, 'safetensors');
  assert.equal(r.file_bytes, file.length);
  assert.equal(r.header_bytes, headerBytes);
  assert.deepEqual(r.tensors.map((t) => [t.name, t.dtype, t.shape, t.bytes, t.offset]), [
    ['w0', 'F32', [4096, 4096], 4096 * 4096 * 4, headerBytes],
  ]);
  assert.equal(r.metadata.source, 'loom-wasm test');
  assert.ok(r.bytes_read <= 64 * 1024, `read ${r.bytes_read} bytes`);
});

test('CPU forward is bit-exact with Loom on every corpus case', async () => {
  assert.ok(forwardCases.length > 350, `only ${forwardCases.length} forward cases`);
  const bad = [];
  for (const c of forwardCases) {
    const model = await open(casePath(c, c.forwardFile));
    try {
      const out = await model.forward(f32FromHex(c.input_f32_hex), c.input_shape);
      assert.equal(out.device, 'cpu');
      if (hexFromF32(out.data) !== c.expected_output_f32_hex) bad.push(c.id);
    } catch (e) {
      bad.push(`${c.id}: ${e.message}`);
    } finally {
      await model.dispose();
    }
  }
  assert.deepEqual(bad, []);
});

test('convert reproduces Loom\'s own bytes: .entity → JSON and JSON → .entity', async () => {
  const bad = [];
  let checked = 0;
  for (const c of entityCases.filter((c) => c.files['loom.json'] && c.load_mode === 'persist')) {
    const json = readFileSync(casePath(c, 'loom.json'));
    const ent = readFileSync(casePath(c, 'loom.entity'));
    if (c.roundtrip?.json_from_reloaded_entity_identical) {
      const m = await open(ent, { name: c.id });
      const { blob, loss } = await m.convert({ format: 'json' });
      if (!Buffer.from(await blob.arrayBuffer()).equals(json)) bad.push(`${c.id} → json`);
      assert.deepEqual(loss.layers, []);
      await m.dispose();
      checked++;
    }
    if (c.roundtrip?.entity_from_reloaded_json_identical) {
      const m = await open(json);
      const { blob } = await m.convert({ format: 'entity' });
      if (!Buffer.from(await blob.arrayBuffer()).equals(ent)) bad.push(`${c.id} → entity`);
      await m.dispose();
      checked++;
    }
  }
  assert.ok(checked > 500, `only ${checked} conversions checked`);
  assert.deepEqual(bad, []);
});

test('lossy conversions are reported first and refused unless allowed', async () => {
  const m = await open(casePath(caseById('layer_Dense_float32'), 'loom.entity'));
  const report = await m.lossReport({ format: 'entity', dtype: 'int4' });
  assert.equal(report.layers.length, 1);
  assert.equal(report.layers[0].from, 'float32');
  assert.equal(report.layers[0].to, 'int4');
  assert.ok(report.layers[0].changed > 0 && report.layers[0].max_abs_error > 0);
  await rejectsWith(m.convert({ format: 'entity', dtype: 'int4' }), 'lossy');
  const { blob, loss } = await m.convert({ format: 'entity', dtype: 'int4', allowLossy: true });
  assert.deepEqual(loss, report);
  const back = await inspect(blob);
  assert.equal(back.layers[0].dtype, 'int4');
  await rejectsWith(m.convert({ format: 'entity', dtype: 'int3' }), 'unsupported_dtype', /int3/);
  await m.dispose();
});

test('bad input is a typed LoomError with a message a person can act on', async () => {
  const ent = readFileSync(casePath(caseById('nested_int8'), 'loom.entity'));
  await rejectsWith(inspect(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])), 'bad_format');
  await rejectsWith(open(ent.subarray(0, ent.length - 10)), 'bad_format', /outside the payload/);
  await rejectsWith(inspect(ent.subarray(0, 30)), 'bad_format');
  await rejectsWith(inspect(join(tmpdir(), 'no-such-loom-file.entity')), 'invalid_input', /no-such-loom-file/);
  await rejectsWith(inspect(42), 'invalid_input', /source must be/);
  const m = await open(ent);
  await rejectsWith(m.forward([1, 2, 3], [3]), 'invalid_input');
  await rejectsWith(m.forward([1], []), 'invalid_input', /shape/);
  await m.dispose();
  await rejectsWith(m.forward([1], [1]), 'invalid_input', /disposed/);
});

test('an aborted signal rejects with code aborted', async () => {
  const ac = new AbortController();
  ac.abort();
  await rejectsWith(open(casePath(caseById('nested_int8'), 'loom.entity'), { signal: ac.signal }), 'aborted');
});

test('progress reports reading and parsing', async () => {
  const seen = [];
  const path = casePath(caseById('transformer_float64'), 'loom.entity');
  await (await open(path, { onProgress: (p) => seen.push(p) })).dispose();
  const size = readFileSync(path).length;
  assert.deepEqual(seen.at(-1), { phase: 'parse', loaded: size, total: size });
  assert.ok(seen.some((p) => p.phase === 'read' && p.loaded === size && p.total === size));
});

test('a GPU forward without WebGPU runs on the CPU and says why', async () => {
  const info = await gpuInfo();
  assert.equal(info.available, false);
  assert.match(info.reason, /WebGPU/);
  const c = caseById('layer_Dense_float32');
  const m = await open(casePath(c, 'loom.entity'));
  const out = await m.forward(f32FromHex(c.input_f32_hex), c.input_shape, { device: 'gpu' });
  assert.equal(out.device, 'cpu');
  assert.match(out.fallbackReason, /WebGPU|GPU/);
  assert.equal(hexFromF32(out.data), c.expected_output_f32_hex);
  await m.dispose();
});

test("load: 'gpu' without WebGPU is a no_webgpu error; other formats and bad values are refused", async () => {
  const c = caseById('layer_Dense_float32');
  await rejectsWith(open(casePath(c, 'loom.entity'), { load: 'gpu' }), 'no_webgpu', /WebGPU/);
  await rejectsWith(open(casePath(c, 'loom.json'), { load: 'gpu' }), 'unsupported', /\.entity/);
  await rejectsWith(open(casePath(c, 'loom.entity'), { load: 'vram' }), 'invalid_input', /'full' or 'gpu'/);
  // A model opened whole still runs on the CPU by default.
  const m = await open(casePath(c, 'loom.entity'), { load: 'full' });
  assert.equal(hexFromF32((await m.forward(f32FromHex(c.input_f32_hex), c.input_shape)).data), c.expected_output_f32_hex);
  await m.dispose();
});

test('memoryBytes is the size of the WebAssembly memory, which holds a model opened whole', async () => {
  const before = await memoryBytes();
  assert.ok(before > 0 && before % 65536 === 0, String(before));
  const { file } = safetensors(2048, 4096);
  const m = await open(file);
  const after = await memoryBytes();
  assert.ok(after >= Math.max(before, file.length), `${before} → ${after} bytes holding a ${file.length}-byte file`);
  await m.dispose();
});

test('openFiles loads a training-checkpoint folder (weights + Adam moments)', async () => {
  const weights = safetensors(3, 4).file;
  const files = [
    new File([weights], 'weights.safetensors'),
    new File([weights], 'optimizer_m.safetensors'),
    new File(['{"arch": "mlp"}'], 'meta.json'),
  ];
  const m = await openFiles(files, { name: 'run-7' });
  assert.equal(m.name, 'run-7');
  assert.equal(m.inspection.format, 'checkpoint');
  assert.deepEqual(m.inspection.tensors.map((t) => [t.name, t.dtype, t.shape]), [['w0', 'F32', [3, 4]]]);
  assert.equal(m.inspection.metadata.adam_moment_tensors, '1');
  await m.dispose();
  await rejectsWith(openFiles([]), 'invalid_input', /openFiles/);
});

test('tensorPreview and tensorStats give the stored weights (Loom JSON float32 as truth); diff compares', async () => {
  const c = caseById('layer_Dense_float32');
  const loomJson = JSON.parse(readFileSync(casePath(c, 'loom.json'), 'utf8'));
  const stored = loomJson.layers[0];
  assert.equal(stored.dtype, 'float32');
  const raw = Buffer.from(stored.weights, 'base64');
  const want = Array.from(new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length)));
  const m = await open(casePath(c, 'loom.entity'));
  const p = await m.tensorPreview('layers.0', 1000);
  assert.deepEqual(Array.from(p.values), want);
  assert.equal(p.dtype, 'float32');
  const s = await m.tensorStats('layers.0', { bins: 4 });
  assert.equal(s.count, want.length);
  assert.equal(s.min, Math.min(...want));
  assert.equal(s.max, Math.max(...want));
  assert.equal(s.histogram.counts.reduce((a, b) => a + b, 0), want.length);
  assert.ok(Math.abs(s.mean - want.reduce((a, b) => a + b, 0) / want.length) < 1e-6);
  const same = await open(casePath(c, 'loom.json'));
  assert.deepEqual((await m.diff(same)).entries.map((e) => e.status), ['same']);
  const { blob } = await m.convert({ format: 'entity', dtype: 'int4', allowLossy: true });
  const q = await open(blob);
  const [entry] = (await m.diff(q)).entries;
  assert.equal(entry.status, 'changed');
  assert.equal(entry.dtype_before, 'float32');
  assert.equal(entry.dtype_after, 'int4');
  assert.ok(entry.max_abs > 0);
  await rejectsWith(m.tensorStats('layers.99'), 'unsupported', /layers\.99/);
  for (const x of [m, same, q]) await x.dispose();
});

test('URLs in Node: inspect uses Range requests, open downloads with progress', async (t) => {
  const server = spawn(process.execPath, [fileURLToPath(new URL('../e2e/server.mjs', import.meta.url))], {
    env: { ...process.env, PORT: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => server.kill());
  const base = await new Promise((r) => server.stdout.once('data', (d) => r(/http:\S+/.exec(String(d))[0])));
  const { file, headerBytes } = safetensors(4096, 4096);
  const r = await inspect(`${base}/gen/big.safetensors`);
  assert.equal(r.header_bytes, headerBytes);
  const sent = (await (await fetch(`${base}/__log`)).json()).reduce((s, e) => s + e.sent, 0);
  assert.ok(sent > 0 && sent / file.length < 0.01, `${sent} bytes sent`);
  const seen = [];
  const c = caseById('transformer_fp4');
  const m = await open(`${base}/testdata/conformance/${c.files['loom.entity']}`, { onProgress: (p) => seen.push(p) });
  assert.equal(m.name, 'loom.entity');
  const out = await m.forward(f32FromHex(c.input_f32_hex), c.input_shape);
  assert.equal(hexFromF32(out.data), c.expected_output_f32_hex);
  assert.deepEqual(seen.filter((p) => p.phase === 'download').at(-1), { phase: 'download', loaded: c.sizes['loom.entity'], total: c.sizes['loom.entity'] });
  await m.dispose();
  await rejectsWith(open(`${base}/gen/missing.entity`), 'network', /404/);
});

test('npm pack puts the LICENSE in the tarball, next to dist/ and the README', () => {
  const web = fileURLToPath(new URL('..', import.meta.url));
  const [pack] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--silent'], { cwd: web, encoding: 'utf8' }));
  const files = pack.files.map((f) => f.path);
  for (const f of ['LICENSE', 'README.md', 'package.json', 'dist/index.js', 'dist/pkg/loom_wasm_bg.wasm', 'dist/pkg-chat/loom_chat_bg.wasm']) assert.ok(files.includes(f), `${f} not in ${files}`);
  assert.equal(pack.files.find((f) => f.path === 'LICENSE').size, readFileSync(new URL('../../LICENSE', import.meta.url)).length);
});
