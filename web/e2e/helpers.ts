import { expect, type Page } from '@playwright/test';

export async function ready(page: Page): Promise<void> {
  await page.goto('/');
  await expect(page.locator('body')).toHaveAttribute('data-ready', '1');
}

export interface LogEntry {
  path: string;
  range: string | null;
  ifRange: string | null;
  status: number;
  sent: number;
}

export async function serverLog(page: Page): Promise<LogEntry[]> {
  return (await page.request.get('/__log')).json();
}

export async function resetServer(page: Page): Promise<void> {
  await page.request.get('/__reset');
}

/** Runs `fn` in the page; a rejection comes back as {error: {code, message, isLoomError}}. */
export const CATCH = `
  window.__try = async (f) => {
    try { return { value: await f() }; }
    catch (e) { return { error: { code: e.code, message: e.message, isLoomError: e instanceof window.loom.LoomError } } }
  };`;

/**
 * GPU forward outputs against Loom's (or the bit-exact CPU's): |gpu − want| ≤ abs + rel·|want|, the native
 * conformance tolerance (crate/src/gpu/mod.rs `GPU_TOLERANCE`). Returns the values outside it and raises
 * `worst` (absolute error where |want| ≤ 1, relative beyond) for the log.
 */
export const GPU_TOLERANCE = { abs: 3e-6, rel: 1e-5 };
export function gpuMismatches(id: string, got: ArrayLike<number>, want: ArrayLike<number>, worst: { abs: number; rel: number }): string[] {
  if (got.length !== want.length) return [`${id}: ${got.length} outputs, want ${want.length}`];
  const bad: string[] = [];
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    const w = Math.abs(want[i]);
    if (w <= 1) worst.abs = Math.max(worst.abs, err);
    else worst.rel = Math.max(worst.rel, err / w);
    if (!(err <= GPU_TOLERANCE.abs + GPU_TOLERANCE.rel * w)) bad.push(`${id}[${i}]: gpu ${got[i]}, want ${want[i]}`);
  }
  return bad;
}
