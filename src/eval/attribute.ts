// Attribution over a dataset (`ctxprobe eval attribute`): for every sample, what each
// chunk contributes to the target's log-likelihood (remove and mask), CHARP's history
// sweep, and the mean per chunk label over samples; results.json, report.md and bar
// charts per sample and averaged.
//
// Data: the lines src/eval/records.ts reads (CHARPEval, RefuteBench, mtRAG-style, or
// samples as the Attribute call takes them).
import { toAttributionSample, type AttributeRecord } from './records.js';
import { EvalClient, forEachBatch } from './client.js';
import type { Intervention } from '../requests/attribution.js';

export { toAttributionSample, type AttributeRecord } from './records.js';

export interface ChunkDelta {
  index: number;
  label: string;
  remove?: number;
  mask?: number;
}

export interface AttributionSampleResult {
  id: string;
  labels: string[];
  target: string;
  logprob: number;
  targetTokens: number;
  /** Δ log-likelihood of the target per chunk (sum over its tokens). */
  chunks: ChunkDelta[];
  sweep: { keep: number; remove?: number; mask?: number }[];
}

export interface AttributeReport {
  model: string;
  interventions: Intervention[];
  samples: AttributionSampleResult[];
  /** Mean Δ per chunk label over every chunk with it (in first-seen order). */
  meanByLabel: { label: string; chunks: number; remove?: number; mask?: number }[];
  meanSweep: { keep: number; samples: number; remove?: number; mask?: number }[];
}

export async function runAttribute(
  client: EvalClient,
  records: AttributeRecord[],
  options: { interventions?: Intervention[]; sweep?: number[]; model?: string; batch?: number } = {},
): Promise<AttributeReport> {
  const interventions = options.interventions?.length ? options.interventions : (['remove', 'mask'] as Intervention[]);
  const samples = records.map((r, i) => ({ id: r.id ?? String(i), ...toAttributionSample(r, `line ${i + 1}`) }));
  const results: AttributionSampleResult[] = new Array(samples.length);
  let model = '';
  await forEachBatch(samples, options.batch ?? 4, 1, 'attribution', async (chunk, start) => {
    const res = await client.attribute({
      model: options.model ?? '',
      samples: chunk,
      interventions: interventions.map((v) => (v === 'remove' ? 'INTERVENTION_REMOVE' : 'INTERVENTION_MASK')),
      historySweep: options.sweep ?? [],
    });
    model = res.model;
    res.samples.forEach((s, k) => {
      const pick = (e: { delta: number } | null | undefined) => (e ? e.delta : undefined);
      results[start + k] = {
        id: s.id,
        labels: s.spans.map((x) => x.label),
        target: s.spans[s.target]!.label,
        logprob: s.logprob,
        targetTokens: s.targetTokens,
        chunks: s.chunks.map((c) => ({ index: c.index, label: c.label, remove: pick(c.remove), mask: pick(c.mask) })),
        sweep: s.sweep.map((p) => ({ keep: p.keep, remove: pick(p.remove), mask: pick(p.mask) })),
      };
    });
  });
  const mean = (xs: (number | undefined)[]) => {
    const v = xs.filter((x): x is number => x !== undefined);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : undefined;
  };
  const labels = [...new Set(results.flatMap((r) => r.chunks.map((c) => c.label)))];
  const meanByLabel = labels.map((label) => {
    const cs = results.flatMap((r) => r.chunks.filter((c) => c.label === label));
    return { label, chunks: cs.length, remove: mean(cs.map((c) => c.remove)), mask: mean(cs.map((c) => c.mask)) };
  });
  const keeps = [...new Set(results.flatMap((r) => r.sweep.map((p) => p.keep)))].sort((a, b) => a - b);
  const meanSweep = keeps.map((keep) => {
    const ps = results.flatMap((r) => r.sweep.filter((p) => p.keep === keep));
    return { keep, samples: ps.length, remove: mean(ps.map((p) => p.remove)), mask: mean(ps.map((p) => p.mask)) };
  });
  return { model, interventions, samples: results, meanByLabel, meanSweep };
}

const fmt = (x: number | undefined) => (x === undefined ? '' : x.toFixed(3));
const DONE: Record<Intervention, string> = { remove: 'removed', mask: 'masked' };

export function attributeMarkdown(r: AttributeReport): string {
  const cols = r.interventions;
  const lines = [
    `# Chunk attribution — ${r.model}`,
    '',
    `${r.samples.length} samples. Δ = the target's log-likelihood (nats, summed over its tokens) with the chunk ${cols.map((c) => DONE[c]).join(' / ')}, minus the unchanged sample's: negative means the chunk supported the target.`,
    '',
    '## Mean Δ per chunk label',
    '',
    `| label | chunks | ${cols.map((c) => `Δ ${c}`).join(' | ')} |`,
    `|---|---|${cols.map(() => '---').join('|')}|`,
    ...r.meanByLabel.map((m) => `| ${m.label} | ${m.chunks} | ${cols.map((c) => fmt(m[c])).join(' | ')} |`),
  ];
  if (r.meanSweep.length) {
    lines.push('', '## History sweep (only the last h turns kept)', '', `| h | samples | ${cols.map((c) => `Δ ${c}`).join(' | ')} |`, `|---|---|${cols.map(() => '---').join('|')}|`);
    lines.push(...r.meanSweep.map((p) => `| ${p.keep >= 2 ** 31 - 1 ? 'all' : p.keep} | ${p.samples} | ${cols.map((c) => fmt(p[c])).join(' | ')} |`));
  }
  lines.push('', '## Per sample', '');
  for (const s of r.samples) {
    lines.push(`### ${s.id} (target ${s.target}: ${s.targetTokens} tokens, log-likelihood ${s.logprob.toFixed(3)})`, '');
    lines.push(`| chunk | label | ${cols.map((c) => `Δ ${c}`).join(' | ')} |`, `|---|---|${cols.map(() => '---').join('|')}|`);
    lines.push(...s.chunks.map((c) => `| ${c.index} | ${c.label} | ${cols.map((v) => fmt(c[v])).join(' | ')} |`), '');
  }
  return lines.join('\n') + '\n';
}
