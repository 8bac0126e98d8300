// Synthetic model files for the tests, built from their format specs (not by loom-wasm), so what a test expects
// of them comes from here.

/** Value of element i of every synthetic tensor: small exact f32 values in a 251-long cycle. */
export const elementValue = (i) => ((i % 251) - 125) / 128;

function floats(n) {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = elementValue(i);
  return Buffer.from(out.buffer);
}

/** A safetensors file with one F32 tensor `w0` of `rows × cols` (header padded with spaces to 8 bytes). */
export function safetensors(rows, cols) {
  const bytes = rows * cols * 4;
  let header = JSON.stringify({
    __metadata__: { source: 'loom-wasm test' },
    w0: { dtype: 'F32', shape: [rows, cols], data_offsets: [0, bytes] },
  });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(header.length));
  return { file: Buffer.concat([len, Buffer.from(header), floats(rows * cols)]), headerBytes: 8 + header.length };
}

/** An ENTITY v1 file (spec §8) holding one float32 Dense layer of `inputs → outputs`, weights only. */
export function entity(inputs, outputs) {
  const bytes = inputs * outputs * 4;
  const header = JSON.stringify({
    format_version: 1,
    network: {
      id: 'network', depth: 1, rows: 1, cols: 1, layers_per_cell: 1,
      layers: [{
        z: 0, y: 0, x: 0, l: 0, type: 'Dense', activation: 'Tanh', dtype: 'float32',
        input_height: inputs, output_height: outputs, softmax_type: 'Standard',
      }],
    },
    blobs: [{ path: 'layers.0', offset: 0, length: bytes, dtype: 'float32', scale: 1, native: true }],
  });
  const pre = Buffer.alloc(20);
  pre.write('ENTITY\0\0', 0, 'latin1');
  pre.writeUInt16LE(1, 8);
  pre.writeUInt16LE(0, 10);
  pre.writeBigUInt64LE(BigInt(header.length), 12);
  return { file: Buffer.concat([pre, Buffer.from(header), floats(inputs * outputs)]), headerBytes: 20 + header.length };
}

/** Weight k of layer l of a `denseChain`: float32 layers hold code/8192, int8 layers code × 2^-12 (spec §4). */
export const chainCode = (l, k) => ((k * 7 + l * 13) % 255) - 127;
export const CHAIN_INT8_SCALE = 2 ** -12;

/**
 * An ENTITY v1 file (spec §8) of Dense Tanh layers `width → width`, one per entry of `dtypes` ('float32' or
 * 'int8', native blobs: little-endian f32, two's-complement bytes with the layer scale).
 */
export function denseChain(width, dtypes) {
  const n = width * width;
  const blobs = [];
  const payload = [];
  let offset = 0;
  dtypes.forEach((dtype, l) => {
    let bytes;
    if (dtype === 'int8') {
      bytes = Buffer.alloc(n);
      for (let k = 0; k < n; k++) bytes.writeInt8(chainCode(l, k), k);
    } else {
      const f = new Float32Array(n);
      for (let k = 0; k < n; k++) f[k] = chainCode(l, k) / 8192;
      bytes = Buffer.from(f.buffer);
    }
    const scale = dtype === 'int8' ? CHAIN_INT8_SCALE : 1;
    blobs.push({ path: `layers.${l}`, offset, length: bytes.length, dtype, scale, native: true });
    payload.push(bytes);
    offset += bytes.length;
  });
  const header = JSON.stringify({
    format_version: 1,
    network: {
      id: 'network', depth: 1, rows: 1, cols: 1, layers_per_cell: dtypes.length,
      layers: dtypes.map((dtype, l) => ({
        z: 0, y: 0, x: 0, l, type: 'Dense', activation: 'Tanh', dtype,
        input_height: width, output_height: width, softmax_type: 'Standard',
      })),
    },
    blobs,
  });
  const pre = Buffer.alloc(20);
  pre.write('ENTITY\0\0', 0, 'latin1');
  pre.writeUInt16LE(1, 8);
  pre.writeBigUInt64LE(BigInt(header.length), 12);
  const headerBytes = 20 + header.length;
  return { file: Buffer.concat([pre, Buffer.from(header), ...payload]), headerBytes, blobs };
}

/** `/gen/stream.entity`: 12 float32 layers of 4 MiB and 4 int8 layers of 1 MiB (52 MiB of weights). */
export const STREAM_WIDTH = 1024;
export const STREAM_DTYPES = Array.from({ length: 16 }, (_, l) => (l % 4 === 3 ? 'int8' : 'float32'));
