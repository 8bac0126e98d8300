// The chat API under Node (in-thread engine, the wasm CPU engine): tiny-llama against its golden greedy ids, SmolLM2
// against llama_ref/jinja2/HF-tokenizers goldens, and bad input.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rejectsWith } from './assert.mjs';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openChat } from 'loom-wasm';

const root = fileURLToPath(new URL('../../', import.meta.url));
const TINY = `${root}../shared/golden/tiny-llama`;
const SMOL_GOLDEN = `${root}../shared/golden/smollm2/expected.json`;
const SMOL_GGUF = `${root}models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`;
const tinyExpected = JSON.parse(readFileSync(`${TINY}/expected.json`, 'utf8'));

// The tiny model's vocabulary is the 256 bytes (id i = byte i) and it ships no chat template: this one renders the
// messages' text as is, so a one-message conversation is exactly the golden prompt.
const CONCAT_TEMPLATE = JSON.stringify({ chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' });

function tinyFolder(weights = 'model.f32.safetensors') {
  const file = (name, as = name) => new File([readFileSync(`${TINY}/${name}`)], as);
  return [
    file('config.json'),
    file(weights),
    file('tokenizer.json'),
    new File([CONCAT_TEMPLATE], 'tokenizer_config.json'),
  ];
}

const greedyIds = (set, prompt) => tinyExpected.weight_sets[set].results[prompt].greedy_ids;
const bytesOf = (text) => [...new TextEncoder().encode(text)];
const textOf = (ids) => new TextDecoder().decode(Uint8Array.from(ids));

test('an HF folder chats: greedy ids equal the golden reference, tokens stream, the next turn reuses the cache', async () => {
  const chat = await openChat(tinyFolder(), { device: 'cpu' });
  assert.equal(chat.device, 'cpu');
  assert.equal(chat.info.format, 'hf');
  assert.deepEqual([chat.info.layers, chat.info.hidden, chat.info.heads, chat.info.kv_heads, chat.info.vocab], [2, 64, 4, 2, 256]);
  assert.deepEqual(Object.keys(chat.info.block_types), ['F32']);
  const prompt = tinyExpected.prompts[1];
  const pieces = [];
  const reply = await chat.send(textOf(prompt), { temperature: 0, maxTokens: 16, onToken: (t) => pieces.push(t) });
  const want = greedyIds('safetensors_f32', 1);
  assert.deepEqual([...reply.ids], want);
  assert.equal(reply.promptTokens, prompt.length);
  assert.equal(reply.stopReason, 'max_tokens');
  assert.ok(pieces.length > 1, `${pieces.length} pieces`);
  assert.equal(pieces.join(''), reply.text);
  assert.deepEqual(chat.history, [
    { role: 'user', content: textOf(prompt) },
    { role: 'assistant', content: reply.text },
  ]);
  // Turn two: the prompt is turn one's text (the reply's bytes as UTF-8) plus the new message; the keys and values
  // of what the two prompts share are reused.
  const second = await chat.send('and', { temperature: 0, maxTokens: 4 });
  assert.equal(second.promptTokens, prompt.length + bytesOf(reply.text).length + 3);
  assert.ok(second.reusedTokens >= prompt.length, `reused ${second.reusedTokens}`);
  assert.equal(chat.history.length, 4);
  await chat.reset();
  assert.deepEqual(chat.history, []);
  assert.equal((await chat.send(textOf(prompt), { temperature: 0, maxTokens: 16 })).reusedTokens, 0);
  await chat.dispose();
  await rejectsWith(chat.send('x'), 'invalid_input', /disposed/);
});

test('tokenize, detokenize and applyTemplate follow the model files; stream() yields the reply', async () => {
  const chat = await openChat(tinyFolder('model.bf16.safetensors'));
  assert.equal(chat.device, 'cpu');
  assert.match(chat.fallbackReason, /WebGPU/);
  assert.deepEqual([...(await chat.tokenize('Hello, '))], bytesOf('Hello, '));
  assert.equal(await chat.detokenize(bytesOf('naïve 🦙')), 'naïve 🦙');
  const messages = [
    { role: 'user', content: 'The quick' },
    { role: 'assistant', content: ' brown' },
  ];
  assert.equal(await chat.applyTemplate(messages), 'The quick brown');
  const prompt = tinyExpected.prompts[2];
  const stream = chat.stream([{ role: 'user', content: textOf(prompt) }], { temperature: 0, maxTokens: 16 });
  const pieces = [];
  for await (const piece of stream) pieces.push(piece);
  const reply = await stream.reply;
  assert.deepEqual([...reply.ids], greedyIds('safetensors_bf16', 2));
  assert.equal(pieces.join(''), reply.text);
  await chat.dispose();
});

test('a stop signal ends the reply early with stopReason cancelled; breaking out of stream() does too', async () => {
  const chat = await openChat(tinyFolder());
  const stop = new AbortController();
  let seen = 0;
  const reply = await chat.send('Hello, ', {
    temperature: 0,
    maxTokens: 200,
    signal: stop.signal,
    onToken: () => ++seen === 3 && stop.abort(),
  });
  assert.equal(reply.stopReason, 'cancelled');
  assert.ok(reply.ids.length >= 3 && reply.ids.length < 200, `${reply.ids.length} ids`);
  assert.equal(chat.history.at(-1).content, reply.text);
  const stream = chat.stream('Hello, ', { temperature: 0, maxTokens: 200 });
  let n = 0;
  for await (const _ of stream) if (++n === 2) break;
  assert.equal((await stream.reply).stopReason, 'cancelled');
  await chat.dispose();
});

test('sampling: the same seed gives the same reply; a stop string cuts it', async () => {
  const chat = await openChat(tinyFolder());
  const opts = { temperature: 1.2, topK: 0, topP: 1, minP: 0, seed: 7, maxTokens: 24 };
  const a = await chat.send([{ role: 'user', content: 'Hello, ' }], opts);
  const b = await chat.send([{ role: 'user', content: 'Hello, ' }], opts);
  assert.deepEqual([...a.ids], [...b.ids]);
  // Prompt "H" continues with bytes 127 127 254 77 ('M') …: a stop string "M" ends the reply at that token.
  const greedy = greedyIds('safetensors_f32', 0);
  const at = greedy.indexOf(77);
  assert.ok(at > 0);
  const cut = await chat.send([{ role: 'user', content: 'H' }], { temperature: 0, maxTokens: 16, stop: ['M'] });
  assert.equal(cut.stopReason, 'stop');
  assert.deepEqual([...cut.ids], greedy.slice(0, at + 1));
  assert.ok(!cut.text.includes('M'), cut.text);
  await chat.dispose();
});

test('bad input and bad files are typed errors', async () => {
  const gguf = readFileSync(`${TINY}/model.q4_0.gguf`);
  await rejectsWith(openChat(gguf.subarray(0, 2000)), 'bad_format');
  await rejectsWith(openChat(new Uint8Array(100)), 'invalid_input', /\.gguf, a \.entity, or an HF folder/);
  await rejectsWith(openChat([]), 'invalid_input', /Files/);
  await rejectsWith(openChat(gguf, { device: 'tpu' }), 'invalid_input', /device/);
  await rejectsWith(openChat([new File(['{}'], 'config.json')]), 'invalid_input', /no \.safetensors/);
  // A GGUF without a chat template opens (tokenizer from its vocabulary) but cannot template a conversation.
  const chat = await openChat(new Uint8Array(gguf), { device: 'gpu' });
  assert.equal(chat.device, 'cpu');
  assert.match(chat.fallbackReason, /WebGPU/);
  assert.equal(chat.info.format, 'gguf');
  assert.deepEqual(Object.keys(chat.info.block_types), ['Q4_0']);
  assert.deepEqual([...(await chat.tokenize('Hi'))], bytesOf('Hi'));
  await rejectsWith(chat.send('Hello'), 'unsupported', /chat template/);
  await rejectsWith(chat.send(42), 'invalid_input');
  await rejectsWith(chat.send([{ role: 'user' }]), 'invalid_input');
  const folder = await openChat(tinyFolder());
  await rejectsWith(folder.send('x', { temperature: Number.NaN }), 'invalid_input', /temperature/);
  await rejectsWith(folder.send('x', { topP: 2 }), 'invalid_input', /top_p/);
  await rejectsWith(folder.send('x', { maxTokens: -1 }), 'invalid_input', /maxTokens/);
  await rejectsWith(folder.send('x'.repeat(300), { maxTokens: 8, temperature: 0 }), 'context_full', /256/);
  // The failed turns left the history as it was.
  assert.deepEqual(folder.history, []);
  // A conversation that outgrows the 256-token context: by default its oldest turns go; with truncate: false it is
  // refused, and the history stays as it was.
  await folder.send('a'.repeat(150), { maxTokens: 4, temperature: 0 });
  const before = folder.history;
  await rejectsWith(folder.send('b'.repeat(100), { maxTokens: 4, temperature: 0, truncate: false }), 'context_full', /256/);
  assert.deepEqual(folder.history, before);
  await rejectsWith(folder.send('b', { truncate: 'no' }), 'invalid_input', /truncate/);
  const kept = await folder.send('b'.repeat(100), { maxTokens: 4, temperature: 0 });
  assert.equal(kept.stopReason, 'max_tokens');
  const contents = folder.history.map((m) => m.content);
  assert.ok(!contents.includes('a'.repeat(150)) && contents.includes('b'.repeat(100)), JSON.stringify(contents));
  assert.equal(contents.at(-1), kept.text);
  await chat.dispose();
  await folder.dispose();
});

test('integrity: a file whose SHA-256 differs is refused; the right one opens', async () => {
  const path = `${TINY}/model.q8_0.gguf`;
  const digest = createHash('sha256').update(readFileSync(path)).digest();
  const chat = await openChat(path, { integrity: `sha256-${digest.toString('base64')}` });
  assert.equal(chat.info.format, 'gguf');
  await chat.dispose();
  await (await openChat(path, { integrity: digest.toString('hex') })).dispose();
  const wrong = Buffer.from(digest);
  wrong[0] ^= 1;
  await rejectsWith(openChat(path, { integrity: wrong.toString('hex') }), 'bad_format', /SHA-256/);
  await rejectsWith(openChat(path, { integrity: 'md5-abc' }), 'invalid_input', /integrity/);
});

test('SmolLM2-135M Q4_1 on the wasm CPU engine: templated prompts and the greedy reply match the reference', async (t) => {
  if (!existsSync(SMOL_GGUF)) return t.skip('models/ is missing: run scripts/setup.sh');
  const golden = JSON.parse(readFileSync(SMOL_GOLDEN, 'utf8'));
  const chat = await openChat(SMOL_GGUF, { device: 'cpu' });
  // The file is named for its main block type.
  const [main] = Object.entries(chat.info.block_types).sort((a, b) => b[1] - a[1])[0];
  assert.equal(main, 'Q4_1');
  for (const c of golden.cases) {
    const text = await chat.applyTemplate([{ role: 'user', content: c.user_message }]);
    assert.equal(text, c.templated_text);
    assert.deepEqual([...(await chat.tokenize(text))], c.prompt_ids);
  }
  const france = golden.cases.find((c) => /France/.test(c.user_message));
  const want = france.results.gguf_dequant_f32;
  const reply = await chat.send(france.user_message, { temperature: 0, maxTokens: want.greedy_ids.length + 1 });
  assert.equal(reply.promptTokens, france.n_prompt_tokens);
  assert.deepEqual([...reply.ids], want.greedy_ids);
  assert.equal(reply.stopReason, want.stopped_on_eos ? 'eos' : 'max_tokens');
  assert.equal(reply.text, want.greedy_text);
  // Every prompt, decoded token by token (the 16-bit activation kernels): the reference's greedy ids for every
  // decision with a margin of at least 0.1, then at the first near-tie the reference's choice or its runner-up.
  for (const c of golden.cases) {
    const ref = c.results.gguf_dequant_f32;
    const sure = ref['greedy_prefix_len_margin_ge_0.1'];
    const n = Math.min(ref.greedy_ids.length, sure + 1);
    await chat.reset();
    const r = await chat.send(c.user_message, { temperature: 0, maxTokens: n });
    const got = [...r.ids];
    assert.deepEqual(got.slice(0, sure), ref.greedy_ids.slice(0, sure), c.user_message);
    if (got.length > sure && sure < ref.greedy_ids.length) {
      assert.ok([ref.greedy_ids[sure], ref.greedy_steps[sure].second].includes(got[sure]), `${c.user_message}: step ${sure}`);
    }
  }
  await chat.dispose();
});

test("OpenAI's chat.completions.create: a reply and a stream in OpenAI's shapes, the same greedy text; what cannot be honoured is refused by name", async () => {
  const chat = await openChat(tinyFolder(), { device: 'cpu' });
  const prompt = tinyExpected.prompts[1];
  const messages = [{ role: 'user', content: [{ type: 'text', text: textOf(prompt) }] }];
  const r = await chat.chat.completions.create({ model: 'tiny', messages, temperature: 0, max_tokens: 16 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, 'tiny');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: prompt.length, completion_tokens: 16, total_tokens: prompt.length + 16 });
  // The conversation is the request's messages and the reply.
  assert.deepEqual(chat.history, [{ role: 'user', content: textOf(prompt) }, { role: 'assistant', content: r.choices[0].message.content }]);
  const chunks = [];
  const stream = await chat.chat.completions.create({ messages, temperature: 0, max_tokens: 16, stream: true, stream_options: { include_usage: true } });
  for await (const c of stream) chunks.push(c);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(text, r.choices[0].message.content, 'streamed text = the non-streamed text');
  assert.ok(chunks.length > 4, `${chunks.length} chunks`);
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  assert.deepEqual(chunks.at(-1).choices, []);
  assert.deepEqual(chunks.at(-1).usage, r.usage);
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === 'chat.completion.chunk'));
  for (const [params, code, says] of [
    [{ messages, n: 2 }, 'unsupported', /n:/],
    [{ messages, presence_penalty: 0.5 }, 'unsupported', /presence_penalty/],
    [{ messages, response_format: { type: 'grammar' } }, 'invalid_input', /response_format|grammar/],
    [{ messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: 'object' } } }, 'invalid_input', /schema/],
    [{ messages: [{ role: 'tool', content: 'x' }] }, 'invalid_input', /tool_call_id/],
    [{ messages, frobnicate: 1 }, 'invalid_input', /frobnicate/],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, 'invalid_input', /unknown role/],
    [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'invalid_input', /image_url/],
    [{ messages: [] }, 'invalid_input', /at least one/],
  ]) {
    await rejectsWith(chat.chat.completions.create(params), code, says);
  }
  await chat.dispose();
});

test('save() and openChat({restore}): the chat goes on where it was, without computing it again; foreign or damaged states are refused', async () => {
  const prompt = textOf(tinyExpected.prompts[1]);
  const first = await openChat(tinyFolder(), { device: 'cpu' });
  const reply = await first.send(prompt, { temperature: 0, maxTokens: 16 });
  assert.deepEqual([...reply.ids], greedyIds('safetensors_f32', 1));
  const meta = { temperature: 0.5, system: 'ünïcode ✓', list: [1, 2.5, null] };
  const state = await first.save({ meta });
  assert.ok(state instanceof Blob);
  assert.equal(state.type, 'application/x-loom-chat');
  const uninterrupted = await first.send('and', { temperature: 0, maxTokens: 6 });

  const restored = await openChat(tinyFolder(), { device: 'cpu', restore: state });
  assert.deepEqual(restored.restored, { history: restored.history, meta });
  assert.deepEqual(restored.history, [
    { role: 'user', content: prompt },
    { role: 'assistant', content: reply.text },
  ]);
  const next = await restored.send('and', { temperature: 0, maxTokens: 6 });
  assert.deepEqual([...next.ids], [...uninterrupted.ids]);
  assert.equal(next.reusedTokens, uninterrupted.reusedTokens);
  // What the restored cache holds and the new prompt shares (the reply's bytes are not all valid UTF-8, so its text
  // templates to other ids than were generated: the shared prefix is the prompt, as in the uninterrupted session).
  assert.ok(next.reusedTokens >= tinyExpected.prompts[1].length, `reused ${next.reusedTokens}`);
  // The same conversation computed afresh gives the same reply.
  const fresh = await openChat(tinyFolder(), { device: 'cpu' });
  const again = await fresh.send([...restored.history.slice(0, 2), { role: 'user', content: 'and' }], { temperature: 0, maxTokens: 6 });
  assert.equal(again.reusedTokens, 0);
  assert.deepEqual([...again.ids], [...next.ids]);

  // Another model's state (other weights, same shape), damaged bytes, something else: refused, no session opens,
  // and a session that refuses one keeps its conversation.
  await rejectsWith(openChat(tinyFolder('model.f16.safetensors'), { device: 'cpu', restore: state }), 'model_mismatch', /another model/);
  const bytes = new Uint8Array(await state.arrayBuffer());
  const cut = bytes.slice(0, bytes.length - 100);
  await rejectsWith(openChat(tinyFolder(), { device: 'cpu', restore: cut }), 'bad_format', /saved chat/);
  const flipped = bytes.slice();
  flipped[flipped.length >> 1] ^= 1;
  await rejectsWith(fresh.restore(flipped), 'bad_format', /checksum/);
  await rejectsWith(fresh.restore('not a state'), 'invalid_input', /save\(\)/);
  await rejectsWith(first.save({ meta: { n: 1n } }), 'invalid_input', /JSON/);
  assert.equal(fresh.history.length, 4);
  for (const c of [first, restored, fresh]) await c.dispose();
});

test("a Gemma GGUF without a chat template chats in Gemma's format: llama.cpp's built-in gemma template, stopping at <end_of_turn>", async () => {
  const gguf = new File([readFileSync(`${root}testdata/gemma3/model.f32.gguf`)], 'gemma3.gguf');
  const cases = JSON.parse(readFileSync(`${root}testdata/templates/built-in-gemma.json`, 'utf8')).cases;
  const chat = await openChat(gguf, { device: 'cpu' });
  assert.equal(chat.info.arch, 'gemma3');
  assert.equal(chat.info.has_template, true);
  assert.equal(chat.info.built_in_template, 'gemma');
  for (const c of cases) {
    assert.equal(await chat.applyTemplate(c.messages, { addGenerationPrompt: c.add_generation_prompt }), c.text);
  }
  const reply = await chat.send('hi', { temperature: 0, maxTokens: 4 });
  assert.equal(reply.promptTokens, (await chat.tokenize(cases[0].text.replace('What is the capital of France?', 'hi'))).length + 1);
  await chat.dispose();
  // Another family without a template still has none.
  const llama = await openChat(new File([readFileSync(`${TINY}/model.q4_0.gguf`)], 'tiny.gguf'), { device: 'cpu' });
  assert.equal(llama.info.has_template, false);
  assert.equal(llama.info.built_in_template, undefined);
  await llama.dispose();
});

/** PyPI jsonschema's verdict on each `{schema, text}`: 'ok' or why not (outside truth, not our grammar engine). */
function jsonschemaVerdicts(checks) {
  const script = `import json, sys, jsonschema
out = []
for c in json.load(sys.stdin):
    try:
        jsonschema.validate(json.loads(c['text']), c['schema'])
        out.append('ok')
    except Exception as e:
        out.append(repr(e)[:300] + ' in ' + c['text'])
print(json.dumps(out))`;
  return JSON.parse(execFileSync('python3', ['-c', script], { input: JSON.stringify(checks), encoding: 'utf8' }));
}

test('constraint: SmolLM2 replies held to JSON Schemas are valid for jsonschema, regexes match whole, a Lark grammar gives one of its sentences; what cannot compile is invalid_input before any token', async (t) => {
  if (!existsSync(SMOL_GGUF)) return t.skip('models/ is missing: run scripts/setup.sh');
  const chat = await openChat(SMOL_GGUF, { device: 'cpu' });
  const greedy = { temperature: 0, maxTokens: 160 };
  // Bounded strings and numbers, so that a 135M model that would repeat a digit forever still completes.
  const cases = [
    ['Describe the capital of France.', { type: 'object', properties: { city: { type: 'string', maxLength: 20 },
      country: { type: 'string', maxLength: 20 }, population: { type: 'integer', minimum: 0, maximum: 99999999 } },
      required: ['city', 'country', 'population'], additionalProperties: false }],
    ['List three fruits.', { type: 'array', items: { type: 'string', minLength: 1, maxLength: 16 }, minItems: 3, maxItems: 3 }],
    ['Make up a product code and a person.', { type: 'object', properties: {
      code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{4}$' }, owner: { $ref: '#/$defs/person' } },
      required: ['code', 'owner'], additionalProperties: false,
      $defs: { person: { type: 'object', properties: { name: { type: 'string', maxLength: 20 },
        age: { type: 'integer', minimum: 18, maximum: 99 } }, required: ['name', 'age'], additionalProperties: false } } }],
  ];
  const checks = [];
  for (const [user, schema] of cases) {
    await chat.reset();
    let streamed = '';
    const r = await chat.send(user, { ...greedy, constraint: { type: 'json_schema', schema }, onToken: (s) => (streamed += s) });
    assert.equal(r.stopReason, 'complete', `${user}: ${r.text}`);
    assert.equal(streamed, r.text);
    checks.push({ schema, text: r.text });
  }
  assert.deepEqual(jsonschemaVerdicts(checks), ['ok', 'ok', 'ok']);

  for (const pattern of ['[0-9]{4}', '(yes|no)', '[A-Z][a-z]{1,11}, [A-Z][a-z]{1,11}']) {
    await chat.reset();
    const r = await chat.send('When did World War II end, and where?', { temperature: 0, maxTokens: 24, constraint: { type: 'regex', pattern } });
    assert.equal(r.stopReason, 'complete', `${pattern}: ${r.text}`);
    assert.match(r.text, new RegExp(`^(?:${pattern})$`));
  }
  await chat.reset();
  const obj = await chat.send('Describe a cat as JSON.', { temperature: 0, maxTokens: 200, constraint: { type: 'json_object' } });
  assert.equal(obj.stopReason, 'complete', obj.text);
  assert.equal(typeof JSON.parse(obj.text), 'object');
  await chat.reset();
  const lark = 'start: answer "."\nanswer: "Paris" | "London" | "Rome"\n';
  const capital = await chat.send('What is the capital of France?', { temperature: 0, maxTokens: 8, constraint: { type: 'lark', grammar: lark } });
  assert.ok(['Paris.', 'London.', 'Rome.'].includes(capital.text), capital.text);
  // Sampled, not greedy: the draw is still from what the grammar allows.
  await chat.reset();
  const sampled = await chat.send('Pick a number.', { temperature: 1.2, seed: 7, maxTokens: 24, constraint: { type: 'regex', pattern: '[1-9][0-9]?' } });
  assert.match(sampled.text, /^[1-9][0-9]?$/);

  await chat.reset();
  for (const [constraint, says] of [
    [{ type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'string', minLenght: 3 } } } }, /#\/properties\/a: unknown JSON Schema keyword "minLenght"/],
    [{ type: 'json_schema', schema: { type: 'strnig' } }, /strnig/],
    [{ type: 'json_schema', schema: 'object' }, /constraint.schema must be a JSON Schema/],
    [{ type: 'regex', pattern: '[0-9' }, /regex/],
    [{ type: 'lark', grammar: 'start: (' }, /constraint/],
    [{ type: 'yaml' }, /constraint.type must be/],
  ]) {
    await rejectsWith(chat.send('Hello', { temperature: 0, maxTokens: 8, constraint }), 'invalid_input', says);
    assert.deepEqual(chat.history, [], 'nothing was added to the conversation');
  }
  // The session goes on unconstrained, as before.
  const plain = await chat.send('Hello', { temperature: 0, maxTokens: 4 });
  assert.equal(plain.ids.length, 4);

  // OpenAI's response_format: json_schema and json_object.
  await chat.reset();
  const schema = cases[0][1];
  const c = await chat.chat.completions.create({
    messages: [{ role: 'user', content: cases[0][0] }], temperature: 0, max_tokens: 160,
    response_format: { type: 'json_schema', json_schema: { name: 'capital', schema, strict: true } },
  });
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.deepEqual(jsonschemaVerdicts([{ schema, text: c.choices[0].message.content }]), ['ok']);
  await chat.dispose();
});

test("logprobs: SmolLM2's greedy reply with each token's log-probability and top 5, the first token's as the reference's logits say; streamed whole with the last chunk; bad counts refused", async (t) => {
  if (!existsSync(SMOL_GGUF)) return t.skip('models/ is missing: run scripts/setup.sh');
  const golden = JSON.parse(readFileSync(SMOL_GOLDEN, 'utf8'));
  const c = golden.cases[0];
  const ref = c.results.gguf_dequant_f32;
  // The whole greedy reply (the SmolLM2 test above holds the wasm engine to it for this prompt).
  const n = ref.greedy_ids.length;
  const chat = await openChat(SMOL_GGUF, { device: 'cpu' });
  const messages = [{ role: 'user', content: c.user_message }];
  const r = await chat.chat.completions.create({ messages, temperature: 0, max_tokens: n, logprobs: true, top_logprobs: 5 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, n);
  const reply = await chat.send(messages, { temperature: 0, maxTokens: n });
  assert.deepEqual([...reply.ids], ref.greedy_ids.slice(0, n));
  for (const [i, tok] of content.entries()) {
    // Greedy: the token is the likeliest; alternatives most likely first, below 0, together at most 1.
    assert.equal(tok.token, await chat.detokenize([ref.greedy_ids[i]]), `token ${i}`);
    assert.deepEqual(tok.bytes, [...new TextEncoder().encode(tok.token)]);
    assert.equal(tok.top_logprobs.length, 5);
    assert.deepEqual([tok.top_logprobs[0].token, tok.top_logprobs[0].logprob], [tok.token, tok.logprob]);
    const lps = tok.top_logprobs.map((a) => a.logprob);
    assert.ok(lps.every((l, j) => l <= 0 && (j === 0 || lps[j - 1] >= l)), `${lps}`);
    assert.ok(lps.reduce((s, l) => s + Math.exp(l), 0) <= 1 + 1e-6);
  }
  assert.equal(content.map((tok) => tok.token).join(''), r.choices[0].message.content);
  // The first token's top 5 are the reference's at the last prompt position, in its order (margins of 0.08 and
  // more), with its logit differences (the normalisation cancels) within twice the golden bound of 0.01.
  const top20 = ref.top20_last_prompt_position;
  const first = content[0].top_logprobs;
  for (const [j, alt] of first.entries()) {
    assert.equal(alt.token, await chat.detokenize([top20[j][0]]), `alternative ${j}`);
    const ours = alt.logprob - first[0].logprob;
    const theirs = top20[j][1] - top20[0][1];
    assert.ok(Math.abs(ours - theirs) <= 0.02, `alternative ${j}: ${ours} against ${theirs}`);
  }
  const plain = await chat.chat.completions.create({ messages, temperature: 0, max_tokens: 4 });
  assert.equal(plain.choices[0].logprobs, null);
  // Streamed: nothing before the last chunk, then the same tokens and values.
  const chunks = [];
  for await (const ch of await chat.chat.completions.create({ messages, temperature: 0, max_tokens: n, logprobs: true, top_logprobs: 5, stream: true })) chunks.push(ch);
  const withLogprobs = chunks.filter((ch) => ch.choices[0]?.logprobs);
  assert.equal(withLogprobs.length, 1);
  assert.equal(withLogprobs[0].choices[0].finish_reason, 'length');
  const streamed = withLogprobs[0].choices[0].logprobs.content;
  assert.deepEqual(streamed.map((tok) => tok.token), content.map((tok) => tok.token));
  for (const [i, tok] of streamed.entries()) assert.ok(Math.abs(tok.logprob - content[i].logprob) <= 0.01, `${i}`);
  // The package's own options: the same.
  const own = await chat.send(messages, { temperature: 0, maxTokens: 2, logprobs: true, topLogprobs: 2 });
  assert.equal(own.logprobs.length, 2);
  assert.equal(own.logprobs[0].top_logprobs.length, 2);
  for (const [params, says] of [
    [{ messages, top_logprobs: 3 }, /needs logprobs/],
    [{ messages, logprobs: true, top_logprobs: 21 }, /at most 20/],
  ]) {
    await rejectsWith(chat.chat.completions.create(params), 'invalid_input', says);
  }
  await rejectsWith(chat.send('Hi', { topLogprobs: 2 }), 'invalid_input', /needs logprobs/);
  await chat.dispose();
});

test('tools through chat.completions: a required call is a call of a tool of the request whose arguments its schema accepts (jsonschema), streamed or not; the call and its result go back as messages; bad tool requests are typed errors', async (t) => {
  if (!existsSync(SMOL_GGUF)) return t.skip('models/ is missing: run scripts/setup.sh');
  const chat = await openChat(SMOL_GGUF, { device: 'cpu' });
  const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 24 }, unit: { enum: ['celsius', 'fahrenheit'] } },
    required: ['city', 'unit'], additionalProperties: false };
  const time = { type: 'object', properties: { zone: { type: 'string', maxLength: 24 } }, required: ['zone'] };
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'The weather now.', parameters: weather } },
    { type: 'function', function: { name: 'get_time', parameters: time } },
  ];
  const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const r = await chat.chat.completions.create({ messages: ask, tools, tool_choice: 'required', temperature: 0, max_tokens: 80 });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  const [call] = r.choices[0].message.tool_calls;
  assert.equal(call.type, 'function');
  assert.ok(['get_weather', 'get_time'].includes(call.function.name), call.function.name);
  const schema = call.function.name === 'get_weather' ? weather : time;
  assert.deepEqual(jsonschemaVerdicts([{ schema, text: call.function.arguments }]), ['ok']);

  // A named call, streamed: one chunk with the call (its index, id and arguments), then the finish reason.
  const chunks = [];
  for await (const c of await chat.chat.completions.create({ messages: ask, tools, temperature: 0, max_tokens: 80,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true })) chunks.push(c);
  const calls = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.delta.tool_calls ?? []));
  assert.equal(calls.length, 1);
  assert.equal(calls[0].index, 0);
  assert.equal(calls[0].function.name, 'get_weather');
  assert.deepEqual(jsonschemaVerdicts([{ schema: weather, text: calls[0].function.arguments }]), ['ok']);
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'tool_calls');

  // The call and its result go back; the model answers (as text, or another call).
  const follow = [...ask,
    { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris', unit: 'celsius' }) } }] },
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21 }) }];
  const after = await chat.chat.completions.create({ messages: follow, tools, temperature: 0, max_tokens: 30 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(after.choices[0].finish_reason));
  assert.deepEqual(chat.history.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant']);

  for (const [params, says] of [
    [{ messages: ask, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, /names no tool/],
    [{ messages: ask, tools: [{ type: 'function', function: { description: 'no name' } }] }, /no name|name/],
    [{ messages: ask, tools, tool_choice: 'required', response_format: { type: 'json_object' } }, /own format/],
  ]) {
    await rejectsWith(chat.chat.completions.create(params), 'invalid_input', says);
    await rejectsWith(chat.chat.completions.create({ ...params, stream: true }), 'invalid_input', says);
  }
  await chat.dispose();
});
