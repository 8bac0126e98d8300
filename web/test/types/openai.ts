// Type-checked, never run (`tsc -p test/types`): the `openai` package's request and response types pass to and from
// `session.chat.completions.create` without a cast, streamed and not.
import type OpenAI from 'openai';
import { openChat } from 'loom-wasm';

export async function roundTrip(): Promise<void> {
  const session = await openChat('model.gguf');
  const params: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming = {
    model: 'smollm2',
    messages: [
      { role: 'developer', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Hello' }] },
      { role: 'assistant', content: 'Hi.' },
    ],
    temperature: 0,
    max_completion_tokens: 32,
    stop: ['\n\n'],
    seed: 1,
  };
  const reply: OpenAI.Chat.ChatCompletion = await session.chat.completions.create(params);
  const text: string | null = reply.choices[0].message.content;
  const streaming: OpenAI.Chat.ChatCompletionCreateParamsStreaming = { ...params, stream: true, stream_options: { include_usage: true } };
  const stream = await session.chat.completions.create(streaming);
  for await (const chunk of stream) {
    const c: OpenAI.Chat.ChatCompletionChunk = chunk;
    void c.choices[0]?.delta.content;
  }
  const general: OpenAI.Chat.ChatCompletionCreateParams = params;
  void (await session.chat.completions.create(general));
  void text;
}
