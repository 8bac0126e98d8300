// The tensor panel: stats, a histogram, and the first values dequantized next to the raw stored codes.
import type { LoomModel } from 'loom-wasm';
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
        h(
          'dl',
          { class: 'tensor-stats', 'data-testid': 'tensor-stats', 'data-count': stats.count },
          [
            ['count', int(stats.count)],
            ['min', num(stats.min)],
            ['max', num(stats.max)],
            ['mean', num(stats.mean)],
            ['std', num(stats.std)],
            ['zeros', percent(stats.sparsity, 1)],
          ].map(([k, v]) => h('div', null, h('dt', null, k), h('dd', null, v))),
        ),
        histogram(stats.histogram, dtypeColor(preview.dtype)),
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
