// The tensor panel: stats, a histogram, and the first values dequantized next to the raw stored codes.
import type { LoomModel, TensorStats } from 'loom-wasm';
import { dtypeColor, histogram } from './charts';
import { fill, h } from './dom';
import { f32, int, num, percent } from './format';
import { errorText } from './errors';

const PREVIEW = 48;
const BINS = 48;

export class TensorPanel {
  private ticket = 0;

  constructor(private readonly target: HTMLElement) {}

  clear(): void {
    this.ticket++;
    fill(this.target, h('h2', null, 'Tensor'), h('p', { class: 'muted' }, 'Select a layer to see its weights.'));
  }

  async show(model: LoomModel | undefined, path: string, params: number): Promise<void> {
    const ticket = ++this.ticket;
    this.target.dataset.path = path;
    const title = h('h2', null, 'Tensor ', h('code', null, path));
    if (!model) {
      fill(this.target, title, h('p', { class: 'muted' }, 'Weights are still loading…'));
      return;
    }
    if (params === 0) {
      fill(this.target, title, h('p', { class: 'muted' }, 'This layer stores no weights (its children may).'));
      return;
    }
    fill(this.target, title, h('p', { class: 'muted' }, 'Reading…'));
    try {
      const [stats, preview] = await Promise.all([model.tensorStats(path, { bins: BINS }), model.tensorPreview(path, PREVIEW)]);
      if (ticket !== this.ticket) return;
      const codes = preview.codes;
      fill(this.target,
        title,
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
        h(
          'div',
          { class: 'table-wrap preview-wrap' },
          h(
            'table',
            { class: 'preview', 'data-testid': 'tensor-preview' },
            h('thead', null, h('tr', null, h('th', null, '#'), codes ? h('th', null, 'code') : null, h('th', null, 'value'))),
            h(
              'tbody',
              null,
              Array.from(preview.values, (v, i) =>
                h('tr', null, h('td', null, i), codes ? h('td', { class: 'code' }, codes[i]) : null, h('td', null, f32(v))),
              ),
            ),
          ),
        ),
      );
    } catch (e) {
      if (ticket !== this.ticket) return;
      fill(this.target, title, h('p', { class: 'inline-error' }, errorText(e)));
    }
  }
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
