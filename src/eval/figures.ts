// Figures of probe and attribution answers as standalone SVG and HTML files, for the CLI
// and the runners (--html, --svg): the viewer page's own charts (src/figures/charts.ts,
// Observable Plot) drawn into linkedom's document instead of a browser's, so a figure
// looks the same wherever it is made.
//   - the per-layer chunk distribution as stacked bars (CHARPEval Figure 2);
//   - the round heatmap with labelled axes (RefuteBench 2.0 Figures 8–9);
//   - Δ log-likelihood per chunk under each intervention (attribution).
import * as Plot from '@observablehq/plot';
import { parseHTML } from 'linkedom';
import type { ProbeAnswer } from '../requests/probe.js';
import { effectBars, layerBars, roundHeatmap, svgText, type Draw } from '../figures/charts.js';

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

let draw: Draw | undefined;
/** Plot and a document to draw into (one for the process: figures are serialised at once). */
function drawing(): Draw {
  draw ??= { Plot, document: parseHTML('<!doctype html><html><body></body></html>').document as unknown as Document };
  return draw;
}

/** Stacked bars: one bar per layer, one colour per chunk, each bar's stack sums to its total. */
export function distributionSvg(values: number[][], labels: string[], title: string): string {
  return svgText(layerBars(drawing(), values, labels, title));
}

/** Query segment × key segment, lower-triangular. */
export function heatmapSvg(matrix: number[][], labels: string[], title: string): string {
  return svgText(roundHeatmap(drawing(), matrix, labels, title));
}

/** One HTML page: the mean distributions (votes and mass) and every sample's heatmap. */
export function probeReportHtml(answer: ProbeAnswer, title = 'ctxprobe attention report', model = ''): string {
  const o = answer.options;
  const parts: string[] = [];
  const mean = answer.mean;
  if (mean) {
    const n = answer.samples.length;
    parts.push(distributionSvg(mean.votes, mean.labels, `Argmax votes per layer (mean of ${n} sample${n === 1 ? '' : 's'})`));
    parts.push(distributionSvg(mean.mass, mean.labels, `Attention mass per layer (mean of ${n} sample${n === 1 ? '' : 's'})`));
    if (mean.heatmap)
      parts.push(heatmapSvg(mean.heatmap, mean.labels, `Heatmap, mean of ${n} (${o.pool} pool, query ${o.queryReduce}, key ${o.keyReduce})`));
  }
  answer.samples.forEach((s, i) => {
    if (mean && answer.samples.length === 1) return; // the mean is the sample
    if (!mean) parts.push(distributionSvg(s.votes, s.labels, `Sample ${i}: argmax votes per layer`));
    parts.push(heatmapSvg(s.heatmap, s.labels, `Sample ${i}: heatmap (${o.pool} pool over layers and heads, query ${o.queryReduce}, key ${o.keyReduce})`));
  });
  const n = answer.samples.length;
  return figuresHtml(title, `${model} — ${n} sample(s); query chunks: ${answer.samples[0]?.queryLabels.join(', ') ?? ''}`, parts);
}

/** Attribution bars: one group per chunk, one horizontal bar per intervention, diverging
 * from zero (left: the chunk's absence lowers the target's log-likelihood — it supported
 * the target; right: it raises it). */
export function attributionSvg(rows: { label: string; values: Partial<Record<'remove' | 'mask', number>> }[], title: string, unit: string): string {
  return svgText(effectBars(drawing(), rows.map((r) => ({ label: r.label, ...r.values })), title, unit));
}

/** One HTML page of figures (SVG strings) under a title. */
export function figuresHtml(title: string, meta: string, figures: string[]): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;margin:24px;color:#222} figure{margin:0 0 32px} p.meta{color:#555}</style></head>
<body><h1>${esc(title)}</h1>
<p class="meta">${esc(meta)}</p>
${figures.map((p) => `<figure>${p}</figure>`).join('\n')}
</body></html>
`;
}
