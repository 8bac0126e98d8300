// The run panel: an input vector (typed, or random from a seed) → the output on the CPU and on WebGPU side by side,
// with the largest difference; when WebGPU is missing the reason is shown. Outputs carry their exact float32 bytes
// in data-f32-hex for tests.
import { gpuInfo } from 'loom-wasm';
import type { ForwardResult, InputSpec, LoomModel } from 'loom-wasm';
import { fill, h } from './dom';
import { f32, f32Hex, num } from './format';
import { errorText } from './errors';
import { noNetworkReason } from './capability';

/** mulberry32: a small seeded generator, so "random, seed 7" gives the same vector every time. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function parseNumbers(text: string): number[] {
  const parts = text.replace(/[[\]]/g, ' ').split(/[\s,]+/).filter(Boolean);
  const out = parts.map(Number);
  const bad = parts.findIndex((p, i) => !Number.isFinite(out[i]) || p === '');
  if (bad >= 0) throw new Error(`"${parts[bad]}" is not a number`);
  return out;
}

function parseShape(text: string, n: number): number[] {
  if (!text.trim()) return [1, n];
  const shape = parseNumbers(text);
  if (shape.some((d) => !Number.isInteger(d) || d <= 0)) throw new Error('the shape must be positive integers, e.g. 1,16');
  return shape;
}

export interface RunDefaults {
  shape: number[];
  input: number[];
}

/** The refusal of an input the network cannot take, worded as the library words it for `loom run`; null if it fits. */
function inputProblem(spec: InputSpec | null, values: number[], shape: number[]): string | null {
  if (!spec) return null;
  if (spec.kind === 'float') {
    const width = spec.shape[1];
    if (shape.length < 2 || shape.slice(1).reduce((a, b) => a * b, 1) !== width)
      return `the input must be [batch, ${width}] float values (${spec.layer} is Dense with ${width} inputs), got shape [${shape.join(', ')}]`;
    return null;
  }
  const vocab = spec.vocab ?? 0;
  const i = values.findIndex((v) => !Number.isInteger(v) || v < 0 || v >= vocab);
  if (i < 0) return null;
  return `the input must be token ids, integers from 0 to ${vocab - 1} (${spec.layer} is an Embedding of ${vocab} tokens); value ${i} is ${values[i]}`;
}

export class RunPanel {
  private model: LoomModel | undefined;
  private spec: InputSpec | null = null;
  private readonly shape = h('input', { type: 'text', placeholder: 'e.g. 1,16', 'data-testid': 'run-shape', 'aria-label': 'Input shape' });
  private readonly input = h('textarea', {
    rows: 3,
    placeholder: '0.1, 0.2, 0.3, …',
    'data-testid': 'run-input',
    'aria-label': 'Input values',
  });
  private readonly seed = h('input', { type: 'number', value: 1, 'aria-label': 'Seed', class: 'seed' });
  private readonly go = h('button', { type: 'button', class: 'btn primary', 'data-testid': 'run-button', disabled: true }, 'Run');
  private readonly random = h('button', { type: 'button', class: 'btn', 'data-testid': 'run-random' }, 'Random');
  private readonly unavailable = h('p', { class: 'note-warn', 'data-testid': 'run-unavailable', hidden: true });
  private readonly gpuNote = h('p', { class: 'muted', 'data-testid': 'gpu-info' }, 'Checking WebGPU…');
  private readonly specNote = h('p', { class: 'muted', 'data-testid': 'input-spec' });
  private readonly inputError = h('p', { class: 'inline-error', 'data-testid': 'input-error', hidden: true });
  private readonly results = h('div', { class: 'run-results' });
  private abort: AbortController | undefined;

  constructor(target: HTMLElement) {
    this.go.addEventListener('click', () => void this.run());
    this.random.addEventListener('click', () => this.randomize());
    fill(target,
      h('h2', null, 'Run'),
      this.gpuNote,
      this.specNote,
      this.unavailable,
      h(
        'div',
        { class: 'run-form' },
        h('label', null, 'Shape', this.shape),
        h('label', { class: 'grow' }, 'Input', this.input),
        h('div', { class: 'run-buttons' }, h('label', null, 'Seed', this.seed), this.random, this.go),
      ),
      this.inputError,
      this.results,
    );
    void gpuInfo().then(
      (g) => {
        this.gpuNote.textContent = g.available
          ? `WebGPU: ${g.adapter || 'available'}${g.shader_f16 ? ' (shader-f16)' : ''}` +
            (g.software ? ', a software adapter: the WebGPU column runs on this CPU, not on a graphics card.' : '')
          : `WebGPU unavailable: ${g.reason ?? 'no adapter'}. The GPU column will run on the CPU and say so.`;
        this.gpuNote.dataset.available = String(g.available);
        this.gpuNote.dataset.software = String(g.software === true);
      },
      (e) => (this.gpuNote.textContent = `WebGPU check failed: ${errorText(e)}`),
    );
  }

  /** A new model: its input spec fills the shape and a random input that fits; nothing of the last model stays. */
  setModel(model: LoomModel | undefined, defaults?: RunDefaults): void {
    this.abort?.abort();
    this.model = model;
    this.spec = model?.inspection.input ?? null;
    const reason = model ? noNetworkReason(model.inspection) : null;
    this.unavailable.textContent = reason ?? '';
    this.unavailable.hidden = reason === null;
    this.go.disabled = !model || reason !== null;
    this.random.disabled = reason !== null;
    fill(this.results);
    this.inputError.hidden = true;
    const spec = this.spec;
    this.specNote.textContent = !spec
      ? ''
      : spec.kind === 'token_ids'
        ? `Input: token ids, integers from 0 to ${(spec.vocab ?? 1) - 1}, shape [seq] (${spec.layer} is an Embedding).`
        : `Input: float values, shape [batch, ${spec.shape[1]}] (${spec.layer} is Dense).`;
    this.specNote.dataset.kind = spec?.kind ?? '';
    this.shape.value = defaults?.shape.join(',') ?? spec?.shape.join(',') ?? '';
    this.input.value = defaults?.input.join(', ') ?? '';
    if (!defaults && spec) this.randomize();
  }

  /** Random values (token ids for an Embedding) for the typed shape, or the model's own when none is typed. */
  private randomize(): void {
    let shape: number[];
    try {
      shape = this.shape.value.trim() ? parseShape(this.shape.value, 0) : (this.spec?.shape ?? []);
    } catch (e) {
      this.showInputError(errorText(e));
      return;
    }
    if (shape.length === 0) {
      this.showInputError('This network does not say its input shape: type one, e.g. 1,16.');
      return;
    }
    this.shape.value = shape.join(',');
    this.inputError.hidden = true;
    const rand = seeded(Number(this.seed.value) || 0);
    const n = shape.reduce((a, b) => a * b, 1);
    const vocab = this.spec?.kind === 'token_ids' ? (this.spec.vocab ?? 1) : 0;
    this.input.value = Array.from({ length: n }, () => (vocab ? Math.floor(rand() * vocab) : f32(rand() * 2 - 1))).join(', ');
  }

  private showInputError(text: string): void {
    this.inputError.textContent = text;
    this.inputError.hidden = false;
    fill(this.results);
  }

  private async run(): Promise<void> {
    const model = this.model;
    if (!model) return;
    this.abort?.abort();
    const abort = (this.abort = new AbortController());
    let values: Float32Array;
    let shape: number[];
    try {
      const numbers = parseNumbers(this.input.value);
      shape = parseShape(this.shape.value, numbers.length);
      const problem = inputProblem(this.spec, numbers, shape);
      if (problem) throw new Error(`Invalid input: ${problem}`);
      values = Float32Array.from(numbers);
    } catch (e) {
      this.showInputError(errorText(e));
      return;
    }
    this.inputError.hidden = true;
    const cpuBox = h('div', { class: 'run-col', 'data-testid': 'cpu-output' }, h('h3', null, 'CPU'), h('p', { class: 'muted' }, 'Running…'));
    const gpuBox = h('div', { class: 'run-col', 'data-testid': 'gpu-output' }, h('h3', null, 'WebGPU'), h('p', { class: 'muted' }, 'Waiting…'));
    const diffBox = h('div', { class: 'run-diff', 'data-testid': 'run-diff' });
    fill(this.results, h('div', { class: 'run-cols' }, cpuBox, gpuBox), diffBox);
    this.go.disabled = true;
    try {
      const cpu = await this.column(cpuBox, 'CPU', 'cpu', () => model.forward(values, shape, { device: 'cpu', signal: abort.signal }));
      const gpu = await this.column(gpuBox, 'WebGPU', 'gpu', () => model.forward(values, shape, { device: 'gpu', signal: abort.signal }));
      if (cpu && gpu && cpu.data.length === gpu.data.length) {
        let max = 0;
        for (let i = 0; i < cpu.data.length; i++) max = Math.max(max, Math.abs(cpu.data[i] - gpu.data[i]));
        diffBox.dataset.maxDiff = String(max);
        fill(diffBox,
          h('b', null, 'max |GPU − CPU| = '),
          h('code', null, num(max)),
          gpu.device === 'gpu' ? '' : ' (both ran on the CPU)',
        );
      }
    } finally {
      if (this.model === model) this.go.disabled = false;
    }
  }

  /** `label` names the device the column asks for (`device`); the result says where it ran only when that differs. */
  private async column(
    box: HTMLElement,
    label: string,
    device: 'cpu' | 'gpu',
    call: () => Promise<ForwardResult>,
  ): Promise<ForwardResult | undefined> {
    box.querySelector('p')!.textContent = 'Running…';
    try {
      const r = await call();
      box.dataset.f32Hex = f32Hex(r.data);
      box.dataset.device = r.device;
      const cpuLayers = Object.entries(r.cpu_layers ?? {});
      // How many layers a GPU run handed to the CPU: a check that the GPU ran them all reads it.
      box.dataset.cpuLayers = String(cpuLayers.length);
      fill(box,
        h(
          'h3',
          null,
          label,
          h('span', { class: 'muted' }, `${r.device === device ? '' : ` · ran on the ${r.device.toUpperCase()}`} · ${r.ms.toFixed(1)} ms · shape [${r.shape.join(', ')}]`),
        ),
        r.fallbackReason ? h('p', { class: 'note-warn', 'data-testid': 'fallback-reason' }, `Ran on the CPU: ${r.fallbackReason}`) : null,
        cpuLayers.length
          ? h('p', { class: 'muted' }, `On the CPU for want of a kernel: ${cpuLayers.map(([p, why]) => `${p} (${why})`).join(', ')}`)
          : null,
        h('pre', { class: 'values' }, Array.from(r.data, f32).join(', ')),
      );
      return r;
    } catch (e) {
      fill(box, h('h3', null, label), h('p', { class: 'inline-error', 'data-testid': 'run-error' }, errorText(e)));
      return undefined;
    }
  }
}
