// Chunk spans from whole-text tokenisation, and chat messages through the model's
// chat template: boundaries inside words, leading spaces and newlines, multi-byte text,
// a system prompt, and the errors for templates and chunks that cannot be segmented.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { TextTokenizer } from '../src/text/tokenizer.js';
import { renderChat, segmentText } from '../src/requests/segments.js';
import { messageLabels } from '../src/common/labels.js';
import { Prober } from '../src/requests/probe.js';
import { InvalidArgumentError } from '../src/common/errors.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}<<SYS>>{{ m.content }}<</SYS>>\n{% elif m.role == 'user' %}[INST] {{ m.content }} [/INST]{% else %} {{ m.content }}{{ eos_token }}\n{% endif %}{% endfor %}";

let tok: TextTokenizer;
let dir: string;
beforeAll(() => {
  dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir;
  const cfgFile = path.join(dir, 'tokenizer_config.json');
  fs.writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(cfgFile, 'utf8')), chat_template: TEMPLATE }));
  tok = TextTokenizer.load(dir);
});

/** Spans tile the whole token sequence, in order. */
function expectTiling(seg: { ids: number[]; segments: { start: number; end: number }[] }) {
  expect(seg.segments[0]!.start).toBe(0);
  seg.segments.forEach((s, k) => {
    expect(s.end).toBeGreaterThan(s.start);
    if (k > 0) expect(s.start).toBe(seg.segments[k - 1]!.end);
  });
  expect(seg.segments.at(-1)!.end).toBe(seg.ids.length);
}

describe('text chunks', () => {
  it('uses the whole text tokens, spans decoding to the chunk texts at clean boundaries', async () => {
    const chunks = [
      { label: 'instruction', text: 'Instruction: choose the best response.\n' },
      { label: 'history', text: 'User: Can you tell me about the Eiffel Tower?\n' },
      { label: 'knowledge', text: 'Knowledge: The tower is 330 metres tall.\n' },
      { label: 'response', text: 'Bot: It is tall.' },
    ];
    const seg = await segmentText(tok, chunks, false);
    expect(seg.ids).toEqual(tok.encode(chunks.map((c) => c.text).join('')));
    expectTiling(seg);
    seg.segments.forEach((s, k) => expect(tok.decode(seg.ids.slice(s.start, s.end))).toBe(chunks[k]!.text));
  });

  it('gives a token that straddles a boundary inside a word to the later chunk', async () => {
    const chunks = [
      { label: 'a', text: 'The Knowl' },
      { label: 'b', text: 'edge was built' },
    ];
    const seg = await segmentText(tok, chunks, false);
    expectTiling(seg);
    const first = tok.decode(seg.ids.slice(0, seg.segments[0]!.end));
    // The first chunk's tokens never reach into the second chunk's text.
    expect('The Knowl'.startsWith(first)).toBe(true);
    expect(tok.decode(seg.ids)).toBe('The Knowledge was built');
  });

  it('keeps leading spaces and newlines with their chunk, and handles multi-byte text', async () => {
    const chunks = [
      { label: 'history', text: 'User: café?' },
      { label: 'knowledge', text: '\n\n  Knowledge: crème brûlée 😀' },
      { label: 'response', text: ' Bot: 東京です' },
    ];
    const seg = await segmentText(tok, chunks, true);
    expect(seg.ids[0]).toBe(tok.bosId); // the special token belongs to the first chunk
    expectTiling(seg);
    expect(tok.decode(seg.ids.slice(1))).toBe(chunks.map((c) => c.text).join(''));
    const texts = seg.segments.map((s) => tok.decode(seg.ids.slice(Math.max(1, s.start), s.end)));
    expect(texts.join('')).toBe(chunks.map((c) => c.text).join(''));
    expect(texts[2]!.startsWith(' Bot')).toBe(true);
  });

  it('refuses a chunk that vanishes in tokenisation, naming it', async () => {
    const err = await segmentText(
      tok,
      [
        { label: 'a', text: 'Hello' },
        { label: 'gap', text: ' ' },
        { label: 'b', text: 'world' },
      ],
      false,
    ).then(
      () => undefined,
      (e) => e as Error,
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err!.message).toMatch(/^chunks\[1\]: chunk "gap" has no token of its own/);
  });
});

describe('chat messages', () => {
  const messages = [
    { role: 'system', content: 'Follow every refutation.' },
    { role: 'user', content: 'Translate: hello' },
    { role: 'assistant', content: 'bonjour' },
    { role: 'user', content: 'No, use a formal tone.' },
    { role: 'assistant', content: 'Bonjour, madame.' },
  ];

  it('renders one segment per message with the model template, labelled by role and turn', async () => {
    expect(messageLabels(messages)).toEqual(['system', 'user#1', 'assistant#1', 'user#2', 'assistant#2']);
    const chunks = renderChat(tok, messages);
    expect(chunks.map((c) => c.text).join('')).toBe(
      '<s><<SYS>>Follow every refutation.<</SYS>>\n[INST] Translate: hello [/INST] bonjour</s>\n[INST] No, use a formal tone. [/INST] Bonjour, madame.</s>\n',
    );
    // One rendering; the markup that closes a message (its EOS and the newline after it)
    // is that message's, the markup that opens the next ([INST], [/INST]) the next one's.
    expect(chunks.map((c) => c.text)).toEqual([
      '<s><<SYS>>Follow every refutation.',
      '<</SYS>>\n[INST] Translate: hello',
      ' [/INST] bonjour</s>\n',
      '[INST] No, use a formal tone.',
      ' [/INST] Bonjour, madame.</s>\n',
    ]);
    const seg = await segmentText(tok, chunks, false);
    expect(seg.ids[0]).toBe(tok.bosId); // "<s>" in the rendered text is the special token
    expect(seg.ids.filter((id) => id === tok.eosId)).toHaveLength(2);
    expectTiling(seg);
  });

  it('refuses a template that cannot render, or is missing', () => {
    expect(() => renderChat(tok, messages, 'messages', "{{ raise_exception('Conversation roles must alternate') }}")).toThrow(
      /messages: the chat template cannot render these messages: Conversation roles must alternate/,
    );
    expect(() => renderChat(tok, messages, 'messages', '{% for m in messages %}')).toThrow(
      /messages: the model's chat template does not parse/,
    );
    const plain = TextTokenizer.load(makeFixture(FAMILY_FIXTURES.gpt2!).dir);
    expect(() => renderChat(plain, messages)).toThrow(/no chat template/);
  });

  it('probes a dialogue by rounds through the prober', async () => {
    const engine = await Engine.load(dir, { threads: 1 });
    const answer = await new Prober(engine).probe([{ messages, excludePositions: [0] }]);
    const s = answer.samples[0]!;
    expect(s.labels).toEqual(['system', 'user#1', 'assistant#1', 'user#2', 'assistant#2']);
    expect(s.queryLabels).toEqual(['assistant#2']);
    expect(s.heatmap).toHaveLength(5);
    s.heatmap.forEach((row, i) => row.forEach((v, j) => (j > i ? expect(v).toBe(0) : expect(v).toBeGreaterThan(0))));
    await engine.release();
  });
});

afterAll(() => {});
