// Labelled spans of one token sequence: CHARPEval's chunks (instruction / history /
// knowledge / response) and RefuteBench's rounds (one segment per chat message).
//
// Text chunks are tokenised as one whole text, so the tokens are exactly those the model
// sees; a chunk's span starts where the encoding of the text before it stops agreeing
// with the whole's. A token that straddles a chunk boundary therefore belongs to the
// later chunk.
import { Template } from '@huggingface/jinja';
import { InvalidArgumentError } from './errors.js';
import { commonPrefixLength } from './common/sequences.js';
import { messageLabels, type ChatMessage } from './common/labels.js';

export type { ChatMessage };
import type { TextTokenizer } from './tokenizer.js';

export interface TextChunk {
  label: string;
  text: string;
}

export interface IdChunk {
  label: string;
  ids: number[];
}

export interface Segment {
  label: string;
  /** Token span [start, end) in the whole sequence. */
  start: number;
  end: number;
}

export interface Segmented {
  ids: number[];
  segments: Segment[];
}

function checkSpans(segments: Segment[], field: string): void {
  segments.forEach((s, k) => {
    if (s.end <= s.start) {
      throw new InvalidArgumentError(
        `${field}[${k}]`,
        `chunk ${JSON.stringify(s.label)} has no token of its own after tokenisation (it merged into a neighbour or is empty)`,
      );
    }
  });
}

/** Tokenise labelled text chunks as one text; each chunk's token span. All the
 * encodings (the whole text and each chunk's prefix of it) are asked for at once. */
export async function segmentText(
  tok: TextTokenizer,
  chunks: TextChunk[],
  addSpecialTokens: boolean,
  field = 'chunks',
): Promise<Segmented> {
  if (chunks.length === 0) throw new InvalidArgumentError(field, 'at least one chunk is needed');
  const prefixes = chunks.map((_, k) =>
    chunks
      .slice(0, k + 1)
      .map((c) => c.text)
      .join(''),
  );
  const [whole, ...encoded] = await Promise.all(
    [prefixes.at(-1)!, ...prefixes.slice(0, -1)].map((t) => tok.encodeAsync(t, addSpecialTokens)),
  );
  let start = 0;
  const segments: Segment[] = chunks.map((chunk, k) => {
    const end = k === chunks.length - 1 ? whole!.length : Math.max(start, commonPrefixLength(encoded[k]!, whole!));
    const segment = { label: chunk.label, start, end };
    start = end;
    return segment;
  });
  // Special tokens the post-processor adds in front (BOS) belong to the first chunk.
  checkSpans(segments, field);
  return { ids: whole!, segments };
}

/** Pre-tokenised chunks: the spans are the chunks themselves. */
export function segmentIds(chunks: IdChunk[], field = 'chunks'): Segmented {
  if (chunks.length === 0) throw new InvalidArgumentError(field, 'at least one chunk is needed');
  const ids: number[] = [];
  const segments = chunks.map((c) => {
    const start = ids.length;
    ids.push(...c.ids);
    return { label: c.label, start, end: ids.length };
  });
  checkSpans(segments, field);
  return { ids, segments };
}

/** Render chat messages with the model's chat template (tokenizer_config.json), one text
 * chunk per message: message k is what rendering messages[0..k] adds to messages[0..k-1]. */
export function renderChat(tok: TextTokenizer, messages: ChatMessage[], field = 'messages', template = tok.chatTemplate): TextChunk[] {
  if (!template)
    throw new InvalidArgumentError(field, 'the model has no chat_template in tokenizer_config.json: send labelled chunks instead');
  if (messages.length === 0) throw new InvalidArgumentError(field, 'at least one message is needed');
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (e) {
    throw new InvalidArgumentError(field, `the model's chat template does not parse: ${(e as Error).message}`);
  }
  const special = (name: string) => {
    const v = tok.config[name];
    return typeof v === 'string' ? v : (v?.content ?? '');
  };
  const render = (upTo: number) => {
    if (upTo === 0) return '';
    try {
      return compiled.render({
        messages: messages.slice(0, upTo),
        bos_token: special('bos_token'),
        eos_token: special('eos_token'),
        add_generation_prompt: false, // raise_exception is built into @huggingface/jinja
      });
    } catch (e) {
      throw new InvalidArgumentError(field, `the chat template cannot render messages[0..${upTo - 1}]: ${(e as Error).message}`);
    }
  };
  const labels = messageLabels(messages);
  const chunks: TextChunk[] = [];
  let before = '';
  messages.forEach((m, k) => {
    if (typeof m.content !== 'string' || typeof m.role !== 'string')
      throw new InvalidArgumentError(`${field}[${k}]`, 'role and content must be strings');
    const upTo = render(k + 1);
    if (!upTo.startsWith(before)) {
      throw new InvalidArgumentError(
        `${field}[${k}]`,
        'the chat template renders a conversation differently from its prefix, so messages cannot be told apart',
      );
    }
    chunks.push({ label: labels[k]!, text: upTo.slice(before.length) });
    before = upTo;
  });
  return chunks;
}
