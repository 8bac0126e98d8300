// A reply's text pieces as an async iterator, for `ChatSession.stream` and `chat.completions.create({stream})`.

export interface PieceStream<R> extends AsyncIterable<string> {
  /** The reply's result (its rejection is the reply's error). */
  reply: Promise<R>;
  /** Resolves at the first piece or when the reply resolves; rejects when the reply fails before any piece. */
  begun: Promise<void>;
  /** Stops the reply (it resolves with what it has). */
  stop(): void;
}

/** Runs `run` with an abort signal (aborted by `outer`, by `stop`, or by leaving the iteration early) and a
 * callback for each text piece; the pieces come out of the iterator in order, then its error if it failed. */
export function pieceStream<R>(
  run: (signal: AbortSignal, onToken: (text: string) => void) => Promise<R>,
  outer?: AbortSignal,
): PieceStream<R> {
  const pieces: string[] = [];
  let ended = false;
  let failure: unknown;
  let wake: (() => void) | undefined;
  let begin: () => void = () => {};
  const stopper = new AbortController();
  if (outer?.aborted) stopper.abort();
  outer?.addEventListener('abort', () => stopper.abort(), { once: true });
  const reply = run(stopper.signal, (t) => {
    pieces.push(t);
    begin();
    wake?.();
  });
  const begun = Promise.race([new Promise<void>((r) => (begin = r)), reply.then(() => undefined)]);
  // Nobody need wait for `begun`: its rejection is the reply's, reported there.
  begun.catch(() => undefined);
  reply.then(
    () => {
      ended = true;
      wake?.();
    },
    (e) => {
      failure = e;
      ended = true;
      wake?.();
    },
  );
  return {
    reply,
    begun,
    stop: () => stopper.abort(),
    async *[Symbol.asyncIterator]() {
      try {
        for (;;) {
          if (pieces.length) {
            yield pieces.shift()!;
            continue;
          }
          if (ended) {
            if (failure !== undefined) throw failure;
            return;
          }
          await new Promise<void>((r) => (wake = r));
          wake = undefined;
        }
      } finally {
        // Leaving the loop early (break, an exception in its body) stops the reply.
        if (!ended) stopper.abort();
      }
    },
  };
}
