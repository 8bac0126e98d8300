// OpenAI's Chat Completions over a ChatSession: `session.chat.completions.create(params)` hands OpenAI's request to
// the chat module, which checks it as `loom serve` does (what this runtime cannot honour is refused by name, never
// ignored) and runs it with the request's whole conversation and tools; the answer comes back in OpenAI's shapes,
// so code written for the `openai` package runs on an open model.
import { LoomError } from './errors.js';
import { pieceStream } from './stream.js';
import type {
  ChatReply, OpenAIChat, OpenAIChatCompletion, OpenAIChatCompletionChunk, OpenAIChatParams, OpenAIFinishReason,
  RawReply, StopReason,
} from './types.js';

/** A reply to a request, with the tool calls the chat module read out of it. */
export type OpenAIReply = ChatReply & Pick<RawReply, 'toolCalls'>;

/** What `create` needs of a session: its name and a way to run a request (its JSON) as one reply. */
export interface OpenAISession {
  readonly name: string;
  sendOpenAI(body: string, requestId: string, opts: { signal?: AbortSignal; onToken?: (text: string) => void }): Promise<OpenAIReply>;
}

/** OpenAI's `finish_reason` for how a reply ended. */
function finishReason(r: OpenAIReply): OpenAIFinishReason {
  if (r.toolCalls) return 'tool_calls';
  const stop: StopReason = r.stopReason;
  return stop === 'max_tokens' || stop === 'context_full' ? 'length' : 'stop';
}

/** A reply's `logprobs` as OpenAI writes them (`null` when not asked for). */
function logprobs(r: ChatReply): OpenAIChatCompletion['choices'][0]['logprobs'] {
  return r.logprobs ? { content: r.logprobs, refusal: null } : null;
}

function usage(r: ChatReply) {
  const completion = r.ids.length;
  return { prompt_tokens: r.promptTokens, completion_tokens: completion, total_tokens: r.promptTokens + completion };
}

let counter = 0;
const requestId = () => `chatcmpl-${Date.now().toString(16)}${(counter++).toString(16)}`;
const now = () => Math.floor(Date.now() / 1000);

/** The `chat` property of a session. */
export function openAIChat(session: OpenAISession): OpenAIChat {
  async function create(params: OpenAIChatParams, req: { signal?: AbortSignal } = {}) {
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      throw new LoomError('invalid_input', 'chat.completions.create() takes {messages: [...], ...}');
    }
    const body = JSON.stringify(params);
    const model = params.model ?? session.name;
    const [id, created] = [requestId(), now()];
    if (!params.stream) {
      const r = await session.sendOpenAI(body, id, { signal: req.signal });
      const message: OpenAIChatCompletion['choices'][0]['message'] = r.toolCalls
        ? { role: 'assistant', content: r.toolCalls.content || null, refusal: null, tool_calls: r.toolCalls.calls }
        : { role: 'assistant', content: r.text, refusal: null };
      const completion: OpenAIChatCompletion = {
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message, logprobs: logprobs(r), finish_reason: finishReason(r) }],
        usage: usage(r),
      };
      return completion;
    }
    const chunk = (
      delta: OpenAIChatCompletionChunk['choices'][0]['delta'],
      finish: OpenAIFinishReason | null,
      lp: OpenAIChatCompletionChunk['choices'][0]['logprobs'] = null,
    ): OpenAIChatCompletionChunk => ({
      id, object: 'chat.completion.chunk', created, model,
      choices: [{ index: 0, delta, logprobs: lp, finish_reason: finish }],
    });
    // With tools offered the reply is read for calls once it is whole: it then comes in one piece, as from
    // `loom serve`.
    const whole = Array.isArray(params.tools) && params.tools.length > 0;
    const pieces = pieceStream((signal, onToken) => session.sendOpenAI(body, id, { signal, onToken }), req.signal);
    async function* chunks(): AsyncGenerator<OpenAIChatCompletionChunk> {
      try {
        yield chunk({ role: 'assistant', content: '' }, null);
        for await (const text of pieces) if (!whole) yield chunk({ content: text }, null);
        const r = await pieces.reply;
        if (r.toolCalls) {
          const calls = r.toolCalls.calls.map((c, index) => ({ index, ...c }));
          yield chunk({ content: r.toolCalls.content || null, tool_calls: calls }, null);
        } else if (whole && r.text) {
          yield chunk({ content: r.text }, null);
        }
        // The text pieces are held back at stop strings and do not fall on token boundaries: the log-probabilities
        // come whole with the last chunk.
        yield chunk({}, finishReason(r), logprobs(r));
        if (params.stream_options?.include_usage === true) {
          yield { id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(r) };
        }
      } finally {
        // Leaving the loop early (break, an exception in its body) stops the reply.
        pieces.stop();
      }
    }
    // Returned once the reply is under way: a request the chat module refuses rejects here, as OpenAI's client
    // rejects before its stream, not in the middle of the iteration.
    await pieces.begun;
    return chunks();
  }
  return { completions: { create } } as OpenAIChat;
}
