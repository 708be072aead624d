// Real public chat templates (test/chat-templates/, sources in its README) segment a
// three-round dialogue, with and without a system message, from one rendering: one chunk
// per message holding its content, labels in order, the chunks adding up to the
// rendering — or a refusal naming the message the template drops, moves or rejects.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Template } from '@huggingface/jinja';
import { beforeAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/text/tokenizer.js';
import { renderChat, segmentText, type ChatMessage, type ChatRenderOptions } from '../src/requests/segments.js';
import { messageLabels } from '../src/common/labels.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const template = (name: string) => fs.readFileSync(path.join(HERE, 'chat-templates', `${name}.jinja`), 'utf8');

const SYSTEM: ChatMessage = { role: 'system', content: 'Answer from the passages only.' };
const ROUNDS: ChatMessage[] = [
  { role: 'user', content: 'Who designed the tower?' },
  { role: 'assistant', content: 'Gustave Eiffel designed it.' },
  { role: 'user', content: 'No: his company did.' },
  { role: 'assistant', content: 'Right, the Eiffel company designed it.' },
  { role: 'user', content: 'When was it built?' },
  { role: 'assistant', content: 'It was built for the 1889 fair.' },
];

let tok: TextTokenizer;
beforeAll(() => {
  tok = TextTokenizer.load(makeFixture(FAMILY_FIXTURES.llama!).dir);
});

/** The rendering transformers would produce, for comparison. */
function rendered(name: string, messages: ChatMessage[], options: ChatRenderOptions = {}): string {
  return new Template(template(name)).render({
    bos_token: '<s>',
    eos_token: '</s>',
    ...options.kwargs,
    messages: messages.map((m) => ({ role: m.role, content: m.content })),
    add_generation_prompt: options.addGenerationPrompt ?? false,
  });
}

/** What a message's chunk must hold: its content as the template renders it. */
function shown(m: ChatMessage): string {
  const after = m.content.includes('</think>') ? m.content.slice(m.content.lastIndexOf('</think>') + 8) : m.content;
  return after.trim();
}

async function expectSegmented(name: string, messages: ChatMessage[], options: ChatRenderOptions = {}) {
  const chunks = renderChat(tok, messages, 'messages', template(name), options);
  expect(chunks.map((c) => c.label)).toEqual(messageLabels(messages));
  expect(chunks.map((c) => c.text).join('')).toBe(rendered(name, messages, options));
  chunks.forEach((c, k) => expect(c.text, `${name}: ${c.label}`).toContain(shown(messages[k]!)));
  // Tokenised as one text, each message keeps its content's tokens (a token straddling the
  // end may join the next chunk, so the last characters are not asked for).
  const seg = await segmentText(tok, chunks, false);
  seg.segments.forEach((s, k) => {
    const text = tok.decode(seg.ids.slice(s.start, s.end));
    expect(text, `${name}: ${s.label}`).toContain(shown(messages[k]!).slice(0, -2));
  });
  return chunks;
}

describe('real chat templates, one rendering', () => {
  it.each([
    'llama-3.3-instruct',
    'llama-2-chat',
    'qwen2.5-instruct',
    'qwen3-4b-thinking-2507',
    'mistral-7b-instruct-v0.2',
    'phi-3-small',
    'chatml-openhermes-2.5',
  ])('%s: with and without a system message', async (name) => {
    await expectSegmented(name, [SYSTEM, ...ROUNDS]);
    await expectSegmented(name, ROUNDS);
  });

  it.each(['mistral-large-2407-v3', 'gemma-2-9b-it', 'gemma-7b-it', 'phi-3-mini', 'phi-3-medium'])(
    '%s: without a system message',
    async (name) => {
      await expectSegmented(name, ROUNDS);
    },
  );

  it('Mistral v0.2 merges the system prompt into the first user turn: each keeps its own span', async () => {
    const chunks = await expectSegmented('mistral-7b-instruct-v0.2', [SYSTEM, ...ROUNDS]);
    expect(chunks[0]!.text).toBe('<s> [INST] Answer from the passages only.');
    expect(chunks[1]!.text).toBe('\n\nWho designed the tower?');
  });

  it('Qwen2.5 inserts its default system prompt when there is none: it goes to the first user turn', async () => {
    const chunks = await expectSegmented('qwen2.5-instruct', ROUNDS);
    expect(chunks[0]!.text.startsWith('<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.')).toBe(true);
  });

  it('Llama 2 folds the system prompt into the first [INST]: each keeps its own span', async () => {
    const chunks = await expectSegmented('llama-2-chat', [SYSTEM, ...ROUNDS]);
    expect(chunks[0]!.text).toBe('<s>[INST] <<SYS>>\nAnswer from the passages only.');
    expect(chunks[1]!.text).toBe('\n<</SYS>>\n\nWho designed the tower?');
  });

  // The markup that closes a message, through its end-of-turn token and the newline after
  // it, is that message's; the role header that opens the next is the next one's (SPEC).
  it.each([
    ['qwen2.5-instruct', '<|im_end|>\n', '<|im_start|>assistant\n', '<|im_start|>user\n'],
    ['chatml-openhermes-2.5', '<|im_end|>\n', '<|im_start|>assistant\n', '<|im_start|>user\n'],
    [
      'llama-3.3-instruct',
      '<|eot_id|>',
      '<|start_header_id|>assistant<|end_header_id|>\n\n',
      '<|start_header_id|>user<|end_header_id|>\n\n',
    ],
    ['gemma-2-9b-it', '<end_of_turn>\n', '<start_of_turn>model\n', '<start_of_turn>user\n'],
    ['phi-3-mini', '<|end|>\n', '<|assistant|>\n', '<|user|>\n'],
  ])(
    '%s: a turn keeps its closing end-of-turn token; the next opens with its own header',
    async (name, close, assistantOpens, userOpens) => {
      const chunks = await expectSegmented(name, ROUNDS);
      for (let k = 0; k < ROUNDS.length - 1; k++) {
        expect(
          chunks[k]!.text.endsWith(shown(ROUNDS[k]!) + close),
          `${name}: ${chunks[k]!.label} ends ${JSON.stringify(chunks[k]!.text.slice(-30))}`,
        ).toBe(true);
        expect(
          chunks[k + 1]!.text.startsWith(ROUNDS[k + 1]!.role === 'assistant' ? assistantOpens : userOpens),
          `${name}: ${chunks[k + 1]!.label}`,
        ).toBe(true);
      }
    },
  );

  it('Mistral and Llama 2 close an answer with EOS, which stays with it; [/INST] opens the answer', async () => {
    for (const name of ['mistral-7b-instruct-v0.2', 'llama-2-chat']) {
      const chunks = await expectSegmented(name, ROUNDS);
      expect(chunks[1]!.text.startsWith(' [/INST]'), `${name}: ${JSON.stringify(chunks[1]!.text)}`).toBe(true);
      expect(
        chunks[1]!.text.trimEnd().endsWith('designed it.</s>') || chunks[1]!.text.endsWith('designed it. </s>'),
        `${name}: ${JSON.stringify(chunks[1]!.text)}`,
      ).toBe(true);
      expect(chunks[2]!.text.startsWith('</s>')).toBe(false);
    }
  });

  it('Phi-3 small appends EOS without a generation prompt; both go to the last message', async () => {
    const plain = await expectSegmented('phi-3-small', ROUNDS);
    expect(plain.at(-1)!.text.endsWith('<|end|>\n</s>')).toBe(true);
    const prompted = await expectSegmented('phi-3-small', ROUNDS, { addGenerationPrompt: true });
    expect(prompted.at(-1)!.text.endsWith('<|end|>\n<|assistant|>\n')).toBe(true);
  });

  it('Qwen3 re-renders earlier assistant turns without their reasoning; the answer is still found', async () => {
    const thinking = ROUNDS.map((m, k) =>
      k === 1 ? { ...m, content: '<think>\nThe user asks about design.\n</think>\n\n' + m.content } : m,
    );
    const chunks = await expectSegmented('qwen3-4b-thinking-2507', thinking);
    expect(chunks[1]!.text).not.toContain('The user asks about design.');
  });

  it('passes template arguments through (Llama 3.x date_string, a generation prompt)', async () => {
    const chunks = await expectSegmented('llama-3.3-instruct', [SYSTEM, ...ROUNDS], {
      addGenerationPrompt: true,
      kwargs: { date_string: '22 Nov 2026' },
    });
    expect(chunks[0]!.text).toContain('Today Date: 22 Nov 2026');
    expect(chunks.at(-1)!.text.endsWith('<|start_header_id|>assistant<|end_header_id|>\n\n')).toBe(true);
  });

  it('refuses, naming the message, where a template rejects, drops or moves it', () => {
    const withSystem = [SYSTEM, ...ROUNDS];
    for (const name of ['gemma-2-9b-it', 'gemma-7b-it'])
      expect(() => renderChat(tok, withSystem, 'messages', template(name))).toThrow(
        /^messages: the chat template cannot render these messages: System role not supported/,
      );
    for (const name of ['phi-3-mini', 'phi-3-medium'])
      expect(() => renderChat(tok, withSystem, 'messages', template(name))).toThrow(/^messages\[0\]: the chat template drops this message/);
    // Mistral v0.3 / Large 2407 put the system prompt into the last user turn — and drop it
    // when the conversation ends with the assistant (no user turn is `loop.last`).
    expect(() => renderChat(tok, withSystem, 'messages', template('mistral-large-2407-v3'))).toThrow(
      /^messages\[0\]: the chat template drops this message/,
    );
    expect(() => renderChat(tok, withSystem.slice(0, -1), 'messages', template('mistral-large-2407-v3'))).toThrow(
      /^messages\[1\]: the chat template renders this message before messages\[0\]/,
    );
  });

  it('puts labelled chunks inside a message (mtRAG passages in one user turn) in their own spans', async () => {
    const messages: ChatMessage[] = [
      SYSTEM,
      {
        role: 'user',
        content: '',
        chunks: [
          { label: 'passage#1', text: 'The tower was designed by the company of Gustave Eiffel.\n' },
          { label: 'passage#2', text: 'It opened for the 1889 World Fair.\n' },
          { label: 'question', text: 'Who designed it?' },
        ],
      },
      { role: 'assistant', content: 'The Eiffel company.' },
    ];
    const chunks = renderChat(tok, messages, 'messages', template('chatml-openhermes-2.5'));
    expect(chunks.map((c) => c.label)).toEqual(['system', 'passage#1', 'passage#2', 'question', 'assistant#1']);
    // The system turn keeps its <|im_end|>; the user turn's header opens its first chunk
    // and its <|im_end|> closes its last.
    expect(chunks[0]!.text.endsWith('Answer from the passages only.<|im_end|>\n')).toBe(true);
    expect(chunks[1]!.text).toBe('<|im_start|>user\nThe tower was designed by the company of Gustave Eiffel.\n');
    expect(chunks[2]!.text).toBe('It opened for the 1889 World Fair.\n');
    expect(chunks[3]!.text).toBe('Who designed it?<|im_end|>\n');
    const seg = await segmentText(tok, chunks, false);
    expect(seg.segments.map((s) => s.label)).toEqual(['system', 'passage#1', 'passage#2', 'question', 'assistant#1']);
    // A template that trims the message (Gemma) cannot place chunks that end in a newline.
    const trailing = { ...messages[1]!, chunks: [...messages[1]!.chunks!.slice(0, 2)] };
    expect(() => renderChat(tok, [trailing, messages[2]!], 'messages', template('gemma-7b-it'))).toThrow(
      /^messages\[0\]\.chunks: the chat template rewrites/,
    );
  });
});

describe('where the template comes from', () => {
  it('reads chat_template.jinja (it wins over the config) and named template lists', () => {
    const dir = makeFixture(FAMILY_FIXTURES.llama!).dir;
    const cfgFile = path.join(dir, 'tokenizer_config.json');
    const cfg = JSON.parse(fs.readFileSync(cfgFile, 'utf8'));
    fs.writeFileSync(
      cfgFile,
      JSON.stringify({
        ...cfg,
        chat_template: [
          { name: 'tool_use', template: 'TOOLS' },
          { name: 'default', template: template('phi-3-small') },
        ],
      }),
    );
    expect(TextTokenizer.load(dir).chatTemplate).toBe(template('phi-3-small'));
    fs.writeFileSync(path.join(dir, 'chat_template.jinja'), template('chatml-openhermes-2.5'));
    expect(TextTokenizer.load(dir).chatTemplate).toBe(template('chatml-openhermes-2.5'));
  });
});
