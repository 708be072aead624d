// The figures of probe, attribution and generation answers, drawn with Observable Plot —
// one drawing code for the viewer page (the browser's document, Plot served as a script)
// and for the CLI's and runners' files (src/eval/figures.ts: Plot imported, linkedom's
// document). Free of Node and of any import but types, so the page loads it as it is.
// Each figure is one self-contained <svg>: title, legend and chart together, so what is
// shown is what is saved.
//   layerBars      per-layer chunk distribution as stacked bars (CHARPEval Fig. 2)
//   layerCells     layers × chunks as a heatmap, values printed
//   roundHeatmap   query segment × key segment, lower-triangular (RefuteBench 2.0 Figs. 8–9)
//   effectBars     Δ log-likelihood per chunk under each intervention (attribution)
//   sweepLines     Δ against the number of history turns kept (CHARP's sweep); bars
//                  when only one count was kept
//   tokenCells     generated tokens × chunks: where each token looked while it was written
// Every mark carries a <title> with its value (to 4 significant digits): what a reader
// hovers, and what the tests read back.
import type * as PlotNS from '@observablehq/plot';

/** Plot and the document it draws into. */
export interface Draw {
  Plot: typeof PlotNS;
  document: Document;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];
const FONT = 'system-ui, sans-serif';
const INTERVENTION_COLOURS = ['#e15759', '#4e79a7'];
// The attribution chart's width: its figure (8 px more) fits the viewer's narrowest card,
// 532 px inside (the grid's 560 less padding and border); at 620 the card cut its right end.
const EFFECT_WIDTH = 520;

/** Labels made unique by position ("2 history") when a label repeats. */
export function uniqueLabels(labels: string[]): string[] {
  const repeated = new Set(labels.filter((l, i) => labels.indexOf(l) !== i));
  return labels.map((l, i) => (repeated.has(l) ? `${i} ${l}` : l));
}

const value4 = (v: number) => Number(v.toPrecision(4)).toString();
const share = (v: number) => `${value4(v)} (${(100 * v).toFixed(1)}%)`;
const isSvg = (e: Element) => e.tagName.toLowerCase() === 'svg';

function svgElement(draw: Draw, name: string, attributes: Record<string, string | number> = {}, text?: string): SVGElement {
  const e = draw.document.createElementNS(SVG_NS, name) as SVGElement;
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** One SVG: `parts` (Plot's charts and the legends, each an <svg>) stacked under a title. */
function compose(draw: Draw, title: string, parts: Element[], kind: string): SVGSVGElement {
  const out = svgElement(draw, 'svg', { xmlns: SVG_NS, class: `figure ${kind}`, 'font-family': FONT }) as SVGSVGElement;
  out.append(svgElement(draw, 'text', { class: 'title', x: 4, y: 16, 'font-size': 13, 'font-weight': 600 }, title));
  let y = 26;
  // 13px bold runs ~8 px a character; the parts sit 8 px in, so a legend's first tick
  // label (centred on its edge) is not cut.
  let width = 8 + title.length * 8;
  for (const svg of parts.flatMap((p) => (isSvg(p) ? [p] : [...p.querySelectorAll('svg')]))) {
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

/** A categorical legend as SVG swatches (Plot's own is HTML, which an SVG file cannot hold),
 * wrapped at `wrapAt` (its chart's width) and as wide as its swatches: a fixed 640 px made
 * every figure with one at least 648 px wide, wider than a viewer card, which cut it. */
function swatches(draw: Draw, labels: string[], colours: string[], wrapAt: number): SVGSVGElement {
  const svg = svgElement(draw, 'svg', { class: 'legend' }) as SVGSVGElement;
  let x = 4;
  let row = 0;
  let width = 0;
  labels.forEach((label, i) => {
    const w = 18 + label.length * 6.6 + 12;
    if (x > 4 && x + w > wrapAt) {
      x = 4;
      row++;
    }
    const y = 4 + row * 18;
    svg.append(svgElement(draw, 'rect', { class: 'swatch', x, y, width: 12, height: 12, fill: colours[i % colours.length]! }));
    svg.append(svgElement(draw, 'text', { class: 'legend-label', x: x + 16, y: y + 10, 'font-size': 11 }, label));
    width = Math.max(width, x + 16 + label.length * 6.6 + 4);
    x += w;
  });
  svg.setAttribute('width', String(Math.ceil(width)));
  svg.setAttribute('height', String(22 + row * 18));
  return svg;
}

let ramps = 0;

/** A continuous colour legend as an SVG gradient with ticks (Plot's ramp paints a canvas
 * into an <image>, which needs a browser and exports as pixels). */
function rampLegend(draw: Draw, scheme: PlotNS.ColorScheme, max: number, label: string): SVGSVGElement {
  const scale = draw.Plot.scale({ color: { type: 'linear', scheme, domain: [0, max] } });
  // Ids unique within a page holding several figures, and the same from run to run.
  const id = `ramp-${scheme}-${++ramps}`;
  const svg = svgElement(draw, 'svg', { class: 'legend ramp', width: 280, height: 44 }) as SVGSVGElement;
  const gradient = svgElement(draw, 'linearGradient', { id, x1: 0, x2: 1, y1: 0, y2: 0 });
  for (let k = 0; k <= 10; k++) gradient.append(svgElement(draw, 'stop', { offset: k / 10, 'stop-color': String(scale.apply((max * k) / 10)) }));
  const defs = svgElement(draw, 'defs');
  defs.append(gradient);
  // 12 px in: the first tick's label is centred on the ramp's edge.
  svg.append(defs, svgElement(draw, 'text', { x: 12, y: 10, 'font-size': 10, 'font-weight': 600 }, label));
  svg.append(svgElement(draw, 'rect', { x: 12, y: 16, width: 256, height: 10, fill: `url(#${id})` }));
  const { ticks, digits } = niceTicks(max);
  for (const t of ticks) {
    const x = 12 + (256 * t) / max;
    svg.append(svgElement(draw, 'line', { x1: x, x2: x, y1: 26, y2: 30, stroke: 'currentColor' }));
    svg.append(svgElement(draw, 'text', { x, y: 40, 'font-size': 10, 'text-anchor': 'middle' }, t.toFixed(digits)));
  }
  return svg;
}

/** Ticks from 0 to `max` at a round step (1, 2, 2.5 or 5 × 10ᵏ, at most 5 intervals), all
 * written with the same digits: quarters of the maximum read "0.08782, 0.1756". */
export function niceTicks(max: number): { ticks: number[]; digits: number } {
  if (!(max > 0) || !Number.isFinite(max)) return { ticks: [0], digits: 0 };
  const rough = max / 5;
  const power = 10 ** Math.floor(Math.log10(rough));
  const mantissa = [1, 2, 2.5, 5, 10].find((m) => m * power >= rough)!;
  const step = mantissa * power;
  // Digits that show the step exactly: one more for 2.5 × 10ᵏ.
  const digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9) + (mantissa === 2.5 ? 1 : 0));
  const ticks: number[] = [];
  for (let k = 0; k * step <= max * (1 + 1e-9); k++) ticks.push(Number((k * step).toFixed(digits)));
  return { ticks, digits };
}

/** The range a text view colours over: the 2nd to the 98th percentile of the values (as
 * seaborn's `robust=True` does), so a few extremes do not leave every other token pale and
 * values bunched near the top do not make nearly every token dark. */
export function robustRange(values: readonly number[]): [number, number] {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return [0, 1];
  const at = (p: number) => {
    // Linear between order statistics (numpy's default quantile).
    const h = (sorted.length - 1) * p;
    const i = Math.floor(h);
    return sorted[i]! + (h - i) * ((sorted[i + 1] ?? sorted[i]!) - sorted[i]!);
  };
  const lo = at(0.02);
  const hi = at(0.98);
  return hi > lo ? [lo, hi] : [lo, lo + 1e-9];
}

/** v on [lo, hi] as 0..1, clamped. */
export const scaledTo = ([lo, hi]: [number, number]) => (v: number) => Math.max(0, Math.min(1, (v - lo) / (hi - lo)));

type Cell = { layer: number; chunk: string; value: number };
const cellsOf = (values: number[][], names: string[]): Cell[] => values.flatMap((row, layer) => row.map((value, c) => ({ layer, chunk: names[c]!, value })));

/** Stacked bars: a bar per layer, a colour per chunk, each bar summing to its total. */
export function layerBars(draw: Draw, values: number[][], labels: string[], title: string): SVGSVGElement {
  const { Plot } = draw;
  const names = uniqueLabels(labels);
  const data = cellsOf(values, names);
  const colours = names.map((_, i) => PALETTE[i % PALETTE.length]!);
  const layerWidth = Math.max(360, 60 + values.length * 22);
  const chart = Plot.plot({
    document: draw.document,
    width: layerWidth,
    height: 240,
    marginLeft: 48,
    x: { label: 'layer', tickFormat: (d: number) => (values.length <= 40 || d % 5 === 0 ? String(d) : '') },
    y: { label: 'share', domain: [0, 1], tickFormat: '.0%', grid: true },
    color: { domain: names, range: colours },
    marks: [Plot.barY(data, { x: 'layer', y: 'value', fill: 'chunk', order: names, title: (d: Cell) => `layer ${d.layer}, ${d.chunk}: ${share(d.value)}` }), Plot.ruleY([0])],
  });
  return compose(draw, title, [swatches(draw, names, colours, layerWidth), chart], 'layer-bars');
}

/** Coloured cells with their values printed: rows × columns of one matrix. */
function cells(
  draw: Draw,
  data: { x: string; y: string | number; value: number; title: string }[],
  axes: { x: string[]; y: (string | number)[]; xLabel: string | null; yLabel: string; scheme: PlotNS.ColorScheme; legend: string; marginLeft: number; values: boolean },
) {
  const { Plot } = draw;
  const max = data.reduce((m, d) => Math.max(m, d.value), 1e-9); // no spread: data may be client-sized
  const chart = Plot.plot({
    document: draw.document,
    width: Math.max(360, axes.marginLeft + 40 + axes.x.length * 64),
    height: Math.max(160, 90 + axes.y.length * 24),
    marginLeft: axes.marginLeft,
    marginBottom: 70,
    x: { label: axes.xLabel, domain: axes.x, tickRotate: axes.x.length > 4 ? -35 : 0 },
    y: { label: axes.yLabel, domain: axes.y },
    color: { type: 'linear', scheme: axes.scheme, domain: [0, max] },
    marks: [
      Plot.cell(data, { x: 'x', y: 'y', fill: 'value', inset: 0.5, title: 'title' }),
      ...(axes.values
        ? [Plot.text(data, { x: 'x', y: 'y', text: (d: { value: number }) => d.value.toFixed(2), fontSize: 9, fill: (d: { value: number }) => (d.value > 0.55 * max ? 'white' : 'black') })]
        : []),
    ],
  });
  return [rampLegend(draw, axes.scheme, max, axes.legend), chart];
}

/** Layers × chunks as coloured cells with their values. */
export function layerCells(draw: Draw, values: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const data = cellsOf(values, names).map((d) => ({ x: d.chunk, y: d.layer, value: d.value, title: `layer ${d.layer}, ${d.chunk}: ${share(d.value)}` }));
  const parts = cells(draw, data, { x: names, y: values.map((_, l) => l), xLabel: null, yLabel: 'layer', scheme: 'blues', legend: 'share', marginLeft: 48, values: true });
  return compose(draw, title, parts, 'layer-cells');
}

/** Query segment (row) × key segment (column), lower-triangular, as RefuteBench draws it. */
export function roundHeatmap(draw: Draw, matrix: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const data = matrix.flatMap((row, q) => row.flatMap((value, k) => (k <= q ? [{ x: names[k]!, y: names[q]!, value, title: `${names[q]} → ${names[k]}: ${value4(value)}` }] : [])));
  // Tick labels, then the rotated axis label beside them.
  const margin = 40 + 6.5 * Math.max(4, ...names.map((n) => n.length));
  const parts = cells(draw, data, { x: names, y: names, xLabel: 'key segment', yLabel: 'query segment', scheme: 'ylorrd', legend: 'attention', marginLeft: margin, values: true });
  return compose(draw, title, parts, 'round-heatmap');
}

/** Generated tokens (rows, in order) × chunks: the attention mass each put on each. */
export function tokenCells(draw: Draw, tokens: string[], values: number[][], labels: string[], title: string): SVGSVGElement {
  const names = uniqueLabels(labels);
  const rows = tokens.map((t, i) => `${i} ${JSON.stringify(t).slice(1, -1)}`);
  const data = values.flatMap((row, i) => row.map((value, c) => ({ x: names[c]!, y: rows[i]!, value, title: `${rows[i]} → ${names[c]}: ${share(value)}` })));
  const parts = cells(draw, data, { x: names, y: rows, xLabel: null, yLabel: 'generated token', scheme: 'purples', legend: 'attention mass (mean over layers)', marginLeft: 130, values: false });
  return compose(draw, title, parts, 'token-cells');
}

export interface EffectRow {
  label: string;
  remove?: number;
  mask?: number;
}

/** Δ log-likelihood of the target per chunk: a bar per intervention, grouped by chunk,
 * diverging from zero (left: the chunk's absence lowers the target's log-likelihood). */
export function effectBars(draw: Draw, rows: EffectRow[], title: string, unit = 'Δ log-likelihood (nats)'): SVGSVGElement {
  const { Plot } = draw;
  const names = uniqueLabels(rows.map((r) => r.label));
  const kinds = (['remove', 'mask'] as const).filter((k) => rows.some((r) => r[k] !== undefined));
  const data = rows.flatMap((r, i) => kinds.flatMap((k) => (r[k] === undefined ? [] : [{ chunk: names[i]!, intervention: k, delta: r[k]! }])));
  const chart = Plot.plot({
    document: draw.document,
    width: EFFECT_WIDTH,
    height: 60 + names.length * (kinds.length * 16 + 8),
    marginLeft: 16 + 6.5 * Math.max(4, ...names.map((n) => n.length)),
    x: { label: unit, grid: true },
    y: { label: null, domain: kinds, axis: null },
    fy: { label: null, domain: names },
    color: { domain: kinds, range: INTERVENTION_COLOURS },
    marks: [
      Plot.barX(data, { x: 'delta', y: 'intervention', fy: 'chunk', fill: 'intervention', title: (d: (typeof data)[number]) => `${d.chunk}, ${d.intervention}: ${value4(d.delta)}` }),
      Plot.ruleX([0]),
    ],
  });
  return compose(draw, title, [swatches(draw, [...kinds], INTERVENTION_COLOURS, EFFECT_WIDTH), chart], 'effect-bars');
}

/** Δ against the number of most recent history turns kept. */
export function sweepLines(draw: Draw, points: { keep: number; remove?: number; mask?: number }[], title: string): SVGSVGElement {
  const { Plot } = draw;
  const kinds = (['remove', 'mask'] as const).filter((k) => points.some((p) => p[k] !== undefined));
  const data = points.flatMap((p) => kinds.flatMap((k) => (p[k] === undefined ? [] : [{ keep: p.keep, intervention: k, delta: p[k]! }])));
  const title4 = (d: (typeof data)[number]) => `keep ${d.keep}, ${d.intervention}: ${value4(d.delta)}`;
  const keeps = new Set(points.map((p) => p.keep));
  if (keeps.size === 1) {
    // One kept count is no sweep: a line through one point says nothing, a bar says Δ.
    const [keep] = keeps;
    const bars = Plot.plot({
      document: draw.document,
      width: 480,
      height: 70 + kinds.length * 28,
      marginLeft: 64,
      x: { label: 'Δ log-likelihood (nats)', grid: true },
      y: { label: null, domain: kinds },
      color: { domain: kinds, range: INTERVENTION_COLOURS },
      marks: [Plot.barX(data, { x: 'delta', y: 'intervention', fill: 'intervention', title: title4 }), Plot.ruleX([0])],
    });
    return compose(draw, `${title} (one point: ${keep} kept)`, [swatches(draw, [...kinds], INTERVENTION_COLOURS, 480), bars], 'sweep-bars');
  }
  const chart = Plot.plot({
    document: draw.document,
    width: 480,
    height: 240,
    marginLeft: 56,
    x: { label: 'history turns kept', ticks: points.map((p) => p.keep), tickFormat: 'd' },
    y: { label: 'Δ log-likelihood (nats)', grid: true },
    color: { domain: kinds, range: INTERVENTION_COLOURS },
    marks: [
      Plot.ruleY([0]),
      Plot.line(data, { x: 'keep', y: 'delta', stroke: 'intervention', z: 'intervention' }),
      Plot.dot(data, { x: 'keep', y: 'delta', fill: 'intervention', title: title4 }),
    ],
  });
  return compose(draw, title, [swatches(draw, [...kinds], INTERVENTION_COLOURS, 480), chart], 'sweep-lines');
}

/** A figure as the text of an SVG file (or of an <svg> inside HTML): the browser's XML
 * serialiser where there is one, else the DOM's own (linkedom writes SVG as XML). */
export function svgText(svg: SVGSVGElement): string {
  const Serializer = (globalThis as { XMLSerializer?: typeof XMLSerializer }).XMLSerializer;
  return Serializer ? new Serializer().serializeToString(svg) : svg.outerHTML;
}
