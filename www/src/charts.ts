// SVG charts: a histogram with axes, bars of bytes per layer, a stacked bar of bytes by dtype.
import { s, h } from './dom';
import { bytes, num, percent } from './format';

/** A stable colour per dtype family: floats blue, small floats violet, ints green, packed low-bit orange. */
export function dtypeColor(dtype: string): string {
  const d = dtype.toLowerCase();
  if (/^(float64|f64|float32|f32)$/.test(d)) return '#4f6bed';
  if (/^(float16|f16|bfloat16|bf16)$/.test(d)) return '#7b8ff5';
  if (/^fp8|^f8/.test(d)) return '#9b6bd8';
  if (/^(fp4|f4|q4_0)$/.test(d)) return '#d0648a';
  // ggml block types (GGUF): 4-bit pinks, 5- and 6-bit ambers, Q8_0 with the 8-bit ints.
  if (/^q4_(1|k)$/.test(d)) return d === 'q4_1' ? '#e08aa8' : '#b84a74';
  if (/^q5_(0|1|k)$/.test(d)) return '#efb45a';
  if (d === 'q6_k') return '#c99a2e';
  if (d === 'q8_0') return '#3fbf8f';
  if (/^(int|uint|i|u)(64|32|16)$/.test(d)) return '#14a37f';
  if (/^(int|uint|i|u)8$/.test(d)) return '#3fbf8f';
  if (/^(int|uint)(4|2)$/.test(d)) return '#e8a33d';
  if (/^(ternary|binary)$/.test(d)) return '#e46f3a';
  return '#8a93a6';
}

export interface Histogram {
  min: number;
  max: number;
  counts: number[];
}

/** A histogram of weight values with x ticks (min, 0 when inside, max) and a y axis in counts. */
export function histogram(hist: Histogram, color = '#4f6bed'): SVGSVGElement {
  const W = 420;
  const H = 180;
  const peak = Math.max(1, ...hist.counts);
  // The left margin fits the widest count label (10px monospace: about 6.1px a character), so none is cut.
  const pad = { l: 10 + 6.5 * String(peak).length, r: 10, t: 10, b: 28 };
  const iw = W - pad.l - pad.r;
  const ih = H - pad.t - pad.b;
  const n = Math.max(1, hist.counts.length);
  const span = hist.max - hist.min || 1;
  const x = (v: number) => pad.l + ((v - hist.min) / span) * iw;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart histogram', role: 'img', 'data-testid': 'histogram' });
  svg.append(s('title', null, `Histogram of ${hist.counts.reduce((a, b) => a + b, 0)} values`));
  // Horizontal grid lines at quarters of the peak.
  for (let i = 0; i <= 4; i++) {
    const y = pad.t + ih - (i / 4) * ih;
    svg.append(s('line', { x1: pad.l, x2: W - pad.r, y1: y, y2: y, class: 'grid' }));
    svg.append(s('text', { x: pad.l - 6, y: y + 3, class: 'tick', 'text-anchor': 'end' }, Math.round((i / 4) * peak)));
  }
  const bw = iw / n;
  hist.counts.forEach((c, i) => {
    if (c === 0) return;
    const bh = (c / peak) * ih;
    const lo = hist.min + (i / n) * span;
    const hi = hist.min + ((i + 1) / n) * span;
    svg.append(
      s(
        'rect',
        { x: pad.l + i * bw + 0.5, y: pad.t + ih - bh, width: Math.max(1, bw - 1), height: bh, fill: color, rx: 1 },
        s('title', null, `[${num(lo)}, ${num(hi)}): ${c}`),
      ),
    );
  });
  svg.append(s('line', { x1: pad.l, x2: W - pad.r, y1: pad.t + ih, y2: pad.t + ih, class: 'axis' }));
  const ticks = [hist.min, hist.max];
  // A 0 tick only where its label cannot run into the end labels.
  if (hist.min < 0 && hist.max > 0 && x(0) - pad.l > 70 && W - pad.r - x(0) > 70) ticks.splice(1, 0, 0);
  for (const t of ticks) {
    const anchor = t === hist.min ? 'start' : t === hist.max ? 'end' : 'middle';
    svg.append(s('line', { x1: x(t), x2: x(t), y1: pad.t + ih, y2: pad.t + ih + 4, class: 'axis' }));
    svg.append(s('text', { x: x(t), y: H - 8, class: 'tick', 'text-anchor': anchor }, num(t)));
  }
  return svg;
}

export interface Bar {
  label: string;
  value: number;
  color: string;
  key: string;
}

/** Vertical bars, one per item in file order; clicking one calls `onPick(key)`. */
export function barChart(bars: Bar[], total: number, onPick: (key: string) => void): SVGSVGElement {
  const W = 640;
  const H = 120;
  const pad = { l: 4, r: 4, t: 6, b: 6 };
  const peak = Math.max(1, ...bars.map((b) => b.value));
  const bw = (W - pad.l - pad.r) / Math.max(1, bars.length);
  const svg = s('svg', {
    viewBox: `0 0 ${W} ${H}`,
    preserveAspectRatio: 'none',
    class: 'chart bars',
    role: 'img',
    'data-testid': 'bytes-chart',
  });
  svg.append(s('title', null, 'Bytes on disk per layer, in file order'));
  bars.forEach((b, i) => {
    const bh = Math.max(1, (b.value / peak) * (H - pad.t - pad.b));
    const rect = s(
      'rect',
      {
        x: pad.l + i * bw + (bw > 3 ? 0.5 : 0),
        y: H - pad.b - bh,
        width: Math.max(0.5, bw - (bw > 3 ? 1 : 0)),
        height: bh,
        fill: b.color,
        class: 'bar',
        'data-key': b.key,
      },
      s('title', null, `${b.label}: ${bytes(b.value)} (${percent(b.value, total)})`),
    );
    rect.addEventListener('click', () => onPick(b.key));
    svg.append(rect);
  });
  return svg;
}

/** One horizontal bar split by dtype, with a legend. */
/** Bytes per dtype as one stacked bar and a legend; with `tensors` (count per dtype) the legend says how many
 * tensors each one holds (a GGUF's quantization mix). */
export function dtypeBar(byDtype: Record<string, number>, tensors?: Record<string, number>): HTMLElement {
  const entries = Object.entries(byDtype).sort((a, b) => b[1] - a[1]);
  const total = entries.reduce((a, [, v]) => a + v, 0);
  return h(
    'div',
    { class: 'dtype-bar' },
    h(
      'div',
      { class: 'stack' },
      entries.map(([d, v]) =>
        h('span', { style: `flex-grow:${v};background:${dtypeColor(d)}`, title: `${d}: ${bytes(v)}` }),
      ),
    ),
    h(
      'ul',
      { class: 'legend' },
      entries.map(([d, v]) =>
        h(
          'li',
          { 'data-dtype': d, 'data-bytes': v, 'data-tensors': tensors?.[d] },
          h('i', { style: `background:${dtypeColor(d)}` }),
          h('b', null, d),
          tensors ? ` ×${tensors[d] ?? 0} tensor${tensors[d] === 1 ? '' : 's'}` : '',
          ` ${bytes(v)} · ${percent(v, total)}`,
        ),
      ),
    ),
  );
}
