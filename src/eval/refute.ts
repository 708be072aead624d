// RefuteBench 2.0 style analysis (../shared/papers/refutebench2.txt §5): round heatmaps of
// dialogues with refutations, and the forgetting view — how much attention the last
// response pays to each earlier round.
//
// Data (JSONL, one dialogue per line):
//   { "id": "…", "setting": "transient"|"persistent",
//     "messages": [{"role": "system", "content": "…"}, {"role": "user", "content": "query"},
//                  {"role": "assistant", "content": "…"}, {"role": "user", "content": "refutation"}, …] }
// Messages are rendered with the model's chat template (one segment per message) or,
// with `plain`, as "Role: content" paragraphs for models without one. With `generate`
// (playDialogues), the model writes every assistant turn itself: each user turn in order,
// the response generated after the dialogue so far, then the next user turn appended —
// the dialogue RefuteBench plays — and that dialogue is what gets probed.
import { messageLabels, type ChatMessage } from '../common/labels.js';
import { EvalClient, forEachBatch, matrixRows } from './client.js';
import { meanMatrix } from '../common/matrix.js';

export interface Dialogue {
  id?: string;
  setting?: string;
  messages: ChatMessage[];
}

export interface DialogueResult {
  id: string;
  setting?: string;
  labels: string[];
  heatmap: number[][];
  /** Round → share of the last response's attention mass (mean over layers); round 0 is the system prompt. */
  lastResponseShare: Record<string, number>;
}

export interface RefuteReport {
  model: string;
  pool: string;
  queryReduce: string;
  keyReduce: string;
  dialogues: DialogueResult[];
  /** Mean heatmap over dialogues with the same labels as the first. */
  meanHeatmap?: { labels: string[]; values: number[][]; dialogues: number };
  meanLastResponseShare: Record<string, number>;
}

export interface PlayOptions {
  model?: string;
  maxTokens?: number;
  temperature?: number;
  seed?: number;
}

/** Replace every assistant turn by the model's own response, generated round by round
 * (the system prompt and user turns kept; a dialogue ends with its last response). */
export async function playDialogues(client: EvalClient, dialogues: Dialogue[], options: PlayOptions = {}): Promise<Dialogue[]> {
  const played: Dialogue[] = new Array(dialogues.length);
  await forEachBatch(dialogues, 1, 2, 'RefuteBench (generating)', async ([d], start) => {
    const given = d!.messages.filter((m) => m.role !== 'assistant');
    const messages: ChatMessage[] = [];
    for (const m of given) {
      messages.push(m);
      if (m.role !== 'user') continue;
      const steps = await client.generate({
        model: options.model ?? '',
        prompt: { messages: messages.map((x) => ({ role: x.role, content: x.content })), addGenerationPrompt: true },
        sampling: { temperature: options.temperature ?? 0, maxTokens: options.maxTokens ?? 64, ...(options.seed !== undefined ? { seed: { value: options.seed } } : {}) },
      });
      messages.push({ role: 'assistant', content: steps.map((s) => s.text).join('') });
    }
    played[start] = { ...d!, messages };
  });
  return played;
}

export const roundOf = (label: string) => (label === 'system' ? '0' : (label.split('#')[1] ?? '0'));

function plainChunks(messages: ChatMessage[]) {
  const labels = messageLabels(messages);
  return messages.map((m, i) => ({ label: labels[i]!, text: `${m.role[0]!.toUpperCase()}${m.role.slice(1)}: ${m.content}\n\n` }));
}

export async function runRefute(
  client: EvalClient,
  dialogues: Dialogue[],
  options: { plain?: boolean; pool?: 'max' | 'mean'; model?: string; excludeFirst?: boolean } = {},
): Promise<RefuteReport> {
  dialogues.forEach((d, i) => {
    if (!Array.isArray(d.messages) || d.messages.length < 2) throw new Error(`dialogue ${i + 1}: "messages" needs at least two messages`);
    if (d.messages.at(-1)!.role !== 'assistant') throw new Error(`dialogue ${i + 1}: the last message must be the assistant's response`);
  });
  const results: DialogueResult[] = new Array(dialogues.length);
  let meta = { pool: '', queryReduce: '', keyReduce: '', model: '' };
  await forEachBatch(dialogues, 2, 1, 'RefuteBench', async (chunk, start) => {
    const samples = chunk.map((d) => {
      const labels = messageLabels(d.messages);
      return {
        ...(options.plain ? { chunks: plainChunks(d.messages) } : { messages: d.messages }),
        queryLabels: [labels.at(-1)!],
        excludePositions: options.excludeFirst === false ? [] : [0],
      };
    });
    const res = await client.probe({ model: options.model ?? '', samples, pool: options.pool === 'mean' ? 'POOL_MEAN' : 'POOL_MAX' });
    meta = { pool: res.pool, queryReduce: res.queryReduce, keyReduce: res.keyReduce, model: res.model };
    res.samples.forEach((s, k: number) => {
      const d = chunk[k]!;
      const labels: string[] = s.spans.map((x) => x.label);
      const mass = matrixRows(s.mass);
      const share: Record<string, number> = {};
      labels.forEach((label, c) => {
        const meanOverLayers = mass.reduce((a, row) => a + row[c]!, 0) / mass.length;
        share[roundOf(label)] = (share[roundOf(label)] ?? 0) + meanOverLayers;
      });
      results[start + k] = {
        id: d.id ?? String(start + k),
        setting: d.setting,
        labels,
        heatmap: matrixRows(s.heatmap),
        lastResponseShare: share,
      };
    });
  });
  const first = results[0]!;
  const same = results.filter((r) => r.labels.join('|') === first.labels.join('|'));
  const meanHeatmap =
    same.length > 0
      ? {
          labels: first.labels,
          dialogues: same.length,
          values: meanMatrix(same.map((r) => r.heatmap)),
        }
      : undefined;
  const rounds = [...new Set(results.flatMap((r) => Object.keys(r.lastResponseShare)))].sort((a, b) => Number(a) - Number(b));
  const meanLastResponseShare = Object.fromEntries(
    rounds.map((k) => [k, results.reduce((a, r) => a + (r.lastResponseShare[k] ?? 0), 0) / results.length]),
  );
  return { ...meta, dialogues: results, meanHeatmap, meanLastResponseShare };
}

export function refuteMarkdown(r: RefuteReport): string {
  const rounds = Object.keys(r.meanLastResponseShare);
  const lines = [
    `# RefuteBench-style attention — ${r.model}`,
    '',
    `${r.dialogues.length} dialogues; heatmaps pool ${r.pool} over layers and heads, query ${r.queryReduce}, key ${r.keyReduce}.`,
    '',
    "Share of the last response's attention mass per round (round 0: system prompt):",
    '',
    `| dialogue | ${rounds.map((k) => `round ${k}`).join(' | ')} |`,
    `|---|${rounds.map(() => '---').join('|')}|`,
    ...r.dialogues.map((d) => `| ${d.id} | ${rounds.map((k) => (100 * (d.lastResponseShare[k] ?? 0)).toFixed(1)).join(' | ')} |`),
    `| mean | ${rounds.map((k) => (100 * r.meanLastResponseShare[k]!).toFixed(1)).join(' | ')} |`,
  ];
  return lines.join('\n') + '\n';
}
