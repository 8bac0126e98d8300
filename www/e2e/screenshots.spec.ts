// The README's screenshots (docs/screenshots/): only with WWW_SCREENSHOTS=1 (scripts/test-www.sh passes it through).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';
import { ROOT, caseFile, dropFiles, openApp } from './corpus';

const OUT = path.join(ROOT, 'docs/screenshots');

test.skip(process.env.WWW_SCREENSHOTS !== '1', 'set WWW_SCREENSHOTS=1 to retake the screenshots');
test.use({ viewport: { width: 1440, height: 1000 }, deviceScaleFactor: 1 });

async function open(page: Page, name: string, bytes: Buffer): Promise<void> {
  await openApp(page);
  // The sticky top bar would cover element screenshots taken below the fold.
  await page.addStyleTag({ content: '.topbar { position: static; }' });
  await dropFiles(page, [{ name, bytes }]);
  await expect(page.locator('body')).toHaveAttribute('data-state', 'ready');
}

test('landing page', async ({ page }) => {
  await openApp(page);
  await page.screenshot({ path: path.join(OUT, 'landing.png') });
});

test('a transformer-like stack: repeated decoder blocks folded', async ({ page }) => {
  await open(page, 'decoder.entity', readFileSync(path.join(ROOT, 'testdata/sample/decoder.entity')));
  await page.screenshot({ path: path.join(OUT, 'transformer.png'), fullPage: true });
});

test('a grid network', async ({ page }) => {
  await open(page, 'grid_2x1x2x2.entity', caseFile('grid_2x1x2x2', 'loom.entity'));
  await page.screenshot({ path: path.join(OUT, 'grid.png'), fullPage: true });
});

test('the tensor panel: an int4 SwiGLU, codes next to dequantized values', async ({ page }) => {
  await open(page, 'decoder.entity', readFileSync(path.join(ROOT, 'testdata/sample/decoder.entity')));
  await page.locator('[data-testid="layer-row"][data-path="layers.2.parallel_branches.0.sequential_layers.1"]').click();
  await expect(page.getByTestId('histogram')).toBeVisible();
  await page.locator('.split').screenshot({ path: path.join(OUT, 'tensor.png') });
});

test('run and convert', async ({ page }) => {
  await open(page, 'decoder.entity', readFileSync(path.join(ROOT, 'testdata/sample/decoder.entity')));
  await page.getByTestId('run-shape').fill('6');
  await page.getByTestId('run-input').fill('3, 14, 15, 9, 26, 5');
  await page.getByTestId('run-button').click();
  await expect(page.getByTestId('run-diff')).toContainText('max');
  await page.getByTestId('convert-dtype').selectOption('int2');
  await expect(page.getByTestId('loss-report')).toHaveAttribute('data-state', 'lossy');
  await page.locator('#run').screenshot({ path: path.join(OUT, 'run.png') });
  await page.locator('#convert').screenshot({ path: path.join(OUT, 'convert.png') });
});

test('a conversation on the Chat page (SmolLM2-135M, the CPU engine, greedy)', async ({ page }) => {
  test.setTimeout(180_000);
  await page.goto('/#chat');
  await page.locator('body[data-app="ready"]').waitFor();
  await page.getByTestId('device-choice').selectOption('cpu');
  await page.getByTestId('open-default-model').click();
  await expect(page.getByTestId('chat-page')).toHaveAttribute('data-state', 'ready', { timeout: 120_000 });
  await page.getByTestId('temperature').fill('0');
  for (const q of ['What is the capital of France?', 'Write a Python function that adds two numbers.']) {
    await page.getByTestId('prompt').fill(q);
    await page.getByTestId('send').click();
    await expect(page.getByTestId('assistant-message').last()).toHaveAttribute('data-done', 'true', { timeout: 120_000 });
  }
  await page.screenshot({ path: path.join(OUT, 'chat.png') });
});
