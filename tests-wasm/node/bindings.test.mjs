// The raw wasm-bindgen API (web/pkg, built by scripts/build-pkg.sh) in Node, against Loom's own files and outputs:
// the conformance corpora (testdata/conformance, testdata/loom-extra), and GGUF files whose expected headers and
// statistics come from llama.cpp's gguf-py and numpy (testdata/gguf/gen.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const pkg = path.join(root, 'web/pkg');
const L = await import(path.join(pkg, 'loom_wasm.js'));
L.initSync({ module: readFileSync(path.join(pkg, 'loom_wasm_bg.wasm')) });

const read = (...p) => readFileSync(path.join(root, ...p));
const corpus = (name) => {
  const dir = path.join('testdata', name);
  const manifest = JSON.parse(read(dir, 'manifest.json'));
  return manifest.cases.map((c) => ({ ...c, file: (f) => c.files?.[f] && read(dir, c.files[f]) }));
};
const cases = [...corpus('conformance'), ...corpus('loom-extra')];

const hexF32 = (hex) => new Float32Array(Uint8Array.from(hex.match(/../g), (h) => parseInt(h, 16)).buffer);
const bits = (f32) => Array.from(new Uint32Array(f32.buffer, f32.byteOffset, f32.length));

/** The thrown value of `fn`, which must throw. */
function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  assert.fail('expected a throw');
}

test('version and format detection', () => {
  assert.match(L.version(), /^\d+\.\d+\.\d+/);
  const first16 = (c, f) => c.file(f).subarray(0, 16);
  const dense = cases.find((c) => c.id === 'layer_Dense_int4');
  assert.equal(L.detectFormat(first16(dense, 'loom.entity')), 'entity');
  assert.equal(L.detectFormat(first16(dense, 'loom.json')), 'json');
  const st = cases.find((c) => c.file('loom.safetensors'));
  assert.equal(L.detectFormat(first16(st, 'loom.safetensors')), 'safetensors');
  assert.equal(L.detectFormat(new Uint8Array([0x89, 0x50, 0x4e, 0x47])), 'unknown');
});

test('inspectHeader of every corpus .entity matches the manifest, from the header alone', () => {
  let n = 0;
  for (const c of cases) {
    const bytes = c.file('loom.entity');
    if (!bytes || !c.sizes?.entity_header_json) continue;
    const ins = L.inspectHeader(bytes, bytes.length);
    assert.equal(ins.format, 'entity', c.id);
    assert.equal(ins.file_bytes, bytes.length, c.id);
    assert.equal(ins.header_bytes, 20 + c.sizes.entity_header_json, c.id);
    if (c.sizes.entity_payload !== undefined) assert.equal(ins.weight_bytes, c.sizes.entity_payload, c.id);
    assert.equal(ins.bytes_read, ins.header_bytes, c.id);
    for (const blob of c.blobs ?? []) {
      const row = ins.layers.find((l) => l.path === blob.path);
      if (!row) continue; // extra blobs (biases, Q4_0 parts) count towards their layer
      assert.equal(row.dtype, blob.dtype, `${c.id} ${blob.path}`);
      assert.equal(Math.fround(row.scale), Math.fround(blob.scale), `${c.id} ${blob.path}`);
    }
    n++;
  }
  assert.ok(n > 300, `${n} entity files inspected`);
});

test('inspectHeader asks for more bytes until the prefix holds the header', () => {
  const c = cases.find((c) => c.id === 'layer_Dense_int4');
  const bytes = c.file('loom.entity');
  const e = thrown(() => L.inspectHeader(bytes.subarray(0, 10), bytes.length));
  assert.equal(e.code, 'need_more');
  assert.ok(e.needed > 10 && e.needed <= bytes.length, `needed ${e.needed}`);
  assert.equal(typeof e.message, 'string');
  const full = L.inspectHeader(bytes, bytes.length);
  assert.deepEqual(L.inspectHeader(bytes.subarray(0, e.needed), bytes.length), full);
});

test('forwardCpu is bit-exact with Loom on every corpus case with a forward', () => {
  let n = 0;
  for (const c of cases) {
    if (!c.input_f32_hex || !c.expected_output_f32_hex) continue;
    const source = c.roundtrip?.forward_after_entity_reload_identical
      ? 'loom.entity'
      : c.roundtrip?.forward_after_json_reload_identical
        ? 'loom.json'
        : 'spec.json';
    const model = L.Model.fromBytes(c.file(source), c.id);
    const out = model.forwardCpu(hexF32(c.input_f32_hex), new Uint32Array(c.input_shape));
    assert.ok(out.data instanceof Float32Array, c.id);
    const expected = hexF32(c.expected_output_f32_hex);
    assert.deepEqual(bits(out.data), bits(expected), `${c.id} from ${source}`);
    assert.equal(out.shape.reduce((a, b) => a * b, 1), expected.length, c.id);
    model.free();
    n++;
  }
  assert.ok(n > 350, `${n} forwards`);
});

test('convert writes the bytes Loom wrote', () => {
  let n = 0;
  for (const c of cases) {
    const entity = c.file('loom.entity');
    const json = c.file('loom.json');
    if (!entity || !json || c.category === 'api_morph') continue;
    if (c.roundtrip?.json_from_reloaded_entity_identical) {
      const m = L.Model.fromBytes(entity);
      assert.ok(Buffer.from(m.convert('json')).equals(json), `${c.id}: entity → json`);
      assert.deepEqual(m.lossReport('json').layers, [], c.id);
      m.free();
      n++;
    }
    if (c.roundtrip?.entity_from_reloaded_json_identical) {
      const m = L.Model.fromBytes(json);
      assert.ok(Buffer.from(m.convert('entity')).equals(entity), `${c.id}: json → entity`);
      m.free();
      n++;
    }
  }
  assert.ok(n > 300, `${n} conversions`);
});

test('convert to a narrower dtype is refused unless allowed, and the report says what changes', () => {
  const c = cases.find((c) => c.id === 'layer_Dense_float32');
  const m = L.Model.fromBytes(c.file('loom.entity'));
  const e = thrown(() => m.convert('entity', 'int8'));
  assert.equal(e.code, 'lossy');
  const report = m.lossReport('entity', 'int8');
  assert.equal(report.layers.length, 1);
  assert.equal(report.layers[0].path, 'layers.0');
  assert.equal(report.layers[0].to, 'int8');
  // The int8 file Loom itself wrote from the same float32 master (its first save after Morph to int8).
  const int8 = cases.find((c) => c.id === 'layer_Dense_int8');
  const spec = L.Model.fromBytes(int8.file('spec.json'));
  assert.ok(Buffer.from(spec.convert('entity', undefined, undefined, false)).equals(int8.file('loom.entity')));
  const bytes = m.convert('entity', 'int8', undefined, true);
  assert.equal(L.Model.fromBytes(bytes).inspection().layers[0].dtype, 'int8');
  const perLayer = m.convert('entity', undefined, { 'layers.0': 'int4' }, true);
  assert.equal(L.Model.fromBytes(perLayer).inspection().layers[0].dtype, 'int4');
  assert.equal(thrown(() => m.convert('entity', undefined, { 'layers.7': 'int4' })).code, 'invalid_input');
  assert.equal(thrown(() => m.convert('entity', 'int3')).code, 'unsupported_dtype');
  assert.equal(thrown(() => m.convert('onnx')).code, 'invalid_input');
});

test('errors are plain objects with codes', () => {
  const bad = thrown(() => L.Model.fromBytes(new Uint8Array([1, 2, 3])));
  assert.deepEqual(Object.keys(bad).sort(), ['code', 'message']);
  assert.equal(bad.code, 'bad_format');
  const c = cases.find((c) => c.id === 'layer_Dense_int4');
  const entity = c.file('loom.entity');
  assert.equal(thrown(() => L.Model.fromBytes(entity.subarray(0, entity.length - 3))).code, 'bad_format');
  const m = L.Model.fromBytes(entity);
  assert.equal(thrown(() => m.forwardCpu(new Float32Array(3), new Uint32Array([1, 5]))).code, 'invalid_input');
  assert.equal(thrown(() => L.inspectHeader(entity, -1)).code, 'invalid_input');
});

const gguf = JSON.parse(read('testdata/gguf/expected.json'));
// The tiny-llama files (blocks.gguf and mixed.gguf are checked through gguf.stats below).
const ggufFiles = Object.keys(gguf.gguf_files).filter((n) => n.startsWith('model.'));

test('GGUF inspection matches gguf-py, through growing prefixes as over HTTP Range', () => {
  assert.equal(ggufFiles.length, 5);
  for (const name of ggufFiles) {
    const bytes = read('testdata/gguf', name);
    const theirs = gguf.gguf_files[name];
    assert.equal(L.detectFormat(bytes.subarray(0, 16)), 'gguf');
    // The read loop of the browser: start with 1 KiB, then read what need_more asks for.
    let prefix = bytes.subarray(0, 1024);
    let ins;
    for (let round = 0; !ins; round++) {
      assert.ok(round < 20);
      try {
        ins = L.inspectHeader(prefix, bytes.length);
      } catch (e) {
        assert.equal(e.code, 'need_more', e.message);
        prefix = bytes.subarray(0, e.needed);
      }
    }
    assert.ok(prefix.length <= 65536, `${name}: read ${prefix.length} bytes`);
    assert.equal(ins.format, 'gguf');
    assert.equal(ins.header_bytes, theirs.data_offset);
    assert.equal(ins.metadata['gguf.version'], String(theirs.version));
    assert.equal(ins.metadata['general.architecture'], theirs.metadata['general.architecture'].value);
    assert.equal(ins.metadata['llama.block_count'], String(theirs.metadata['llama.block_count'].value));
    assert.deepEqual(
      ins.tensors.map((t) => [t.name, t.dtype, t.shape, t.offset, t.bytes]),
      theirs.tensors.map((t) => [t.name, t.type, [...t.ne].reverse(), t.offset, t.bytes]),
    );
    const model = L.Model.fromBytes(bytes, name);
    assert.deepEqual({ ...model.inspection(), bytes_read: 0 }, { ...ins, bytes_read: 0 });
    assert.equal(thrown(() => model.forwardCpu(new Float32Array(4), new Uint32Array([1, 4]))).code, 'unsupported');
    assert.equal(thrown(() => model.convert('entity')).code, 'unsupported');
    model.free();
  }
});

test('tensorStats and tensorPreview match numpy', () => {
  let n = 0;
  for (const [file, tensors] of Object.entries(gguf.stats)) {
    const bytes = file.endsWith('loom.entity') ? read('testdata/conformance/cases', file) : read('testdata/gguf', file);
    const model = L.Model.fromBytes(bytes, file);
    for (const [name, theirs] of Object.entries(tensors)) {
      const s = model.tensorStats(name, gguf.bins);
      for (const k of ['count', 'min', 'max', 'sparsity', 'non_finite']) assert.equal(s[k], theirs[k], `${file} ${name} ${k}`);
      for (const k of ['mean', 'std']) assert.ok(Math.abs(s[k] - theirs[k]) <= 1e-12 + 1e-9 * Math.abs(theirs[k]), `${file} ${name} ${k}`);
      assert.deepEqual(s.histogram, theirs.histogram, `${file} ${name}`);
      const p = model.tensorPreview(name, 8);
      assert.ok(p.values instanceof Float32Array);
      assert.equal(Buffer.from(p.values.buffer, p.values.byteOffset, p.values.byteLength).toString('hex'), theirs.first_f32_hex);
      if (theirs.first_codes === null) assert.equal(p.codes, undefined, `${file} ${name}`);
      else assert.deepEqual(Array.from(p.codes), theirs.first_codes, `${file} ${name}`);
      n++;
    }
    assert.equal(thrown(() => model.tensorStats('no such tensor', 8)).code, 'unsupported');
    model.free();
  }
  assert.ok(n > 100, `${n}`);
});

test('diff of two GGUF files matches numpy', () => {
  const before = L.Model.fromBytes(read('testdata/gguf/model.f32.gguf'));
  const after = L.Model.fromBytes(read('testdata/gguf/model.q8_0.gguf'));
  const { entries } = before.diff(after);
  const theirs = gguf.diff['model.f32.gguf -> model.q8_0.gguf'];
  assert.equal(entries.length, Object.keys(theirs).length);
  for (const e of entries) {
    const t = theirs[e.name];
    assert.ok(Math.abs(e.max_abs - t.max_abs) <= 1e-12, e.name);
    assert.ok(Math.abs(e.mean_abs - t.mean_abs) <= 1e-12, e.name);
    assert.equal(e.status, e.dtype_before === e.dtype_after && t.max_abs === 0 ? 'same' : 'changed', e.name);
  }
});

test('fromFiles loads a training-checkpoint folder', () => {
  const weights = read('testdata/gguf/model.f16.safetensors');
  const m = L.Model.fromFiles(['run/weights.safetensors', 'run/notes.txt'], [weights, new Uint8Array([1])]);
  const ins = m.inspection();
  assert.equal(ins.format, 'checkpoint');
  assert.ok(ins.tensors.some((t) => t.name === 'model.embed_tokens.weight' && t.dtype === 'F16'));
  const theirs = gguf.stats['model.f16.safetensors']['model.norm.weight'];
  assert.equal(m.tensorStats('model.norm.weight', 16).max, theirs.max);
  assert.equal(thrown(() => L.Model.fromFiles(['notes.txt'], [new Uint8Array([1])])).code, 'invalid_input');
  assert.equal(thrown(() => L.Model.fromFiles(['a', 'b'], [new Uint8Array([1])])).code, 'invalid_input');
});

test('gpuInfo without WebGPU says why', async () => {
  const info = await L.gpuInfo();
  assert.equal(info.available, false);
  assert.equal(typeof info.reason, 'string');
  const c = cases.find((c) => c.id === 'layer_Dense_int4');
  const m = L.Model.fromBytes(c.file('loom.entity'));
  await assert.rejects(m.forwardGpu(hexF32(c.input_f32_hex), new Uint32Array(c.input_shape)), { code: 'no_webgpu' });
  // The CPU path still works after the failed GPU call.
  const out = m.forwardCpu(hexF32(c.input_f32_hex), new Uint32Array(c.input_shape));
  assert.deepEqual(bits(out.data), bits(hexF32(c.expected_output_f32_hex)));
});
