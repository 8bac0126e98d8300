// What a constraint costs per token in the npm package's wasm (BENCHMARKS.md, "Constrained decoding"): SmolLM2-135M
// Q4_1 on the chat module's CPU engine under Node, the grammar module (llguidance) computing each step's mask, as the
// package's worker runs them. Per token: the mask (`Grammar.mask()`: the allowed set as a bitmask, handed to the chat
// module) and the drawn id taken back (`accept`), timed apart from the engine step they go with (`Chat.step(mask)`).
//
//   node scripts/bench-constrain-wasm.mjs        (after scripts/build-pkg.sh and `node web/scripts/build.mjs`)
//
// Prints JSON: the vocabulary's build, then per constraint the tokens, the compile, the mask and step times.
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = `${root}web/dist`;
const chatWasm = await import(`${dist}/pkg-chat/loom_chat.js`);
chatWasm.initSync({ module: readFileSync(`${dist}/pkg-chat/loom_chat_bg.wasm`) });
const grammarWasm = await import(`${dist}/pkg-grammar/loom_grammar.js`);
grammarWasm.initSync({ module: readFileSync(`${dist}/pkg-grammar/loom_grammar_bg.wasm`) });

const model = 'SmolLM2-135M-Instruct.Q4_1.gguf';
const chat = chatWasm.Chat.open([model], [readFileSync(`${root}models/smollm2/${model}`)]);
let t = performance.now();
const vocab = new grammarWasm.GrammarVocab(chat.grammarWords());
const vocabMs = performance.now() - t;
const cases = [
  ['json_schema', 'Describe the capital of France.', JSON.stringify({ type: 'object', properties: {
    city: { type: 'string', maxLength: 20 }, country: { type: 'string', maxLength: 20 },
    population: { type: 'integer', minimum: 0, maximum: 99999999 } }, required: ['city', 'country', 'population'],
    additionalProperties: false })],
  ['json_object', 'Describe a cat as JSON.', ''],
  ['regex', 'When did World War II end?', '[0-9]{4}'],
];
const mean = (v) => v.reduce((a, b) => a + b, 0) / Math.max(1, v.length);
const results = [];
for (const [kind, user, source] of cases) {
  chat.reset();
  t = performance.now();
  const grammar = vocab.start(kind, source);
  const compileMs = performance.now() - t;
  chat.begin([{ role: 'user', content: user }], { temperature: 0, maxTokens: 200, constrained: true });
  const maskUs = [];
  const stepUs = [];
  let tokens = 0;
  for (;;) {
    t = performance.now();
    const mask = grammar.mask();
    const masked = performance.now();
    const r = await chat.step(mask);
    const stepped = performance.now();
    if (r.id !== undefined) grammar.accept(r.id);
    const accepted = performance.now();
    // The first step runs the prompt: only decode steps are counted.
    if (tokens > 0) {
      maskUs.push((masked - t + accepted - stepped) * 1e3);
      stepUs.push((stepped - masked) * 1e3);
    }
    tokens++;
    if (r.done || grammar.isDone()) break;
  }
  if (!grammar.isDone()) throw new Error(`${kind}: the reply ended before its grammar completed`);
  chat.complete();
  const reply = chat.finish();
  grammar.free();
  results.push({ kind, tokens, text: reply.text, compile_ms: +compileMs.toFixed(2),
    mask_mean_us: +mean(maskUs).toFixed(0), mask_max_us: +Math.max(...maskUs).toFixed(0),
    step_mean_us: +mean(stepUs).toFixed(0), mask_per_step: +(mean(maskUs) / mean(stepUs)).toFixed(3) });
}
console.log(JSON.stringify({ node: process.version, load: loadavg()[0], vocab_ms: +vocabMs.toFixed(1), results }, null, 1));
