// Loom's conformance corpus (testdata/conformance): the outside truth the tests compare with.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const corpusDir = fileURLToPath(new URL('../../testdata/conformance/', import.meta.url));
export const manifest = JSON.parse(readFileSync(`${corpusDir}manifest.json`, 'utf8'));
export const cases = manifest.cases;
export const caseById = (id) => cases.find((c) => c.id === id);
export const casePath = (c, file) => `${corpusDir}${c.files[file]}`;

export function f32FromHex(hex) {
  return new Float32Array(Uint8Array.from(Buffer.from(hex, 'hex')).buffer);
}
export function hexFromF32(values) {
  return Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString('hex');
}

/**
 * Cases Loom ran a forward on, each with `forwardFile`: the file whose reload keeps Loom's output (the .entity when
 * Loom's own .entity reload does, else its JSON, else the spec it was built from), as the native conformance
 * runner chooses.
 */
export const forwardCases = cases
  .filter((c) => c.expected_output_f32_hex && c.files)
  .map((c) => ({
    ...c,
    forwardFile: c.roundtrip?.forward_after_entity_reload_identical
      ? 'loom.entity'
      : c.roundtrip?.forward_after_json_reload_identical
        ? 'loom.json'
        : 'spec.json',
  }));

/** Every manifest expectation about an `.entity` inspection; returns a list of mismatches. */
export function entityInspectionMismatches(c, r) {
  const bad = [];
  const eq = (what, got, want) => {
    if (got !== want) bad.push(`${c.id}: ${what} is ${JSON.stringify(got)}, Loom's manifest says ${JSON.stringify(want)}`);
  };
  eq('format', r.format, 'entity');
  eq('header_bytes', r.header_bytes, 20 + c.sizes.entity_header_json);
  eq('weight_bytes', r.weight_bytes, c.sizes.entity_payload);
  eq('file_bytes', r.file_bytes, c.sizes['loom.entity']);
  // Extra blobs (Q4_0 block parts, biases, norms) count towards their layer, as `loom inspect` shows them.
  const layerOf = (path) => path.replace(/\.q4_0\..*$|\.(biases|q_norm|k_norm)$/, '');
  const byLayer = new Map();
  for (const blob of c.blobs ?? []) {
    if (blob.path.startsWith('transformer.')) {
      const t = r.tensors.find((t) => t.name === blob.path);
      eq(`${blob.path} tensor bytes`, t?.bytes, blob.length);
      continue;
    }
    const path = layerOf(blob.path);
    byLayer.set(path, [...(byLayer.get(path) ?? []), blob]);
  }
  for (const [path, blobs] of byLayer) {
    const row = r.layers.find((l) => l.path === path);
    if (!row) {
      bad.push(`${c.id}: no layer row for ${path}`);
      continue;
    }
    const main = blobs.find((b) => b.path === path);
    eq(`${path} bytes`, row.bytes, blobs.reduce((s, b) => s + b.length, 0));
    eq(`${path} dtype`, row.dtype, blobs.some((b) => b.dtype === 'Q4_0') ? 'Q4_0' : main?.dtype);
    if (main) eq(`${path} scale`, Math.fround(row.scale ?? 0), Math.fround(main.scale ?? 0));
  }
  return bad;
}
