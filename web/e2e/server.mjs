// The tests' web server (PORT=0 picks a free port, printed on start): the built package, a test page, Loom's corpus, and synthetic models served
// with Range support. It counts what it sends and can cut or slow a response, so tests can check header-only
// reads, aborts and resumed downloads from the outside.
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { STREAM_DTYPES, STREAM_WIDTH, denseChain, entity, safetensors } from './fixtures.mjs';

const web = fileURLToPath(new URL('..', import.meta.url));
const corpus = join(web, '../testdata');
const port = Number(process.env.PORT ?? 4178);

const generated = {
  '/gen/big.safetensors': () => safetensors(4096, 4096), // 64 MiB
  '/gen/big.entity': () => entity(2048, 2048), // 16 MiB
  '/gen/mid.safetensors': () => safetensors(1024, 1024), // 4 MiB
  '/gen/stream.entity': () => denseChain(STREAM_WIDTH, STREAM_DTYPES), // 52 MiB in 16 blobs of 1 or 4 MiB
};
const cache = new Map();
const gen = (path) => {
  if (!cache.has(path)) cache.set(path, generated[path]().file);
  return cache.get(path);
};

const TYPES = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html', '.json': 'application/json' };

/** What was asked and sent, per path; `cutNext` cuts the next model response after that many body bytes. */
let log = [];
/** The .wasm files fetched since the last reset, to see which of the package's modules a page loads. */
let wasmFetched = [];
let cutNext = null;
let slow = false;

const PAGE = `<!doctype html><meta charset="utf-8"><title>loom-wasm test</title><body><script type="module">
  // Record any wasm instantiation on the page's own thread: the package must do it in its worker.
  window.__mainThreadWasm = 0;
  for (const k of ['instantiate', 'instantiateStreaming', 'compile', 'compileStreaming']) {
    const f = WebAssembly[k];
    WebAssembly[k] = (...a) => { window.__mainThreadWasm++; return f.apply(WebAssembly, a); };
  }
  window.loom = await import('/dist/index.js');
  document.body.dataset.ready = '1';
</script>`;

async function fileBytes(path) {
  if (path.startsWith('/gen/') && generated[path]) return gen(path);
  // /models/: the GGUF scripts/setup.sh fetched; /golden/: ../shared/golden (the chat tests' reference models).
  const root = path.startsWith('/dist/')
    ? web
    : /^\/(testdata|models)\//.test(path)
      ? join(corpus, '..')
      : path.startsWith('/golden/')
        ? join(web, '../../shared')
        : null;
  if (!root) return null;
  const full = normalize(join(root, path));
  if (!full.startsWith(normalize(root))) return null;
  try {
    if (!(await stat(full)).isFile()) return null;
    return await readFile(full);
  } catch {
    return null;
  }
}

const server = createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  const path = url.pathname;
  if (path === '/') return res.writeHead(200, { 'Content-Type': 'text/html' }).end(PAGE);
  if (path === '/__log') return res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(log));
  if (path === '/__wasm') return res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(wasmFetched));
  if (path === '/__reset') {
    log = [];
    wasmFetched = [];
    cutNext = null;
    slow = false;
    return res.end('ok');
  }
  if (path === '/__cut') {
    cutNext = Number(url.searchParams.get('after'));
    return res.end('ok');
  }
  if (path === '/__slow') {
    slow = true;
    return res.end('ok');
  }
  const body = await fileBytes(path);
  if (!body) return res.writeHead(404).end('not found');
  const entry = { path, range: req.headers.range ?? null, ifRange: req.headers['if-range'] ?? null, status: 200, sent: 0 };
  const isModel = !path.startsWith('/dist/');
  if (isModel) log.push(entry);
  if (path.endsWith('.wasm')) wasmFetched.push(path);
  const headers = {
    'Content-Type': TYPES[extname(path)] ?? 'application/octet-stream',
    'Accept-Ranges': 'bytes',
    ETag: `"${body.length}"`,
    'Cache-Control': 'no-store',
  };
  let start = 0;
  let end = body.length - 1;
  const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
  const validatorOk = !req.headers['if-range'] || req.headers['if-range'] === headers.ETag;
  if (m && validatorOk) {
    start = Number(m[1]);
    end = m[2] ? Math.min(Number(m[2]), body.length - 1) : body.length - 1;
    if (start >= body.length) {
      entry.status = 416;
      return res.writeHead(416, { 'Content-Range': `bytes */${body.length}` }).end();
    }
    entry.status = 206;
    headers['Content-Range'] = `bytes ${start}-${end}/${body.length}`;
  }
  headers['Content-Length'] = end - start + 1;
  res.writeHead(entry.status, headers);
  const part = body.subarray(start, end + 1);
  const cut = isModel && cutNext !== null ? cutNext : null;
  if (cut !== null) cutNext = null;
  // Sent in 64 KiB pieces, honouring back-pressure, so a client that hangs up stops the sending.
  let at = 0;
  let closed = false;
  res.on('close', () => (closed = true));
  const step = 64 * 1024;
  while (at < part.length && !closed) {
    const n = Math.min(step, part.length - at, cut !== null ? cut - at : Infinity);
    if (n <= 0) break;
    const ok = res.write(part.subarray(at, at + n));
    at += n;
    entry.sent = at;
    if (!ok) {
      // Whichever comes first; the other listener goes too, so long bodies do not pile up listeners.
      await new Promise((r) => {
        const done = () => {
          res.off('drain', done).off('close', done);
          r();
        };
        res.once('drain', done).once('close', done);
      });
    }
    if (slow && isModel) await new Promise((r) => setTimeout(r, 30));
  }
  if (cut !== null && at < part.length) {
    // Let the bytes reach the client, then drop the connection mid-body.
    setTimeout(() => res.destroy(), 300);
    return;
  }
  res.end();
});
server.listen(port, '127.0.0.1', () => console.log(`test server on http://127.0.0.1:${server.address().port}`));
