// wasm side of scripts/bench-forward.sh: times our CPU forward in Node on the same files as Loom.
//
//   node bench-wasm/run.cjs PKG_JS LOOM_JSON [--runs N]   > wasm.json
//
// PKG_JS is the `wasm-bindgen --target nodejs` output for bench-wasm; LOOM_JSON is what
// `scripts/bench_forward.py loom` wrote. Per case: load Loom's .entity into a fresh model (not timed), time the
// first forward (it dequantizes and caches the weights), check every output bit against Loom's, run 2 untimed
// warm-up forwards, then time `runs` forwards inside wasm: wall time (performance.now()) and the process's CPU time
// (process.cpuUsage()) around each call. scripts/bench-forward.sh runs it with `node --no-liftoff`, so V8 compiles
// the module with TurboFan up front and every timed call runs the optimized code (what tier-up ends with).
// Prints JSON like the native benchmark's; exits 1 after printing if any output differs from Loom's.
"use strict";
const fs = require("fs");
const os = require("os");

const args = process.argv.slice(2);
let runs = 15;
const r = args.indexOf("--runs");
if (r >= 0) {
  runs = Math.max(1, parseInt(args[r + 1], 10));
  args.splice(r, 2);
}
if (args.length !== 2) {
  console.error("usage: node bench-wasm/run.cjs PKG_JS LOOM_JSON [--runs N]");
  process.exit(2);
}
// The process's CPU time (user + system, all of Node's threads) in ms, which the wasm module imports.
globalThis.benchCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
};
const wasm = require(require("path").resolve(args[0]));
const loom = JSON.parse(fs.readFileSync(args[1], "utf8"));

function f32(path) {
  const b = fs.readFileSync(path);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}
function median(v) {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

const cases = [];
let allIdentical = true;
for (const c of loom.cases) {
  const input = f32(c.input);
  const expected = f32(c.loom_output);
  const shape = Uint32Array.from(c.shape);
  let bench;
  let first;
  let firstMs;
  try {
    bench = new wasm.Bench(fs.readFileSync(c.file));
    const t = performance.now();
    first = bench.forward(input, shape);
    firstMs = performance.now() - t;
  } catch (e) {
    if (bench) bench.free();
    console.error(`wasm ${c.case}: ${e.message}`);
    cases.push({ case: c.case, error: String(e.message) });
    continue;
  }
  const a = new Uint32Array(first.buffer, first.byteOffset, first.length);
  const b = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
  let mismatches = a.length === b.length ? 0 : Math.max(a.length, b.length);
  let maxAbs = 0;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    if (a[i] !== b[i]) mismatches++;
    maxAbs = Math.max(maxAbs, Math.abs(first[i] - expected[i]));
  }
  allIdentical = allIdentical && mismatches === 0;
  bench.time(input, shape, 2); // untimed warm-up
  const both = bench.time(input, shape, runs);
  const times = Array.from(both.filter((_, i) => i % 2 === 0));
  const cpu = Array.from(both.filter((_, i) => i % 2 === 1));
  bench.free();
  const m = median(times);
  console.error(`wasm ${c.case}: ${m.toFixed(3)} ms (first ${firstMs.toFixed(3)} ms), ${mismatches} outputs differ`);
  cases.push({
    case: c.case,
    shape: c.shape,
    output_len: expected.length,
    bit_identical: mismatches === 0,
    mismatches,
    max_abs_diff: maxAbs,
    runs,
    first_ms: firstMs,
    forward_ms: times,
    forward_ms_median: m,
    forward_ms_min: Math.min(...times),
    // process CPU time (user + system, all of Node's threads) of each run
    cpu_ms: cpu,
    cpu_ms_median: median(cpu),
  });
}
console.log(JSON.stringify({
  runtime: `node ${process.version} (V8 ${process.versions.v8})`,
  simd128: wasm.simd128(),
  loadavg_end: os.loadavg().map((x) => x.toFixed(2)).join(" "),
  cases,
}, null, 1));
if (!allIdentical) process.exit(1);
