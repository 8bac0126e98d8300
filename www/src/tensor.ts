// The tensor panel: stats, a histogram, and the first values dequantized next to the raw stored codes.
import type { LoomModel, TensorPreview, TensorStats } from 'loom-wasm';
import { dtypeColor, histogram } from './charts';
import { fill, h } from './dom';
import { f32, f32Hex, int, num, percent } from './format';
import { errorText } from './errors';

const PREVIEW = 48;

/** One part of a combined weight store, as the inspection lists it. */
type Part = { name: string; shape: number[] };
const BINS = 48;

export class TensorPanel {
  private ticket = 0;

  constructor(private readonly target: HTMLElement) {}

  clear(): void {
    this.ticket++;
    fill(this.target, h('h2', null, 'Tensor'), h('p', { class: 'muted' }, 'Select a layer to see its weights.'));
  }

  /**
   * Shows the weights of `path`; for a combined store (`parts`: MHA's q/k/v/o, SwiGLU's gate/up/down, …) a bar
   * picks the whole store or one part, read as `path#part`.
   */
  async show(model: LoomModel | undefined, path: string, params: number, parts: Part[] = [], part = ''): Promise<void> {
    const ticket = ++this.ticket;
    this.target.dataset.path = path;
    this.target.dataset.part = part;
    const name = part ? `${path}#${part}` : path;
    const title = h('h2', null, 'Tensor ', h('code', null, path), part ? [' · ', h('code', null, part)] : null);
    const bar = parts.length
      ? h(
          'div',
          { class: 'part-bar', role: 'group', 'aria-label': 'Part of the layer’s weights' },
          [{ name: '', shape: [params] }, ...parts].map((p) =>
            h(
              'button',
              {
                type: 'button',
                class: `btn small${p.name === part ? ' selected' : ''}`,
                'data-testid': 'tensor-part',
                'data-part': p.name,
                'aria-pressed': String(p.name === part),
                onclick: () => void this.show(model, path, params, parts, p.name),
              },
              p.name || 'whole store',
              h('span', { class: 'muted' }, ` ${p.shape.join('×')}`),
            ),
          ),
        )
      : null;
    if (!model) {
      fill(this.target, title, bar, h('p', { class: 'muted' }, 'Weights are still loading…'));
      return;
    }
    if (params === 0) {
      fill(this.target, title, h('p', { class: 'muted' }, 'This layer stores no weights (its children may).'));
      return;
    }
    fill(this.target, title, bar, h('p', { class: 'muted' }, 'Reading…'));
    try {
      const [stats, preview] = await Promise.all([model.tensorStats(name, { bins: BINS }), model.tensorPreview(name, PREVIEW)]);
      if (ticket !== this.ticket) return;
      const codes = preview.codes;
      fill(this.target,
        title,
        bar,
        h(
          'p',
          { class: 'muted' },
          h('span', { class: 'dtype', style: `--c:${dtypeColor(preview.dtype)}` }, preview.dtype),
          ` shape [${preview.shape.join(' × ')}]`,
          preview.scale !== null && preview.scale !== undefined ? ` · scale ${f32(preview.scale)}` : '',
        ),
        nonFinite(stats),
        h(
          'dl',
          {
            class: 'tensor-stats',
            'data-testid': 'tensor-stats',
            // Exact numbers for tests; the text shows them rounded.
            'data-count': stats.count,
            'data-min': stats.min,
            'data-max': stats.max,
            'data-mean': stats.mean,
            'data-std': stats.std,
          },
          [
            ['count', int(stats.count)],
            ['min', num(stats.min)],
            ['max', num(stats.max)],
            ['mean', num(stats.mean)],
            ['std', num(stats.std)],
            ['zeros', percent(stats.sparsity, 1)],
          ].map(([k, v]) => h('div', null, h('dt', null, k), h('dd', null, v))),
        ),
        histogram(stats.clipped?.histogram ?? stats.histogram, dtypeColor(preview.dtype)),
        histogramNote(stats),
        h(
          'h3',
          null,
          codes ? 'Stored codes → dequantized values' : 'Values',
          h('span', { class: 'muted' }, ` (first ${preview.values.length} of ${int(stats.count)})`),
        ),
        preview.groups ? h('p', { class: 'muted', 'data-testid': 'code-formula' }, FORMULAS[preview.dtype] ?? FORMULAS.other) : null,
        h(
          'div',
          { class: 'table-wrap preview-wrap' },
          h(
            'table',
            { class: 'preview', 'data-testid': 'tensor-preview', 'data-f32-hex': f32Hex(preview.values) },
            h(
              'thead',
              null,
              h(
                'tr',
                null,
                h('th', null, '#'),
                codes ? h('th', null, 'code') : null,
                h('th', null, 'value'),
                preview.groups ? [h('th', null, 'scale'), h('th', null, 'min')] : null,
              ),
            ),
            h('tbody', null, previewRows(preview)),
          ),
        ),
      );
    } catch (e) {
      if (ticket !== this.ticket) return;
      fill(this.target, title, bar, h('p', { class: 'inline-error' }, errorText(e)));
    }
  }
}

/** How each GGUF block type turns its stored codes into values (gguf-py's dequantization, in float32). */
const FORMULAS: Record<string, string> = {
  Q4_0: 'Q4_0: value = d · (code − 8); 4-bit codes, one scale d per block of 32.',
  Q4_1: 'Q4_1: value = d · code + m; 4-bit codes, a scale d and a min m per block of 32.',
  Q5_0: 'Q5_0: value = d · (code − 16); 5-bit codes, one scale d per block of 32.',
  Q5_1: 'Q5_1: value = d · code + m; 5-bit codes, a scale d and a min m per block of 32.',
  Q8_0: 'Q8_0: value = d · code; signed 8-bit codes, one scale d per block of 32.',
  Q4_K: 'Q4_K: value = (d·sc) · code − dmin·m; 4-bit codes; per sub-block of 32 a 6-bit scale sc and min m, per super-block of 256 d and dmin. The scale column is d·sc, the min −dmin·m.',
  Q5_K: 'Q5_K: value = (d·sc) · code − dmin·m; 5-bit codes; per sub-block of 32 a 6-bit scale sc and min m, per super-block of 256 d and dmin. The scale column is d·sc, the min −dmin·m.',
  Q6_K: 'Q6_K: value = (d·sc) · (code − 32); 6-bit codes; per sub-block of 16 a signed 8-bit scale sc, per super-block of 256 d. The scale column is d·sc.',
  other: 'value = scale · (code − zero) + min, per block.',
};

/** One row per previewed value, its code first; for block types the scale and min of each block (or sub-block)
 * span its rows, after the values. */
function previewRows(preview: TensorPreview): HTMLElement[] {
  const { codes, groups, values } = preview;
  const spans = new Map<number, { len: number; scale: number; min: number }>();
  let at = 0;
  for (const g of groups ?? []) {
    if (at < values.length) spans.set(at, { len: Math.min(g.len, values.length - at), scale: g.scale, min: g.min });
    at += g.len;
  }
  return Array.from(values, (v, i) => {
    const g = spans.get(i);
    return h(
      'tr',
      codes ? { 'data-code': codes[i] } : null,
      h('td', null, i),
      codes ? h('td', { class: 'code' }, codes[i]) : null,
      h('td', null, f32(v)),
      g
        ? [
            h('td', { class: 'group', rowspan: g.len, 'data-scale': g.scale }, f32(g.scale)),
            h('td', { class: 'group', rowspan: g.len, 'data-min': g.min }, f32(g.min)),
          ]
        : null,
    );
  });
}

/** NaN and ±Inf counts, in a warning above the stats they are left out of; nothing when every value is finite. */
function nonFinite(stats: TensorStats): HTMLElement | null {
  if (stats.non_finite === 0) return null;
  const parts = [`${int(stats.nan)} NaN`, `${int(stats.pos_inf)} +Inf`, `${int(stats.neg_inf)} −Inf`];
  return h(
    'p',
    { class: 'note-warn non-finite', 'data-testid': 'non-finite', 'data-nan': stats.nan, 'data-pos-inf': stats.pos_inf, 'data-neg-inf': stats.neg_inf },
    `⚠ ${parts.join(' · ')}: left out of min, max, mean, std and the histogram.`,
  );
}

/** Says what the histogram shows: every finite value, or the range between two percentiles and what lies outside. */
function histogramNote(stats: TensorStats): HTMLElement {
  const c = stats.clipped;
  if (!c) return h('p', { class: 'muted chart-note', 'data-testid': 'histogram-note' }, 'Histogram of every finite value, linear axes.');
  const [lo, hi] = c.percentiles;
  return h(
    'p',
    { class: 'muted chart-note', 'data-testid': 'histogram-note', 'data-clipped': 'true', 'data-below': c.below, 'data-above': c.above },
    `Clipped to the ${lo}th–${hi}th percentiles [${num(c.histogram.min)}, ${num(c.histogram.max)}] so outliers do not squeeze ` +
      `the rest into one bar: ${int(c.below)} value(s) below, ${int(c.above)} above (full range ${num(stats.min)} to ${num(stats.max)}).`,
  );
}
