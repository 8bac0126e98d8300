// One readable line for any failure: a LoomError's code and message, or what else was thrown.
import { LoomError } from 'loom-wasm';

const HINTS: Partial<Record<string, string>> = {
  bad_format: 'This file is not one we can read',
  unsupported_dtype: 'This file uses a dtype we do not support',
  unsupported: 'Not supported',
  invalid_input: 'Invalid input',
  invalid_network: 'The network in this file is not valid',
  lossy: 'This conversion would change weights',
  no_webgpu: 'WebGPU is not available',
  network: 'Download failed',
  quota: 'Out of storage space',
  out_of_memory: 'Out of memory',
  aborted: 'Cancelled',
};

export function errorCode(e: unknown): string {
  return e instanceof LoomError ? e.code : 'internal';
}

// The start of a message that restates its code (the Rust error's own wording): the hint says it once instead.
const RESTATED = /^(invalid input|invalid network|unsupported dtype|unsupported|lossy conversion refused|no GPU|GPU out of memory|error): /i;

export function errorText(e: unknown): string {
  if (e instanceof LoomError) return `${HINTS[e.code] ?? 'Error'}: ${e.message.replace(RESTATED, '')}`;
  return e instanceof Error ? e.message : String(e);
}

/** Shows `e` in an error box (its code in data-code), or hides the box for `null`. */
export function showErrorIn(box: HTMLElement, e: unknown | null): void {
  box.hidden = e === null;
  box.textContent = e === null ? '' : errorText(e);
  if (e === null) delete box.dataset.code;
  else box.dataset.code = errorCode(e);
}
