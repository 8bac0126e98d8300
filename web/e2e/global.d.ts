// `window.loom` in the test page is the built package.
declare global {
  interface Window {
    loom: typeof import('../dist/index.js');
    /** The tiny Llama's folder as Files (chat.spec.ts puts it in the page). */
    tinyFolder: (template: string) => Promise<File[]>;
  }
}
export {};
