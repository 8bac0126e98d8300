// How far the wasm decode kernels move SmolLM2's logits from the golden reference (numpy, float32 weights as
// dequantized from the GGUF): each prompt is fed one token at a time (every step a decode step), then the top-20 of
// the reference at the last prompt position are compared. Prints JSON: max |Δ| per prompt and overall.
//
//   node bench-wasm/decode-accuracy.cjs PKG_JS MODEL GOLDEN_JSON
"use strict";
const fs = require("fs");
const [pkg, model, golden] = process.argv.slice(2);
const wasm = require(require("path").resolve(pkg));
const bench = new wasm.LlmBench(fs.readFileSync(model));
const cases = JSON.parse(fs.readFileSync(golden, "utf8")).cases;
const out = { prompts: [] };
let worst = 0;
for (const c of cases) {
  const logits = bench.decodeLogits(Uint32Array.from(c.prompt_ids));
  const top = c.results.gguf_dequant_f32.top20_last_prompt_position;
  const d = Math.max(...top.map(([id, l]) => Math.abs(logits[id] - l)));
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  out.prompts.push({ prompt: c.user_message, max_abs_delta_top20: d, argmax: best, reference_argmax: top[0][0] });
  worst = Math.max(worst, d);
}
out.max_abs_delta_top20 = worst;
console.log(JSON.stringify(out, null, 1));
