// Number and size formatting shared by the panels.
import type { Progress } from 'loom-wasm';

/** What a load is doing, for people. */
export const PHASES: Record<Progress['phase'], string> = {
  download: 'Downloading',
  read: 'Reading',
  parse: 'Parsing',
  upload: 'Uploading to the GPU',
  forward: 'Running',
  convert: 'Converting',
};

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n: number): string {
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${UNITS[u]}`;
}

export function int(n: number): string {
  return n.toLocaleString('en-US');
}

/** 1234567 → "1.23 M". */
export function compact(n: number): string {
  if (n < 1e3) return String(n);
  const [d, u] = n < 1e6 ? [1e3, 'k'] : n < 1e9 ? [1e6, 'M'] : [1e9, 'B'];
  return `${(n / d).toPrecision(3)} ${u}`;
}

export function percent(part: number, whole: number): string {
  if (whole <= 0) return '—';
  const p = (100 * part) / whole;
  return p > 0 && p < 0.1 ? '<0.1%' : `${p.toFixed(1)}%`;
}

/** The shortest decimal that reads back as the same float32 (what Go's strconv prints for a float32). */
export function f32(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const want = Math.fround(v);
  for (let p = 1; p < 9; p++) {
    const t = want.toPrecision(p);
    if (Math.fround(Number(t)) === want) return String(Number(t));
  }
  return String(Number(want.toPrecision(9)));
}

/** A float for a table cell: fixed width where it helps reading, exponent for tiny or huge values. */
export function num(v: number): string {
  if (v === 0 || !Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  return a < 1e-3 || a >= 1e5 ? v.toExponential(3) : v.toPrecision(5);
}

/** The little-endian bytes of float32 values as hex: an exact, bit-level test hook. */
export function f32Hex(values: Float32Array): string {
  const u8 = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  return Array.from(u8, (b) => b.toString(16).padStart(2, '0')).join('');
}
