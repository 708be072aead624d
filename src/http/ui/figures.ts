// The viewer's figures, drawn with Observable Plot (served from the package as a UMD
// script: window.Plot over window.d3). Each figure is one self-contained <svg> — chart and
// legend together — so what the page shows is what "Export SVG" saves.
//   layerBars      per-layer chunk distribution as stacked bars (CHARPEval Fig. 2)
//   layerCells     layers × chunks as a heatmap, values printed
//   roundHeatmap   query segment × key segment, lower-triangular (RefuteBench 2.0 Figs. 8–9)
//   effectBars     Δ log-likelihood per chunk under each intervention (attribution)
//   sweepLines     Δ against the number of history turns kept (CHARP's sweep)
//   tokenCells     generated tokens × chunks: where each token looked while it was written
import type * as PlotNS from '@observablehq/plot';

declare const Plot: typeof PlotNS;

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const FONT = 'system-ui, sans-serif';

/** Labels made unique by position ("2 history") when a label repeats. */
export function uniqueLabels(labels: string[]): string[] {
  const repeated = new Set(labels.filter((l, i) => labels.indexOf(l) !== i));
  return labels.map((l, i) => (repeated.has(l) ? `${i} ${l}` : l));
}

/** One SVG: `parts` (Plot's charts and legends, each an <svg>) stacked under a title. */
function compose(title: string, parts: Element[], kind: string): SVGSVGElement {
  const svgs = parts.flatMap((p) => (p instanceof SVGSVGElement ? [p] : [...p.querySelectorAll('svg')])) as SVGSVGElement[];
  const out = document.createElementNS(SVG_NS, 'svg');
  out.setAttribute('xmlns', SVG_NS);
  out.setAttribute('class', `figure ${kind}`);
  out.setAttribute('font-family', FONT);
  const heading = document.createElementNS(SVG_NS, 'text');
  heading.setAttribute('x', '4');
  heading.setAttribute('y', '16');
  heading.setAttribute('font-size', '13');
  heading.setAttribute('font-weight', '600');
  heading.textContent = title;
  out.append(heading);
  let y = 26;
  // 13px bold runs ~8 px a character; the parts sit 8 px in, so a legend's first tick
  // label (centred on its edge) is not cut.
  let width = 8 + title.length * 8;
  for (const svg of svgs) {
    const w = Number(svg.getAttribute('width')) || 640;
    const h = Number(svg.getAttribute('height')) || 40;
    svg.setAttribute('x', '8');
    svg.setAttribute('y', String(y));
    out.append(svg);
    y += h + 4;
    width = Math.max(width, w + 8);
  }
  out.setAttribute('width', String(width));
  out.setAttribute('height', String(y));
  out.setAttribute('viewBox', `0 0 ${width} ${y}`);
  return out;
}

/** A categorical legend as SVG swatches (Plot's own is HTML, which an SVG file cannot hold). */
function swatches(labels: string[], colours: string[]): SVGSVGElement {
  const svg = document.createElementNS(SVG_NS, 'svg');
  let x = 4;
  let row = 0;
  const parts: string[] = [];
  labels.forEach((label, i) => {
    const w = 18 + label.length * 6.6 + 12;
    if (x + w > 640) {
      x = 4;
      row++;
    }
    const y = 4 + row * 18;
    parts.push(`<rect x="${x}" y="${y}" width="12" height="12" fill="${colours[i % colours.length]}"></rect>`);
    parts.push(`<text x="${x + 16}" y="${y + 10}" font-size="11"></text>`);
    x += w;
  });
  svg.innerHTML = parts.join('');
  svg.querySelectorAll('text').forEach((t, i) => (t.textContent = labels[i]!));
  svg.setAttribute('class', 'legend');
  svg.setAttribute('width', '640');
  svg.setAttribute('height', String(22 + row * 18));
  return svg;
}

const pct = (v: number) => `${(100 * v).toFixed(1)}%`;

/** Stacked bars: a bar per layer, a colour per chunk, each bar summing to its total. */
export function layerBars(values: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const data = values.flatMap((row, layer) => row.map((value, c) => ({ layer, chunk: names[c]!, value })));
  const colours = names.map((_, i) => PALETTE[i % PALETTE.length]!);
  const chart = Plot.plot({
    width: Math.max(360, 60 + values.length * 22),
    height: 240,
    marginLeft: 48,
    x: { label: 'layer', tickFormat: (d: number) => (values.length <= 40 || d % 5 === 0 ? String(d) : '') },
    y: { label: 'share', domain: [0, 1], tickFormat: '.0%', grid: true },
    color: { domain: names, range: colours },
    marks: [
      Plot.barY(data, { x: 'layer', y: 'value', fill: 'chunk', order: names, title: (d: (typeof data)[number]) => `layer ${d.layer}, ${d.chunk}: ${pct(d.value)}` }),
      Plot.ruleY([0]),
    ],
  });
  return compose(title, [swatches(names, colours), chart], 'layer-bars');
}

/** Layers × chunks as coloured cells with their values. */
export function layerCells(values: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const data = values.flatMap((row, layer) => row.map((value, c) => ({ layer, chunk: names[c]!, value })));
  const chart = Plot.plot({
    width: Math.max(360, 80 + names.length * 70),
    height: Math.max(160, 50 + values.length * 22),
    marginLeft: 48,
    marginBottom: 60,
    x: { label: null, domain: names, tickRotate: names.length > 6 ? -30 : 0 },
    y: { label: 'layer', domain: values.map((_, l) => l) },
    color: { type: 'linear', scheme: 'blues', domain: [0, Math.max(1e-9, ...data.map((d) => d.value))] },
    marks: [
      Plot.cell(data, { x: 'chunk', y: 'layer', fill: 'value', inset: 0.5, title: (d: (typeof data)[number]) => `layer ${d.layer}, ${d.chunk}: ${pct(d.value)}` }),
      Plot.text(data, { x: 'chunk', y: 'layer', text: (d: (typeof data)[number]) => d.value.toFixed(2), fontSize: 9, fill: (d: (typeof data)[number]) => (d.value > 0.5 * Math.max(...data.map((e) => e.value)) ? 'white' : 'black') }),
    ],
  });
  return compose(title, [Plot.legend({ color: chart.scale('color')!, label: 'share', width: 260 }) as Element, chart], 'layer-cells');
}

/** Query segment (row) × key segment (column), lower-triangular, as RefuteBench draws it. */
export function roundHeatmap(matrix: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const data = matrix.flatMap((row, q) => row.flatMap((value, k) => (k <= q ? [{ query: names[q]!, key: names[k]!, value }] : [])));
  const max = Math.max(1e-9, ...data.map((d) => d.value));
  const side = Math.max(240, 90 + names.length * 46);
  const chart = Plot.plot({
    width: side + 40,
    height: side,
    marginLeft: 90,
    marginBottom: 80,
    x: { label: 'key segment', domain: names, tickRotate: -35 },
    y: { label: 'query segment', domain: names },
    color: { type: 'linear', scheme: 'ylorrd', domain: [0, max] },
    marks: [
      Plot.cell(data, { x: 'key', y: 'query', fill: 'value', inset: 0.5, title: (d: (typeof data)[number]) => `${d.query} → ${d.key}: ${d.value.toFixed(4)}` }),
      Plot.text(data, { x: 'key', y: 'query', text: (d: (typeof data)[number]) => d.value.toFixed(2), fontSize: 9, fill: (d: (typeof data)[number]) => (d.value > 0.6 * max ? 'white' : 'black') }),
    ],
  });
  return compose(title, [Plot.legend({ color: chart.scale('color')!, label: 'attention', width: 260 }) as Element, chart], 'round-heatmap');
}

export interface EffectRow {
  label: string;
  remove?: number;
  mask?: number;
}

/** Δ log-likelihood of the target per chunk: a bar per intervention, grouped by chunk. */
export function effectBars(rows: EffectRow[], title: string, unit = 'Δ log-likelihood (nats)'): SVGSVGElement {
  const names = uniqueLabels(rows.map((r) => r.label));
  const kinds = (['remove', 'mask'] as const).filter((k) => rows.some((r) => r[k] !== undefined));
  const data = rows.flatMap((r, i) => kinds.flatMap((k) => (r[k] === undefined ? [] : [{ chunk: names[i]!, intervention: k, delta: r[k]! }])));
  const colours = ['#e15759', '#4e79a7'];
  const chart = Plot.plot({
    width: 620,
    height: 40 + names.length * kinds.length * 16 + 40,
    marginLeft: 120,
    x: { label: unit, grid: true },
    y: { label: null, domain: kinds, axis: null },
    fy: { label: null, domain: names },
    color: { domain: kinds, range: colours },
    marks: [
      Plot.barX(data, { x: 'delta', y: 'intervention', fy: 'chunk', fill: 'intervention', title: (d: (typeof data)[number]) => `${d.chunk}, ${d.intervention}: ${d.delta.toFixed(3)}` }),
      Plot.ruleX([0]),
    ],
  });
  return compose(title, [swatches([...kinds], colours), chart], 'effect-bars');
}

/** Δ against the number of most recent history turns kept. */
export function sweepLines(points: { keep: number; remove?: number; mask?: number }[], title: string): SVGSVGElement {
  const kinds = (['remove', 'mask'] as const).filter((k) => points.some((p) => p[k] !== undefined));
  const data = points.flatMap((p) => kinds.flatMap((k) => (p[k] === undefined ? [] : [{ keep: p.keep, intervention: k, delta: p[k]! }])));
  const colours = ['#e15759', '#4e79a7'];
  const chart = Plot.plot({
    width: 480,
    height: 240,
    marginLeft: 56,
    x: { label: 'history turns kept', ticks: points.map((p) => p.keep), tickFormat: 'd' },
    y: { label: 'Δ log-likelihood (nats)', grid: true },
    color: { domain: kinds, range: colours },
    marks: [Plot.ruleY([0]), Plot.line(data, { x: 'keep', y: 'delta', stroke: 'intervention', z: 'intervention' }), Plot.dot(data, { x: 'keep', y: 'delta', fill: 'intervention', title: (d: (typeof data)[number]) => `keep ${d.keep}, ${d.intervention}: ${d.delta.toFixed(3)}` })],
  });
  return compose(title, [swatches([...kinds], colours), chart], 'sweep-lines');
}

/** Generated tokens (rows, in order) × chunks: the attention mass each put on each. */
export function tokenCells(tokens: string[], values: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const rows = tokens.map((t, i) => `${i} ${JSON.stringify(t).slice(1, -1)}`);
  const data = values.flatMap((row, i) => row.map((value, c) => ({ token: rows[i]!, chunk: names[c]!, value })));
  const chart = Plot.plot({
    width: Math.max(360, 140 + names.length * 60),
    height: Math.max(140, 60 + tokens.length * 16),
    marginLeft: 130,
    marginBottom: 60,
    x: { label: null, domain: names, tickRotate: names.length > 5 ? -30 : 0 },
    y: { label: 'generated token', domain: rows },
    color: { type: 'linear', scheme: 'purples', domain: [0, Math.max(1e-9, ...data.map((d) => d.value))] },
    marks: [Plot.cell(data, { x: 'chunk', y: 'token', fill: 'value', inset: 0.5, title: (d: (typeof data)[number]) => `${d.token} → ${d.chunk}: ${pct(d.value)}` })],
  });
  return compose(title, [Plot.legend({ color: chart.scale('color')!, label: 'attention mass (mean over layers)', width: 260 }) as Element, chart], 'token-cells');
}

/** A colour on a light-to-dark ramp for v in [0, 1] (the text view's backgrounds). */
export function ramp(scheme: 'blues' | 'reds', v: number): string {
  const interpolate = scheme === 'blues' ? (window as unknown as { d3: { interpolateBlues(t: number): string } }).d3.interpolateBlues : (window as unknown as { d3: { interpolateReds(t: number): string } }).d3.interpolateReds;
  return interpolate(Math.max(0, Math.min(1, v)) * 0.85);
}

/** The SVG file of a figure. */
export function svgFile(svg: SVGSVGElement): Blob {
  return new Blob([`<?xml version="1.0" encoding="UTF-8"?>\n${new XMLSerializer().serializeToString(svg)}`], { type: 'image/svg+xml' });
}
