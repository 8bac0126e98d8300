// The Chat page on the bundled SmolLM2-135M-Instruct (models/, fetched by scripts/setup.sh and served by the app):
// greedy replies against the golden reference (../shared/golden/smollm2, llama_ref + jinja2 + HF tokenizers) on
// WebGPU (SwiftShader here) and on the wasm CPU engine; streaming, stop, a second turn, hostile files.
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';
import { ROOT } from './corpus';

const GGUF = path.join(ROOT, 'models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf');
const golden = JSON.parse(readFileSync(path.join(ROOT, '../shared/golden/smollm2/expected.json'), 'utf8'));
const france = golden.cases.find((c: { user_message: string }) => /France/.test(c.user_message));

test.skip(!existsSync(GGUF), 'models/ is missing: run scripts/setup.sh');

async function openChatPage(page: Page, device: 'auto' | 'gpu' | 'cpu'): Promise<void> {
  await page.goto('/#chat');
  await page.locator('body[data-app="ready"]').waitFor();
  await page.getByTestId('device-choice').selectOption(device);
  await page.getByTestId('open-default-model').click();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 120_000 });
}

async function ask(page: Page, text: string, opts: { temperature?: number; maxTokens?: number } = {}): Promise<void> {
  await page.getByTestId('temperature').fill(String(opts.temperature ?? 0));
  if (opts.maxTokens) await page.getByTestId('max-tokens').fill(String(opts.maxTokens));
  await page.getByTestId('prompt').fill(text);
  await page.getByTestId('send').click();
}

const lastReply = (page: Page) => page.getByTestId('assistant-message').last();

test('greedy on the CPU: the reply is the reference reply, streamed, and a second turn continues the conversation', async ({ page }) => {
  test.setTimeout(180_000);
  // One click from the app's first page opens the bundled model on the Chat page ('auto': the CPU here, where
  // WebGPU is SwiftShader).
  await page.goto('/');
  await page.locator('body[data-app="ready"]').waitFor();
  await page.getByTestId('landing-chat').click();
  await expect(page).toHaveURL(/#chat$/);
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 120_000 });
  await expect(page.getByTestId('device')).toHaveText('CPU');
  // The fit check ran on the headers before the download.
  await expect(page.getByTestId('chat-fit')).toContainText(/WebGPU: fits \(.*\) · CPU engine: fits/);
  await ask(page, france.user_message);
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(reply.locator('.bubble-body')).toHaveText(france.results.gguf_dequant_f32.greedy_text);
  await expect(reply).toContainText('Paris');
  // Streamed: the message was painted before it ended (at most once a frame, so a fast reply on a busy machine may
  // paint only once before its final paint).
  expect(Number(await reply.getAttribute('data-updates'))).toBeGreaterThan(1);
  await expect(reply.getByTestId('reply-stats')).toContainText('tok/s');
  // Turn two sees turn one: asked about "that city", the model names it again.
  await ask(page, 'What is a famous landmark in that city?', { maxTokens: 40 });
  await expect(page.getByTestId('assistant-message')).toHaveCount(2);
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(lastReply(page)).toContainText(/Eiffel|Louvre|Paris|Notre/);
});

test('greedy on WebGPU (SwiftShader): the reply names Paris', async ({ page }) => {
  test.setTimeout(300_000);
  await openChatPage(page, 'gpu');
  await expect(page.getByTestId('device')).toHaveText('WebGPU');
  await ask(page, france.user_message, { maxTokens: 8 });
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-done', 'true', { timeout: 240_000 });
  // The first 8 greedy ids of the reference ("The capital of France is Paris.").
  await expect(reply.locator('.bubble-body')).toHaveText(france.results.gguf_dequant_f32.greedy_text);
});

test('the Benchmark panel: prefill and decode tok/s on WebGPU and the CPU engine, the adapter as the browser names it, a software note; the conversation untouched', async ({ page }) => {
  test.setTimeout(300_000);
  await openChatPage(page, 'cpu');
  await page.getByTestId('bench-run').click();
  await expect(page.getByTestId('bench-table')).toHaveAttribute('data-state', 'done', { timeout: 240_000 });
  await expect(page.getByTestId('bench-row')).toHaveCount(2);
  for (const device of ['gpu', 'cpu']) {
    const row = page.locator(`[data-testid="bench-row"][data-device="${device}"]`);
    expect(Number(await row.getAttribute('data-prefill')), device).toBeGreaterThan(0);
    expect(Number(await row.getAttribute('data-decode')), device).toBeGreaterThan(0);
  }
  // The browser's own name for its adapter (GPUAdapter.info), not wgpu's "(BrowserWebGpu)"; SwiftShader here, so
  // the note says these WebGPU figures are the CPU's.
  const browser = await page.evaluate(async () => {
    const adapter = await (navigator as any).gpu.requestAdapter();
    return { description: adapter.info.description as string, vendor: adapter.info.vendor as string };
  });
  const name = (await page.getByTestId('bench-adapter-name').textContent()) ?? '';
  expect(name).not.toContain('BrowserWebGpu');
  expect(name).toBe(browser.description || name);
  await expect(page.getByTestId('bench-adapter')).toContainText(`vendor ${browser.vendor || '—'}`);
  await expect(page.getByTestId('bench-adapter')).toContainText(/shader-f16 (yes|no) · subgroups (yes|no)/);
  await expect(page.getByTestId('bench-software')).toBeVisible();
  // The chat itself: still on the CPU, with an empty conversation, and it still answers.
  await expect(page.getByTestId('device')).toHaveText('CPU');
  await expect(page.getByTestId('assistant-message')).toHaveCount(0);
  await ask(page, france.user_message, { maxTokens: 8 });
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(lastReply(page)).toContainText('Paris');
});

test('stop ends a streaming reply within a second, and the page goes on', async ({ page }) => {
  test.setTimeout(180_000);
  await openChatPage(page, 'cpu');
  await ask(page, 'Write a long story about a dragon.', { temperature: 0.8, maxTokens: 400 });
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-updates', /[3-9]|\d\d/, { timeout: 60_000 });
  const t0 = Date.now();
  await page.getByTestId('stop').click();
  await expect(reply).toHaveAttribute('data-done', 'true', { timeout: 1000 });
  expect(Date.now() - t0).toBeLessThan(1000);
  const stopped = await reply.locator('.bubble-body').textContent();
  await expect(page.getByTestId('send')).toBeEnabled({ timeout: 10_000 });
  await page.waitForTimeout(500);
  expect(await reply.locator('.bubble-body').textContent()).toBe(stopped);
  await expect(reply.getByTestId('reply-stats')).toContainText('cancelled');
  await ask(page, france.user_message, { maxTokens: 12 });
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(lastReply(page)).toContainText('Paris');
});

test('model output is rendered as Markdown, never as HTML', async ({ page }) => {
  test.setTimeout(180_000);
  await openChatPage(page, 'cpu');
  // The system prompt steers the model to echo markup; whatever it writes, no element it names may appear.
  await page.getByTestId('system-prompt').fill('Repeat the user message exactly, with nothing else.');
  await ask(page, '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> **bold** `code`', { maxTokens: 40 });
  const reply = lastReply(page);
  await expect(reply).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(reply.locator('img, script, iframe')).toHaveCount(0);
  expect(await page.evaluate(() => (window as { __pwned?: number }).__pwned)).toBeUndefined();
});

test('a hostile GGUF dropped on the chat page says why; the bundled model still opens', async ({ page }, info) => {
  test.setTimeout(180_000);
  const dir = info.outputPath('hostile');
  mkdirSync(dir, { recursive: true });
  // A GGUF header that claims 2^40 tensors, and a real model cut in half.
  const lying = Buffer.alloc(64);
  lying.write('GGUF', 0, 'latin1');
  lying.writeUInt32LE(3, 4);
  lying.writeBigUInt64LE(1n << 40n, 8);
  lying.writeBigUInt64LE(0n, 16);
  writeFileSync(path.join(dir, 'lying.gguf'), lying);
  const whole = readFileSync(GGUF);
  writeFileSync(path.join(dir, 'cut.gguf'), whole.subarray(0, whole.length >> 1));
  // A download that saved an error page under the model's name, and one cut inside its header.
  writeFileSync(path.join(dir, 'model.gguf'), '<!doctype html><title>404 Not Found</title>');
  writeFileSync(path.join(dir, 'short.gguf'), whole.subarray(0, 3000));
  await page.goto('/#chat');
  await page.locator('body[data-app="ready"]').waitFor();
  for (const [name, says] of [
    ['lying.gguf', /lying\.gguf: .*(tensor|truncated|bytes)/],
    ['cut.gguf', /cut\.gguf: .*truncated/],
    ['model.gguf', /model\.gguf: not a GGUF file/],
    ['short.gguf', /short\.gguf: .*truncated/],
  ] as const) {
    await page.locator('#chat-file-input').setInputFiles(path.join(dir, name));
    await expect(page.getByTestId('chat-error')).toBeVisible({ timeout: 60_000 });
    await expect(page.getByTestId('chat-error')).toHaveAttribute('data-code', 'bad_format');
    await expect(page.getByTestId('chat-error')).toContainText(says);
  }
  await page.getByTestId('device-choice').selectOption('cpu');
  await page.getByTestId('open-default-model').click();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 120_000 });
  await expect(page.getByTestId('chat-error')).toBeHidden();
});

test('a GGUF open in the inspector: "Chat with this model" opens it on the Chat page ("auto" picks the CPU over a software WebGPU)', async ({ page }) => {
  test.setTimeout(180_000);
  await page.goto('/');
  await page.locator('body[data-app="ready"]').waitFor();
  await expect(page.getByTestId('chat-with-model')).toBeHidden();
  await page.locator('#file-input').setInputFiles(GGUF);
  await expect(page.getByTestId('summary')).toHaveAttribute('data-format', 'gguf', { timeout: 60_000 });
  await page.getByTestId('chat-with-model').click();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 120_000 });
  await expect(page.getByTestId('chat-model-name')).toHaveText(path.basename(GGUF));
  await expect(page.getByTestId('device')).toHaveText('CPU');
  await expect(page.getByTestId('device-reason')).toContainText(/software|WebGPU/);
  await ask(page, france.user_message, { maxTokens: 12 });
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  await expect(lastReply(page)).toContainText('Paris');
});

test('the last conversation is kept in OPFS: after a reload the page offers it, resumes it with its KV cache (nothing recomputed), and a damaged one is refused with the model still usable', async ({ page }) => {
  test.setTimeout(240_000);
  await openChatPage(page, 'cpu');
  await ask(page, france.user_message, { maxTokens: 16 });
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  const first = await lastReply(page).locator('.bubble-body').innerText();
  // Kept after the reply (the page marks how many messages it kept).
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-kept', '2', { timeout: 30_000 });

  await page.reload();
  await page.locator('body[data-app="ready"]').waitFor();
  const bar = page.getByTestId('chat-resume');
  await expect(bar).toBeVisible();
  await expect(bar).toContainText(/SmolLM2.*2 messages/);
  await page.getByTestId('device-choice').selectOption('cpu');
  await page.getByTestId('chat-resume-button').click();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-resumed', '2', { timeout: 120_000 });
  await expect(page.getByTestId('user-message')).toHaveText([france.user_message]);
  await expect(page.getByTestId('assistant-message').locator('.bubble-body')).toHaveText([first]);
  await expect(page.getByTestId('temperature')).toHaveValue('0');
  // The next turn computes only what is new: the first turn's prompt and reply come from the restored cache.
  await ask(page, 'And of Italy?', { maxTokens: 8 });
  await expect(page.getByTestId('assistant-message')).toHaveCount(2);
  await expect(lastReply(page)).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  const reused = Number(await lastReply(page).getByTestId('reply-stats').getAttribute('data-reused'));
  expect(reused).toBeGreaterThan(france.n_prompt_tokens);
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-kept', '4', { timeout: 30_000 });

  // A damaged kept conversation: the page says so and the open model goes on.
  await page.evaluate(async () => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('loom-chat');
    const file = await (await dir.getFileHandle('last.loomchat')).getFile();
    const bytes = new Uint8Array(await file.arrayBuffer());
    bytes[bytes.length >> 1] ^= 1;
    const w = await (await dir.getFileHandle('last.loomchat')).createWritable();
    await w.write(bytes);
    await w.close();
  });
  await page.reload();
  await page.locator('body[data-app="ready"]').waitFor();
  await page.getByTestId('device-choice').selectOption('cpu');
  await page.getByTestId('chat-resume-button').click();
  await expect(page.getByTestId('chat-error')).toContainText('checksum', { timeout: 120_000 });
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready');
  await expect(page.getByTestId('assistant-message')).toHaveCount(0);
  // Forgotten on request.
  await page.getByTestId('chat-forget-button').click();
  await expect(bar).toBeHidden();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-kept', 'none');
  await page.reload();
  await page.locator('body[data-app="ready"]').waitFor();
  await expect(page.getByTestId('chat-resume')).toBeHidden();
});
