// Node entry: no Web Worker, the engine runs in the calling thread; files are read lazily with fs.openAsBlob.
import { openAsBlob } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createApi } from './api.js';
import { configureEngine, handle } from './engine.js';
import { initSync as initInspector } from './pkg/loom_wasm.js';
import { initSync as initChat } from './pkg-chat/loom_chat.js';
import { initSync as initGrammar } from './pkg-grammar/loom_grammar.js';

export { LoomError } from './errors.js';
export type { LoomErrorCode } from './errors.js';
export type { CacheBackend } from './cache.js';
export type * from './types.js';

configureEngine({
  loadWasm: async (name) => {
    const [init, file] = {
      inspector: [initInspector, './pkg/loom_wasm_bg.wasm'] as const,
      chat: [initChat, './pkg-chat/loom_chat_bg.wasm'] as const,
      grammar: [initGrammar, './pkg-grammar/loom_grammar_bg.wasm'] as const,
    }[name];
    init({ module: await readFile(new URL(file, import.meta.url)) });
  },
  openFileUrl: (url) => openAsBlob(fileURLToPath(url)),
  cacheBackend: 'none',
});

const api = createApi(
  {
    start(method, args, onProgress, onToken) {
      const controller = new AbortController();
      return {
        result: handle(method, args, { signal: controller.signal, onProgress, onToken }),
        cancel: () => controller.abort(),
        interrupt: () => controller.abort(),
      };
    },
  },
  // In Node a string that is not a URL is a file path.
  (url) => {
    if (url instanceof URL) return url.href;
    if (/^[a-z][a-z0-9+.-]+:/i.test(url) && !isAbsolute(url)) return new URL(url).href;
    return pathToFileURL(resolve(url)).href;
  },
);

export const { inspect, open, openChat, fitCheck, openFiles, gpuInfo, memoryBytes, cache, configure } = api;
