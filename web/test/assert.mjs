// Shared assertions of the Node tests.
import assert from 'node:assert/strict';
import { LoomError } from 'loom-wasm';

/** `promise` rejects with a LoomError of `code` (and a message matching `messagePart`). */
export async function rejectsWith(promise, code, messagePart) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof LoomError, `expected a LoomError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (messagePart) assert.match(e.message, messagePart);
    return true;
  });
}
