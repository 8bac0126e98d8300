// In-browser chat benchmark (BENCHMARKS.md, "Chat in the browser"): the package in Debian's Chromium on
// SmolLM2-135M-Instruct Q4_1, on the wasm CPU engine and on WebGPU (whatever adapter Chromium has: SwiftShader on
// a machine without a GPU), with llama.cpp (llama-cpp-python, 1 thread) on the same prompt ids in the same run.
//
//   node scripts/bench-chat.mjs [DECODE_TOKENS=64]        (after scripts/build-www.sh or scripts/test-web.sh)
//
// Environment: LLAMA_VENV=DIR (a venv with llama-cpp-python; default /work/bench-venv, skipped when missing),
// DEVICES="cpu gpu". Prints a Markdown table and writes target/bench-data/chat/report.json.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const require = createRequire(`${root}web/package.json`);
const { chromium } = require('playwright');
const MODEL = 'models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';
const decodeTokens = Number(process.argv[2] ?? 64);
const devices = (process.env.DEVICES ?? 'cpu gpu').split(/\s+/).filter(Boolean);
const PROMPT = 'Write a short story about a robot who learns to paint.';
const port = 4391;
const out = `${root}target/bench-data/chat`;
mkdirSync(out, { recursive: true });

const server = spawn('node', ['e2e/server.mjs'], { cwd: `${root}web`, env: { ...process.env, PORT: String(port) }, stdio: 'ignore' });
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking'],
});
const results = {};
try {
  for (let i = 0; i < 50; i++) {
    if (await fetch(`http://127.0.0.1:${port}/`).then((r) => r.ok, () => false)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  for (const device of devices) {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`http://127.0.0.1:${port}/`);
    await page.waitForSelector('body[data-ready="1"]', { state: 'attached' });
    results[device] = await page.evaluate(
      async ({ url, device, prompt, decodeTokens }) => {
        const { openChat, memoryBytes, gpuInfo } = window.loom;
        const info = await gpuInfo();
        // First open: download into the cache. Then "click to first token" with the model cached: open + prefill.
        const first = await openChat(url, { device });
        await first.dispose();
        const t0 = performance.now();
        const chat = await openChat(url, { device });
        const opened = performance.now();
        let firstToken = 0;
        const warm = await chat.send(prompt, { temperature: 0, maxTokens: 1, onToken: () => (firstToken ||= performance.now()) });
        const r = await chat.send(prompt, { temperature: 0, maxTokens: decodeTokens });
        const ids = [...(await chat.tokenize(await chat.applyTemplate([{ role: 'user', content: prompt }])))];
        const heap = await memoryBytes();
        await chat.dispose();
        return {
          device: chat.device, adapter: info.adapter ?? null, software: info.software ?? null,
          open_ms: opened - t0, first_token_ms: (firstToken || performance.now()) - t0, prompt_tokens: warm.promptTokens,
          prefill_tok_s: warm.prefillTokensPerSecond, decode_tok_s: r.tokensPerSecond, decoded: r.ids.length,
          wasm_heap_bytes: heap, prompt_ids: ids,
        };
      },
      { url: `/${MODEL}`, device, prompt: PROMPT, decodeTokens },
    );
    await context.close();
  }
} finally {
  await browser.close();
  server.kill();
}

// llama.cpp on the same ids: 1 thread, as the wasm engine has one.
const venv = process.env.LLAMA_VENV ?? '/work/bench-venv';
let llama = null;
if (existsSync(`${venv}/bin/python`)) {
  const ids = Object.values(results)[0].prompt_ids;
  writeFileSync(`${out}/ids.json`, JSON.stringify({ prefill_ids: ids, chat_ids: ids }));
  const raw = execFileSync(`${venv}/bin/python`, [`${root}scripts/bench_llm_llamacpp.py`, `${root}${MODEL}`, '--ids', `${out}/ids.json`,
    '--threads', '1', '--runs', '3', '--what', 'prefill,decode', '--decode-tokens', String(decodeTokens)], { encoding: 'utf8' });
  llama = JSON.parse(raw);
}
const report = { when: new Date().toISOString(), cpus: cpus().length, load: loadavg(), decodeTokens, results, llama };
writeFileSync(`${out}/report.json`, JSON.stringify(report, null, 2));
const tokS = (x) => (x ? x.toFixed(1) : '—');
const lp = llama?.prefill?.tok_s_median;
const ld = llama?.decode?.tok_s_median;
console.log(`| engine | prefill tok/s | decode tok/s | vs llama.cpp 1 thread (prefill / decode) | open (cached) | click → first token | wasm heap |`);
console.log('|---|---|---|---|---|---|---|');
for (const r of Object.values(results)) {
  const name = r.device === 'gpu' ? `WebGPU (${r.adapter}${r.software ? ', software' : ''})` : 'wasm CPU (1 thread)';
  const ratio = lp && ld ? `${(r.prefill_tok_s / lp).toFixed(2)}× / ${(r.decode_tok_s / ld).toFixed(2)}×` : '—';
  console.log(`| ${name} | ${tokS(r.prefill_tok_s)} | ${tokS(r.decode_tok_s)} | ${ratio} | ${(r.open_ms / 1000).toFixed(2)} s | ` +
    `${(r.first_token_ms / 1000).toFixed(2)} s | ${(r.wasm_heap_bytes / 2 ** 20).toFixed(0)} MiB |`);
}
if (llama) console.log(`| llama.cpp native, 1 thread | ${tokS(lp)} | ${tokS(ld)} | 1× | | | |`);
console.log(`\n${cpus().length} CPUs, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}; prompt ${Object.values(results)[0]?.prompt_tokens} tokens, ${decodeTokens} decoded`);
