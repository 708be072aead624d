// KIEval's contamination checks (../shared/papers/kieval.txt §4): average LM loss (Wei et
// al. 2023) and Min-K% Prob (Shi et al. 2023) per text, compared between two sets.
//
// Sets are JSONL files with {"text": …} per line, or plain text files with one text per line.
import fs from 'node:fs';
import { EvalClient, forEachBatch } from './client.js';

export interface TextScore {
  meanLoss: number;
  minKLogprob: number;
  numTokens: number;
}

export interface ContaminationReport {
  model: string;
  minKPercent: number;
  a: TextScore[];
  b: TextScore[];
  summary: {
    meanLossA: number;
    meanLossB: number;
    /** meanLossA − meanLossB: negative when set A looks more familiar to the model. */
    meanLossDifference: number;
    minKA: number;
    minKB: number;
    minKDifference: number;
    /** ROC AUC of telling A from B: by −loss, and by Min-K% log-prob (higher = more familiar). */
    aucMeanLoss: number;
    aucMinK: number;
  };
}

/** ROC AUC of scores `pos` against `neg` (Mann–Whitney: P(pos > neg) + ½ P(pos = neg)). */
export function rocAuc(pos: number[], neg: number[]): number {
  if (pos.length === 0 || neg.length === 0) throw new Error('AUC needs texts in both sets');
  const all = [...pos.map((v) => ({ v, p: 1 })), ...neg.map((v) => ({ v, p: 0 }))].sort((x, y) => x.v - y.v);
  // Rank sum of the positives with mid-ranks for ties.
  let rankSum = 0;
  for (let i = 0; i < all.length;) {
    let j = i;
    while (j < all.length && all[j]!.v === all[i]!.v) j++;
    const midRank = (i + 1 + j) / 2;
    for (let k = i; k < j; k++) if (all[k]!.p) rankSum += midRank;
    i = j;
  }
  return (rankSum - (pos.length * (pos.length + 1)) / 2) / (pos.length * neg.length);
}

export function readTexts(file: string): string[] {
  const lines = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim().length > 0);
  return lines.map((l, i) => {
    if (!l.trimStart().startsWith('{')) return l;
    const obj = JSON.parse(l);
    if (typeof obj.text !== 'string') throw new Error(`${file}:${i + 1}: a JSON line needs "text"`);
    return obj.text;
  });
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

export async function runContamination(
  client: EvalClient,
  setA: string[],
  setB: string[],
  options: { minKPercent?: number; model?: string } = {},
): Promise<ContaminationReport> {
  const k = options.minKPercent ?? 20;
  const score = async (texts: string[], label: string) => {
    const out: TextScore[] = new Array(texts.length);
    await forEachBatch(texts, 16, 2, label, async (chunk, start) => {
      const res = await client.rolling({
        model: options.model ?? '',
        items: chunk.map((text, j) => ({ id: String(start + j), text, minKPercent: k })),
      });
      res.items.forEach((r, j: number) => (out[start + j] = { meanLoss: r.meanLoss, minKLogprob: r.minKLogprob, numTokens: r.numTokens }));
    });
    return out;
  };
  const a = await score(setA, 'set A');
  const b = await score(setB, 'set B');
  const model = (await client.models()).models.find((m) => !options.model || m.name === options.model)?.name ?? '';
  return {
    model,
    minKPercent: k,
    a,
    b,
    summary: {
      meanLossA: mean(a.map((s) => s.meanLoss)),
      meanLossB: mean(b.map((s) => s.meanLoss)),
      meanLossDifference: mean(a.map((s) => s.meanLoss)) - mean(b.map((s) => s.meanLoss)),
      minKA: mean(a.map((s) => s.minKLogprob)),
      minKB: mean(b.map((s) => s.minKLogprob)),
      minKDifference: mean(a.map((s) => s.minKLogprob)) - mean(b.map((s) => s.minKLogprob)),
      aucMeanLoss: rocAuc(
        a.map((s) => -s.meanLoss),
        b.map((s) => -s.meanLoss),
      ),
      aucMinK: rocAuc(
        a.map((s) => s.minKLogprob),
        b.map((s) => s.minKLogprob),
      ),
    },
  };
}

export function contaminationMarkdown(r: ContaminationReport): string {
  const s = r.summary;
  return [
    `# Contamination check — ${r.model}`,
    '',
    `Set A: ${r.a.length} texts; set B: ${r.b.length} texts; Min-K% with k = ${r.minKPercent}.`,
    '',
    '| measure | set A | set B | A − B | ROC AUC (A vs B) |',
    '|---|---|---|---|---|',
    `| mean LM loss | ${s.meanLossA.toFixed(4)} | ${s.meanLossB.toFixed(4)} | ${s.meanLossDifference.toFixed(4)} | ${s.aucMeanLoss.toFixed(3)} |`,
    `| Min-K% log-prob | ${s.minKA.toFixed(4)} | ${s.minKB.toFixed(4)} | ${s.minKDifference.toFixed(4)} | ${s.aucMinK.toFixed(3)} |`,
    '',
    'An AUC above 0.5 means the model finds set A more familiar than set B (lower loss, higher Min-K% log-prob).',
    '',
  ].join('\n');
}
