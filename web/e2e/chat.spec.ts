// The chat API of the built package in Chromium (its module worker): an HF folder from a directory handle, a URL
// with integrity, WebGPU (SwiftShader here) against the tiny-llama golden, and a stop that crosses to the worker.
import { test, expect } from '@playwright/test';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CATCH, ready, resetServer, serverLog } from './helpers';

const root = fileURLToPath(new URL('../../', import.meta.url));
const TINY = `${root}../shared/golden/tiny-llama`;
const expected = JSON.parse(readFileSync(`${TINY}/expected.json`, 'utf8'));
const greedy = (set: string, prompt: number): number[] => expected.weight_sets[set].results[prompt].greedy_ids;
const SMOL = 'models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf';
const TEMPLATE = JSON.stringify({ chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' });

test.beforeEach(async ({ page }) => {
  await ready(page);
  await page.evaluate(CATCH);
});

test('an HF folder from a directory handle chats in the worker; greedy ids equal the golden, on the CPU and WebGPU', async ({ page }) => {
  test.setTimeout(180_000);
  const got = await page.evaluate(async (template) => {
    // A real FileSystemDirectoryHandle: the tiny Llama's folder written into the origin's private file system.
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('tiny-llama', { create: true });
    const put = async (name: string, data: BlobPart) => {
      const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
      await w.write(data);
      await w.close();
    };
    for (const name of ['config.json', 'model.f32.safetensors', 'tokenizer.json']) {
      await put(name, await (await fetch(`/golden/tiny-llama/${name}`)).blob());
    }
    await put('tokenizer_config.json', template);
    const out: Record<string, unknown> = {};
    for (const device of ['cpu', 'gpu'] as const) {
      const chat = await window.loom.openChat(dir, { device });
      let pieces = 0;
      const r = await chat.send('Hello, ', { temperature: 0, maxTokens: 16, onToken: () => pieces++ });
      out[device] = { device: chat.device, format: chat.info.format, ids: [...r.ids], pieces, history: chat.history.length };
      if (device === 'gpu') out.where = { adapter: chat.adapter, warning: chat.warning, gpu: await window.loom.gpuInfo() };
      await chat.dispose();
    }
    return out;
  }, TEMPLATE);
  // Chosen by name on this machine's software adapter, WebGPU runs; the session names the browser's adapter (not
  // wgpu's "(BrowserWebGpu)") and warns that it is a software one, as 'auto' says when it picks the CPU instead.
  const where = got.where as { adapter?: string; warning?: string; gpu: { adapter?: string; software?: boolean } };
  expect(where.gpu.software).toBe(true);
  expect(where.adapter).toBe(where.gpu.adapter);
  expect(where.adapter).not.toContain('BrowserWebGpu');
  expect(where.warning).toContain('software adapter');
  const want = greedy('safetensors_f32', 1);
  expect(got.cpu).toEqual({ device: 'cpu', format: 'hf', ids: want, pieces: (got.cpu as any).pieces, history: 2 });
  expect((got.cpu as any).pieces).toBeGreaterThan(1);
  expect(got.gpu).toEqual({ device: 'gpu', format: 'hf', ids: want, pieces: (got.gpu as any).pieces, history: 2 });
});

test('a constrained reply: the grammar module is fetched by the first one only; on WebGPU and the CPU the tiny Llama answers within the regex, the same ids', async ({ page }) => {
  test.setTimeout(180_000);
  await resetServer(page);
  const fetched = async () => (await page.request.get('/__wasm')).json();
  const run = (constraint: boolean) =>
    page.evaluate(async ([template, constraint]) => {
      const files = await Promise.all(['config.json', 'model.f32.safetensors', 'tokenizer.json'].map(async (name) =>
        new File([await (await fetch(`/golden/tiny-llama/${name}`)).blob()], name)));
      files.push(new File([template as string], 'tokenizer_config.json'));
      const out: Record<string, unknown> = {};
      for (const device of ['cpu', 'gpu'] as const) {
        const chat = await window.loom.openChat(files, { device });
        const opts = constraint ? { constraint: { type: 'regex' as const, pattern: '[a-z]{5}' } } : {};
        const r = await chat.send('Hello, ', { temperature: 0, maxTokens: 16, ...opts });
        out[device] = { device: chat.device, text: r.text, ids: [...r.ids], stop: r.stopReason };
        await chat.dispose();
      }
      return out;
    }, [TEMPLATE, constraint] as const);
  const plain = await run(false);
  expect(await fetched()).toEqual(['/dist/pkg-chat/loom_chat_bg.wasm']);
  const held = await run(true);
  expect(await fetched()).toEqual(['/dist/pkg-chat/loom_chat_bg.wasm', '/dist/pkg-grammar/loom_grammar_bg.wasm']);
  const cpu = held.cpu as { device: string; text: string; ids: number[]; stop: string };
  expect(cpu.device).toBe('cpu');
  expect(cpu.text).toMatch(/^[a-z]{5}$/);
  expect(cpu.stop).toBe('complete');
  expect(held.gpu).toEqual({ ...cpu, device: 'gpu' });
  // Unconstrained, the same model says something else: the grammar did the holding.
  expect((plain.cpu as { text: string }).text).not.toMatch(/^[a-z]{5}$/);
});

test('the GPU self-test at open: a kernel made wrong on purpose sends the chat to the CPU with the kernel named; the reply is the golden', async ({ page }) => {
  test.setTimeout(180_000);
  const got = await page.evaluate(async (template) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('tiny-self-test', { create: true });
    const put = async (name: string, data: BlobPart) => {
      const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
      await w.write(data);
      await w.close();
    };
    for (const name of ['config.json', 'model.f32.safetensors', 'tokenizer.json']) {
      await put(name, await (await fetch(`/golden/tiny-llama/${name}`)).blob());
    }
    await put('tokenizer_config.json', template);
    const open = async () => {
      const t0 = performance.now();
      const chat = await window.loom.openChat(dir, { device: 'gpu' });
      const ms = performance.now() - t0;
      const r = await chat.send('Hello, ', { temperature: 0, maxTokens: 16 });
      const out = { device: chat.device, fallbackReason: chat.fallbackReason, ids: [...r.ids], ms };
      await chat.dispose();
      return out;
    };
    const sound = await open();
    await window.loom.configure({ testBreakGpuKernel: 'attention_attend' });
    const broken = await open();
    await window.loom.configure({ testBreakGpuKernel: null });
    const mended = await open();
    return { sound, broken, mended };
  }, TEMPLATE);
  console.log(`openChat on WebGPU with the self-test: ${got.sound.ms.toFixed(0)} ms (tiny Llama, SwiftShader)`);
  const want = greedy('safetensors_f32', 1);
  expect(got.sound).toMatchObject({ device: 'gpu', fallbackReason: undefined, ids: want });
  expect(got.broken).toMatchObject({ device: 'cpu', ids: want });
  expect(got.broken.fallbackReason).toMatch(/^GPU self-test failed: the attention_attend kernel differs from its CPU twin by up to \S+/);
  expect(got.mended).toMatchObject({ device: 'gpu', fallbackReason: undefined, ids: want });
});

test('fitCheck from the headers only: a few Range reads of the GGUF, what fits WebGPU, the CPU engine and the storage quota; no storage once kept', async ({ page }) => {
  test.skip(!existsSync(`${root}${SMOL}`), 'models/ is missing: run scripts/setup.sh');
  test.setTimeout(120_000);
  const size = readFileSync(`${root}${SMOL}`).length;
  await page.evaluate(() => window.loom.cache.clear());
  await resetServer(page);
  const fit = await page.evaluate((url) => window.loom.fitCheck(url), `/${SMOL}`);
  // Range requests of the header only: nothing of the weights.
  const log = await serverLog(page);
  expect(log.every((e) => e.status === 206)).toBe(true);
  expect(log.reduce((s, e) => s + e.sent, 0)).toBeLessThan(0.05 * size);
  const got = await page.evaluate(async (url) => {
    const inspection = await window.loom.inspect(url, { cache: false });
    const embed = inspection.tensors.find((t: any) => t.name === 'token_embd.weight');
    const chat = await window.loom.openChat(url, { device: 'cpu' });
    await chat.dispose();
    const kept = await window.loom.fitCheck(url);
    return { weightBytes: inspection.weight_bytes, embed: embed && embed.bytes, keptStorage: kept.storage };
  }, `/${SMOL}`);
  expect(fit.bytesRead).toBeLessThan(0.05 * size);
  expect(fit).toMatchObject({ arch: 'llama', fileBytes: size, weightBytes: got.weightBytes });
  expect(fit.largestTensor).toEqual({ name: 'token_embd.weight', bytes: got.embed });
  // SwiftShader's limits hold SmolLM2 (its 30 MB Q8_0 embedding in bindings of its size); the CPU engine's 32-bit
  // memory holds the file and a 4,096-position cache.
  expect(fit.gpu).toMatchObject({ fits: true, problems: [], context: 4096 });
  expect(fit.gpu.maxStorageBufferBindingSize).toBeGreaterThan(0);
  expect(fit.gpu.kvCacheBytes).toBe(4096 * 30 * 2 * 3 * 64 * 4);
  expect(fit.cpu).toMatchObject({ fits: true, positions: 4096, neededBytes: size + 4096 * 30 * 2 * 3 * 64 * 4 });
  expect(fit.storage).toMatchObject({ fits: true, neededBytes: size });
  // Once openChat kept the download, nothing more would be stored.
  expect(got.keptStorage).toBeNull();
});

test('a GPU device lost mid-reply (GPUDevice.destroy()): the model reopens on a new device from its source, the reply goes on to the golden ids', async ({ page }) => {
  test.setTimeout(180_000);
  const got = await page.evaluate(async (template) => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('tiny-lost', { create: true });
    const put = async (name: string, data: BlobPart) => {
      const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
      await w.write(data);
      await w.close();
    };
    for (const name of ['config.json', 'model.f32.safetensors', 'tokenizer.json']) {
      await put(name, await (await fetch(`/golden/tiny-llama/${name}`)).blob());
    }
    await put('tokenizer_config.json', template);
    const chat = await window.loom.openChat(dir, { device: 'gpu' });
    let pieces = 0;
    const lost: Promise<void>[] = [];
    const r = await chat.send('Hello, ', {
      temperature: 0,
      maxTokens: 16,
      onToken: () => {
        if (++pieces === 3) lost.push(window.loom.configure({ testLoseGpuDevice: true }));
      },
    });
    await Promise.all(lost);
    // The next turn runs on the new device too.
    const next = await chat.send('Hello, ', { temperature: 0, maxTokens: 4 });
    await chat.dispose();
    return { device: chat.device, ids: [...r.ids], devicesLost: r.devicesLost, stop: r.stopReason, next: next.devicesLost, history: chat.history.length };
  }, TEMPLATE);
  expect(got.devicesLost).toBe(1);
  expect(got.ids).toEqual(greedy('safetensors_f32', 1));
  expect(got).toMatchObject({ device: 'gpu', stop: 'max_tokens', next: 0, history: 4 });
});

test('a URL with integrity: the right SHA-256 opens, a wrong one is bad_format and leaves nothing in the cache', async ({ page }) => {
  const digest = createHash('sha256').update(readFileSync(`${TINY}/model.q8_0.gguf`)).digest();
  const wrong = Buffer.from(digest);
  wrong[31] ^= 0x80;
  const got = await page.evaluate(async ([good, bad]) => {
    const u = '/golden/tiny-llama/model.q8_0.gguf';
    const t = (window as any).__try;
    const ok = await t(async () => {
      const chat = await window.loom.openChat(u, { integrity: good });
      const ids = [...(await chat.tokenize('Hi'))];
      await chat.dispose();
      return ids;
    });
    await window.loom.cache.clear();
    const refused = await t(() => window.loom.openChat(u, { integrity: bad }));
    const cached = (await window.loom.cache.list()).map((e: { url: string }) => e.url);
    return { ok, refused, cached };
  }, [`sha256-${digest.toString('base64')}`, wrong.toString('hex')]);
  expect(got.ok).toEqual({ value: [72, 105] });
  expect(got.refused.error).toMatchObject({ code: 'bad_format', isLoomError: true });
  expect(got.refused.error.message).toMatch(/SHA-256/);
  expect(got.cached).toEqual([]);
});

test('seeded sampling on WebGPU (drawn on the GPU): the same seed gives the same reply, other seeds others', async ({ page }) => {
  test.setTimeout(180_000);
  const got = await page.evaluate(async (template) => {
    // The tiny Llama's folder (its GGUFs carry no chat template) with a plain one beside it.
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('tiny-sampled', { create: true });
    const put = async (name: string, data: BlobPart) => {
      const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
      await w.write(data);
      await w.close();
    };
    for (const name of ['config.json', 'model.f16.safetensors', 'tokenizer.json']) {
      await put(name, await (await fetch(`/golden/tiny-llama/${name}`)).blob());
    }
    await put('tokenizer_config.json', template);
    const chat = await window.loom.openChat(dir, { device: 'gpu' });
    const draw = async (seed: number) => {
      await chat.reset();
      const r = await chat.send('Hello, ', { temperature: 1.0, topK: 40, topP: 0.95, seed, maxTokens: 12 });
      return [...r.ids];
    };
    const out = { device: chat.device, a: await draw(1), again: await draw(1), b: await draw(2), c: await draw(3) };
    await chat.dispose();
    return out;
  }, TEMPLATE);
  expect(got.device).toBe('gpu');
  expect(got.a.length).toBeGreaterThan(0);
  expect(got.again).toEqual(got.a);
  expect(new Set([got.a, got.b, got.c].map((ids) => ids.join(','))).size).toBeGreaterThan(1);
});

test('stop: aborting the signal ends a SmolLM2 reply in the worker after a few tokens, resolving as cancelled', async ({ page }) => {
  test.skip(!existsSync(`${root}${SMOL}`), 'models/ is missing: run scripts/setup.sh');
  test.setTimeout(120_000);
  const got = await page.evaluate(async (url) => {
    const chat = await window.loom.openChat(url, { device: 'cpu' });
    const stop = new AbortController();
    let seen = 0;
    const t0 = performance.now();
    let stoppedAt = 0;
    const r = await chat.send('Write a long story about a dragon.', {
      temperature: 0.8, seed: 1, maxTokens: 300, signal: stop.signal,
      onToken: () => {
        if (++seen === 3) {
          stoppedAt = performance.now();
          stop.abort();
        }
      },
    });
    const settled = performance.now();
    const next = await chat.send('What is the capital of France?', { temperature: 0, maxTokens: 8 });
    await chat.dispose();
    return { reason: r.stopReason, n: r.ids.length, afterStopMs: settled - stoppedAt, total: settled - t0, next: next.text };
  }, `/${SMOL}`);
  expect(got.reason).toBe('cancelled');
  expect(got.n).toBeLessThan(20);
  expect(got.afterStopMs).toBeLessThan(1000);
  expect(got.next).toContain('Paris');
});

test('a GGUF URL opened for WebGPU streams its tensors to the GPU: wasm memory stays far below the file, and the reply starts as the reference', async ({ page }) => {
  test.skip(!existsSync(`${root}${SMOL}`), 'models/ is missing: run scripts/setup.sh');
  test.setTimeout(240_000);
  const golden = JSON.parse(readFileSync(`${root}../shared/golden/smollm2/expected.json`, 'utf8'));
  const france = golden.cases.find((c: { user_message: string }) => /France/.test(c.user_message));
  const size = readFileSync(`${root}${SMOL}`).length;
  const got = await page.evaluate(async ([url, question]) => {
    const before = await window.loom.memoryBytes();
    const phases = new Set<string>();
    const chat = await window.loom.openChat(url, { device: 'gpu', onProgress: (p) => phases.add(p.phase) });
    const after = await window.loom.memoryBytes();
    const r = await chat.send(question, { temperature: 0, maxTokens: 2 });
    await chat.dispose();
    return { device: chat.device, before, after, ids: [...r.ids], phases: [...phases], mix: chat.info.block_types };
  }, [`/${SMOL}`, france.user_message]);
  expect(got.device).toBe('gpu');
  expect(got.phases).toContain('upload');
  expect(got.ids).toEqual(france.results.gguf_dequant_f32.greedy_ids.slice(0, 2));
  // The largest tensor (the Q8_0 embedding, 30 MB) plus the tokenizer, never the whole file (47.5 MB in all
  // for this 98 MB file when measured; a whole-file load takes more than the file).
  console.log(`wasm memory: ${got.before} B before, ${got.after} B after streaming a ${size} B GGUF to the GPU`);
  expect(got.after - got.before).toBeLessThan(0.55 * size);
  expect(Object.values(got.mix as Record<string, number>).reduce((a, b) => a + b, 0)).toBeGreaterThan(size * 0.9);
});

test('a chat saved to OPFS survives a page reload: restored on WebGPU or the CPU (either way round), it replies as the uninterrupted one without computing its prompt again', async ({ page }) => {
  test.setTimeout(240_000);
  const pairs = [['gpu', 'cpu'], ['cpu', 'gpu'], ['gpu', 'gpu']] as const;
  // The tiny Llama's folder as Files, in the page before and after the reload.
  await page.addInitScript(() => {
    window.tinyFolder = async (template: string) => {
      const files = [];
      for (const name of ['config.json', 'model.f32.safetensors', 'tokenizer.json']) {
        files.push(new File([await (await fetch(`/golden/tiny-llama/${name}`)).blob()], name));
      }
      files.push(new File([template], 'tokenizer_config.json'));
      return files;
    };
  });
  await page.reload();
  await ready(page);
  const before = await page.evaluate(async ({ template, pairs }) => {
    const folder = window.tinyFolder;
    const out = [];
    for (const [from] of pairs) {
      const chat = await window.loom.openChat(await folder(template), { device: from });
      const first = await chat.send('Hello, ', { temperature: 0, maxTokens: 16 });
      const state = await chat.save({ meta: { from } });
      const w = await (await (await navigator.storage.getDirectory()).getFileHandle(`chat-${from}.loomchat`, { create: true })).createWritable();
      await w.write(state);
      await w.close();
      const next = await chat.send('world', { temperature: 0, maxTokens: 8 });
      out.push({ device: chat.device, first: [...first.ids], next: [...next.ids], reused: next.reusedTokens, bytes: state.size });
      await chat.dispose();
    }
    return out;
  }, { template: TEMPLATE, pairs });
  expect(before.map((b) => b.first)).toEqual(pairs.map(() => greedy('safetensors_f32', 1)));

  await page.reload();
  await ready(page);
  const after = await page.evaluate(async ({ template, pairs }) => {
    const folder = window.tinyFolder;
    const out = [];
    for (const [from, to] of pairs) {
      const state = await (await (await navigator.storage.getDirectory()).getFileHandle(`chat-${from}.loomchat`)).getFile();
      const chat = await window.loom.openChat(await folder(template), { device: to, restore: state });
      const next = await chat.send('world', { temperature: 0, maxTokens: 8 });
      out.push({ device: chat.device, meta: chat.restored?.meta, history: chat.history.length, next: [...next.ids], reused: next.reusedTokens });
      await chat.dispose();
    }
    // Another model's state (the same shape, float16 weights) opens nothing.
    const files = await folder(template);
    files[1] = new File([await (await fetch('/golden/tiny-llama/model.f16.safetensors')).blob()], 'model.f16.safetensors');
    const state = await (await (await navigator.storage.getDirectory()).getFileHandle('chat-gpu.loomchat')).getFile();
    const refused = await window.loom.openChat(files, { device: 'cpu', restore: state }).then(
      () => 'opened',
      (e) => `${e.code}: ${e.message}`,
    );
    return { out, refused };
  }, { template: TEMPLATE, pairs });
  pairs.forEach(([from, to], i) => {
    const b = before[i];
    const a = after.out[i];
    expect(a.device, `${from} → ${to}`).toBe(to);
    expect(a.meta).toEqual({ from });
    expect(a.history).toBe(4);
    expect(a.next, `${from} → ${to}`).toEqual(b.next);
    expect(a.reused, `${from} → ${to}`).toBe(b.reused);
    expect(a.reused).toBeGreaterThanOrEqual(7);
  });
  expect(after.refused).toMatch(/^model_mismatch: .*another model/);
});
