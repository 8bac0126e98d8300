import { defineConfig } from 'vite';

// The package starts its own module worker (`new URL('./worker.js', import.meta.url)`) and loads its .wasm the
// same way; pre-bundling would move the module away from those files, so Vite serves it as is.
export default defineConfig({
  build: { target: 'es2022' },
  optimizeDeps: { exclude: ['loom-wasm'] },
  worker: { format: 'es' },
  server: { host: '127.0.0.1', port: 5173 },
  preview: { host: '127.0.0.1', port: 4173, strictPort: true },
});
