// The Benchmark panel of the Chat page: the open model's prefill and decode speed on WebGPU and on the wasm CPU
// engine, each in a session of its own (the conversation is left alone), with the adapter as the browser names it
// (GPUAdapter.info: wgpu's name is empty in browsers), its f16 and subgroups, and a plain note when that adapter is
// a software one, whichever device the chat was opened on.
import { gpuInfo, openChat } from 'loom-wasm';
import type { ChatSource } from 'loom-wasm';
import { byId, fill, h } from './dom';
import { showErrorIn } from './errors';

/** The model to measure, as the chat opened it. */
export interface BenchModel {
  source: ChatSource;
  name: string;
  integrity?: string;
}

/** A prompt of about fifty tokens and the new tokens drawn after it (greedy). */
const PROMPT =
  'Write a short story about a lighthouse keeper who finds a message in a bottle on a stormy night. ' +
  'The message is old, the ink has faded, and the keeper must decide whether to answer it.';
const NEW_TOKENS = 16;

const button = byId<HTMLButtonElement>('bench-run');
const adapterLine = byId('bench-adapter');
const table = byId<HTMLTableElement>('bench-table');
const errorBox = byId('bench-error');
let model: () => BenchModel | undefined = () => undefined;
let running = false;

/** Enables the button while a model is open and the chat is not replying. */
export function setBenchReady(ready: boolean): void {
  button.disabled = !ready || running;
}

const rate = (x: number) => (x > 0 ? x.toFixed(1) : '—');

async function run(): Promise<void> {
  const m = model();
  if (!m || running) return;
  running = true;
  button.disabled = true;
  showErrorIn(errorBox, null);
  table.hidden = false;
  const body = table.tBodies[0];
  body.replaceChildren();
  try {
    const gpu = await gpuInfo();
    const yesNo = (x: boolean | undefined) => (x ? 'yes' : 'no');
    fill(
      adapterLine,
      gpu.available
        ? [
            h('span', { 'data-testid': 'bench-adapter-name' }, gpu.adapter ?? 'unnamed adapter'),
            ` · vendor ${gpu.vendor || '—'} · architecture ${gpu.architecture || '—'} · shader-f16 ${yesNo(gpu.shader_f16)}`,
            ` · subgroups ${yesNo(gpu.subgroups)}`,
            gpu.software
              ? h('p', { class: 'note-warn', 'data-testid': 'bench-software' },
                  `This WebGPU adapter is a software one: its figures are this computer's CPU running WebGPU, not a GPU's.`)
              : null,
          ]
        : `WebGPU: not available here (${gpu.reason ?? 'no adapter'}).`,
    );
    for (const device of gpu.available ? (['gpu', 'cpu'] as const) : (['cpu'] as const)) {
      const row = h('tr', { 'data-testid': 'bench-row', 'data-device': device },
        h('td', null, device === 'gpu' ? 'WebGPU' : 'CPU (WebAssembly)'), h('td', { colspan: 2, class: 'muted' }, 'running…'));
      body.append(row);
      const session = await openChat(m.source, { device, integrity: m.integrity, name: m.name });
      try {
        if (session.device !== device) {
          fill(row, h('td', null, 'WebGPU'), h('td', { colspan: 2, class: 'muted' }, `ran on the CPU: ${session.fallbackReason ?? ''}`));
          continue;
        }
        const r = await session.send(PROMPT, { temperature: 0, maxTokens: NEW_TOKENS });
        row.dataset.prefill = String(r.prefillTokensPerSecond);
        row.dataset.decode = String(r.tokensPerSecond);
        fill(
          row,
          h('td', null, device === 'gpu' ? 'WebGPU' : 'CPU (WebAssembly)'),
          h('td', { class: 'num' }, `${rate(r.prefillTokensPerSecond)} `, h('span', { class: 'muted' }, `(${r.promptTokens} tokens)`)),
          h('td', { class: 'num' }, `${rate(r.tokensPerSecond)} `, h('span', { class: 'muted' }, `(${r.ids.length} tokens)`)),
        );
      } finally {
        await session.dispose();
      }
    }
    table.dataset.state = 'done';
  } catch (e) {
    showErrorIn(errorBox, e);
  } finally {
    running = false;
    button.disabled = model() === undefined;
  }
}

/** Wires the panel to the chat's open model. */
export function initBench(current: () => BenchModel | undefined): void {
  model = current;
  button.addEventListener('click', () => void run());
}
