// The summary card: format, parameter count, bytes by dtype, file size vs weight bytes vs header bytes.
// data-format / data-params are stable test hooks.
import type { Inspection } from 'loom-wasm';
import { dtypeBar } from './charts';
import { fill, h } from './dom';
import { bytes, compact, int, percent } from './format';

const FORMAT_NAMES: Record<string, string> = {
  entity: 'Loom ENTITY v1 (.entity)',
  json: 'Loom JSON',
  safetensors: 'safetensors',
  checkpoint: 'training checkpoint',
  gguf: 'GGUF',
};

function stat(label: string, value: string, note?: string): HTMLElement {
  return h('div', { class: 'stat' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), note ? h('div', { class: 'note' }, note) : null);
}

/** How many tensors a file of bare tensors holds per dtype (GGUF: per block type). */
function tensorCounts(ins: Inspection): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const t of ins.tensors) counts[t.dtype] = (counts[t.dtype] ?? 0) + 1;
  return counts;
}

export function renderSummary(target: HTMLElement, name: string, ins: Inspection, loaded: boolean): void {
  target.dataset.format = ins.format;
  target.dataset.params = String(ins.total_params);
  target.dataset.layers = String(ins.layers.length || ins.tensors.length);
  const other = Math.max(0, ins.file_bytes - ins.header_bytes - ins.weight_bytes);
  const g = ins.grid;
  const metadata = Object.entries(ins.metadata).filter(([k]) => k !== 'loom_network');
  fill(target,
    h(
      'div',
      { class: 'summary-head' },
      h('h2', { class: 'file-name', title: name }, name),
      h('span', { class: 'pill' }, FORMAT_NAMES[ins.format] ?? ins.format),
      h(
        'span',
        { class: `pill ${loaded ? 'ok' : 'pending'}`, 'data-testid': 'load-state' },
        loaded ? 'weights loaded' : `header only · read ${bytes(ins.bytes_read)}`,
      ),
    ),
    h(
      'div',
      { class: 'stats' },
      // The exact count underneath only where the headline rounds it (1.23 M), not 240 twice.
      stat('Parameters', compact(ins.total_params), compact(ins.total_params) === String(ins.total_params) ? undefined : int(ins.total_params)),
      stat('File size', bytes(ins.file_bytes), `${int(ins.file_bytes)} bytes`),
      stat('Weights', bytes(ins.weight_bytes), percent(ins.weight_bytes, ins.file_bytes) + ' of the file'),
      stat('Header', bytes(ins.header_bytes), percent(ins.header_bytes, ins.file_bytes) + ' of the file'),
      g
        ? stat('Grid', `${g.depth}×${g.rows}×${g.cols}`, `${g.layers_per_cell} layers per cell · ${ins.layers.length} layers`)
        : stat('Tensors', int(ins.tensors.length)),
    ),
    h(
      'div',
      { class: 'file-bar', title: 'The file: header, weights, other bytes' },
      h('span', { class: 'hdr', style: `flex-grow:${ins.header_bytes}` }),
      h('span', { class: 'wts', style: `flex-grow:${ins.weight_bytes}` }),
      other > 0 ? h('span', { class: 'oth', style: `flex-grow:${other}` }) : null,
    ),
    h(
      'div',
      { class: 'file-bar-legend muted' },
      h('span', null, h('i', { class: 'hdr' }), `header ${bytes(ins.header_bytes)}`),
      h('span', null, h('i', { class: 'wts' }), `weights ${bytes(ins.weight_bytes)}`),
      other > 0 ? h('span', null, h('i', { class: 'oth' }), `other ${bytes(other)}`) : null,
    ),
    Object.keys(ins.bytes_by_dtype).length
      ? h('h3', null, ins.format === 'gguf' ? 'Quantization mix' : 'Bytes by dtype')
      : null,
    Object.keys(ins.bytes_by_dtype).length ? dtypeBar(ins.bytes_by_dtype, ins.layers.length ? undefined : tensorCounts(ins)) : null,
    metadata.length
      ? h(
          'details',
          { class: 'metadata' },
          h('summary', null, `Metadata (${metadata.length})`),
          h('dl', null, metadata.map(([k, v]) => [h('dt', null, k), h('dd', null, v.length > 300 ? v.slice(0, 300) + '…' : v)])),
        )
      : null,
  );
}
