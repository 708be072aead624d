// Labelled spans of one token sequence: CHARPEval's chunks (instruction / history /
// knowledge / response) and RefuteBench's rounds (one segment per chat message).
//
// Text chunks are tokenised as one whole text, so the tokens are exactly those the model
// sees; a chunk's span starts where the encoding of the text before it stops agreeing
// with the whole's. A token that straddles a chunk boundary therefore belongs to the
// later chunk.
import { append } from '../common/sequences.js';
import { InvalidArgumentError, checkTokenIds } from '../common/errors.js';
import type { Engine } from '../engine/engine.js';
import { commonPrefixLength } from '../common/sequences.js';
import { messageLabels, type ChatMessage } from '../common/labels.js';

export type { ChatMessage };
import type { TextTokenizer } from '../text/tokenizer.js';
import {
  compileTemplate,
  describeTemplate,
  renderTemplate,
  templateArguments,
  templateError,
  type CompiledTemplate,
} from '../text/chat-template.js';

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
    append(ids, c.ids);
    return { label: c.label, start, end: ids.length };
  });
  checkSpans(segments, field);
  return { ids, segments };
}

/** Render a conversation with the model's chat template (tokenizer_config.json or
 * chat_template.jinja) as one text — what a chat completion's prompt is — in the
 * template's own process, within its bounds (src/text/chat-template-host.ts). Each message
 * goes to the template whole, as transformers passes it (`name`, `tool_call_id`, …). A
 * conversation the template refuses (its raise_exception) is INVALID_ARGUMENT with the
 * template's own message, as before; the template failing otherwise (an error, its time, output or memory bound) is
 * the checkpoint's, FAILED_PRECONDITION naming the template. */
export async function chatText(
  tok: TextTokenizer,
  messages: { role: string; content: string; name?: string; tool_call_id?: string }[],
  field = 'messages',
  options: ChatRenderOptions = {},
): Promise<string> {
  checkConversation(tok.chatTemplate, messages, field, '');
  return tok.renderChatTemplate(templateArguments(tok.config, messages, options), field);
}

/** The model's chat template rendered once and cut into one chunk per message (see
 * renderChat), in the template's own process, within its bounds (as chatText). */
export async function chatChunks(
  tok: TextTokenizer,
  messages: ChatMessage[],
  field = 'messages',
  options: ChatRenderOptions = {},
): Promise<TextChunk[]> {
  const contents = checkMessages(tok.chatTemplate, messages, field);
  const text = await chatText(tok, withContents(messages, contents), field, options);
  return splitRendering(tok, messages, contents, text, field);
}

/** chatText on the calling thread, unbounded, with any template (`template`): for tests
 * and tools; request paths render through chatText, in the template's process. */
export function renderChatText(
  tok: TextTokenizer,
  messages: { role: string; content: string; name?: string; tool_call_id?: string }[],
  field = 'messages',
  template = tok.chatTemplate,
  options: ChatRenderOptions = {},
): string {
  checkConversation(template, messages, field, '');
  let compiled: CompiledTemplate;
  try {
    compiled = compileTemplate(template!);
  } catch (e) {
    throw new InvalidArgumentError(field, `the model's chat template does not parse: ${(e as Error).message}`);
  }
  const result = renderTemplate(compiled, templateArguments(tok.config, messages, options));
  if ('failure' in result) {
    const where = template === tok.chatTemplate && tok.chatTemplateOrigin ? describeTemplate(tok.chatTemplateOrigin) : 'as given';
    throw templateError(field, where, result.failure);
  }
  return result.text;
}

/** How a conversation is rendered: the template's own arguments. */
export interface ChatRenderOptions {
  /** Render the prompt of the next assistant turn too (default false). */
  addGenerationPrompt?: boolean;
  /** Further template arguments: enable_thinking, date_string, tools, … */
  kwargs?: Record<string, unknown>;
}

/** Render a conversation with the model's chat template once, and cut the text into one
 * chunk per message (or per labelled chunk inside a message): each message's content is
 * found in the rendering, in order; the markup that closes a message, through its
 * end-of-turn token and the newline after it, is that message's, the rest (role headers)
 * goes to the message it introduces (all of it, for a template with no end-of-turn
 * token); markup after the last message (an EOS, the generation prompt) to the last chunk. A
 * template that drops a message, rewrites its content beyond trimming, or reorders
 * messages is refused naming the message. On the calling thread, as renderChatText: request
 * paths use chatChunks. */
export function renderChat(
  tok: TextTokenizer,
  messages: ChatMessage[],
  field = 'messages',
  template = tok.chatTemplate,
  options: ChatRenderOptions = {},
): TextChunk[] {
  const contents = checkMessages(template, messages, field);
  const text = renderChatText(tok, withContents(messages, contents), field, template, options);
  return splitRendering(tok, messages, contents, text, field);
}

function checkConversation(template: string | undefined, messages: unknown[], field: string, advice: string): void {
  if (!template)
    throw new InvalidArgumentError(field, `the model has no chat template (tokenizer_config.json or chat_template.jinja)${advice}`);
  if (messages.length === 0) throw new InvalidArgumentError(field, 'at least one message is needed');
}

/** Each message's content (its chunks joined, where it has chunks), checked. */
function checkMessages(template: string | undefined, messages: ChatMessage[], field: string): string[] {
  checkConversation(template, messages, field, ': send labelled chunks instead');
  messages.forEach((m, k) => {
    if (typeof m.role !== 'string') throw new InvalidArgumentError(`${field}[${k}].role`, 'must be a string');
    if (m.chunks?.length) {
      const joined = m.chunks.map((c) => c.text).join('');
      if (m.content && m.content !== joined)
        throw new InvalidArgumentError(`${field}[${k}].content`, "give the content or its chunks, not both (or the chunks' texts joined)");
    } else if (typeof m.content !== 'string') throw new InvalidArgumentError(`${field}[${k}].content`, 'must be a string');
  });
  return messages.map((m) => (m.chunks?.length ? m.chunks.map((c) => c.text).join('') : m.content));
}

const withContents = (messages: ChatMessage[], contents: string[]) => messages.map((m, k) => ({ role: m.role, content: contents[k]! }));

/** The rendering `text` of `messages` cut into one chunk per message (renderChat). */
function splitRendering(tok: TextTokenizer, messages: ChatMessage[], contents: string[], text: string, field: string): TextChunk[] {
  // Where each message's content sits in the rendering: [start, end), and whether it is
  // the content as given (templates trim; Qwen3 drops earlier turns' reasoning).
  const spans: { start: number; end: number; exact: boolean }[] = [];
  let cursor = 0;
  contents.forEach((content, k) => {
    const found = locate(text, content, cursor);
    if (!found) {
      const earlier = locate(text, content, 0);
      if (earlier && k > 0)
        throw new InvalidArgumentError(
          `${field}[${k}]`,
          `the chat template renders this message before messages[${k - 1}] (it moves a message, e.g. a system prompt into a later turn), so messages cannot be told apart`,
        );
      throw new InvalidArgumentError(
        `${field}[${k}]`,
        'the chat template drops this message or rewrites its content, so it has no span of its own',
      );
    }
    spans.push(found);
    cursor = found.end;
  });
  const labels = messageLabels(messages);
  // Where message k's chunk ends: after its content and the markup that closes it (up to
  // and including an end-of-turn token and the newline written after it); what opens the
  // next message (its role header) is the next one's. End-of-turn tokens are attention
  // sinks: given to the next message, they moved every round's mass to the next round.
  const ends = spans.map((span, k) =>
    k === spans.length - 1 ? text.length : span.end + closingMarkup(text.slice(span.end, spans[k + 1]!.start), tok),
  );
  const chunks: TextChunk[] = [];
  spans.forEach((span, k) => {
    const from = k === 0 ? 0 : ends[k - 1]!;
    const to = ends[k]!;
    const inner = messages[k]!.chunks;
    if (!inner?.length) return chunks.push({ label: labels[k]!, text: text.slice(from, to) });
    if (!span.exact)
      throw new InvalidArgumentError(
        `${field}[${k}].chunks`,
        'the chat template rewrites this message (trims or drops part of it), so its chunks cannot be placed',
      );
    let at = from;
    let within = span.start;
    inner.forEach((c, j) => {
      within += c.text.length;
      const end = j === inner.length - 1 ? to : within;
      chunks.push({ label: c.label, text: text.slice(at, end) });
      at = end;
    });
  });
  return chunks;
}

/** End-of-turn tokens as chat templates write them: ChatML, Llama 3, Gemma, Phi-3, the
 * Llama 2 / Mistral EOS; the model's own EOS is one too. */
const END_OF_TURN = ['<|im_end|>', '<|eot_id|>', '<|eom_id|>', '<end_of_turn>', '<|end|>', '</s>', '<|endoftext|>'];

/** How much of the markup between two messages closes the first: through its first
 * end-of-turn token and one newline after it; none when it has no such token (Mistral's
 * `[/INST]` opens the answer, so it stays with the message it introduces). */
function closingMarkup(gap: string, tok: TextTokenizer): number {
  const eos = tok.eosId !== undefined ? tok.tokenString(tok.eosId) : undefined;
  let first: { at: number; end: number } | undefined;
  for (const marker of eos && !END_OF_TURN.includes(eos) ? [...END_OF_TURN, eos] : END_OF_TURN) {
    const at = gap.indexOf(marker);
    if (at >= 0 && (!first || at < first.at)) first = { at, end: at + marker.length };
  }
  if (!first) return 0;
  return gap[first.end] === '\n' ? first.end + 1 : first.end;
}

/** The first place at or after `from` where `content` — as given, trimmed, or after its
 * last `</think>` (Qwen3 re-renders earlier assistant turns without their reasoning) — is
 * rendered. Empty content sits where the cursor is. */
function locate(text: string, content: string, from: number): { start: number; end: number; exact: boolean } | undefined {
  const candidates = [content, content.trim()];
  const think = content.lastIndexOf('</think>');
  if (think >= 0) candidates.push(content.slice(think + '</think>'.length).trim());
  for (const needle of candidates) {
    if (needle.length === 0) return { start: from, end: from, exact: content.length === 0 };
    const at = text.indexOf(needle, from);
    if (at >= 0) return { start: at, end: at + needle.length, exact: needle === content };
  }
  return undefined;
}

/** What a sample's tokens come from: one of labelled text chunks, labelled token-id chunks,
 * or chat messages (probes and attribution take it). */
export interface SampleContent {
  chunks?: TextChunk[];
  chunkIds?: IdChunk[];
  messages?: ChatMessage[];
  /** Text chunks only: run the tokenizer's special tokens (BOS) on the whole text. */
  addSpecialTokens?: boolean;
  /** Chat messages: render the next assistant turn's prompt too (default false). */
  addGenerationPrompt?: boolean;
  /** Chat messages: further template arguments (enable_thinking, date_string, tools, …). */
  templateKwargs?: Record<string, unknown>;
}

/** A sample's tokens and labelled spans: its chunks tokenised as one text, its token-id
 * chunks concatenated, or its messages rendered with the chat template (throws
 * InvalidArgumentError naming the field). */
export async function segmentSample(
  engine: Pick<Engine, 'tokenizer' | 'config'>,
  sample: SampleContent,
  field: string,
): Promise<Segmented> {
  const tok = engine.tokenizer;
  const given = [sample.chunks, sample.chunkIds, sample.messages].filter((x) => x !== undefined && x.length > 0).length;
  if (given !== 1) throw new InvalidArgumentError(field, 'give exactly one of chunks, chunk_ids or messages');
  if (sample.messages?.length)
    return segmentText(
      tok,
      await chatChunks(tok, sample.messages, `${field}.messages`, {
        addGenerationPrompt: sample.addGenerationPrompt,
        kwargs: sample.templateKwargs,
      }),
      false,
      `${field}.messages`,
    );
  if (sample.chunks?.length) return segmentText(tok, sample.chunks, sample.addSpecialTokens ?? false, `${field}.chunks`);
  sample.chunkIds!.forEach((c, k) => checkTokenIds(c.ids, engine.config.vocabSize, `${field}.chunk_ids[${k}].ids`));
  return segmentIds(sample.chunkIds!, `${field}.chunk_ids`);
}
