// /v1/chat/completions gives the chat template each message whole, as transformers'
// apply_chat_template does: a template that reads `message.name` or `message.tool_call_id`
// sees them (they were dropped without a word); a field the server does not pass on is
// refused by name.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { postJson, serveModel } from './helpers.js';

// ChatML that writes the name and the tool call id when a message has them (a newline
// right after a block tag is trimmed, as transformers renders with trim_blocks).
const TEMPLATE = [
  '{% for m in messages %}<|im_start|>{{ m.role }}',
  '{% if m.name is defined %} name={{ m.name }}{% endif %}',
  '{% if m.tool_call_id is defined %} call={{ m.tool_call_id }}{% endif %}',
  "{{ '\\n' + m.content }}<|im_end|>\n{% endfor %}",
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}',
].join('');

describe('/v1/chat/completions message fields', () => {
  let server: CtxprobeServer;
  let base: string;
  beforeAll(async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 128, chatTemplate: 'chatml' });
    fs.writeFileSync(path.join(fx.dir, 'chat_template.jinja'), TEMPLATE);
    ({ server, base } = await serveModel('named', fx.dir));
  });
  afterAll(async () => server?.close());
  const post = (route: string, body: unknown) => postJson(base, route, body);

  it("renders each message's name and tool_call_id as the template reads them", async () => {
    const messages = [
      { role: 'system', content: 'Answer briefly.', name: 'rules' },
      { role: 'user', content: 'Who built it?', name: 'alice' },
      { role: 'tool', content: 'Eiffel', tool_call_id: 'call_7' },
      { role: 'user', content: [{ type: 'text', text: 'And when?' }] },
    ];
    const rendered =
      '<|im_start|>system name=rules\nAnswer briefly.<|im_end|>\n<|im_start|>user name=alice\nWho built it?<|im_end|>\n' +
      '<|im_start|>tool call=call_7\nEiffel<|im_end|>\n<|im_start|>user\nAnd when?<|im_end|>\n<|im_start|>assistant\n';
    const chat = await post('/v1/chat/completions', { messages, max_tokens: 4, temperature: 0 });
    expect(chat.status, chat.text).toBe(200);
    const plain = await post('/v1/completions', { prompt: rendered, add_special_tokens: false, max_tokens: 4, temperature: 0 });
    expect(chat.body.usage.prompt_tokens).toBe(plain.body.usage.prompt_tokens);
    expect(chat.body.choices[0].token_ids).toEqual(plain.body.choices[0].token_ids);
    // Without the fields the prompt is shorter: they were read, not dropped.
    const bare = messages.map(({ role, content }) => ({ role, content }));
    const unnamed = await post('/v1/chat/completions', { messages: bare, max_tokens: 4, temperature: 0 });
    expect(unnamed.body.usage.prompt_tokens).toBeLessThan(chat.body.usage.prompt_tokens);
  });

  it('refuses a message field it does not pass on, by name', async () => {
    const toolCalls = [{ id: 'call_7', type: 'function', function: { name: 'lookup', arguments: '{}' } }];
    const res = await post('/v1/chat/completions', {
      messages: [
        { role: 'user', content: 'Who built it?' },
        { role: 'assistant', content: '', tool_calls: toolCalls },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.error.message).toMatch(/^messages\[1\]\.tool_calls: unknown field/);
  });
});
