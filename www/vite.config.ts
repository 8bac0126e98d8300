import { createReadStream, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';
import type { Plugin } from 'vite';

// The chat page's bundled model is the GGUF scripts/setup.sh fetched into models/ (never committed, never copied
// into dist/): the app's server hands it out under /models/, with Range requests so the package can resume a cut
// download and validators (ETag, Last-Modified) so it never splices two versions of the file.
const MODELS = fileURLToPath(new URL('../models/smollm2/', import.meta.url));

function serveModel(req: IncomingMessage, res: ServerResponse, next: () => void): void {
  const path = (req.url ?? '').split('?')[0];
  if (!path.startsWith('/models/')) return next();
  const name = decodeURIComponent(path.slice('/models/'.length));
  let size: number;
  let mtime: Date;
  try {
    if (!/^[\w.-]+\.gguf$/.test(name)) throw new Error('not a model name');
    ({ size, mtime } = statSync(MODELS + name));
  } catch {
    res.statusCode = 404;
    res.end(`${name} is not in models/smollm2/: run bash scripts/setup.sh`);
    return;
  }
  const etag = `"${size.toString(16)}-${mtime.getTime().toString(16)}"`;
  res.setHeader('Accept-Ranges', 'bytes');
  res.setHeader('Content-Type', 'application/octet-stream');
  res.setHeader('ETag', etag);
  res.setHeader('Last-Modified', mtime.toUTCString());
  let start = 0;
  let end = size - 1;
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
  const ifRange = req.headers['if-range'];
  if (range && (!ifRange || ifRange === etag || ifRange === mtime.toUTCString())) {
    start = Number(range[1]);
    end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
    if (start >= size || start > end) {
      res.statusCode = 416;
      res.setHeader('Content-Range', `bytes */${size}`);
      res.end();
      return;
    }
    res.statusCode = 206;
    res.setHeader('Content-Range', `bytes ${start}-${end}/${size}`);
  }
  res.setHeader('Content-Length', String(end - start + 1));
  if (req.method === 'HEAD') {
    res.end();
    return;
  }
  createReadStream(MODELS + name, { start, end }).pipe(res);
}

const models: Plugin = {
  name: 'loom-models',
  configureServer: (server) => void server.middlewares.use(serveModel),
  configurePreviewServer: (server) => void server.middlewares.use(serveModel),
};

// The package starts its own module worker (`new URL('./worker.js', import.meta.url)`) and loads its .wasm the
// same way; pre-bundling would move the module away from those files, so Vite serves it as is.
export default defineConfig({
  build: { target: 'es2022' },
  optimizeDeps: { exclude: ['loom-wasm'] },
  worker: { format: 'es' },
  plugins: [models],
  // loom-wasm links to ../web, outside this folder: the dev server may serve its worker and .wasm from there.
  server: { host: '127.0.0.1', port: 5173, fs: { allow: [fileURLToPath(new URL('..', import.meta.url))] } },
  preview: { host: '127.0.0.1', port: 4173, strictPort: true },
});
