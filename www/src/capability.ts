// What the inspector can do with an opened file: a Loom network runs and converts; a file of bare tensors (GGUF, a
// safetensors file without Loom's topology, a checkpoint folder) can only be inspected, because the library has no
// network to run and no layers to write.
import type { Inspection } from 'loom-wasm';

/** Why Run and Convert are off for this file, in a sentence; null when it holds a Loom network. */
export function noNetworkReason(ins: Inspection): string | null {
  if (ins.layers.length > 0) return null;
  if (ins.format === 'gguf')
    return 'A GGUF file holds an LLM’s tensors, not a Loom network: it can be inspected here, but not run or converted. ' +
      'The loom command-line tool runs it (loom chat) and converts it (loom convert FILE out.entity).';
  return `This ${ins.format} file holds tensors without a Loom network: it can be inspected here, but not run or converted.`;
}
