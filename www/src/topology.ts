// The network's shape: the Loom grid as cells (z,y,x) holding their layer stacks, nested parallel / sequential /
// meta branches as a tree, and runs of identical blocks collapsed into one row with a count. Files without a Loom
// topology (safetensors, GGUF) get their tensor names as a tree, with numbered siblings of identical shape collapsed
// (a GGUF's blk.N decoder blocks fold as one ×N even where their block types differ, as in Q4_K_M; the fold says
// which types it holds).
import type { Inspection, LayerRow, TensorRow } from 'loom-wasm';
import { dtypeColor } from './charts';
import { fill, h } from './dom';
import { bytes, compact } from './format';

interface LayerNode {
  row: LayerRow;
  /** How the parent holds this node: a parallel branch, a step of a sequence, the observed layer of a meta layer. */
  role: 'top' | 'parallel' | 'sequential' | 'meta';
  children: LayerNode[];
  /** Everything that makes two blocks "the same" for collapsing: types, activations, dtypes, sizes. */
  signature: string;
  totalParams: number;
  totalBytes: number;
}

function roleOf(path: string): LayerNode['role'] {
  if (/\.parallel_branches\.\d+$/.test(path)) return 'parallel';
  if (/\.sequential_layers\.\d+$/.test(path)) return 'sequential';
  if (/\.meta_observed_layer$/.test(path)) return 'meta';
  return 'top';
}

/** Rebuilds the layer tree from the inspection's pre-order rows (`nesting` is the depth). */
function layerTree(rows: LayerRow[]): LayerNode[] {
  const roots: LayerNode[] = [];
  const stack: LayerNode[] = [];
  for (const row of rows) {
    const node: LayerNode = { row, role: roleOf(row.path), children: [], signature: '', totalParams: 0, totalBytes: 0 };
    while (stack.length > row.nesting) stack.pop();
    (stack.length ? stack[stack.length - 1].children : roots).push(node);
    stack.push(node);
  }
  const finish = (n: LayerNode): void => {
    n.children.forEach(finish);
    const r = n.row;
    n.signature = `${r.type}/${r.activation}/${r.dtype}/${r.params}/${r.disabled ? 'off' : 'on'}` +
      (n.children.length ? `(${n.children.map((c) => `${c.role}:${c.signature}`).join(',')})` : '');
    n.totalParams = r.params + n.children.reduce((a, c) => a + c.totalParams, 0);
    n.totalBytes = r.bytes + n.children.reduce((a, c) => a + c.totalBytes, 0);
  };
  roots.forEach(finish);
  return roots;
}

interface Run {
  start: number;
  /** Items per block: 1 for a run of equal items, 2 for alternating pairs (attention, MLP), … */
  period: number;
  /** How many times the block repeats back to back. */
  count: number;
}

const MAX_PERIOD = 4;

/** Splits items into repeated blocks: at each position the period whose back-to-back repeats cover the most items
 * wins (a decoder's alternating attention and MLP layers fold as one block of two). Unrepeated items are runs of 1. */
function repeats<T>(items: T[], key: (t: T) => string): Run[] {
  const keys = items.map(key);
  const out: Run[] = [];
  let i = 0;
  while (i < keys.length) {
    let best: Run = { start: i, period: 1, count: 1 };
    for (let p = 1; p <= MAX_PERIOD && i + 2 * p <= keys.length; p++) {
      let count = 1;
      while (i + (count + 1) * p <= keys.length && keys.slice(i, i + p).every((k, j) => k === keys[i + count * p + j])) count++;
      if (count > 1 && count * p > best.count * best.period) best = { start: i, period: p, count };
    }
    out.push(best);
    i += best.period * best.count;
  }
  return out;
}

type Pick = (key: string) => void;

function nodeView(n: LayerNode, onPick: Pick): HTMLElement {
  const r = n.row;
  const head = h(
    'button',
    {
      type: 'button',
      class: 'node-head',
      'data-path': r.path,
      title: `${r.path}: ${r.type}, ${r.activation}, ${r.dtype}`,
      onclick: (e: Event) => {
        e.stopPropagation();
        onPick(r.path);
      },
    },
    h('span', { class: 'type' }, r.type),
    r.activation !== 'Linear' ? h('span', { class: 'act' }, r.activation) : null,
    r.params > 0 || n.children.length === 0
      ? h('span', { class: 'dtype', style: `--c:${dtypeColor(r.dtype)}` }, r.dtype)
      : null,
    n.totalParams > 0 ? h('span', { class: 'params' }, compact(n.totalParams)) : null,
    r.disabled ? h('span', { class: 'off' }, 'disabled') : null,
  );
  const kids = n.children.length
    ? h(
        'div',
        { class: `children ${n.children[0].role}` },
        n.children[0].role === 'sequential' ? stackView(n.children, onPick) : n.children.map((c) => nodeView(c, onPick)),
      )
    : null;
  return h('div', { class: `node role-${n.role}${r.disabled ? ' disabled' : ''}`, 'data-type': r.type }, head, kids);
}

/** Items with blocks repeated back to back folded into one `×N` entry that expands to show them all. */
function folded<T>(
  items: T[],
  key: (t: T) => string,
  view: (t: T) => HTMLElement,
  describe: (first: T, last: T, count: number, block: T[], all: T[]) => string,
  /** False when the folded blocks match by shape only (their dtypes differ). */
  identical: (all: T[]) => boolean = () => true,
): HTMLElement[] {
  return repeats(items, key).flatMap(({ start, period, count }) => {
    const block = (k: number) => items.slice(start + k * period, start + (k + 1) * period);
    const all = items.slice(start, start + period * count);
    if (count === 1) return block(0).map(view);
    const rest = h(
      'div',
      { class: 'repeat-all', hidden: true },
      Array.from({ length: count - 1 }, (_, k) => h('div', { class: 'repeat-block' }, block(k + 1).map(view))),
    );
    const toggle = h('button', { type: 'button', class: 'link', 'aria-expanded': 'false' }, `show all ${count}`);
    toggle.addEventListener('click', () => {
      rest.hidden = !rest.hidden;
      toggle.textContent = rest.hidden ? `show all ${count}` : 'fold';
      toggle.setAttribute('aria-expanded', String(!rest.hidden));
    });
    return [
      h(
        'div',
        { class: 'repeat', 'data-testid': 'repeat-group', 'data-count': count, 'data-period': period },
        h(
          'div',
          { class: 'repeat-head' },
          h('span', { class: 'count' }, `×${count}`),
          h(
            'span',
            { class: 'muted' },
            ` ${identical(all) ? 'identical' : 'same-shape'} ${period > 1 ? `${period}-layer ` : ''}blocks ` +
              describe(items[start], items[start + period * count - 1], count, block(0), all),
          ),
          toggle,
        ),
        h('div', { class: 'repeat-sample' }, block(0).map(view)),
        rest,
      ),
    ];
  });
}

/** A vertical stack of layers, repeated blocks folded. */
function stackView(nodes: LayerNode[], onPick: Pick): HTMLElement[] {
  return folded(nodes, (n) => n.signature, (n) => nodeView(n, onPick), (first, last, count, block) =>
    `${first.row.path} … ${last.row.path} · ${compact(block.reduce((a, n) => a + n.totalParams, 0) * count)} params`);
}

function gridView(ins: Inspection, onPick: Pick): HTMLElement {
  const g = ins.grid!;
  const cells = new Map<string, LayerNode[]>();
  for (const n of layerTree(ins.layers)) {
    const k = `${n.row.z},${n.row.y},${n.row.x}`;
    if (!cells.has(k)) cells.set(k, []);
    cells.get(k)!.push(n);
  }
  cells.forEach((stack) => stack.sort((a, b) => a.row.l - b.row.l));
  const slices = [];
  for (let z = 0; z < g.depth; z++) {
    const boxes = [];
    for (let y = 0; y < g.rows; y++) {
      for (let x = 0; x < g.cols; x++) {
        const stack = cells.get(`${z},${y},${x}`) ?? [];
        const params = stack.reduce((a, n) => a + n.totalParams, 0);
        boxes.push(
          h(
            'div',
            { class: `cell${stack.length ? '' : ' empty'}`, 'data-testid': 'grid-cell', 'data-cell': `${z},${y},${x}` },
            h(
              'div',
              { class: 'cell-head' },
              h('b', null, `(${z},${y},${x})`),
              h('span', { class: 'muted' }, stack.length ? `${stack.length} layers · ${compact(params)} params` : 'empty'),
            ),
            h('div', { class: 'layer-stack' }, stackView(stack, onPick)),
          ),
        );
      }
    }
    slices.push(
      h(
        'div',
        { class: 'slice' },
        g.depth > 1 ? h('div', { class: 'slice-head' }, `z = ${z}`) : null,
        h('div', { class: 'cells', style: `grid-template-columns: repeat(${g.cols}, minmax(220px, 1fr))` }, boxes),
      ),
    );
  }
  return h(
    'div',
    null,
    h(
      'p',
      { class: 'muted' },
      `Grid depth ${g.depth} × rows ${g.rows} × cols ${g.cols}, ${g.layers_per_cell} layers per cell; ` +
        'data flows through the cells in (z, y, x, l) order.',
    ),
    slices,
  );
}

interface NameNode {
  name: string;
  children: Map<string, NameNode>;
  tensor?: TensorRow;
  /** Names and shapes below this node; `signature` adds the dtypes. */
  shape: string;
  signature: string;
  bytes: number;
}

function nameTree(tensors: TensorRow[]): NameNode {
  const root: NameNode = { name: '', children: new Map(), shape: '', signature: '', bytes: 0 };
  for (const t of tensors) {
    let node = root;
    for (const part of t.name.split('.')) {
      if (!node.children.has(part)) node.children.set(part, { name: part, children: new Map(), shape: '', signature: '', bytes: 0 });
      node = node.children.get(part)!;
    }
    node.tensor = t;
  }
  const finish = (n: NameNode): void => {
    n.children.forEach(finish);
    const kids = [...n.children.values()];
    const sig = (own: string, part: (c: NameNode) => string) =>
      own + '{' + kids.map((c) => `${/^\d+$/.test(c.name) ? '#' : c.name}:${part(c)}`).join(',') + '}';
    n.shape = sig(n.tensor ? `[${n.tensor.shape.join('x')}]` : '', (c) => c.shape);
    n.signature = sig(n.tensor ? `${n.tensor.dtype}[${n.tensor.shape.join('x')}]` : '', (c) => c.signature);
    n.bytes = (n.tensor?.bytes ?? 0) + [...n.children.values()].reduce((a, c) => a + c.bytes, 0);
  };
  finish(root);
  return root;
}

/** The tensors per dtype of folded blocks whose dtypes differ (` · types vary: Q4_K ×14, Q6_K ×2`); empty when
 * every block stores the same dtypes, which the sample block then shows. */
const sameTypes = (blocks: NameNode[]): boolean => blocks.every((b) => b.signature === blocks[0].signature);

function typeMix(blocks: NameNode[]): string {
  if (sameTypes(blocks)) return '';
  const counts = new Map<string, number>();
  const visit = (n: NameNode): void => {
    if (n.tensor) counts.set(n.tensor.dtype, (counts.get(n.tensor.dtype) ?? 0) + 1);
    n.children.forEach(visit);
  };
  blocks.forEach(visit);
  return ' · types vary: ' + [...counts].sort((a, b) => b[1] - a[1]).map(([d, c]) => `${d} ×${c}`).join(', ');
}

function nameView(n: NameNode, prefix: string, onPick: Pick): HTMLElement {
  const path = prefix ? `${prefix}.${n.name}` : n.name;
  const label = n.tensor
    ? h(
        'button',
        { type: 'button', class: 'node-head', 'data-path': path, onclick: () => onPick(path) },
        h('span', { class: 'type' }, n.name),
        h('span', { class: 'dtype', style: `--c:${dtypeColor(n.tensor.dtype)}` }, n.tensor.dtype),
        h('span', { class: 'params' }, `[${n.tensor.shape.join(' × ')}]`),
      )
    : h('div', { class: 'node-head static' }, h('span', { class: 'type' }, n.name), h('span', { class: 'params' }, bytes(n.bytes)));
  const kids = [...n.children.values()];
  const key = (k: NameNode) => (/^\d+$/.test(k.name) ? k.shape : `name:${k.name}`);
  const items = folded(kids, key, (k) => nameView(k, path, onPick), (first, last, _count, _block, all) =>
    `${path}.${first.name} … ${last.name} · ${bytes(all.reduce((a, k) => a + k.bytes, 0))}` + typeMix(all), sameTypes);
  return h('div', { class: 'node role-sequential' }, label, items.length ? h('div', { class: 'children sequential' }, items) : null);
}

export function renderTopology(target: HTMLElement, ins: Inspection, onPick: Pick): void {
  fill(target);
  if (ins.grid) {
    target.append(gridView(ins, onPick));
  } else if (ins.tensors.length) {
    const root = nameTree(ins.tensors);
    target.append(
      h('p', { class: 'muted' }, 'No Loom topology in this file: its tensors by name, numbered blocks of identical shape folded.'),
      h('div', { class: 'layer-stack names' }, [...root.children.values()].map((c) => nameView(c, '', onPick))),
    );
  } else {
    target.append(h('p', { class: 'muted' }, 'This file holds no layers.'));
  }
}
