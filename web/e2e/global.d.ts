// `window.loom` in the test page is the built package.
declare global {
  interface Window {
    loom: typeof import('../dist/index.js');
  }
}
export {};
