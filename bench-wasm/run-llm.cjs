// wasm side of scripts/bench-llm.sh: our CPU LLM engine in Node, one thread, on the same GGUF and token ids as
// the native benchmark and llama.cpp.
//
//   node bench-wasm/run-llm.cjs PKG_JS MODEL IDS_JSON [--runs N] [--decode-tokens N] [--what prefill,decode,ttft]
//
// The file is read in Node and handed to `new LlmBench(bytes)` (load: the copy into wasm memory and the GGUF
// parse, timed from JavaScript). Prefill, decode and time to first token are timed inside wasm
// (performance.now(), and process.cpuUsage() for CPU time), after one untimed warm-up each; medians of `runs` (decode: of at most 3). Prints JSON.
// scripts/bench-llm.sh runs it with `node --no-liftoff`, so every call runs TurboFan's code.
"use strict";
const fs = require("fs");
const os = require("os");

const args = process.argv.slice(2);
function take(name, dflt) {
  const i = args.indexOf(name);
  if (i < 0) return dflt;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
}
const runs = Math.max(1, parseInt(take("--runs", "5"), 10));
const decodeTokens = parseInt(take("--decode-tokens", "128"), 10);
const what = take("--what", "load,prefill,decode,ttft").split(",");
if (args.length !== 3) {
  console.error("usage: node bench-wasm/run-llm.cjs PKG_JS MODEL IDS_JSON [--runs N] [--decode-tokens N] [--what LIST]");
  process.exit(2);
}
globalThis.benchCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
};
const wasm = require(require("path").resolve(args[0]));
const ids = JSON.parse(fs.readFileSync(args[2], "utf8"));
const prefillIds = Uint32Array.from(ids.prefill_ids);
const chatIds = Uint32Array.from(ids.chat_ids);

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}
// runs: [wall ms, CPU ms] pairs (CPU: the whole Node process, from process.cpuUsage()).
function timings(runs, tokens) {
  const ms = runs.map((r) => r[0]);
  const cpu = runs.map((r) => r[1]);
  const m = median(ms);
  const c = median(cpu);
  const rate = (x) => (tokens && x > 0 ? tokens / (x / 1e3) : 0);
  return {
    tokens, ms, ms_median: m, tok_s_median: rate(m), cpu_ms: cpu, cpu_ms_median: c, tok_per_cpu_s_median: rate(c),
  };
}

const report = {
  side: "ours (wasm)",
  runtime: `node ${process.version} (V8 ${process.versions.v8})`,
  simd128: wasm.simd128(),
  threads: 1,
  runs,
  model: args[1],
  prefill_tokens: prefillIds.length,
  chat_tokens: chatIds.length,
  loadavg_start: os.loadavg().map((x) => x.toFixed(2)).join(" "),
};
const file = fs.readFileSync(args[1]);
report.file_bytes = file.length;
let t = performance.now();
let bench = new wasm.LlmBench(file);
const firstLoad = performance.now() - t;
if (what.includes("load")) {
  const ms = [];
  for (let r = 0; r < runs; r++) {
    bench.free();
    const c = globalThis.benchCpuMs();
    t = performance.now();
    bench = new wasm.LlmBench(file);
    ms.push([performance.now() - t, globalThis.benchCpuMs() - c]);
  }
  report.load = { ...timings(ms, 0), first_ms: firstLoad };
}
if (what.includes("prefill")) {
  const ms = [];
  for (let r = 0; r <= runs; r++) {
    const m = bench.prefill(prefillIds);
    if (r > 0) ms.push(Array.from(m));
  }
  report.prefill = timings(ms, prefillIds.length);
}
if (what.includes("decode")) {
  const ms = [];
  let out = [];
  for (let r = 0; r <= Math.min(runs, 3); r++) {
    out = bench.decode(chatIds, decodeTokens);
    if (r > 0) ms.push([out[0], out[1]]);
  }
  report.decode = { ...timings(ms, decodeTokens), first_ids: Array.from(out.slice(2, 18)) };
}
if (what.includes("ttft")) {
  const ms = [];
  for (let r = 0; r <= runs; r++) {
    const m = bench.prefill(chatIds);
    if (r > 0) ms.push(Array.from(m));
  }
  report.ttft = timings(ms, chatIds.length);
}
bench.free();
report.max_rss_bytes = process.resourceUsage().maxRSS * 1024;
report.loadavg_end = os.loadavg().map((x) => x.toFixed(2)).join(" ");
console.log(JSON.stringify(report, null, 1));
