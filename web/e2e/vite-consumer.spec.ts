// The packed tarball as a user meets it: `npm install` into a fresh Vite 8 + TypeScript 7 project (no config), type-check,
// `vite build`, then the built page inspects a corpus file and chats with the tiny golden Llama in Chromium.
import { test, expect } from '@playwright/test';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { caseById, casePath, entityInspectionMismatches } from '../test/corpus.mjs';

const web = fileURLToPath(new URL('..', import.meta.url));
const TINY = join(web, '../../shared/golden/tiny-llama');
const tinyGreedy = JSON.parse(readFileSync(join(TINY, 'expected.json'), 'utf8')).weight_sets.safetensors_f32.results[1].greedy_ids;
const run = (cmd: string, args: string[], cwd: string) =>
  execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 240_000 });

test('npm pack → fresh Vite 8 + TS 7 project, no configuration → tsc + vite build → the page inspects a file and chats (build and dev server)', async ({ page }) => {
  test.setTimeout(300_000);
  const dir = mkdtempSync(join(tmpdir(), 'loom-vite-'));
  try {
    const tarball = join(dir, run('npm', ['pack', '--silent', '--pack-destination', dir], web).trim().split('\n').at(-1)!);
    const app = join(dir, 'app');
    mkdirSync(join(app, 'src'), { recursive: true });
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    writeFileSync(join(app, 'index.html'), '<!doctype html><input type="file" id="file"><pre id="out"></pre>' +
      '<input type="file" id="chat" multiple><pre id="reply"></pre><script type="module" src="/src/main.ts"></script>');
    writeFileSync(join(app, 'src/main.ts'), `
import { inspect, openChat, LoomError, type ChatReply, type Inspection } from 'loom-wasm';
document.querySelector<HTMLInputElement>('#chat')!.addEventListener('change', async (e) => {
  const out = document.querySelector<HTMLPreElement>('#reply')!;
  try {
    const chat = await openChat((e.target as HTMLInputElement).files!, { device: 'cpu' });
    const pieces: string[] = [];
    const r: ChatReply = await chat.send('Hello, ', { temperature: 0, maxTokens: 16, onToken: (t) => pieces.push(t) });
    out.textContent = JSON.stringify({ ids: [...r.ids], pieces: pieces.length, joined: pieces.join('') === r.text });
  } catch (err) {
    out.textContent = err instanceof LoomError ? 'error ' + err.code + ' ' + err.message : String(err);
  }
});
const out = document.querySelector<HTMLPreElement>('#out')!;
document.querySelector<HTMLInputElement>('#file')!.addEventListener('change', async (e) => {
  const file = (e.target as HTMLInputElement).files![0];
  try {
    const r: Inspection = await inspect(file, { onProgress: (p) => console.log(p.phase, p.loaded) });
    out.textContent = JSON.stringify(r);
  } catch (err) {
    out.textContent = err instanceof LoomError ? 'error ' + err.code : String(err);
  }
});
`);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { target: 'ES2022', module: 'ESNext', moduleResolution: 'bundler', lib: ['ES2022', 'DOM'],
        strict: true, noEmit: true, skipLibCheck: false, types: [] },
      include: ['src'],
    }));
    // No vite.config: what the web README promises a fresh Vite 8 project needs.
    run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', tarball, 'vite@8.3.8', 'typescript@7.0.2'], app);
    run(join(app, 'node_modules/.bin/tsc'), ['-p', '.'], app);
    run(join(app, 'node_modules/.bin/vite'), ['build'], app);
    // The production build (vite preview), then the dev server (its dependency pre-bundling on, as Vite ships).
    for (const [mode, args] of [['build', ['preview']], ['dev', []]] as const) {
      const port = 4179;
      const server = spawn(join(app, 'node_modules/.bin/vite'), [...args, '--host', '127.0.0.1', '--port', String(port), '--strictPort'], { cwd: app, stdio: 'ignore' });
      try {
        await expect.poll(() => fetch(`http://127.0.0.1:${port}/`).then((r) => r.ok, () => false), { timeout: 20_000 }).toBe(true);
        await page.goto(`http://127.0.0.1:${port}/`);
        const c = caseById('grid_2x1x2x2');
        await page.setInputFiles('#file', { name: 'grid.entity', mimeType: 'application/octet-stream', buffer: readFileSync(casePath(c, 'loom.entity')) });
        await expect(page.locator('#out'), mode).toContainText('"format"', { timeout: 30_000 });
        const r = JSON.parse(await page.locator('#out').textContent() ?? '');
        expect(entityInspectionMismatches(c, r), mode).toEqual([]);
        // The tiny Llama as an HF folder, with a chat template that renders the message as is: greedy ids = golden.
        const file = (name: string) => ({ name, mimeType: 'application/octet-stream', buffer: readFileSync(join(TINY, name)) });
        await page.setInputFiles('#chat', [
          file('config.json'),
          file('model.f32.safetensors'),
          file('tokenizer.json'),
          { name: 'tokenizer_config.json', mimeType: 'application/json',
            buffer: Buffer.from(JSON.stringify({ chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' })) },
        ]);
        await expect(page.locator('#reply'), mode).toContainText('"ids"', { timeout: 60_000 });
        const reply = JSON.parse(await page.locator('#reply').textContent() ?? '');
        expect(reply, mode).toEqual({ ids: tinyGreedy, pieces: reply.pieces, joined: true });
        expect(reply.pieces, mode).toBeGreaterThan(1);
      } finally {
        server.kill();
        await new Promise((r) => server.once('exit', r));
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
