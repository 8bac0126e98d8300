// The layer table (Loom networks) or tensor table (safetensors): sortable columns, a share-of-file bar per row,
// and a chart of bytes per layer above it. Rows carry data-testid="layer-row" and data-path for tests.
import type { Inspection } from 'loom-wasm';
import { barChart, dtypeColor } from './charts';
import { fill, h } from './dom';
import type { Child } from './dom';
import { bytes, int, f32, percent } from './format';

interface Column {
  title: string;
  cls?: string;
  /** Sort key; rows keep file order when no column is chosen. */
  key: (r: Row) => string | number;
  cell: (r: Row) => Child;
}

interface Row {
  path: string;
  nesting: number;
  cell: string;
  type: string;
  activation: string;
  dtype: string;
  scale: number | null;
  shape: string;
  /** One input row → the output row it gives, `3×32×32 → 16×30×30`; empty when the config does not say. */
  io: string;
  params: number;
  bytes: number;
  disabled: boolean;
  order: number;
}

// Layer types whose forward applies the layer's activation (crate/src/cpu: dense.rs, conv.rs, embedding.rs). The
// others (norms, attention, SwiGLU, recurrent, softmax, containers) store one, Linear by default, and never use it.
const ACTIVATED = new Set(['Dense', 'CNN1', 'CNN2', 'CNN3', 'ConvTransposed1D', 'ConvTransposed2D', 'ConvTransposed3D', 'Embedding', 'KMeans']);

function rowsOf(ins: Inspection): Row[] {
  if (ins.layers.length) {
    return ins.layers.map((l, i) => ({
      path: l.path,
      nesting: l.nesting,
      cell: l.nesting === 0 ? `${l.z},${l.y},${l.x},${l.l}` : '',
      type: l.type,
      activation: ACTIVATED.has(l.type) ? l.activation : '',
      dtype: l.dtype,
      scale: l.scale,
      shape: l.parts.length ? `${l.parts.length} parts` : l.shape.join(' × '),
      io: l.input && l.output ? `${l.input.join('×')} → ${l.output.join('×')}` : '',
      params: l.params,
      bytes: l.bytes,
      disabled: l.disabled,
      order: i,
    }));
  }
  return ins.tensors.map((t, i) => ({
    path: t.name,
    nesting: 0,
    cell: '',
    type: 'tensor',
    activation: '',
    dtype: t.dtype,
    scale: null,
    shape: t.shape.join(' × '),
    io: '',
    params: t.shape.reduce((a, b) => a * b, 1),
    bytes: t.bytes,
    disabled: false,
    order: i,
  }));
}

export class LayerTable {
  private rows: Row[] = [];
  private sortBy = -1;
  private desc = false;
  private selected = '';
  private columns: Column[] = [];
  private fileBytes = 0;
  /** Rows with nested rows (Parallel, Sequential, ...), and those of them folded shut (file order only). */
  private parents = new Set<string>();
  private collapsed = new Set<string>();

  constructor(
    private readonly table: HTMLTableElement,
    private readonly chart: HTMLElement,
    private readonly title: HTMLElement,
    private readonly onPick: (path: string) => void,
  ) {}

  show(ins: Inspection): void {
    this.rows = rowsOf(ins);
    this.fileBytes = ins.file_bytes;
    this.sortBy = -1;
    this.desc = false;
    this.collapsed.clear();
    const paths = new Set(this.rows.map((r) => r.path));
    this.parents = new Set(this.rows.filter((r) => r.nesting > 0).map((r) => r.path.replace(/\.(parallel_branches|sequential_layers)\.\d+$|\.meta_observed_layer$/, '')).filter((p) => paths.has(p)));
    const loom = ins.layers.length > 0;
    this.title.textContent = loom ? `Layers (${this.rows.length})` : `Tensors (${this.rows.length})`;
    const dtypeCell = (r: Row) => h('span', { class: 'dtype', style: `--c:${dtypeColor(r.dtype)}` }, r.dtype);
    const share = (r: Row) =>
      h(
        'div',
        { class: 'share' },
        h('i', { style: `width:${this.fileBytes ? (100 * r.bytes) / this.fileBytes : 0}%` }),
        h('span', null, r.bytes ? percent(r.bytes, this.fileBytes) : '—'),
      );
    const name: Column = {
      title: loom ? 'Path' : 'Name',
      cls: 'path',
      key: (r) => r.path,
      // In file order nested rows show only their own step (the tree gives the rest); sorted, the full path.
      cell: (r) => [
        this.sortBy < 0 && this.parents.has(r.path) ? this.foldButton(r.path) : null,
        this.sortBy < 0 && r.nesting > 0
          ? h('span', { class: 'branch', style: `padding-left:${r.nesting * 14}px`, title: r.path }, '↳ ', r.path.endsWith('.meta_observed_layer') ? 'meta_observed_layer' : r.path.split('.').slice(-2).join('.'))
          : h('span', { title: r.path }, r.path),
      ],
    };
    this.columns = loom
      ? [
          name,
          { title: '(z,y,x,l)', key: (r) => r.cell, cell: (r) => r.cell },
          { title: 'Type', key: (r) => r.type, cell: (r) => (r.disabled ? `${r.type} (off)` : r.type) },
          { title: 'Activation', key: (r) => r.activation, cell: (r) => r.activation || '—' },
          { title: 'Dtype', key: (r) => r.dtype, cell: dtypeCell },
          { title: 'Shape', key: (r) => r.shape, cell: (r) => r.shape || '—' },
          { title: 'In → out', key: (r) => r.io, cell: (r) => r.io || '—' },
          { title: 'Scale', cls: 'num', key: (r) => r.scale ?? -Infinity, cell: (r) => (r.scale === null ? '' : f32(r.scale)) },
          { title: 'Params', cls: 'num', key: (r) => r.params, cell: (r) => (r.params ? int(r.params) : '—') },
          { title: 'Bytes', cls: 'num', key: (r) => r.bytes, cell: (r) => (r.bytes ? bytes(r.bytes) : '—') },
          { title: 'Share', key: (r) => r.bytes, cell: share },
        ]
      : [
          name,
          { title: ins.format === 'gguf' ? 'Block type' : 'Dtype', key: (r) => r.dtype, cell: dtypeCell },
          { title: 'Shape', key: (r) => r.shape, cell: (r) => r.shape || 'scalar' },
          { title: 'Params', cls: 'num', key: (r) => r.params, cell: (r) => int(r.params) },
          { title: 'Bytes', cls: 'num', key: (r) => r.bytes, cell: (r) => bytes(r.bytes) },
          { title: 'Share', key: (r) => r.bytes, cell: share },
        ];
    const bars = this.rows
      .filter((r) => r.bytes > 0)
      .map((r) => ({ label: `${r.path} (${r.dtype})`, value: r.bytes, color: dtypeColor(r.dtype), key: r.path }));
    const tallest = bars.reduce<(typeof bars)[number] | undefined>((a, b) => (a && a.value >= b.value ? a : b), undefined);
    fill(this.chart,
      tallest
        ? [
            h(
              'p',
              { class: 'muted chart-note', 'data-testid': 'bytes-chart-label', 'data-tallest': tallest.key },
              `Bytes on disk per ${loom ? 'layer' : 'tensor'}, in file order; the tallest bar is `,
              h('code', null, tallest.key),
              `, ${bytes(tallest.value)}. Click a bar to open it.`,
            ),
            barChart(bars, this.fileBytes, this.onPick),
          ]
        : h('p', { class: 'muted' }, 'No weights stored.'),
    );
    this.render();
  }

  select(path: string): void {
    this.selected = path;
    for (const tr of this.table.querySelectorAll<HTMLTableRowElement>('tbody tr')) {
      tr.classList.toggle('selected', tr.dataset.path === path);
    }
    this.table.querySelector(`tr[data-path="${CSS.escape(path)}"]`)?.scrollIntoView({ block: 'nearest' });
  }

  /** Folds or unfolds the rows nested in `path`; keeps the keyboard focus on the button. */
  private foldButton(path: string): HTMLButtonElement {
    const shut = this.collapsed.has(path);
    return h(
      'button',
      {
        type: 'button',
        class: 'fold',
        'data-testid': 'fold',
        'aria-expanded': String(!shut),
        'aria-label': `${shut ? 'Unfold' : 'Fold'} the layers in ${path}`,
        onclick: (e: Event) => {
          e.stopPropagation(); // folding is not opening the row
          if (shut) this.collapsed.delete(path);
          else this.collapsed.add(path);
          this.render();
          this.table.querySelector<HTMLElement>(`tr[data-path="${CSS.escape(path)}"] button.fold`)?.focus();
        },
        onkeydown: (e: Event) => e.stopPropagation(), // Enter/Space click the button, not the row
      },
      shut ? '▸' : '▾',
    );
  }

  private onRowKey(e: KeyboardEvent, path: string): void {
    const tr = e.currentTarget as HTMLTableRowElement;
    if (e.key === 'Enter' || e.key === ' ') this.onPick(path);
    else if (e.key === 'ArrowDown') (tr.nextElementSibling as HTMLElement | null)?.focus();
    else if (e.key === 'ArrowUp') (tr.previousElementSibling as HTMLElement | null)?.focus();
    else return;
    e.preventDefault();
  }

  private render(): void {
    const folded = [...this.collapsed].map((p) => `${p}.`);
    const sorted = this.sortBy < 0 ? this.rows.filter((r) => !folded.some((p) => r.path.startsWith(p))) : [...this.rows];
    if (this.sortBy >= 0) {
      const key = this.columns[this.sortBy].key;
      sorted.sort((a, b) => {
        const ka = key(a);
        const kb = key(b);
        const c = typeof ka === 'number' && typeof kb === 'number' ? ka - kb : String(ka).localeCompare(String(kb), 'en', { numeric: true });
        return (this.desc ? -c : c) || a.order - b.order;
      });
    }
    const head = h(
      'tr',
      null,
      this.columns.map((c, i) =>
        h(
          'th',
          {
            class: c.cls,
            'aria-sort': this.sortBy === i ? (this.desc ? 'descending' : 'ascending') : 'none',
          },
          h(
            'button',
            {
              type: 'button',
              onclick: () => {
                // First click sorts numbers biggest first, text A→Z; the next click reverses; a third restores file order.
                if (this.sortBy !== i) {
                  this.sortBy = i;
                  this.desc = c.cls === 'num' || c.title === 'Share';
                } else if (this.desc === (c.cls === 'num' || c.title === 'Share')) {
                  this.desc = !this.desc;
                } else {
                  this.sortBy = -1;
                }
                this.render();
              },
            },
            c.title,
            h('span', { class: 'sort' }, this.sortBy === i ? (this.desc ? '▼' : '▲') : ''),
          ),
        ),
      ),
    );
    const body = sorted.map((r) =>
      h(
        'tr',
        {
          'data-testid': 'layer-row',
          'data-path': r.path,
          'data-params': r.params,
          'data-shape': r.shape,
          'data-io': r.io,
          'data-dtype': r.dtype,
          class: `${r.path === this.selected ? 'selected' : ''}${r.disabled ? ' disabled' : ''}`,
          // Rows are reachable with Tab and the arrow keys, and open with Enter or Space, as they do on click.
          tabindex: 0,
          onclick: () => this.onPick(r.path),
          onkeydown: (e: Event) => this.onRowKey(e as KeyboardEvent, r.path),
        },
        this.columns.map((c) => h('td', { class: c.cls }, c.cell(r))),
      ),
    );
    fill(this.table, h('thead', null, head), h('tbody', null, body));
  }
}
