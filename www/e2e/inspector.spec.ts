// The inspector against Loom's corpus: layer rows and parameter counts, conversions, forward outputs, hostile files.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';
import {
  ROOT,
  caseFile,
  corpusCase,
  dropFiles,
  expectedLayerKinds,
  expectedLayerPaths,
  expectedParams,
  f32FromHex,
  f32Hex,
  openApp,
  weightedLayersOfType,
} from './corpus';

const summary = (page: Page) => page.getByTestId('summary');
const rowPaths = (page: Page) => page.getByTestId('layer-row').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-path')));

/** Drops one corpus file and waits until its weights are loaded. */
async function dropCase(page: Page, id: string, file: string): Promise<void> {
  await dropFiles(page, [{ name: `${id}.${file.split('.').pop()}`, bytes: caseFile(id, file) }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
}

test.beforeEach(async ({ page }) => {
  page.on('pageerror', (e) => {
    throw e;
  });
  await openApp(page);
});

// Grids (mixed dtypes, a disabled layer, packed codecs), nested parallel/sequential branches, a transformer stack,
// single layers of the recurrent and attention families.
for (const id of ['grid_2x1x2x2', 'grid_uniform_fp4', 'nested_int8', 'nested_ternary', 'transformer_int4', 'layer_LSTM_float16', 'layer_MultiHeadAttention_int8']) {
  test(`drop ${id}/loom.entity: layer rows and parameters match the corpus`, async ({ page }) => {
    await dropCase(page, id, 'loom.entity');
    await expect(summary(page)).toHaveAttribute('data-format', 'entity');
    await expect(summary(page)).toHaveAttribute('data-params', String(expectedParams(id)));
    expect(await rowPaths(page)).toEqual(expectedLayerPaths(id));
  });
}

for (const id of ['grid_2x1x2x2', 'nested_fp4', 'transformer_int8']) {
  test(`drop ${id}/loom.json: layer rows and parameters match the corpus`, async ({ page }) => {
    await dropCase(page, id, 'loom.json');
    await expect(summary(page)).toHaveAttribute('data-format', 'json');
    await expect(summary(page)).toHaveAttribute('data-params', String(expectedParams(id)));
    expect(await rowPaths(page)).toEqual(expectedLayerPaths(id));
  });
}

test('drop a safetensors file with every dtype: one row per tensor, parameters = values Loom decodes', async ({ page }) => {
  const id = 'safetensors_read_all_dtypes';
  const decoded = corpusCase(id).loom_decoded!;
  await dropCase(page, id, 'input.safetensors');
  await expect(summary(page)).toHaveAttribute('data-format', 'safetensors');
  const params = Object.values(decoded).reduce((a, v) => a + v.length, 0);
  await expect(summary(page)).toHaveAttribute('data-params', String(params));
  expect((await rowPaths(page)).sort()).toEqual(Object.keys(decoded).sort());
});

test('drop a safetensors file Loom wrote: its one tensor', async ({ page }) => {
  const id = 'safetensors_write_single';
  const header = JSON.parse(corpusCase(id).header!) as Record<string, { shape: number[] }>;
  await dropCase(page, id, 'loom.safetensors');
  await expect(summary(page)).toHaveAttribute('data-format', 'safetensors');
  const params = Object.values(header).reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
  await expect(summary(page)).toHaveAttribute('data-params', String(params));
  expect(await rowPaths(page)).toEqual(Object.keys(header));
});

test('first paint comes from the header, and the sample opens in one click', async ({ page }) => {
  await page.getByTestId('open-sample').click();
  // The sample is the corpus case transformer_int8.
  await expect(summary(page)).toHaveAttribute('data-params', String(expectedParams('transformer_int8')));
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  expect(await rowPaths(page)).toEqual(expectedLayerPaths('transformer_int8'));
  await expect(page.getByTestId('grid-cell')).toHaveCount(1);
});

test('the landing page says GGUF opens and offers the decoder first; the summary and Run columns say things once', async ({ page }) => {
  await expect(page.getByTestId('dropzone')).toContainText('.gguf');
  const buttons = page.locator('.landing-actions button');
  await expect(buttons.first()).toHaveAttribute('data-testid', 'open-decoder');
  await buttons.first().click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  // scripts/gen_decoder_sample.py: D 16, 4 heads, 2 KV heads (head_dim 4), FF 32, vocab 32, 6 blocks.
  const [D, KV, FF, VOCAB, BLOCKS] = [16, 8, 32, 32, 6];
  const attention = 2 * D * D + 2 * KV * D + D + 2 * KV + D;
  const swiglu = 3 * D * FF + 2 * FF + D;
  const params = VOCAB * D + BLOCKS * (2 * D + attention + swiglu) + D + D * VOCAB;
  await expect(summary(page)).toHaveAttribute('data-params', String(params));
  const stat = summary(page).locator('.stat', { hasText: 'Parameters' });
  await expect(stat.locator('.note')).toHaveText(params.toLocaleString('en-US')); // rounded above, exact below

  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  await expect(stat.locator('.value')).toHaveText(String(expectedParams('grid_2x1x2x2')));
  await expect(stat.locator('.note')).toHaveCount(0); // not the same number twice
  await page.getByTestId('run-button').click();
  await expect(page.getByTestId('gpu-output')).toHaveAttribute('data-device', 'gpu', { timeout: 60_000 });
  await expect(page.getByTestId('cpu-output').locator('h3')).toHaveText(/^CPU · [\d.]+ ms · shape \[1, \d+\]$/);
  await expect(page.getByTestId('gpu-output').locator('h3')).toHaveText(/^WebGPU · [\d.]+ ms · shape \[1, \d+\]$/);
});

test('open a URL: the same network, fetched by the package', async ({ page, baseURL }) => {
  await page.locator('#url-input').fill(`${baseURL}/sample.entity`);
  await page.locator('#url-form button').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(summary(page)).toHaveAttribute('data-format', 'entity');
  expect(await rowPaths(page)).toEqual(expectedLayerPaths('transformer_int8'));
});

// Loom writes JSON from a loaded .entity as loom.json, or rt_from_entity.json where the two differ.
for (const id of ['grid_2x1x2x2', 'nested_int4', 'transformer_fp8e4m3']) {
  test(`convert ${id}/loom.entity to Loom JSON in the page: the download is Loom's bytes`, async ({ page }) => {
    await dropCase(page, id, 'loom.entity');
    await page.getByTestId('convert-format').selectOption('json');
    await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossless');
    const got = await download(page);
    expect(got.name).toBe(`${id}.json`);
    const files = corpusCase(id).files;
    const want = caseFile(id, files['rt_from_entity.json'] ? 'rt_from_entity.json' : 'loom.json');
    expect(got.bytes.equals(want)).toBe(true);
  });
}

/** What `loom convert IN OUT [args]` writes (the CLI of this repository, built by cargo as needed). */
function loomConvert(input: Buffer, inName: string, outName: string, args: string[]): Buffer {
  const dir = mkdtempSync(path.join(tmpdir(), 'www-convert-'));
  try {
    writeFileSync(path.join(dir, inName), input);
    execFileSync('cargo', ['run', '-q', '--bin', 'loom', '--', 'convert', path.join(dir, inName), path.join(dir, outName), ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    return readFileSync(path.join(dir, outName));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Loom's own conversion of `input` to `dtype` (scripts/welvet_morph.py: welvet 0.80.0's morph of every top-level
 * layer, then its serialize_entity). */
function welvetMorph(input: Buffer, dtype: string): Buffer {
  const dir = mkdtempSync(path.join(tmpdir(), 'www-welvet-'));
  try {
    writeFileSync(path.join(dir, 'in.entity'), input);
    execFileSync('python3', [path.join(ROOT, 'scripts/welvet_morph.py'), path.join(dir, 'in.entity'), path.join(dir, 'out.entity'), dtype], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    return readFileSync(path.join(dir, 'out.entity'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Clicks the convert panel's download button: the file's name and bytes. */
async function download(page: Page): Promise<{ name: string; bytes: Buffer }> {
  const [d] = await Promise.all([page.waitForEvent('download'), page.getByTestId('convert-download').click()]);
  const chunks: Buffer[] = [];
  for await (const c of await d.createReadStream()) chunks.push(c as Buffer);
  return { name: d.suggestedFilename(), bytes: Buffer.concat(chunks) };
}

for (const [format, dtype, ext] of [['entity', 'int4', 'entity'], ['safetensors', '', 'safetensors']]) {
  test(`convert grid_2x1x2x2 to ${format}${dtype ? ` with every layer ${dtype}` : ''}: the download equals loom convert's file`, async ({ page }) => {
    test.setTimeout(300_000); // cargo may have to build the CLI first
    const input = caseFile('grid_2x1x2x2', 'loom.entity');
    const want = loomConvert(input, 'in.entity', `out.${ext}`, dtype ? ['--dtype', dtype, '--allow-lossy'] : []);
    await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
    await page.getByTestId('convert-format').selectOption(format);
    if (dtype) {
      await page.getByTestId('convert-dtype').selectOption(dtype);
      await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
      await page.getByTestId('convert-accept-loss').check();
    } else {
      await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossless');
    }
    expect((await download(page)).bytes.equals(want)).toBe(true);
  });
}

// Held to Loom itself: welvet morphs each top-level layer and writes the file, and the app's download is that file
// byte for byte (welvet cannot reach nested layers, so these cases have none).
for (const [id, dtype] of [['layer_SwiGLU_float32', 'int4'], ['layer_MultiHeadAttention_float32', 'int8'], ['layer_LSTM_float32', 'fp4']]) {
  test(`convert ${id} to ${dtype} .entity: the download is welvet's morph and serialize_entity, byte for byte`, async ({ page }) => {
    const want = welvetMorph(caseFile(id, 'loom.entity'), dtype);
    await dropCase(page, id, 'loom.entity');
    await page.getByTestId('convert-format').selectOption('entity');
    await page.getByTestId('convert-dtype').selectOption(dtype);
    await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
    await page.getByTestId('convert-accept-loss').check();
    expect((await download(page)).bytes.equals(want)).toBe(true);
  });
}

/** The rows of a table: one array of cell texts per row. */
const cellTexts = (rows: ReturnType<Page['getByTestId']>) => rows.evaluateAll((rs) => rs.map((r) => Array.from(r.querySelectorAll('td'), (td) => td.textContent ?? '')));

// The app's conversion is held to the CLI's (the same library in the page): the codecs themselves are held to Loom by
// the corpora's per-dtype and API-morph cases (testdata/conformance, testdata/loom-extra), byte for byte.
test('the sample to int4 .entity: the download is sample.int4.entity and the loss report equals its diff', async ({ page }) => {
  test.setTimeout(300_000); // cargo may have to build the CLI first
  const sample = readFileSync(path.join(ROOT, 'testdata/sample/sample.entity'));
  const want = loomConvert(sample, 'sample.entity', 'out.entity', ['--dtype', 'int4', '--allow-lossy']);
  await page.getByTestId('open-sample').click();
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await page.getByTestId('convert-format').selectOption('entity');
  await page.getByTestId('convert-dtype').selectOption('int4');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
  // Layer, from, to, changed, max abs error.
  const loss = await cellTexts(page.getByTestId('loss-row'));
  await page.getByTestId('convert-accept-loss').check();
  const got = await download(page);
  expect(got.name).toBe('sample.int4.entity');
  expect(got.bytes.equals(want)).toBe(true);

  // The app's own diff of the input against what it wrote: the same layers change, by the same largest error.
  await page.getByTestId('diff-input').setInputFiles({ name: got.name, mimeType: 'application/octet-stream', buffer: got.bytes });
  await expect(page.getByTestId('diff-summary')).toBeVisible();
  const changed = await cellTexts(page.locator('[data-testid="diff-row"][data-status="changed"]'));
  expect(loss.map(([p, , , , max]) => [p, max]).sort()).toEqual(changed.map(([p, , , max]) => [p, max]).sort());
  // .entity keeps RMSNorm in float32 with its exact values (spec §8): Loom's three RMSNorm layers lose nothing.
  const norms = weightedLayersOfType('transformer_int8', 'RMSNorm');
  expect(norms).toHaveLength(3);
  for (const n of norms) expect(loss.map(([p]) => p)).not.toContain(n);
});

test('a tensor with NaN and ±Inf: the counts are shown and the stats are numpy\'s over the finite values', async ({ page }) => {
  // Written by numpy and the safetensors package, expected values from numpy (testdata/nonfinite/gen.py).
  const dir = path.join(ROOT, 'testdata/nonfinite');
  const want = JSON.parse(readFileSync(path.join(dir, 'expected.json'), 'utf8'));
  await dropFiles(page, [{ name: 'nonfinite.safetensors', bytes: readFileSync(path.join(dir, 'nonfinite.safetensors')) }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await page.locator(`[data-testid="layer-row"][data-path="${want.tensor}"]`).click();
  const warning = page.getByTestId('non-finite');
  await expect(warning).toBeVisible();
  await expect(warning).toHaveAttribute('data-nan', String(want.nan));
  await expect(warning).toHaveAttribute('data-pos-inf', String(want.pos_inf));
  await expect(warning).toHaveAttribute('data-neg-inf', String(want.neg_inf));
  await expect(warning).toContainText(`${want.nan} NaN · ${want.pos_inf} +Inf · ${want.neg_inf} −Inf`);
  const stats = page.getByTestId('tensor-stats');
  await expect(stats).toHaveAttribute('data-count', String(want.count));
  for (const k of ['min', 'max', 'mean', 'std']) {
    const v = Number(await stats.getAttribute(`data-${k}`));
    expect(Math.abs(v - want[k]), k).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(want[k])));
  }
  // Two outliers would squeeze everything else into one bar: the histogram is clipped and says what it left out.
  const note = page.getByTestId('histogram-note');
  await expect(note).toHaveAttribute('data-clipped', 'true');
  await expect(note).toHaveAttribute('data-below', String(want.below));
  await expect(note).toHaveAttribute('data-above', String(want.above));
});

test('Run is prefilled with the model\'s input shape, and reset when another model opens', async ({ page }) => {
  const values = async () => (await page.getByTestId('run-input').inputValue()).split(',').map(Number);
  for (const id of ['grid_2x1x2x2', 'nested_int8']) {
    await dropCase(page, id, 'loom.entity');
    const shape = corpusCase(id).input_shape!; // the shape Loom's corpus ran the network with
    await expect(page.getByTestId('run-shape')).toHaveValue(shape.join(','));
    expect(await values()).toHaveLength(shape.reduce((a, b) => a * b, 1));
    await expect(page.getByTestId('input-spec')).toContainText(`[batch, ${shape[1]}]`);
    await page.getByTestId('run-button').click();
    await expect(page.getByTestId('cpu-output')).toHaveAttribute('data-device', 'cpu');
    await expect(page.getByTestId('run-diff')).toContainText('max |GPU − CPU|'); // both columns done
  }
  // An Embedding first: token ids, integers below the vocabulary Loom wrote.
  const vocab = JSON.parse(caseFile('transformer_int8', 'loom.json').toString('utf8')).layers[0].vocab_size as number;
  await dropCase(page, 'transformer_int8', 'loom.entity');
  await expect(page.getByTestId('input-spec')).toHaveAttribute('data-kind', 'token_ids');
  await expect(page.getByTestId('input-spec')).toContainText(`0 to ${vocab - 1}`);
  for (const id of await values()) expect(Number.isInteger(id) && id >= 0 && id < vocab, String(id)).toBe(true);
  await expect(page.getByTestId('cpu-output')).toHaveCount(0); // the last model's output is gone
});

test('Run refuses a wrong input at the input, naming the expected shape', async ({ page }) => {
  const width = corpusCase('grid_2x1x2x2').input_shape![1];
  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  await page.getByTestId('run-shape').fill(`1,${width - 1}`);
  await page.getByTestId('run-input').fill(Array.from({ length: width - 1 }, (_, i) => i / 10).join(', '));
  await page.getByTestId('run-button').click();
  const error = page.getByTestId('input-error');
  await expect(error).toBeVisible();
  await expect(error).toContainText(`[batch, ${width}]`);
  await expect(error).toContainText(`got shape [1, ${width - 1}]`);
  await expect(error).toHaveText(/^Invalid input: the input must be/); // the prefix said once
  await expect(page.getByTestId('cpu-output')).toHaveCount(0);

  // Token ids: fractional or past the vocabulary (vocab_size 10 in Loom's loom.json) are refused too.
  await dropCase(page, 'transformer_int8', 'loom.entity');
  for (const [bad, at] of [['1, 2.5', '2.5'], ['1, 10', '10']]) {
    await page.getByTestId('run-shape').fill('2');
    await page.getByTestId('run-input').fill(bad);
    await page.getByTestId('run-button').click();
    await expect(error).toContainText(`integers from 0 to 9`);
    await expect(error).toContainText(`value 1 is ${at}`);
    await expect(page.getByTestId('cpu-output')).toHaveCount(0);
  }
});

test('a lossy conversion is marked before the download and needs a tick', async ({ page }) => {
  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  await page.getByTestId('convert-dtype').selectOption('int2');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
  await expect(page.getByTestId('loss-row').first()).toBeVisible();
  await expect(page.getByTestId('convert-download')).toBeDisabled();
  await page.getByTestId('convert-accept-loss').check();
  await expect(page.getByTestId('convert-download')).toBeEnabled();
});

// Loom's output for the network as loaded from loom.entity: the manifest's exact bytes, or where the .entity reload
// computes differently (nested cases), the output Loom printed after that reload (shortest float32 text).
function loomEntityOutput(id: string): number[] {
  const c = corpusCase(id);
  const reload = c.roundtrip?.forward_after_entity_reload;
  return reload ? reload.map(Math.fround) : f32FromHex(c.expected_output_f32_hex!);
}

// |gpu − loom| ≤ 3e-6 + 1e-5·|loom|: the conformance tolerance (crate/src/gpu/mod.rs GPU_TOLERANCE), every layer on
// the GPU.
for (const id of ['grid_2x1x2x2', 'transformer_int8', 'nested_int8']) {
  test(`run ${id} in the page: CPU bits equal Loom's, WebGPU within tolerance with no layer on the CPU`, async ({ page }) => {
    const c = corpusCase(id);
    const want = loomEntityOutput(id);
    await dropCase(page, id, 'loom.entity');
    await page.getByTestId('run-shape').fill(c.input_shape!.join(','));
    await page.getByTestId('run-input').fill(c.input!.join(', '));
    await page.getByTestId('run-button').click();
    const cpu = page.getByTestId('cpu-output');
    await expect(cpu).toHaveAttribute('data-f32-hex', f32Hex(want));
    const gpu = page.getByTestId('gpu-output');
    await expect(gpu).toHaveAttribute('data-device', 'gpu', { timeout: 60_000 });
    await expect(gpu).toHaveAttribute('data-cpu-layers', '0');
    const got = f32FromHex((await gpu.getAttribute('data-f32-hex'))!);
    expect(got.length).toBe(want.length);
    got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThanOrEqual(3e-6 + 1e-5 * Math.abs(want[i])));
    await expect(page.getByTestId('run-diff')).toContainText('max |GPU − CPU|');
  });
}

test('the tensor panel shows stats, a histogram and raw codes next to dequantized values', async ({ page }) => {
  const id = 'layer_Dense_int4';
  await dropCase(page, id, 'loom.entity');
  await page.getByTestId('layer-row').first().click();
  const panel = page.getByTestId('tensor-panel');
  await expect(panel.getByTestId('tensor-stats')).toHaveAttribute('data-count', String(expectedParams(id)));
  await expect(panel.getByTestId('histogram')).toBeVisible();
  await expect(panel.getByTestId('tensor-preview').locator('th')).toHaveText(['#', 'code', 'value']);
  await expect(panel.getByTestId('tensor-preview').locator('tbody tr')).toHaveCount(expectedParams(id));
});

test('layer rows: an activation only where the layer applies one, and opened from the keyboard', async ({ page }) => {
  const id = 'transformer_int8';
  await dropCase(page, id, 'loom.entity');
  const kinds = expectedLayerKinds(id);
  // Loom's forward applies the activation in Dense, convolutions, Embedding and KMeans only.
  const applies = new Set(['Dense', 'Embedding']);
  const shown = await page.getByTestId('layer-row').evaluateAll((rows) => rows.map((r) => [r.getAttribute('data-path')!, r.querySelectorAll('td')[3].textContent!]));
  expect(shown.length).toBe(kinds.size);
  for (const [p, activation] of shown) {
    const k = kinds.get(p)!;
    expect(activation, `${p} (${k.type})`).toBe(applies.has(k.type) ? k.activation : '—');
  }
  expect(shown.filter(([, a]) => a === '—').length).toBeGreaterThan(0);

  const rows = page.getByTestId('layer-row');
  await page.getByRole('button', { name: 'Path' }).focus();
  // Tab from the Path header past the other sort buttons to the first row.
  for (let i = 0; i < 20 && !(await rows.first().evaluate((r) => r === document.activeElement)); i++) await page.keyboard.press('Tab');
  await page.keyboard.press('Enter');
  await expect(page.getByTestId('tensor-panel')).toHaveAttribute('data-path', (await rows.nth(0).getAttribute('data-path'))!);
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press(' ');
  await expect(page.getByTestId('tensor-panel')).toHaveAttribute('data-path', (await rows.nth(1).getAttribute('data-path'))!);
});

test('the bytes chart is labelled: what it shows and its tallest bar', async ({ page }) => {
  const id = 'transformer_int8';
  await dropCase(page, id, 'loom.entity');
  // Bytes per layer from Loom's own file description: int8 codes are one byte, float32 (RMSNorm in .entity) four.
  const net = JSON.parse(caseFile(id, 'loom.json').toString('utf8'));
  const spec = JSON.parse(caseFile(id, 'spec.json').toString('utf8'));
  const sizes = new Map<string, number>();
  const walk = (l: any, s: any, p: string) => {
    if (s.weights) sizes.set(p, (Buffer.from(s.weights, 'base64').length / 4) * (l.type === 'RMSNorm' ? 4 : 1));
    (l.parallel_branches ?? []).forEach((c: any, j: number) => walk(c, s.parallel_branches[j], `${p}.parallel_branches.${j}`));
    (l.sequential_layers ?? []).forEach((c: any, j: number) => walk(c, s.sequential_layers[j], `${p}.sequential_layers.${j}`));
  };
  net.layers.forEach((l: any, i: number) => walk(l, spec.layers[i], `layers.${i}`));
  const [tallest, size] = [...sizes].reduce((a, b) => (b[1] > a[1] ? b : a));
  const label = page.getByTestId('bytes-chart-label');
  await expect(label).toContainText('Bytes on disk per layer, in file order');
  await expect(label).toHaveAttribute('data-tallest', tallest);
  await expect(label).toContainText(`${tallest}, ${size} B`);
});

test('container rows fold and unfold their nested layers, by click or from the keyboard', async ({ page }) => {
  const id = 'transformer_int8';
  await dropCase(page, id, 'loom.entity');
  const all = expectedLayerPaths(id);
  const container = 'layers.1'; // a Parallel block in Loom's loom.json
  const nested = all.filter((p) => p.startsWith(`${container}.`));
  expect(nested.length).toBeGreaterThan(0);
  const fold = page.locator(`[data-testid="layer-row"][data-path="${container}"] [data-testid="fold"]`);
  await fold.click();
  expect(await rowPaths(page)).toEqual(all.filter((p) => !nested.includes(p)));
  await expect(fold).toHaveAttribute('aria-expanded', 'false');
  await expect(page.getByTestId('tensor-panel')).not.toHaveAttribute('data-path', container); // folding is not opening
  await expect(fold).toBeFocused();
  await page.keyboard.press('Enter');
  expect(await rowPaths(page)).toEqual(all);
  await expect(page.getByTestId('tensor-panel')).not.toHaveAttribute('data-path', container);
  // Sorted, the table is flat: every row, no fold buttons.
  await fold.click();
  await page.getByRole('button', { name: 'Params' }).click();
  expect((await rowPaths(page)).sort()).toEqual([...all].sort());
  await expect(page.getByTestId('fold')).toHaveCount(0);
});

test('diff against a re-quantized copy: every weighted layer changes, with its dtype change', async ({ page }) => {
  await dropCase(page, 'nested_int8', 'loom.entity');
  await page.getByTestId('diff-input').setInputFiles({ name: 'nested_int4.entity', mimeType: 'application/octet-stream', buffer: caseFile('nested_int4', 'loom.entity') });
  const changed = page.locator('[data-testid="diff-row"][data-status="changed"]');
  await expect(changed.first()).toBeVisible();
  await expect(changed.first()).toContainText('int8 → int4');
  // The same file against itself: nothing differs.
  await page.getByTestId('diff-input').setInputFiles({ name: 'same.entity', mimeType: 'application/octet-stream', buffer: caseFile('nested_int8', 'loom.entity') });
  await expect(page.getByTestId('diff-summary')).toHaveAttribute('data-changed', '0');
});

const HOSTILE: [string, Buffer][] = [
  ['garbage.entity', Buffer.from('this is not a model at all, just some text that goes on')],
  ['truncated.entity', caseFile('grid_2x1x2x2', 'loom.entity').subarray(0, 200)],
  ['huge-header.safetensors', Buffer.concat([Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00]), Buffer.from('{"a":')])],
  ['not-loom.json', Buffer.from('{"hello": "world", "layers": 7}')],
];
for (const [name, bytes] of HOSTILE) {
  test(`a hostile file (${name}) gives a message, and the page still works`, async ({ page }) => {
    await dropFiles(page, [{ name, bytes }]);
    await expect(page.getByTestId('error')).toBeVisible();
    await expect(page.getByTestId('error')).not.toBeEmpty();
    await expect(page.locator('body')).toHaveAttribute('data-state', /error|inspected/);
    await dropCase(page, 'nested_int8', 'loom.entity');
    await expect(page.getByTestId('error')).toBeHidden();
    await expect(summary(page)).toHaveAttribute('data-params', String(expectedParams('nested_int8')));
  });
}

/** The master values of a corpus case's first layer (spec.json weights: base64 little-endian f32). */
function firstLayerMaster(id: string): { layer: Record<string, number>; values: number[] } {
  const layer = JSON.parse(caseFile(id, 'spec.json').toString('utf8')).layers[0];
  const b = Buffer.from(layer.weights, 'base64');
  return { layer, values: Array.from({ length: b.length / 4 }, (_, i) => b.readFloatLE(4 * i)) };
}

for (const id of ['layer_Dense_float32', 'layer_CNN2_float32', 'layer_Embedding_float32', 'layer_LSTM_float32', 'layer_MultiHeadAttention_float32']) {
  test(`${id}: the layer table gives the weight shape and the row sizes the layer maps, as Loom’s corpus does`, async ({ page }) => {
    const c = corpusCase(id) as ReturnType<typeof corpusCase> & { input: number[]; expected_output: number[] };
    await dropCase(page, id, 'loom.entity');
    const row = page.locator('[data-testid="layer-row"][data-path="layers.0"]');
    const io = (await row.getAttribute('data-io'))!;
    // One input row → one output row, and the corpus feeds and gets back a whole number of the same rows.
    const [rowIn, rowOut] = io.split(' → ').map((s) => s.split('×').reduce((a, b) => a * Number(b), 1));
    expect(c.input.length % rowIn, `${id} ${io}`).toBe(0);
    expect(c.input.length / rowIn, `${id} ${io}`).toBe(c.expected_output.length / rowOut);
    const { layer, values } = firstLayerMaster(id);
    if (id === 'layer_Dense_float32') {
      // spec §6.2: W[o·in + i], so [out, in].
      await expect(row).toHaveAttribute('data-shape', `${layer.output_height} × ${layer.input_height}`);
      await expect(row).toHaveAttribute('data-io', `${layer.input_height} → ${layer.output_height}`);
    } else if (id === 'layer_MultiHeadAttention_float32') {
      await expect(row).toHaveAttribute('data-shape', '8 parts'); // q, k, v, o weights and biases
    } else if (id === 'layer_LSTM_float32') {
      await expect(row).toHaveAttribute('data-shape', '12 parts'); // W_ih, W_hh, b for each of 4 gates
    } else {
      expect((await row.getAttribute('data-shape'))!.split(' × ').reduce((a, b) => a * Number(b), 1), id).toBe(values.length);
    }
  });
}

// spec §6.2 store layouts, from the config fields Loom wrote, checked against the master values Loom was fed.
for (const id of ['layer_MultiHeadAttention_float32', 'layer_SwiGLU_float32']) {
  test(`${id}: the tensor panel splits the combined store into its parts, each the master's own values`, async ({ page }) => {
    const { layer, values } = firstLayerMaster(id);
    let parts: [string, number][];
    if (layer.type as unknown as string === 'MultiHeadAttention') {
      const d = layer.d_model;
      const q = layer.query_dim || d;
      const heads = layer.num_heads;
      const kv = (layer.num_kv_heads || heads) * (layer.head_dim || d / heads);
      parts = [['q_weight', q * d], ['k_weight', kv * d], ['v_weight', kv * d], ['o_weight', d * q], ['q_bias', q], ['k_bias', kv], ['v_bias', kv], ['o_bias', d]];
    } else {
      const [h, i] = [layer.input_height, layer.output_height];
      parts = [['gate_weight', i * h], ['up_weight', i * h], ['down_weight', h * i], ['gate_bias', i], ['up_bias', i], ['down_bias', h]];
    }
    expect(parts.reduce((a, [, n]) => a + n, 0)).toBe(values.length);
    await dropCase(page, id, 'loom.entity');
    await page.locator('[data-testid="layer-row"][data-path="layers.0"]').click();
    const panel = page.getByTestId('tensor-panel');
    const buttons = panel.getByTestId('tensor-part');
    await expect(buttons).toHaveCount(parts.length + 1);
    expect(await buttons.evaluateAll((bs) => bs.map((b) => b.getAttribute('data-part')))).toEqual(['', ...parts.map(([n]) => n)]);
    let start = 0;
    for (const [name, len] of parts) {
      await panel.locator(`[data-testid="tensor-part"][data-part="${name}"]`).click();
      await expect(panel).toHaveAttribute('data-part', name);
      await expect(panel.getByTestId('tensor-stats')).toHaveAttribute('data-count', String(len));
      await expect(panel.getByTestId('tensor-preview')).toHaveAttribute('data-f32-hex', f32Hex(values.slice(start, start + Math.min(len, 48))));
      start += len;
    }
    // And back to the whole store.
    await panel.locator('[data-testid="tensor-part"][data-part=""]').click();
    await expect(panel.getByTestId('tensor-stats')).toHaveAttribute('data-count', String(values.length));
  });
}

/** A Loom Q4_0 blob's values (spec §8): n_scales, n_words, the f32 scales, then words whose nibble m of word w is
 * element 8w+m (sign-extended), times its block's scale. */
function loomQ4Values(blob: Buffer, n: number): number[] {
  const scales = blob.readUInt32LE(0);
  const words = 8 + 4 * scales;
  return Array.from({ length: n }, (_, i) => {
    const nibble = (blob.readUInt32LE(words + 4 * Math.floor(i / 8)) >>> (4 * (i % 8))) & 0xf;
    return Math.fround(((nibble << 28) >> 28) * blob.readFloatLE(8 + 4 * Math.floor(i / 32)));
  });
}

test('a Q4_0 transformer .entity: the tensor panel reads each matrix from its blocks, and says which biases the file lacks', async ({ page }) => {
  const id = 'q4_0_transformer_entity';
  const file = caseFile(id, 'emulated_q4.entity');
  const n = Number(file.readBigUInt64LE(12));
  const header = JSON.parse(file.subarray(20, 20 + n).toString('utf8'));
  const blob = (p: string) => {
    const b = header.blobs.find((x: { path: string }) => x.path === p);
    return file.subarray(20 + n + b.offset, 20 + n + b.offset + b.length);
  };
  await dropCase(page, id, 'emulated_q4.entity');
  const row = page.locator('[data-testid="layer-row"][data-path="layers.1"]');
  await expect(row).toHaveAttribute('data-shape', '8 parts');
  await row.click();
  const panel = page.getByTestId('tensor-panel');
  for (const [part, key] of [['q_weight', 200], ['o_weight', 203]] as const) {
    await panel.locator(`[data-testid="tensor-part"][data-part="${part}"]`).click();
    await expect(panel).toHaveAttribute('data-part', part);
    await expect(panel.getByTestId('tensor-stats')).toHaveAttribute('data-count', '64');
    await expect(panel.getByTestId('tensor-preview')).toHaveAttribute('data-f32-hex', f32Hex(loomQ4Values(blob(`layers.1.q4_0.${key}`), 48)));
  }
  await panel.locator('[data-testid="tensor-part"][data-part="q_bias"]').click();
  await expect(panel).toContainText('stores no q_bias');
});

/** A safetensors file's tensors: name → [dtype, raw bytes]. */
function safetensorsTensors(file: Buffer): Map<string, [string, Buffer]> {
  const n = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + n).toString('utf8'));
  const out = new Map<string, [string, Buffer]>();
  for (const [name, t] of Object.entries<{ dtype: string; data_offsets: [number, number] }>(header)) {
    if (name !== '__metadata__') out.set(name, [t.dtype, file.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1])]);
  }
  return out;
}

test('an HF safetensors file re-exports as BF16: torch’s BF16 values, and the loss report lists the tensors that round', async ({ page }) => {
  const golden = (name: string) => readFileSync(path.join(ROOT, '../shared/golden/tiny-llama', name));
  const f32 = safetensorsTensors(golden('model.f32.safetensors'));
  const bf16 = safetensorsTensors(golden('model.bf16.safetensors'));
  // Tensors whose F32 values are not already BF16 values (the low 16 bits of some value are not zero).
  const rounded = [...f32].filter(([, [, b]]) => Array.from({ length: b.length / 4 }, (_, i) => b.readUInt16LE(4 * i)).some((lo) => lo !== 0)).map(([n]) => n);
  expect(rounded.length).toBeGreaterThan(0);
  await dropFiles(page, [{ name: 'model.f32.safetensors', bytes: golden('model.f32.safetensors') }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(page.getByTestId('run-button')).toBeDisabled();
  // Only the safetensors formats are offered, and no Loom dtype.
  const offered = await page.getByTestId('convert-format').evaluate((s: HTMLSelectElement) => Array.from(s.options).filter((o) => !o.hidden).map((o) => o.value));
  expect(offered).toEqual(['safetensors', 'safetensors-f16', 'safetensors-bf16']);
  await expect(page.getByTestId('convert-dtype')).toBeHidden();
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossless'); // F32 → F32
  await page.getByTestId('convert-format').selectOption('safetensors-bf16');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
  const loss = await cellTexts(page.getByTestId('loss-row'));
  expect(loss.map(([name]) => name).sort()).toEqual(rounded.sort());
  for (const [, from, to] of loss) expect([from, to]).toEqual(['F32', 'BF16']);
  await page.getByTestId('convert-accept-loss').check();
  const got = await download(page);
  expect(got.name).toBe('model.bf16.safetensors');
  const written = safetensorsTensors(got.bytes);
  expect([...written.keys()].sort()).toEqual([...bf16.keys()].sort());
  for (const [name, [dtype, bytes]] of written) {
    expect(dtype, name).toBe('BF16');
    expect(bytes.equals(bf16.get(name)![1]), name).toBe(true);
  }
  // A Loom network opened next gets every format and its dtypes back.
  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  await expect(page.getByTestId('convert-dtype')).toBeVisible();
  await page.getByTestId('convert-format').selectOption('entity');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossless');
});

test('a GGUF file is inspected, and Run and Convert are off with the reason', async ({ page }) => {
  // A tiny llama written by llama.cpp's gguf-py (testdata/gguf/gen.py).
  await dropFiles(page, [{ name: 'model.q4_0.gguf', bytes: readFileSync(path.join(ROOT, 'testdata/gguf/model.q4_0.gguf')) }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(summary(page)).toHaveAttribute('data-format', 'gguf');
  await expect(page.getByTestId('run-button')).toBeDisabled();
  await expect(page.getByTestId('run-random')).toBeDisabled();
  await expect(page.getByTestId('run-unavailable')).toContainText('GGUF');
  await expect(page.getByTestId('run-unavailable')).toContainText('Run and Convert here do not take it');
  // The page's own chat runs it, and the CLI's conversion keeps its tokenizer: the note says both.
  await expect(page.getByTestId('run-unavailable')).toContainText('Chat with this model');
  await expect(page.getByTestId('run-unavailable')).toContainText('writing its tokenizer beside it');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'unavailable');
  await expect(page.getByTestId('convert-unavailable')).toContainText('GGUF');
  await expect(page.getByTestId('convert-format')).toBeDisabled();
  await expect(page.getByTestId('convert-download')).toBeDisabled();
  // A Loom network opened next has both back.
  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  await expect(page.getByTestId('run-unavailable')).toBeHidden();
  await expect(page.getByTestId('run-button')).toBeEnabled();
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossless');
  await expect(page.getByTestId('convert-download')).toBeEnabled();
});

test('"Chat with this model" is off, with the reason, for a GGUF whose architecture does not run', async ({ page }) => {
  // A header naming phi2 (testdata/families/gen.py, gguf-py).
  const phi2 = readFileSync(path.join(ROOT, 'testdata/families/unsupported.gguf'));
  await dropFiles(page, [{ name: 'unsupported.gguf', bytes: phi2 }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await expect(page.getByTestId('chat-with-model')).toBeDisabled();
  await expect(page.getByTestId('chat-with-unavailable')).toContainText('phi2');
  await expect(page.getByTestId('run-unavailable')).toContainText('does not run');
  // A decoder that runs has it back.
  await dropFiles(page, [{ name: 'model.q4_0.gguf', bytes: readFileSync(path.join(ROOT, 'testdata/gguf/model.q4_0.gguf')) }]);
  await expect(page.getByTestId('chat-with-model')).toBeEnabled();
  await expect(page.getByTestId('chat-with-unavailable')).toBeHidden();
});

test('the Run panel says when WebGPU is a software adapter (headless Chromium: SwiftShader)', async ({ page }) => {
  const architecture = await page.evaluate(async () => (await (navigator as any).gpu.requestAdapter()).info.architecture as string);
  expect(architecture).toBe('swiftshader');
  await dropCase(page, 'grid_2x1x2x2', 'loom.entity');
  const note = page.getByTestId('gpu-info');
  await expect(note).toHaveAttribute('data-software', 'true');
  await expect(note).toContainText('swiftshader');
  await expect(note).toContainText('software adapter');
});

test.describe('420 px wide', () => {
  test.use({ viewport: { width: 420, height: 800 } });

  test('the header fits: every action is inside the window and the page does not scroll sideways', async ({ page }) => {
    const check = async () => {
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(420);
      for (const action of [page.getByText('Open files…'), page.getByText('Open folder…'), page.locator('#url-input'), page.getByRole('button', { name: 'Open URL' })]) {
        const box = (await action.boundingBox())!;
        expect(box.x).toBeGreaterThanOrEqual(0);
        expect(box.x + box.width).toBeLessThanOrEqual(420);
      }
    };
    await check();
    await page.getByTestId('open-sample').click();
    await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
    await check();
  });

  test('the layer table scrolls sideways under its path column, which stays in view when sorted', async ({ page }) => {
    await page.getByTestId('open-sample').click();
    await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
    await page.getByRole('button', { name: 'Bytes' }).click();
    const wrap = page.locator('.layers-card .table-wrap');
    const scrolled = await wrap.evaluate((w) => {
      w.scrollLeft = w.scrollWidth;
      return w.scrollLeft;
    });
    expect(scrolled).toBeGreaterThan(0); // the table is wider than the window
    const left = (await wrap.boundingBox())!.x;
    for (const cell of (await page.locator('[data-testid="layer-row"] td.path').all()).slice(0, 3)) {
      // Only the page scrolls, vertically, to bring the row into the window.
      await cell.evaluate((td) => window.scrollBy(0, td.getBoundingClientRect().top - 400));
      const box = (await cell.boundingBox())!;
      expect(Math.abs(box.x - left)).toBeLessThanOrEqual(2); // stuck to the table's left edge
      expect(box.width).toBeLessThan(420 / 2);
      // What is drawn there is the path cell, not a column scrolled over it.
      expect(await cell.evaluate((td) => {
        const r = td.getBoundingClientRect();
        return td.contains(document.elementFromPoint(r.left + 4, r.top + r.height / 2));
      })).toBe(true);
    }
  });
});
