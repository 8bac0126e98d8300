// GGUF in the inspector, against gguf-py and numpy (testdata/gguf/expected.json, written by testdata/gguf/gen.py):
// block types per tensor, the quantization mix, decoder blocks folded ×N, the tensor panel's stats and its stored
// codes, block scales and mins next to the dequantized values; hostile GGUF files give a message and the page still
// works; the real SmolLM2 GGUF opens.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';
import { ROOT, dropFiles, f32Hex, openApp } from './corpus';

interface GgufTensor {
  name: string;
  ne: number[];
  type: string;
  offset: number;
  bytes: number;
  elements: number;
}
interface Stats {
  count: number;
  min: number;
  max: number;
  histogram: { counts: number[] };
}
interface Codes {
  type: string;
  group: number;
  zero: number;
  codes: number[];
  scale_f32_hex: string[];
  min_f32_hex: string[];
  values_f32_hex: string;
}
const EXPECTED: {
  gguf_files: Record<string, { tensors: GgufTensor[]; metadata: Record<string, { value?: unknown }> }>;
  stats: Record<string, Record<string, Stats>>;
  codes: Record<string, Record<string, Codes>>;
} = JSON.parse(readFileSync(path.join(ROOT, 'testdata/gguf/expected.json'), 'utf8'));

const gguf = (name: string) => readFileSync(path.join(ROOT, 'testdata/gguf', name));
const summary = (page: Page) => page.getByTestId('summary');
const ready = (page: Page) => expect(page.locator('body')).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });

async function dropGguf(page: Page, name: string, bytes: Buffer = gguf(name)): Promise<void> {
  await dropFiles(page, [{ name, bytes }]);
  await ready(page);
  await expect(summary(page)).toHaveAttribute('data-format', 'gguf');
}

/** Per block type: tensors and bytes, as gguf-py lists the file's tensors. */
function mix(file: string): Map<string, { tensors: number; bytes: number }> {
  const out = new Map<string, { tensors: number; bytes: number }>();
  for (const t of EXPECTED.gguf_files[file].tensors) {
    const m = out.get(t.type) ?? { tensors: 0, bytes: 0 };
    out.set(t.type, { tensors: m.tensors + 1, bytes: m.bytes + t.bytes });
  }
  return out;
}

test.beforeEach(async ({ page }) => {
  page.on('pageerror', (e) => {
    throw e;
  });
  await openApp(page);
});

for (const file of ['blocks.gguf', 'mixed.gguf']) {
  test(`${file}: each tensor's block type in the table, the quantization mix in the summary`, async ({ page }) => {
    await dropGguf(page, file);
    const tensors = EXPECTED.gguf_files[file].tensors;
    const rows = page.getByTestId('layer-row');
    expect(await rows.evaluateAll((rs) => rs.map((r) => [r.getAttribute('data-path'), r.getAttribute('data-dtype')]))).toEqual(
      tensors.map((t) => [t.name, t.type]),
    );
    await expect(page.locator('#layer-table th').nth(1)).toHaveText('Block type');
    await expect(summary(page).locator('h3', { hasText: 'Quantization mix' })).toBeVisible();
    const legend = summary(page).locator('.legend li');
    const want = mix(file);
    await expect(legend).toHaveCount(want.size);
    for (const [type, m] of want) {
      const li = summary(page).locator(`.legend li[data-dtype="${type}"]`);
      await expect(li).toHaveAttribute('data-tensors', String(m.tensors));
      await expect(li).toHaveAttribute('data-bytes', String(m.bytes));
      await expect(li).toContainText(`${type} ×${m.tensors} tensor`);
    }
  });
}

test('blocks.gguf: for every block type the tensor panel shows gguf-py\'s stats, and its codes, scales and mins next to the values', async ({ page }) => {
  await dropGguf(page, 'blocks.gguf');
  const codes = EXPECTED.codes['blocks.gguf'];
  expect(Object.values(codes).map((c) => c.type)).toEqual(['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K']);
  const panel = page.getByTestId('tensor-panel');
  for (const [name, want] of Object.entries(codes)) {
    await page.locator(`[data-testid="layer-row"][data-path="${name}"]`).click();
    await expect(panel).toHaveAttribute('data-path', name);
    const stats = EXPECTED.stats['blocks.gguf'][name];
    const dl = panel.getByTestId('tensor-stats');
    await expect(dl).toHaveAttribute('data-count', String(stats.count));
    expect(Number(await dl.getAttribute('data-min'))).toBe(stats.min);
    expect(Number(await dl.getAttribute('data-max'))).toBe(stats.max);
    await expect(panel.getByTestId('histogram')).toBeVisible();
    await expect(panel.getByTestId('code-formula')).toContainText(want.type);
    const table = panel.getByTestId('tensor-preview');
    await expect(table.locator('th')).toHaveText(['#', 'code', 'value', 'scale', 'min']);
    await expect(table).toHaveAttribute('data-f32-hex', want.values_f32_hex);
    const rowCodes = await table.locator('tbody tr').evaluateAll((rs) => rs.map((r) => Number(r.getAttribute('data-code'))));
    expect(rowCodes, name).toEqual(want.codes);
    const hex = async (attr: string) =>
      (await table.locator(`td[${attr}]`).evaluateAll((tds, a) => tds.map((td) => Number(td.getAttribute(a))), attr)).map((v) =>
        f32Hex([v]),
      );
    expect(await hex('data-scale'), name).toEqual(want.scale_f32_hex);
    expect(await hex('data-min'), name).toEqual(want.min_f32_hex);
    // Each scale spans its block's (or sub-block's) rows.
    const spans = await table.locator('td[data-scale]').evaluateAll((tds) => tds.map((td) => (td as HTMLTableCellElement).rowSpan));
    expect(spans.slice(0, -1).every((s) => s === want.group), name).toBe(true);
  }
});

for (const [file, blocks] of [['model.q4_0.gguf', 2], ['mixed.gguf', 2]] as const) {
  test(`${file}: the decoder blocks fold as one ×${blocks} in the topology, saying when their block types differ`, async ({ page }) => {
    await dropGguf(page, file);
    expect(EXPECTED.gguf_files[file].metadata['llama.block_count'].value).toBe(blocks);
    const group = page.locator('#topology [data-testid="repeat-group"]');
    await expect(group).toHaveCount(1);
    await expect(group).toHaveAttribute('data-count', String(blocks));
    await expect(group.locator('.repeat-head')).toContainText(`blk.0 … ${blocks - 1}`);
    // The types of the blk.* tensors, per gguf-py; they vary between blocks in mixed.gguf (attn_v, ffn_down).
    const types = new Map<string, number>();
    const perBlock = new Set<string>();
    for (const t of EXPECTED.gguf_files[file].tensors.filter((t) => t.name.startsWith('blk.'))) {
      types.set(t.type, (types.get(t.type) ?? 0) + 1);
      perBlock.add(t.name.replace(/^blk\.\d+\./, '') + ':' + t.type);
    }
    const varies = perBlock.size > EXPECTED.gguf_files[file].tensors.filter((t) => t.name.startsWith('blk.0.')).length;
    expect(varies).toBe(file === 'mixed.gguf');
    if (varies) {
      await expect(group.locator('.repeat-head')).toContainText('same-shape blocks');
      for (const [type, n] of types) await expect(group.locator('.repeat-head')).toContainText(`${type} ×${n}`);
    } else {
      await expect(group.locator('.repeat-head')).toContainText('identical blocks');
      await expect(group.locator('.repeat-head')).not.toContainText('types vary');
    }
    // A tensor of the folded sample block opens in the tensor panel.
    await group.locator('.repeat-sample .node-head[data-path="blk.0.attn_q.weight"]').click();
    await expect(page.getByTestId('tensor-panel')).toHaveAttribute('data-path', 'blk.0.attn_q.weight');
    await expect(page.getByTestId('tensor-stats')).toHaveAttribute('data-count', String(EXPECTED.stats[file]['blk.0.attn_q.weight'].count));
  });
}

/** A GGUF v3 file from parts: little-endian integers, u64-length strings. */
class Gguf {
  parts: Buffer[] = [];
  constructor(tensors: bigint, kvs: bigint) {
    this.raw(Buffer.from('GGUF')).u32(3).u64(tensors).u64(kvs);
  }
  raw(b: Buffer): this {
    this.parts.push(b);
    return this;
  }
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    return this.raw(b);
  }
  u64(v: bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(v);
    return this.raw(b);
  }
  string(s: string): this {
    return this.u64(BigInt(Buffer.byteLength(s))).raw(Buffer.from(s));
  }
  /** A tensor info: name, dims (innermost first), ggml type id, offset into the data. */
  tensor(name: string, dims: bigint[], type: number, offset: bigint): this {
    this.string(name).u32(dims.length);
    dims.forEach((d) => this.u64(d));
    return this.u32(type).u64(offset);
  }
  /** Pads to the 32-byte alignment, then `data` bytes of tensor data. */
  done(data: number): Buffer {
    const head = Buffer.concat(this.parts);
    return Buffer.concat([head, Buffer.alloc((32 - (head.length % 32)) % 32), Buffer.alloc(data, 0x11)]);
  }
}

const real = gguf('model.q4_0.gguf');
// Cut 1000 bytes from the end: the message names the first tensor (in header order, per gguf-py) that ends past the cut.
const cut = real.length - 1000;
const lastTensor = EXPECTED.gguf_files['model.q4_0.gguf'].tensors.find((t) => t.offset + t.bytes > cut)!;
const HOSTILE: [string, Buffer, RegExp][] = [
  ['truncated-header.gguf', real.subarray(0, 600), /cannot fit in a 600-byte file/],
  ['truncated-data.gguf', real.subarray(0, cut), new RegExp(`tensor ${lastTensor.name.replaceAll('.', '\\.')}: .* end past .* \\(a truncated file`)],
  ['lying-offset.gguf', new Gguf(1n, 0n).tensor('w', [32n], 0, 1n << 20n).done(128), /tensor w: 128 bytes of F32 at data offset 1048576 end past the 128 bytes/],
  ['lying-shape.gguf', new Gguf(1n, 0n).tensor('w', [4096n, 4096n], 0, 0n).done(128), /tensor w: 67108864 bytes of F32 at data offset 0 end past/],
  ['unknown-type.gguf', new Gguf(1n, 0n).tensor('w', [32n], 99, 0n).done(128), /tensor w: unknown ggml type id 99/],
  ['absurd-tensor-count.gguf', new Gguf(1n << 62n, 0n).done(64), /4611686018427387904 tensors cannot fit/],
  ['absurd-array.gguf', new Gguf(0n, 1n).string('k').u32(9).u32(4).u64(1n << 60n).done(64), /k: 1152921504606846976 array items cannot fit/],
];

test('a well-formed GGUF made by the test builder opens (so the hostile ones below fail for their lie alone)', async ({ page }) => {
  await dropGguf(page, 'ok.gguf', new Gguf(1n, 0n).tensor('w', [32n], 0, 0n).done(128));
  await expect(page.locator('[data-testid="layer-row"][data-path="w"]')).toHaveAttribute('data-dtype', 'F32');
});

for (const [name, bytes, why] of HOSTILE) {
  test(`a hostile GGUF (${name}) on the inspector: the message says why, and the page still works`, async ({ page }) => {
    await dropFiles(page, [{ name, bytes }]);
    const error = page.getByTestId('error');
    await expect(error).toBeVisible();
    await expect(error).toHaveText(why);
    // A typed LoomError, not an internal failure.
    expect(['bad_format', 'unsupported_dtype', 'unsupported']).toContain(await error.getAttribute('data-code'));
    await expect(page.locator('body')).toHaveAttribute('data-state', 'error');
    await dropGguf(page, 'model.q4_1.gguf');
    await expect(error).toBeHidden();
    await expect(page.getByTestId('layer-row')).toHaveCount(EXPECTED.gguf_files['model.q4_1.gguf'].tensors.length);
  });
}

const SMOLLM2 = path.join(ROOT, 'models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf');
const SMOLLM2_CONFIG = path.join(ROOT, 'models/smollm2-hf/config.json');

test('the real SmolLM2-135M GGUF opens: its 30 decoder blocks fold, and one tensor\'s stats dequantize that tensor', async ({ page }) => {
  test.skip(!existsSync(SMOLLM2) || !existsSync(SMOLLM2_CONFIG), 'models/ is fetched by scripts/setup.sh');
  test.setTimeout(180_000);
  const config = JSON.parse(readFileSync(SMOLLM2_CONFIG, 'utf8')) as { num_hidden_layers: number; hidden_size: number; intermediate_size: number };
  await page.locator('#file-input').setInputFiles(SMOLLM2);
  await ready(page);
  const group = page.locator('#topology [data-testid="repeat-group"]');
  await expect(group).toHaveCount(1);
  await expect(group).toHaveAttribute('data-count', String(config.num_hidden_layers));
  await page.locator('[data-testid="layer-row"][data-path="blk.0.ffn_down.weight"]').click();
  await expect(page.getByTestId('tensor-stats')).toHaveAttribute('data-count', String(config.hidden_size * config.intermediate_size), {
    timeout: 60_000,
  });
  await expect(page.getByTestId('code-formula')).toContainText('Q4_1');
  await expect(page.getByTestId('tensor-preview').locator('td[data-scale]')).not.toHaveCount(0);
});

test('Diff: the same model as a GGUF and as HF safetensors compares equal (HF names, q/k rows restored)', async ({ page }) => {
  // The tiny-llama goldens: one set of float32 weights written by gguf-py (q/k rows permuted) and by safetensors.
  const golden = (name: string) => readFileSync(path.join(ROOT, '../shared/golden/tiny-llama', name));
  await dropFiles(page, [{ name: 'model.f32.gguf', bytes: golden('model.f32.gguf') }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
  await page.getByTestId('diff-input').setInputFiles({ name: 'model.f32.safetensors', mimeType: 'application/octet-stream', buffer: golden('model.f32.safetensors') });
  await expect(page.getByTestId('diff-summary')).toHaveAttribute('data-changed', '0');
  await expect(page.locator('[data-testid="diff-row"][data-status="added"]')).toHaveCount(0);
  await expect(page.locator('[data-testid="diff-row"][data-status="removed"]')).toHaveCount(0);
  // Against the BF16 copy the weights differ by rounding, so the summary says so.
  await page.getByTestId('diff-input').setInputFiles({ name: 'model.bf16.safetensors', mimeType: 'application/octet-stream', buffer: golden('model.bf16.safetensors') });
  await expect(page.getByTestId('diff-summary')).not.toHaveAttribute('data-changed', '0');
});
