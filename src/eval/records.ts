// The runners' data lines as API samples, in one module free of Node and of the client
// (the viewer page imports it too, from /ui/src/eval/records.js): a CHARPEval sample,
// a RefuteBench dialogue, an mtRAG-style turn with passages, or a sample as the API takes it.
//
// Data (JSONL, one sample per line), any of:
//   CHARPEval: { "history": [{role, text}], "user", "knowledge", "responses": {"GTRS", …} }
//     → chunks instruction / history (one per turn) / user / knowledge / response (GTRS),
//       the text CHARPEval scores (its prompt + " " + the ground truth).
//   RefuteBench: { "messages": [system, user, assistant, …, assistant] } → the chat
//     template's rendering; target: the last assistant message.
//   mtRAG-style: { "messages": […, user, assistant], "passages": [{"text", "label"?}] } →
//     the passages (labelled e.g. reference / noise; default passage#k) as chunks inside
//     the last user message, before its question.
//   Or a sample as the Attribute call takes it: { "chunks": [{label, text}] } or
//   { "messages" }, with optional "target" and "ablate" labels.
import type { ChatMessage } from '../common/labels.js';
import type { AttributionSample } from '../api/generated/ctxprobe/v1/AttributionSample.js';
import type { ProbeSample } from '../api/generated/ctxprobe/v1/ProbeSample.js';

export const RESPONSE_TYPES = ['GTRS', 'KGIR', 'KGUG', 'RECF', 'IECF', 'COEX'] as const;
export type ResponseType = (typeof RESPONSE_TYPES)[number];

export const INSTRUCTION =
  'You are given a conversation history between a "User" and a "Bot", along with a piece of "Knowledge" containing factual information. ' +
  "Your goal is to produce a response to the User's last message, relying only on the provided Knowledge. " +
  'Do not introduce any new information that is not present in the Knowledge. ' +
  'If the User asks about something that is not covered by the Knowledge, you may express uncertainty, but do not invent details.';

export interface CharpSample {
  id?: string;
  history: { role: 'user' | 'bot'; text: string }[];
  user: string;
  knowledge: string;
  responses: Record<ResponseType, string>;
}

export interface AttributeRecord {
  id?: string;
  chunks?: { label: string; text: string }[];
  messages?: ChatMessage[];
  passages?: { text: string; label?: string }[];
  target?: string;
  ablate?: string[];
  history?: CharpSample['history'];
  user?: string;
  knowledge?: string;
  responses?: CharpSample['responses'];
}

/** A data line as an Attribute sample (throws naming the line's layout problem). */
export function toAttributionSample(r: AttributeRecord, where: string): AttributionSample {
  if (r.responses && r.knowledge !== undefined) {
    if (!Array.isArray(r.history) || typeof r.user !== 'string' || typeof r.responses.GTRS !== 'string')
      throw new Error(`${where}: a CHARPEval sample needs history, user, knowledge and responses.GTRS`);
    const role = (t: { role: string }) => (t.role === 'user' ? 'User' : 'Bot');
    return {
      chunks: [
        { label: 'instruction', text: `${INSTRUCTION}\n\n` },
        ...r.history.map((t) => ({ label: 'history', text: `${role(t)}: ${t.text}\n` })),
        { label: 'user', text: `User: ${r.user}\n\n` },
        { label: 'knowledge', text: `Knowledge: ${r.knowledge}\n\n` },
        { label: 'response', text: `Bot: ${r.responses.GTRS}` },
      ],
      targetLabel: 'response',
    };
  }
  if (r.messages) {
    if (!Array.isArray(r.messages) || r.messages.length < 2) throw new Error(`${where}: "messages" needs at least two messages`);
    if (r.messages.at(-1)!.role !== 'assistant') throw new Error(`${where}: the last message must be the assistant's response`);
    let messages = r.messages.map((m) => ({ role: m.role, content: m.content }));
    if (r.passages?.length) {
      const k = messages.length - 2;
      if (messages[k]!.role !== 'user') throw new Error(`${where}: passages go into the user message before the response`);
      const chunks = r.passages.map((p, j) => ({ label: p.label ?? `passage#${j + 1}`, text: `${p.text}\n\n` }));
      messages = messages.map((m, i) => (i === k ? { role: m.role, content: '', chunks: [...chunks, { label: 'question', text: m.content }] } : m));
    }
    return { messages, targetLabel: r.target ?? '', ablateLabels: r.ablate ?? [] };
  }
  if (r.chunks?.length) return { chunks: r.chunks.map((c) => ({ label: c.label, text: c.text })), targetLabel: r.target ?? '', ablateLabels: r.ablate ?? [] };
  throw new Error(`${where}: give a CHARPEval sample, "messages" (optionally with "passages"), or "chunks"`);
}

/** The fields of a ProbeSample, by their JSON and proto names. */
const PROBE_FIELDS = new Set([
  'id', 'chunks', 'messages', 'queryLabels', 'query_labels', 'excludePositions', 'exclude_positions',
  'addSpecialTokens', 'add_special_tokens', 'addGenerationPrompt', 'add_generation_prompt',
  'chatTemplateKwargsJson', 'chat_template_kwargs_json',
]);

/** What the viewer probes for a pasted line: a sample in ProbeSample's shape as given (keys
 * that are no ProbeSample field set aside and named, as a RefuteBench line's "setting"),
 * or a runner's line (CHARPEval, mtRAG-style) as its runner builds it, the target as the
 * query chunk. */
export function viewerSample(record: Record<string, unknown>): { sample: ProbeSample; target?: string; ignored: string[] } {
  const r = record as AttributeRecord & Record<string, unknown>;
  const runnerLine = (r.responses && r.knowledge !== undefined) || (r.messages && r.passages);
  if (runnerLine) {
    const a = toAttributionSample(r, 'the sample');
    const target = a.targetLabel || undefined;
    const ignored = Object.keys(record).filter((k) => !['id', 'history', 'user', 'knowledge', 'responses', 'messages', 'passages', 'target', 'ablate'].includes(k));
    return { sample: { ...(r.id ? { id: String(r.id) } : {}), chunks: a.chunks, messages: a.messages }, target, ignored };
  }
  if (!Array.isArray(r.chunks) && !Array.isArray(r.messages))
    throw new Error('give labelled "chunks", chat "messages", or a CHARPEval / RefuteBench / mtRAG line');
  const ignored = Object.keys(record).filter((k) => !PROBE_FIELDS.has(k) && k !== 'target');
  const sample = Object.fromEntries(Object.entries(record).filter(([k]) => PROBE_FIELDS.has(k))) as ProbeSample;
  return { sample, target: typeof r.target === 'string' ? r.target : undefined, ignored };
}
