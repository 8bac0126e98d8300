// The packed tarball as a user meets it: `npm install` into a fresh Vite + TypeScript project, type-check,
// `vite build`, then the built page inspects a corpus file in Chromium.
import { test, expect } from '@playwright/test';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { caseById, casePath, entityInspectionMismatches } from '../test/corpus.mjs';

const web = fileURLToPath(new URL('..', import.meta.url));
const run = (cmd: string, args: string[], cwd: string) =>
  execFileSync(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 240_000 });

test('npm pack → fresh Vite + TS project → tsc + vite build → the page inspects a file (build and dev server)', async ({ page }) => {
  test.setTimeout(300_000);
  const dir = mkdtempSync(join(tmpdir(), 'loom-vite-'));
  try {
    const tarball = join(dir, run('npm', ['pack', '--silent', '--pack-destination', dir], web).trim().split('\n').at(-1)!);
    const app = join(dir, 'app');
    mkdirSync(join(app, 'src'), { recursive: true });
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    writeFileSync(join(app, 'index.html'), '<!doctype html><input type="file" id="file"><pre id="out"></pre>' +
      '<script type="module" src="/src/main.ts"></script>');
    writeFileSync(join(app, 'src/main.ts'), `
import { inspect, LoomError, type Inspection } from 'loom-wasm';
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
    writeFileSync(join(app, 'vite.config.ts'),
      "import { defineConfig } from 'vite';\nexport default defineConfig({ optimizeDeps: { exclude: ['loom-wasm'] } });\n");
    run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', tarball, 'vite@7.3.8', 'typescript@5.9.3'], app);
    run(join(app, 'node_modules/.bin/tsc'), ['-p', '.'], app);
    run(join(app, 'node_modules/.bin/vite'), ['build'], app);
    // The production build (vite preview), then the dev server with the README's optimizeDeps.exclude.
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
      } finally {
        server.kill();
        await new Promise((r) => server.once('exit', r));
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
