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
