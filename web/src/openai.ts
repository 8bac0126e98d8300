// OpenAI's Chat Completions over a ChatSession: `session.chat.completions.create(params)` reads OpenAI's request
// (what this runtime cannot honour is refused by name, never ignored), runs it as `send` / `stream` with the whole
// conversation, and answers in OpenAI's shapes, so code written for the `openai` package runs on an open model.
import { LoomError } from './errors.js';
import type {
  ChatConstraint, ChatMessage, ChatReply, ChatSession, ChatStream, OpenAIChat, OpenAIChatCompletion, OpenAIChatCompletionChunk,
  OpenAIChatParams, OpenAIFinishReason, SendOptions, StopReason,
} from './types.js';

/** Most new tokens when a request sets no limit (as `loom serve`). */
const DEFAULT_MAX_TOKENS = 1024;

/** OpenAI's `finish_reason` for how a reply ended. */
export function finishReason(stop: StopReason): OpenAIFinishReason {
  return stop === 'max_tokens' || stop === 'context_full' ? 'length' : 'stop';
}

function unsupported(param: string, what: string): never {
  throw new LoomError('unsupported', `${param}: ${what} is not supported by loom-wasm`);
}

/** The conversation and the send options a request asks for. */
export function readRequest(p: OpenAIChatParams): { messages: ChatMessage[]; opts: SendOptions } {
  if (typeof p !== 'object' || p === null || !Array.isArray(p.messages)) {
    throw new LoomError('invalid_input', 'chat.completions.create() takes {messages: [...], ...}');
  }
  if (p.n != null && p.n !== 1) unsupported('n', 'more than one choice');
  if ((p.frequency_penalty ?? 0) !== 0) unsupported('frequency_penalty', 'a penalty other than 0');
  if ((p.presence_penalty ?? 0) !== 0) unsupported('presence_penalty', 'a penalty other than 0');
  if (p.logit_bias && Object.keys(p.logit_bias).length > 0) unsupported('logit_bias', 'a logit bias');
  if (p.tools && p.tools.length > 0) unsupported('tools', 'tool calling');
  let constraint: ChatConstraint | undefined;
  const format = p.response_format;
  if (format?.type === 'json_object') constraint = { type: 'json_object' };
  else if (format?.type === 'json_schema') {
    const schema = (format as { json_schema?: { schema?: object } }).json_schema?.schema;
    if (schema !== undefined && (typeof schema !== 'object' || schema === null)) {
      throw new LoomError('invalid_input', 'response_format.json_schema.schema: a JSON Schema is an object');
    }
    constraint = { type: 'json_schema', schema: schema ?? {} };
  } else if (format && format.type !== 'text') {
    throw new LoomError('invalid_input', `response_format: unknown type ${JSON.stringify(format.type)} (text, json_object, json_schema)`);
  }
  if (p.messages.length === 0) throw new LoomError('invalid_input', 'messages: at least one message is needed');
  const messages = p.messages.map((m, i): ChatMessage => {
    const role = m.role === 'developer' ? 'system' : m.role;
    if (role === 'tool' || role === 'function') unsupported('messages', 'a tool result');
    if (!['system', 'user', 'assistant'].includes(role)) {
      throw new LoomError('invalid_input', `messages[${i}]: unknown role ${JSON.stringify(m.role)}`);
    }
    let content = '';
    if (typeof m.content === 'string') content = m.content;
    else if (Array.isArray(m.content)) {
      for (const part of m.content) {
        if (part.type !== 'text' || typeof part.text !== 'string') {
          throw new LoomError('invalid_input', `messages[${i}]: a content part of type ${JSON.stringify(part.type)} (only text is read)`);
        }
        content += part.text;
      }
    }
    return { role, content };
  });
  const stop = p.stop == null ? undefined : typeof p.stop === 'string' ? [p.stop] : [...p.stop];
  if (stop && stop.length > 4) throw new LoomError('invalid_input', 'stop: at most 4 sequences');
  // OpenAI's defaults (temperature 1, top_p 1) and neither top-k nor min-p, which it does not have.
  const opts: SendOptions = {
    temperature: p.temperature ?? 1,
    topP: p.top_p ?? 1,
    topK: 0,
    minP: 0,
    maxTokens: p.max_completion_tokens ?? p.max_tokens ?? DEFAULT_MAX_TOKENS,
    stop,
  };
  if (p.seed != null) opts.seed = p.seed;
  if (constraint) opts.constraint = constraint;
  if (p.top_logprobs != null && p.top_logprobs > 0 && !p.logprobs) {
    throw new LoomError('invalid_input', 'top_logprobs: needs logprobs: true');
  }
  if (p.top_logprobs != null && (!Number.isInteger(p.top_logprobs) || p.top_logprobs < 0 || p.top_logprobs > 20)) {
    throw new LoomError('invalid_input', `top_logprobs: a whole number from 0 to 20, got ${p.top_logprobs}`);
  }
  if (p.logprobs) {
    opts.logprobs = true;
    opts.topLogprobs = p.top_logprobs ?? 0;
  }
  return { messages, opts };
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
export function openAIChat(session: ChatSession): OpenAIChat {
  async function create(params: OpenAIChatParams, req: { signal?: AbortSignal } = {}) {
    const { messages, opts } = readRequest(params);
    const model = params.model ?? session.name;
    const [id, created] = [requestId(), now()];
    if (!params.stream) {
      const r = await session.send(messages, { ...opts, signal: req.signal });
      const completion: OpenAIChatCompletion = {
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message: { role: 'assistant', content: r.text, refusal: null }, logprobs: logprobs(r),
          finish_reason: finishReason(r.stopReason) }],
        usage: usage(r),
      };
      return completion;
    }
    const includeUsage = params.stream_options?.include_usage === true;
    const stream: ChatStream = session.stream(messages, { ...opts, signal: req.signal });
    const chunk = (
      delta: OpenAIChatCompletionChunk['choices'][0]['delta'],
      finish: OpenAIFinishReason | null,
      lp: OpenAIChatCompletionChunk['choices'][0]['logprobs'] = null,
    ): OpenAIChatCompletionChunk => ({
      id, object: 'chat.completion.chunk', created, model,
      choices: [{ index: 0, delta, logprobs: lp, finish_reason: finish }],
    });
    async function* chunks(): AsyncGenerator<OpenAIChatCompletionChunk> {
      yield chunk({ role: 'assistant', content: '' }, null);
      for await (const text of stream) yield chunk({ content: text }, null);
      const r = await stream.reply;
      // The text pieces are held back at stop strings and do not fall on token boundaries: the log-probabilities
      // come whole with the last chunk.
      yield chunk({}, finishReason(r.stopReason), logprobs(r));
      if (includeUsage) yield { id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(r) };
    }
    return chunks();
  }
  return { completions: { create } } as OpenAIChat;
}
