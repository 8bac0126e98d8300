// Expected values for the e2e tests, read from Loom's conformance corpus (testdata/conformance): layer paths from
// Loom's own loom.json, parameter counts from the float32 masters in spec.json, outputs from the manifest.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import type { Page } from '@playwright/test';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CORPUS = path.join(ROOT, 'testdata/conformance');

export interface Case {
  id: string;
  category: string;
  input?: number[];
  input_shape?: number[] | null;
  expected_output_f32_hex?: string;
  roundtrip?: { forward_after_entity_reload?: number[] };
  files: Record<string, string>;
  loom_decoded?: Record<string, number[]>;
  header?: string;
}

const manifest: { cases: Case[] } = JSON.parse(readFileSync(path.join(CORPUS, 'manifest.json'), 'utf8'));

export function corpusCase(id: string): Case {
  const c = manifest.cases.find((c) => c.id === id);
  if (!c) throw new Error(`no corpus case ${id}`);
  return c;
}

export function caseFile(id: string, file: string): Buffer {
  const rel = corpusCase(id).files[file];
  if (!rel) throw new Error(`corpus case ${id} has no ${file}`);
  return readFileSync(path.join(CORPUS, rel));
}

interface JsonLayer {
  type?: string;
  activation?: string;
  weights?: string;
  parallel_branches?: JsonLayer[];
  sequential_layers?: JsonLayer[];
  meta_observed_layer?: JsonLayer;
}

/** A layer and everything nested in it with their blob paths, in pre-order (parents before their children). */
function walk(layer: JsonLayer, p: string): { path: string; layer: JsonLayer }[] {
  return [
    { path: p, layer },
    ...(layer.parallel_branches ?? []).flatMap((c, j) => walk(c, `${p}.parallel_branches.${j}`)),
    ...(layer.sequential_layers ?? []).flatMap((c, j) => walk(c, `${p}.sequential_layers.${j}`)),
    ...(layer.meta_observed_layer ? walk(layer.meta_observed_layer, `${p}.meta_observed_layer`) : []),
  ];
}

function allLayers(net: { layers: JsonLayer[] }): { path: string; layer: JsonLayer }[] {
  return net.layers.flatMap((l, i) => walk(l, `layers.${i}`));
}

/** Layer paths as Loom wrote the network (loom.json). */
export function expectedLayerPaths(id: string): string[] {
  const net = JSON.parse(caseFile(id, 'loom.json').toString('utf8'));
  return allLayers(net).map((l) => l.path);
}

/** Each layer's type and activation as Loom wrote the network (loom.json), by path. */
export function expectedLayerKinds(id: string): Map<string, { type: string; activation: string }> {
  const net = JSON.parse(caseFile(id, 'loom.json').toString('utf8'));
  return new Map(allLayers(net).map((l) => [l.path, { type: l.layer.type ?? '', activation: l.layer.activation ?? '' }]));
}

/** Paths of the layers of one type (e.g. RMSNorm) that carry weights, as Loom wrote the network (loom.json). */
export function weightedLayersOfType(id: string, type: string): string[] {
  const net = JSON.parse(caseFile(id, 'loom.json').toString('utf8'));
  return allLayers(net)
    .filter((l) => l.layer.type === type && l.layer.weights)
    .map((l) => l.path);
}

/** Parameters = float32 values in the masters Loom was fed (spec.json weights are base64 little-endian f32). */
export function expectedParams(id: string): number {
  const spec = JSON.parse(caseFile(id, 'spec.json').toString('utf8'));
  return allLayers(spec).reduce((a, { layer }) => a + (layer.weights ? Buffer.from(layer.weights, 'base64').length / 4 : 0), 0);
}

/** The float32 values of a little-endian hex string. */
export function f32FromHex(hex: string): number[] {
  const b = Buffer.from(hex, 'hex');
  return Array.from({ length: b.length / 4 }, (_, i) => b.readFloatLE(4 * i));
}

/** Float32 values as little-endian hex (the app's data-f32-hex). */
export function f32Hex(values: number[]): string {
  const b = Buffer.alloc(4 * values.length);
  values.forEach((v, i) => b.writeFloatLE(v, 4 * i));
  return b.toString('hex');
}

/** Drops files on the page the way a user's drag and drop does (a DataTransfer on a drop event). */
export async function dropFiles(page: Page, files: { name: string; bytes: Buffer }[]): Promise<void> {
  const dt = await page.evaluateHandle((list) => {
    const d = new DataTransfer();
    for (const f of list) d.items.add(new File([new Uint8Array(f.bytes)], f.name, { type: 'application/octet-stream' }));
    return d;
  }, files.map((f) => ({ name: f.name, bytes: [...f.bytes] })));
  await page.dispatchEvent('[data-testid="dropzone"]', 'dragenter', { dataTransfer: dt });
  await page.dispatchEvent('[data-testid="dropzone"]', 'dragover', { dataTransfer: dt });
  await page.dispatchEvent('[data-testid="dropzone"]', 'drop', { dataTransfer: dt });
}

/** Opens the app and waits until its script has wired the page. */
export async function openApp(page: Page): Promise<void> {
  await page.goto('/');
  await page.locator('body[data-app="ready"]').waitFor();
}
