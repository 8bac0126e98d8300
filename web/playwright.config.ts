import { defineConfig } from '@playwright/test';

// Debian's Chromium (no browser download here); WebGPU comes from SwiftShader behind --enable-unsafe-webgpu.
export const CHROME_ARGS = [
  '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--enable-unsafe-webgpu',
];
const port = Number(process.env.LOOM_TEST_PORT ?? 4178);

export default defineConfig({
  testDir: 'e2e',
  timeout: 120_000,
  reporter: 'list',
  workers: 1,
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    launchOptions: { executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: CHROME_ARGS },
  },
  projects: [{ name: 'chromium', use: { browserName: 'chromium' } }],
  webServer: {
    command: `node e2e/server.mjs`,
    env: { PORT: String(port) },
    url: `http://127.0.0.1:${port}/__log`,
    reuseExistingServer: false,
    timeout: 30_000,
  },
});
