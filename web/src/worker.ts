// The module Web Worker the package starts: runs the engine off the page's thread.
import { handle } from './engine.js';
import { serializeError } from './errors.js';
import { transferables } from './protocol.js';
import type { FromWorker, ToWorker } from './protocol.js';

const scope = self as unknown as {
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
  postMessage(msg: FromWorker, transfer?: Transferable[]): void;
};
const running = new Map<number, AbortController>();

scope.onmessage = async ({ data: msg }) => {
  if (msg.type === 'abort') {
    running.get(msg.id)?.abort();
    return;
  }
  const { id } = msg;
  const controller = new AbortController();
  running.set(id, controller);
  try {
    const value = await handle(msg.method, msg.args, {
      signal: controller.signal,
      onProgress: (progress) => scope.postMessage({ type: 'progress', id, progress }),
      onToken: (text) => scope.postMessage({ type: 'token', id, text }),
    });
    scope.postMessage({ type: 'result', id, value }, transferables(value));
  } catch (e) {
    scope.postMessage({ type: 'error', id, error: serializeError(e) });
  } finally {
    running.delete(id);
  }
};
