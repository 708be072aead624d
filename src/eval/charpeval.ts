// CHARPEval (../shared/papers/charpeval.txt): 6-way response selection by log-likelihood.
//
// Data (JSONL, one sample per line):
//   { "id": "…", "history": [{"role": "user"|"bot", "text": "…"}, …],
//     "user": "the last user utterance", "knowledge": "…",
//     "responses": { "GTRS": "…", "KGIR": "…", "KGUG": "…", "RECF": "…", "IECF": "…", "COEX": "…" } }
// GTRS is the ground truth; the five distractors are the paper's types (§2.3).
//
// The prompt is the paper's (Appendix A): the instruction, `User:` / `Bot:` turns, the
// last user turn, `Knowledge:`, then `Bot:`; each response is scored as the continuation
// " <response>". Few-shot: k demonstrations (the same layout, with their ground truth)
// between the instruction and the sample.
import { EvalClient, forEachBatch, matrixRows } from './client.js';
import { meanMatrix } from '../common/matrix.js';
import type { ContinuationScore__Output } from '../api/generated/ctxprobe/v1/ContinuationScore.js';
import type { ModelInfo__Output } from '../api/generated/ctxprobe/v1/ModelInfo.js';

export { INSTRUCTION, RESPONSE_TYPES, type CharpSample, type ResponseType } from './records.js';
import { INSTRUCTION, RESPONSE_TYPES, type CharpSample, type ResponseType } from './records.js';

export function validateSample(s: CharpSample, where: string): void {
  if (!Array.isArray(s.history)) throw new Error(`${where}: "history" must be a list of {role, text}`);
  s.history.forEach((t, i) => {
    if ((t.role !== 'user' && t.role !== 'bot') || typeof t.text !== 'string')
      throw new Error(`${where}: history[${i}] needs role user|bot and text`);
  });
  for (const key of ['user', 'knowledge'] as const) if (typeof s[key] !== 'string') throw new Error(`${where}: "${key}" must be text`);
  for (const t of RESPONSE_TYPES) if (typeof s.responses?.[t] !== 'string') throw new Error(`${where}: responses.${t} is missing`);
}

/** The prompt's parts: instruction (+ demonstrations), history with the last user turn, knowledge, "Bot:". */
export function promptParts(sample: CharpSample, demos: CharpSample[]) {
  const dialogue = (s: CharpSample) =>
    [...s.history.map((t) => `${t.role === 'user' ? 'User' : 'Bot'}: ${t.text}`), `User: ${s.user}`].join('\n');
  const instruction = `${INSTRUCTION}\n\n`;
  const demonstrations = demos.map((d) => `${dialogue(d)}\n\nKnowledge: ${d.knowledge}\n\nBot: ${d.responses.GTRS}\n\n`).join('');
  return { instruction, demonstrations, history: `${dialogue(sample)}\n\n`, knowledge: `Knowledge: ${sample.knowledge}\n\n`, bot: 'Bot:' };
}

export function buildPrompt(sample: CharpSample, demos: CharpSample[]): string {
  const p = promptParts(sample, demos);
  return p.instruction + p.demonstrations + p.history + p.knowledge + p.bot;
}

/** The k demonstrations of a sample: from `pool`, never the sample itself. */
export function demonstrationsFor(index: number, samples: CharpSample[], pool: CharpSample[] | undefined, k: number): CharpSample[] {
  if (k === 0) return [];
  const source = pool ?? samples;
  const demos = source.filter((d, i) => pool !== undefined || i !== index).slice(0, k);
  if (demos.length < k) throw new Error(`few-shot: ${k} demonstrations asked, ${demos.length} available`);
  return demos;
}

export interface CharpSampleResult {
  id: string;
  logprobs: Record<ResponseType, number>;
  numChars: Record<ResponseType, number>;
  numTokens: Record<ResponseType, number>;
  /** 1 = most likely. */
  ranks: Record<ResponseType, number>;
  predicted: ResponseType;
  predictedNorm: ResponseType;
  correct: boolean;
  correctNorm: boolean;
}

export interface CharpReport {
  model: string;
  samples: number;
  shots: number;
  acc: number;
  accNorm: number;
  /** Share of samples whose top-ranked response is of each type (the paper's Tables 2 and 4). */
  topRankedByType: Record<ResponseType, number>;
  topRankedByTypeNorm: Record<ResponseType, number>;
  results: CharpSampleResult[];
  attention?: { labels: string[]; votes: number[][]; mass: number[][]; layers: number; heads: number };
}

const argmax = (values: Record<ResponseType, number>) =>
  RESPONSE_TYPES.reduce((best, t) => (values[t] > values[best] ? t : best), RESPONSE_TYPES[0]);

export function summarise(results: CharpSampleResult[]): Pick<CharpReport, 'acc' | 'accNorm' | 'topRankedByType' | 'topRankedByTypeNorm'> {
  const n = results.length;
  const share = (pick: (r: CharpSampleResult) => ResponseType) =>
    Object.fromEntries(RESPONSE_TYPES.map((t) => [t, results.filter((r) => pick(r) === t).length / n])) as Record<ResponseType, number>;
  return {
    acc: results.filter((r) => r.correct).length / n,
    accNorm: results.filter((r) => r.correctNorm).length / n,
    topRankedByType: share((r) => r.predicted),
    topRankedByTypeNorm: share((r) => r.predictedNorm),
  };
}

export async function runCharpeval(
  client: EvalClient,
  samples: CharpSample[],
  options: { shots?: number; demos?: CharpSample[]; attention?: boolean; batch?: number; concurrency?: number; model?: string } = {},
): Promise<CharpReport> {
  samples.forEach((s, i) => validateSample(s, `sample ${i + 1}`));
  const shots = options.shots ?? 0;
  const prompts = samples.map((s, i) => buildPrompt(s, demonstrationsFor(i, samples, options.demos, shots)));
  const results: CharpSampleResult[] = new Array(samples.length);
  await forEachBatch(samples, options.batch ?? 8, options.concurrency ?? 4, 'CHARPEval', async (chunk, start) => {
    const res = await client.score({
      model: options.model ?? '',
      items: chunk.map((s, k) => ({
        id: String(start + k),
        contextText: prompts[start + k],
        continuationsText: RESPONSE_TYPES.map((t) => ` ${s.responses[t]}`),
      })),
    });
    res.items.forEach((item, k: number) => {
      const i = start + k;
      const per = <T>(f: (c: ContinuationScore__Output) => T) =>
        Object.fromEntries(RESPONSE_TYPES.map((t, j) => [t, f(item.continuations[j]!)])) as Record<ResponseType, T>;
      const logprobs = per((c) => c.logprob);
      const numChars = per((c) => c.numChars);
      const sorted = [...RESPONSE_TYPES].sort((a, b) => logprobs[b] - logprobs[a]);
      const predicted = argmax(logprobs);
      const predictedNorm = argmax(
        Object.fromEntries(RESPONSE_TYPES.map((t) => [t, logprobs[t] / numChars[t]])) as Record<ResponseType, number>,
      );
      results[i] = {
        id: samples[i]!.id ?? String(i),
        logprobs,
        numChars,
        numTokens: per((c) => c.numTokens as number),
        ranks: Object.fromEntries(sorted.map((t, r) => [t, r + 1])) as Record<ResponseType, number>,
        predicted,
        predictedNorm,
        correct: predicted === 'GTRS',
        correctNorm: predictedNorm === 'GTRS',
      };
    });
  });
  const info = (await client.models()).models.find((m) => !options.model || m.name === options.model);
  const report: CharpReport = { model: info?.name ?? '', samples: samples.length, shots, ...summarise(results), results };
  if (options.attention) report.attention = await charpAttention(client, samples, options, info);
  return report;
}

/** Appendix C.1: per-layer distribution of response tokens' attention-head argmax over
 * instruction / history / knowledge / response (ground-truth response), mean over samples. */
async function charpAttention(
  client: EvalClient,
  samples: CharpSample[],
  options: { shots?: number; demos?: CharpSample[]; model?: string },
  info: ModelInfo__Output | undefined,
) {
  const shots = options.shots ?? 0;
  const chunked = samples.map((s, i) => {
    const p = promptParts(s, demonstrationsFor(i, samples, options.demos, shots));
    return [
      { label: 'instruction', text: p.instruction + p.demonstrations },
      { label: 'history', text: p.history },
      { label: 'knowledge', text: p.knowledge + p.bot },
      { label: 'response', text: ` ${s.responses.GTRS}` },
    ];
  });
  const votes: number[][][] = [];
  const mass: number[][][] = [];
  await forEachBatch(chunked, 4, 1, 'attention', async (chunk) => {
    const res = await client.probe({ model: options.model ?? '', samples: chunk.map((chunks) => ({ chunks, queryLabels: ['response'] })) });
    for (const s of res.samples) {
      votes.push(matrixRows(s.votes));
      mass.push(matrixRows(s.mass));
    }
  });
  return {
    labels: ['instruction', 'history', 'knowledge', 'response'],
    votes: meanMatrix(votes),
    mass: meanMatrix(mass),
    layers: info?.layers ?? 0,
    heads: info?.heads ?? 0,
  };
}

/** A readable report in the layout of the paper's tables. */
export function charpMarkdown(r: CharpReport): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}`;
  const lines = [
    `# CHARPEval — ${r.model}`,
    '',
    `${r.samples} samples, ${r.shots}-shot. acc ${pct(r.acc)}%, acc_norm ${pct(r.accNorm)}%.`,
    '',
    'Top-ranked response by type (% of samples; GTRS is accuracy):',
    '',
    `| ranking | ${RESPONSE_TYPES.join(' | ')} |`,
    `|---|${RESPONSE_TYPES.map(() => '---').join('|')}|`,
    `| log-likelihood | ${RESPONSE_TYPES.map((t) => pct(r.topRankedByType[t])).join(' | ')} |`,
    `| per character | ${RESPONSE_TYPES.map((t) => pct(r.topRankedByTypeNorm[t])).join(' | ')} |`,
    '',
    '## Per sample',
    '',
    `| id | ${RESPONSE_TYPES.map((t) => `${t} (rank)`).join(' | ')} | predicted |`,
    `|---|${RESPONSE_TYPES.map(() => '---').join('|')}|---|`,
    ...r.results.map(
      (s) => `| ${s.id} | ${RESPONSE_TYPES.map((t) => `${s.logprobs[t].toFixed(2)} (${s.ranks[t]})`).join(' | ')} | ${s.predicted} |`,
    ),
  ];
  if (r.attention) {
    lines.push(
      '',
      '## Attention (argmax votes of response tokens, mean over samples)',
      '',
      `| layer | ${r.attention.labels.join(' | ')} |`,
      `|---|${r.attention.labels.map(() => '---').join('|')}|`,
    );
    r.attention.votes.forEach((row, l) => lines.push(`| ${l} | ${row.map(pct).join(' | ')} |`));
  }
  return lines.join('\n') + '\n';
}
