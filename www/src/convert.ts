// The convert panel: output format, a global dtype and per-layer dtypes; the loss report is shown before the
// download, and a lossy conversion needs an explicit tick. The bytes come from the package's convert(), the same
// code as `loom convert`.
import type { ConvertOptions, Inspection, LossReport, LoomModel } from 'loom-wasm';
import { fill, h } from './dom';
import { int, num } from './format';
import { errorText } from './errors';
import { noConvertReason, tensorsOnly } from './capability';

const DTYPES = [
  'float64', 'float32', 'float16', 'bfloat16', 'fp8e4m3', 'fp8e5m2', 'int64', 'int32', 'int16', 'int8',
  'uint64', 'uint32', 'uint16', 'uint8', 'int4', 'uint4', 'fp4', 'int2', 'uint2', 'ternary', 'binary',
];

const FORMATS: { value: ConvertOptions['format']; label: string; ext: string; tag?: string }[] = [
  { value: 'entity', label: 'Loom .entity', ext: '.entity' },
  { value: 'json', label: 'Loom JSON', ext: '.json' },
  { value: 'safetensors', label: 'safetensors (F32)', ext: '.safetensors', tag: 'f32' },
  { value: 'safetensors-f16', label: 'safetensors (F16)', ext: '.safetensors', tag: 'f16' },
  { value: 'safetensors-bf16', label: 'safetensors (BF16)', ext: '.safetensors', tag: 'bf16' },
];

// Name parts that say what a file holds; a conversion to another dtype replaces them.
const TYPE_TAGS = new Set([...DTYPES, 'f32', 'f16', 'bf16', 'q4_0', 'q4_1', 'q5_0', 'q5_1', 'q8_0', 'q4_k', 'q5_k', 'q6_k', 'mixed']);

/**
 * The download's name says what the conversion made: `sample.entity` to int4 is `sample.int4.entity`, a per-layer
 * mix `sample.mixed.entity`; the input's extension (also `.gguf`) goes, and so does its old dtype tag when the
 * conversion sets a new one.
 */
export function convertedName(input: string, format: ConvertOptions['format'], dtype: string | undefined, perLayer: boolean): string {
  const f = FORMATS.find((x) => x.value === format)!;
  const tag = perLayer ? 'mixed' : dtype ?? f.tag;
  const parts = input.replace(/\.(entity|json|safetensors|gguf)$/i, '').split('.');
  if (tag && parts.length > 1 && TYPE_TAGS.has(parts[parts.length - 1].toLowerCase())) parts.pop();
  const stem = parts.filter((p) => p !== '');
  return [...(stem.length ? stem : ['model']), ...(tag ? [tag] : [])].join('.') + f.ext;
}

function select(options: [string, string][], attrs: Record<string, string>): HTMLSelectElement {
  return h('select', attrs, options.map(([v, label]) => h('option', { value: v }, label)));
}

export class ConvertPanel {
  private model: LoomModel | undefined;
  private name = 'model';
  private readonly format = select(FORMATS.map((f) => [f.value, f.label]), { 'data-testid': 'convert-format', 'aria-label': 'Output format' });
  private readonly dtype = select([['', 'keep each layer’s dtype'], ...DTYPES.map((d): [string, string] => [d, d])], {
    'data-testid': 'convert-dtype',
    'aria-label': 'Dtype for every layer',
  });
  private readonly perLayer = h('div', { class: 'per-layer' });
  private readonly report = h('div', { class: 'loss-report', 'data-testid': 'loss-report' });
  private readonly accept = h('input', { type: 'checkbox', 'data-testid': 'convert-accept-loss' });
  private readonly acceptLabel = h('label', { class: 'accept', hidden: true }, this.accept, ' I accept the loss shown above');
  private readonly download = h('button', { type: 'button', class: 'btn primary', 'data-testid': 'convert-download', disabled: true }, 'Download');
  private layerSelects = new Map<string, HTMLSelectElement>();
  private lossy = false;
  /** The file holds bare tensors: the report lists tensors, not layers. */
  private reexport = false;
  /** Why this file cannot be converted; null when it can. */
  private unavailable: string | null = null;
  private ticket = 0;

  constructor(target: HTMLElement) {
    for (const el of [this.format, this.dtype]) el.addEventListener('change', () => void this.refresh());
    this.accept.addEventListener('change', () => this.updateButton());
    this.download.addEventListener('click', () => void this.save());
    fill(target,
      h('h2', null, 'Convert'),
      h(
        'div',
        { class: 'convert-form' },
        h('label', null, 'Format', this.format),
        h('label', null, 'Dtype', this.dtype),
      ),
      this.perLayer,
      this.report,
      h('div', { class: 'convert-actions' }, this.acceptLabel, this.download),
    );
  }

  setModel(model: LoomModel | undefined, ins: Inspection | undefined, name: string): void {
    this.model = model;
    this.name = name || 'model';
    this.unavailable = ins ? noConvertReason(ins) : null;
    this.format.disabled = this.dtype.disabled = this.unavailable !== null;
    // Bare tensors re-export as safetensors only, and have no Loom dtypes to choose.
    const reexport = ins !== undefined && tensorsOnly(ins);
    this.reexport = reexport;
    for (const o of this.format.options) o.hidden = o.disabled = reexport && !o.value.startsWith('safetensors');
    if (reexport && !this.format.value.startsWith('safetensors')) this.format.value = 'safetensors';
    this.dtype.disabled ||= reexport;
    if (reexport) this.dtype.value = '';
    (this.dtype.parentElement as HTMLElement).hidden = reexport;
    this.layerSelects.clear();
    const weighted = ins?.layers.filter((l) => l.params > 0) ?? [];
    fill(this.perLayer,
      weighted.length
        ? h(
            'details',
            null,
            h('summary', null, `Per-layer dtypes (${weighted.length} layers with weights)`),
            h(
              'div',
              { class: 'per-layer-grid' },
              weighted.map((l) => {
                const sel = select([['', `keep (${l.dtype})`], ...DTYPES.map((d): [string, string] => [d, d])], {
                  'data-path': l.path,
                  'aria-label': `Dtype for ${l.path}`,
                });
                sel.addEventListener('change', () => void this.refresh());
                this.layerSelects.set(l.path, sel);
                return h('label', null, h('code', null, l.path), h('span', { class: 'muted' }, ` ${l.type}`), sel);
              }),
            ),
          )
        : null,
    );
    void this.refresh();
  }

  private options(): ConvertOptions {
    const layerDtypes: Record<string, string> = {};
    this.layerSelects.forEach((sel, path) => {
      if (sel.value) layerDtypes[path] = sel.value;
    });
    return {
      format: this.format.value as ConvertOptions['format'],
      dtype: this.dtype.value || undefined,
      layerDtypes: Object.keys(layerDtypes).length ? layerDtypes : undefined,
    };
  }

  private fileName(): string {
    const o = this.options();
    return convertedName(this.name, o.format, o.dtype, o.layerDtypes !== undefined);
  }

  private async refresh(): Promise<void> {
    const ticket = ++this.ticket;
    this.lossy = false;
    this.accept.checked = false;
    this.download.textContent = `Download ${this.fileName()}`;
    if (!this.model) {
      fill(this.report, h('p', { class: 'muted' }, 'Weights are still loading…'));
      this.updateButton();
      return;
    }
    if (this.unavailable !== null) {
      fill(this.report, h('p', { class: 'note-warn', 'data-testid': 'convert-unavailable' }, this.unavailable));
      this.report.dataset.state = 'unavailable';
      this.updateButton();
      return;
    }
    fill(this.report, h('p', { class: 'muted' }, 'Checking what this conversion changes…'));
    this.download.disabled = true;
    try {
      const loss = await this.model.lossReport(this.options());
      if (ticket !== this.ticket) return;
      this.showLoss(loss);
    } catch (e) {
      if (ticket !== this.ticket) return;
      fill(this.report, h('p', { class: 'inline-error' }, errorText(e)));
      this.report.dataset.state = 'error';
    }
    this.updateButton();
  }

  private showLoss(loss: LossReport): void {
    this.lossy = loss.layers.length > 0;
    this.report.dataset.state = this.lossy ? 'lossy' : 'lossless';
    if (!this.lossy) {
      fill(this.report, h('p', { class: 'note-ok' }, '✓ Lossless: every weight keeps its exact value.'));
      return;
    }
    const rows = [...loss.layers].sort((a, b) => a.path.localeCompare(b.path, 'en', { numeric: true }));
    const table = h(
      'table',
      { class: 'loss-table' },
      h('thead', null, h('tr', null, [this.reexport ? 'Tensor' : 'Layer', 'From', 'To', 'Changed weights', 'Max abs error'].map((t) => h('th', null, t)))),
      h(
        'tbody',
        null,
        rows.map((l) =>
          h(
            'tr',
            { 'data-testid': 'loss-row' },
            h('td', null, h('code', null, l.path)),
            h('td', null, l.from),
            h('td', null, l.to),
            h('td', { class: 'num' }, `${int(l.changed)} / ${int(l.total)}`),
            h('td', { class: 'num' }, num(l.max_abs_error)),
          ),
        ),
      ),
    );
    fill(
      this.report,
      h('p', { class: 'note-warn' }, `⚠ Lossy: ${loss.layers.length} ${this.reexport ? 'tensor' : 'layer'}(s) change. Review before you download.`),
      h('div', { class: 'table-wrap loss-wrap' }, table),
    );
  }

  private updateButton(): void {
    this.acceptLabel.hidden = !this.lossy;
    this.download.disabled =
      !this.model || (this.lossy && !this.accept.checked) || this.report.dataset.state === 'error' || this.unavailable !== null;
  }

  private async save(): Promise<void> {
    if (!this.model) return;
    this.download.disabled = true;
    const label = this.download.textContent;
    this.download.textContent = 'Converting…';
    try {
      const { blob } = await this.model.convert({ ...this.options(), allowLossy: this.lossy && this.accept.checked });
      const url = URL.createObjectURL(blob);
      const a = h('a', { href: url, download: this.fileName(), hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (e) {
      this.report.append(h('p', { class: 'inline-error' }, errorText(e)));
    } finally {
      this.download.textContent = label;
      this.updateButton();
    }
  }
}
