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
