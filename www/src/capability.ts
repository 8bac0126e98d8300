// What the inspector can do with an opened file: a Loom network runs and converts; a safetensors file of bare
// tensors (an HF checkpoint) re-exports as safetensors of another float type; a GGUF file (a language model: the
// Chat page runs it) or a checkpoint folder has no Loom network to run and no layers to write.
import type { Inspection } from 'loom-wasm';

/** Why Run is off for this file, in a sentence; null when it holds a Loom network. */
export function noNetworkReason(ins: Inspection): string | null {
  if (ins.layers.length > 0) return null;
  if (ins.format === 'gguf') {
    const chat = ins.llm_unsupported === undefined
      ? 'Chat with it here (“Chat with this model”, or the Chat page) or with loom chat; '
      : `Its decoder does not run (${ins.llm_unsupported}); `;
    return 'A GGUF file holds a language model’s tensors, not a Loom network, so Run and Convert here do not take it. ' +
      chat + 'loom convert FILE out.entity converts it to a Loom transformer, writing its tokenizer beside it.';
  }
  if (ins.format === 'safetensors')
    return 'This safetensors file holds tensors without a Loom network: it cannot run here, and it converts only to ' +
      'safetensors of another float type (F32, F16, BF16).';
  return `This ${ins.format} file holds tensors without a Loom network: it can be inspected here, but not run or converted.`;
}

/** True for a file whose only conversion is a safetensors re-export (F32 ↔ F16 ↔ BF16). */
export function tensorsOnly(ins: Inspection): boolean {
  return ins.layers.length === 0 && ins.format === 'safetensors';
}

/** Why Convert is off for this file; null when it converts (a Loom network, or safetensors to re-export). */
export function noConvertReason(ins: Inspection): string | null {
  return tensorsOnly(ins) ? null : noNetworkReason(ins);
}
