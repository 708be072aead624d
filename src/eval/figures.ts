// Figures of probe and attribution answers, as standalone SVG and HTML reports:
//   - the per-layer chunk distribution as stacked bars (CHARPEval Figure 2);
//   - the round heatmap with labelled axes (RefuteBench 2.0 Figures 8–9);
//   - Δ log-likelihood per chunk under each intervention (attribution).
// Plain SVG strings: no chart library is needed for three fixed chart types, and the
// output opens anywhere. Every mark carries data-* attributes so tests can read what
// is drawn.
import type { ProbeAnswer } from '../requests/probe.js';

const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const num = (x: number) => +x.toFixed(2);

/** Stacked bars: one bar per layer, one colour per chunk, each bar's stack sums to its total. */
export function distributionSvg(values: number[][], labels: string[], title: string): string {
  const layers = values.length;
  const barWidth = Math.max(8, Math.min(28, 560 / Math.max(1, layers)));
  const left = 48;
  const top = 36;
  const height = 220;
  const width = Math.max(left + layers * (barWidth + 4) + 160, left + title.length * 7.5);
  const marks: string[] = [];
  values.forEach((row, l) => {
    let y = top + height;
    row.forEach((v, c) => {
      const h = Math.max(0, v) * height;
      y -= h;
      marks.push(
        `<rect class="bar" x="${num(left + l * (barWidth + 4))}" y="${num(y)}" width="${barWidth}" height="${num(h)}" fill="${PALETTE[c % PALETTE.length]}" data-layer="${l}" data-label="${esc(labels[c]!)}" data-value="${v}"><title>layer ${l}, ${esc(labels[c]!)}: ${(100 * v).toFixed(1)}%</title></rect>`,
      );
    });
    if (layers <= 40 || l % 5 === 0) {
      marks.push(
        `<text class="tick x" x="${num(left + l * (barWidth + 4) + barWidth / 2)}" y="${top + height + 14}" text-anchor="middle" font-size="10">${l}</text>`,
      );
    }
  });
  for (const p of [0, 0.25, 0.5, 0.75, 1]) {
    const y = top + height - p * height;
    marks.push(
      `<line x1="${left - 4}" x2="${left}" y1="${num(y)}" y2="${num(y)}" stroke="#333"/><text class="tick y" x="${left - 6}" y="${num(y + 3)}" text-anchor="end" font-size="10">${p * 100}%</text>`,
    );
  }
  const legendX = left + layers * (barWidth + 4) + 16;
  labels.forEach((label, c) => {
    marks.push(
      `<rect class="legend-swatch" x="${legendX}" y="${top + c * 18}" width="12" height="12" fill="${PALETTE[c % PALETTE.length]}"/><text class="legend" x="${legendX + 18}" y="${top + c * 18 + 10}" font-size="12">${esc(label)}</text>`,
    );
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" class="chart distribution" width="${width}" height="${top + height + 40}" viewBox="0 0 ${width} ${top + height + 40}" font-family="sans-serif" data-layers="${layers}" data-chunks="${labels.length}">
<text class="title" x="${left}" y="20" font-size="14" font-weight="bold">${esc(title)}</text>
<line x1="${left}" x2="${left}" y1="${top}" y2="${top + height}" stroke="#333"/>
${marks.join('\n')}
<text class="axis-label" x="${left + (layers * (barWidth + 4)) / 2}" y="${top + height + 32}" text-anchor="middle" font-size="12">layer</text>
</svg>`;
}

/** Heatmap of a [segments × segments] matrix: rows are query segments, columns key segments. */
export function heatmapSvg(matrix: number[][], labels: string[], title: string): string {
  const n = labels.length;
  const cell = Math.max(18, Math.min(48, 480 / Math.max(1, n)));
  const left = 12 + 7 * Math.max(...labels.map((l) => l.length), 4);
  const top = 40;
  const max = Math.max(1e-12, ...matrix.flat());
  const marks: string[] = [];
  matrix.forEach((row, s) =>
    row.forEach((v, u) => {
      if (u > s) return; // causal: keys after the query segment are never attended
      const shade = Math.round(255 * (1 - v / max));
      marks.push(
        `<rect class="cell" x="${num(left + u * cell)}" y="${num(top + s * cell)}" width="${cell}" height="${cell}" fill="rgb(255,${shade},${shade})" stroke="#fff" data-row="${s}" data-col="${u}" data-value="${v}"><title>${esc(labels[s]!)} → ${esc(labels[u]!)}: ${v.toPrecision(3)}</title></rect>`,
      );
    }),
  );
  labels.forEach((label, i) => {
    marks.push(
      `<text class="row-label" x="${left - 6}" y="${num(top + i * cell + cell / 2 + 4)}" text-anchor="end" font-size="11">${esc(label)}</text>`,
    );
    const x = num(left + i * cell + cell / 2);
    const y = top + n * cell + 8;
    marks.push(`<text class="col-label" x="${x}" y="${y}" transform="rotate(45 ${x} ${y})" font-size="11">${esc(label)}</text>`);
  });
  // Colour scale: white (0) to red (the largest value shown).
  const scaleX = left + n * cell + 8;
  marks.push(
    `<defs><linearGradient id="scale" x1="0" x2="1"><stop offset="0" stop-color="#fff"/><stop offset="1" stop-color="#f00"/></linearGradient></defs><rect class="scale" x="${scaleX}" y="${top + 40}" width="80" height="10" fill="url(#scale)" stroke="#999"/><text x="${scaleX}" y="${top + 64}" font-size="10">0</text><text x="${scaleX + 80}" y="${top + 64}" font-size="10" text-anchor="end">${max.toPrecision(2)}</text>`,
  );
  const width = Math.max(left + n * cell + 120, 12 + title.length * 7.5);
  const height = top + n * cell + 100;
  return `<svg xmlns="http://www.w3.org/2000/svg" class="chart heatmap" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" data-segments="${n}" data-max="${max}">
<text class="title" x="12" y="20" font-size="14" font-weight="bold">${esc(title)}</text>
<text class="axis-label" x="${left + n * cell + 8}" y="${top + 12}" font-size="11">row: query segment</text>
<text class="axis-label" x="${left + n * cell + 8}" y="${top + 28}" font-size="11">column: key segment</text>
${marks.join('\n')}
</svg>`;
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
      parts.push(
        heatmapSvg(mean.heatmap, mean.labels, `Heatmap, mean of ${n} (${o.pool} pool, query ${o.queryReduce}, key ${o.keyReduce})`),
      );
  }
  answer.samples.forEach((s, i) => {
    if (mean && answer.samples.length === 1) return; // the mean is the sample
    if (!mean) parts.push(distributionSvg(s.votes, s.labels, `Sample ${i}: argmax votes per layer`));
    parts.push(
      heatmapSvg(
        s.heatmap,
        s.labels,
        `Sample ${i}: heatmap (${o.pool} pool over layers and heads, query ${o.queryReduce}, key ${o.keyReduce})`,
      ),
    );
  });
  const n = answer.samples.length;
  return figuresHtml(title, `${model} — ${n} sample(s); query chunks: ${answer.samples[0]?.queryLabels.join(', ') ?? ''}`, parts);
}

/** Attribution bars: one group per chunk, one horizontal bar per intervention, diverging
 * from zero (left: the chunk's absence lowers the target's log-likelihood — it supported
 * the target; right: it raises it). */
export function attributionSvg(rows: { label: string; values: Partial<Record<'remove' | 'mask', number>> }[], title: string, unit: string): string {
  const kinds = (['remove', 'mask'] as const).filter((k) => rows.some((r) => r.values[k] !== undefined));
  const colours = { remove: PALETTE[0]!, mask: PALETTE[1]! };
  const left = 16 + 7 * Math.max(4, ...rows.map((r) => r.label.length));
  const half = 200;
  const zero = left + half;
  const bar = 12;
  const group = kinds.length * (bar + 2) + 10;
  const top = 56;
  const max = Math.max(1e-12, ...rows.flatMap((r) => kinds.map((k) => Math.abs(r.values[k] ?? 0))));
  const marks: string[] = [];
  rows.forEach((r, i) => {
    const y0 = top + i * group;
    marks.push(`<text class="row-label" x="${left - 6}" y="${num(y0 + (kinds.length * (bar + 2)) / 2 + 3)}" text-anchor="end" font-size="11">${esc(r.label)}</text>`);
    kinds.forEach((k, j) => {
      const v = r.values[k];
      if (v === undefined) return;
      const w = (Math.abs(v) / max) * half;
      marks.push(
        `<rect class="bar" x="${num(v < 0 ? zero - w : zero)}" y="${num(y0 + j * (bar + 2))}" width="${num(w)}" height="${bar}" fill="${colours[k]}" data-label="${esc(r.label)}" data-intervention="${k}" data-value="${v}"><title>${esc(r.label)}, ${k}: ${v.toPrecision(4)}</title></rect>`,
      );
    });
  });
  const bottom = top + rows.length * group;
  for (const p of [-1, -0.5, 0, 0.5, 1]) {
    const x = zero + p * half;
    marks.push(
      `<line x1="${num(x)}" x2="${num(x)}" y1="${bottom}" y2="${bottom + 4}" stroke="#333"/><text class="tick x" x="${num(x)}" y="${bottom + 16}" text-anchor="middle" font-size="10">${(p * max).toPrecision(2)}</text>`,
    );
  }
  kinds.forEach((k, j) =>
    marks.push(
      `<rect class="legend-swatch" x="${left + j * 90}" y="30" width="12" height="12" fill="${colours[k]}"/><text class="legend" x="${left + j * 90 + 18}" y="40" font-size="12">${k}</text>`,
    ),
  );
  const width = Math.max(zero + half + 24, 12 + title.length * 7.5);
  const height = bottom + 44;
  return `<svg xmlns="http://www.w3.org/2000/svg" class="chart attribution" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" data-rows="${rows.length}" data-max="${max}">
<text class="title" x="12" y="20" font-size="14" font-weight="bold">${esc(title)}</text>
<line x1="${zero}" x2="${zero}" y1="${top - 4}" y2="${bottom}" stroke="#333"/>
<line x1="${zero - half}" x2="${zero + half}" y1="${bottom}" y2="${bottom}" stroke="#333"/>
${marks.join('\n')}
<text class="axis-label" x="${zero}" y="${bottom + 34}" text-anchor="middle" font-size="12">${esc(unit)}</text>
</svg>`;
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
