// Chromium without WebGPU: gpuInfo says why, and a GPU forward runs on the CPU and says so.
import { test, expect } from '@playwright/test';
import { CHROME_ARGS } from '../playwright.config';
import { caseById } from '../test/corpus.mjs';
import { ready } from './helpers';

test.use({ launchOptions: { executablePath: '/usr/bin/chromium', args: CHROME_ARGS.filter((a) => a !== '--enable-unsafe-webgpu') } });

test('without WebGPU a GPU forward falls back to the CPU, bit-exact, with the reason', async ({ page }) => {
  await ready(page);
  const c = caseById('layer_Dense_float32');
  const r = await page.evaluate(async ({ u, input, shape }) => {
    const info = await window.loom.gpuInfo();
    const m = await window.loom.open(u);
    const bytes = new Uint8Array(input.match(/../g)!.map((h: string) => parseInt(h, 16)));
    const out = await m.forward(new Float32Array(bytes.buffer), shape, { device: 'gpu' });
    const hex = [...new Uint8Array(out.data.buffer)].map((b) => b.toString(16).padStart(2, '0')).join('');
    return { info, device: out.device, fallbackReason: out.fallbackReason, hex };
  }, { u: `/testdata/conformance/${c.files['loom.entity']}`, input: c.input_f32_hex, shape: c.input_shape });
  expect(r.info.available).toBe(false);
  expect(r.info.reason).toBeTruthy();
  expect(r.device).toBe('cpu');
  expect(r.fallbackReason).toBe(r.info.reason);
  expect(r.hex).toBe(c.expected_output_f32_hex);
});

test('without WebGPU, load: \'gpu\' is a no_webgpu error, never a silent CPU load', async ({ page }) => {
  await ready(page);
  const c = caseById('layer_Dense_float32');
  const r = await page.evaluate(async (u) => {
    try {
      await window.loom.open(u, { load: 'gpu' });
      return { opened: true };
    } catch (e: any) {
      return { code: e.code, message: e.message, isLoomError: e instanceof window.loom.LoomError };
    }
  }, `/testdata/conformance/${c.files['loom.entity']}`);
  expect(r).toMatchObject({ code: 'no_webgpu', isLoomError: true });
  expect((r as any).message).toMatch(/WebGPU.*load: 'full'/);
});
