// The viewer page: a sample in, the server's answers drawn. Every number comes from the
// HTTP/JSON API the page is served beside (/v1/probe, /v1/raw-attention, /v1/attribute,
// /v1/generate, /v1/list-models), each call carrying the bearer token the user entered.
//   Analyse ─> Probe (votes, mass, round heatmap, tokens, query log-probs)
//           ─> RawAttention of the query rows (the text coloured by where they looked)
//           ─> Attribute (remove / mask per chunk, history sweep)       [optional]
//           ─> Generate (the response, with per-token attention)        [optional]
import type * as PlotNS from '@observablehq/plot';
import * as charts from '../../figures/charts.js';
import { viewerSample } from '../../eval/records.js';
import { keyMass, tokenText } from './text-view.js';

type Json = any; // eslint-disable-line @typescript-eslint/no-explicit-any

// Plot comes as a script (vendor/), the charts from the code the CLI draws with.
declare const Plot: typeof PlotNS;
const draw: charts.Draw = { Plot, document };
const { uniqueLabels } = charts;
const layerBars = charts.layerBars.bind(null, draw);
const layerCells = charts.layerCells.bind(null, draw);
const roundHeatmap = charts.roundHeatmap.bind(null, draw);
const effectBars = charts.effectBars.bind(null, draw);
const sweepLines = charts.sweepLines.bind(null, draw);
const tokenCells = charts.tokenCells.bind(null, draw);

/** The SVG file of a figure. */
const svgFile = (svg: SVGSVGElement) =>
  new Blob([`<?xml version="1.0" encoding="UTF-8"?>\n${charts.svgText(svg)}`], { type: 'image/svg+xml' });

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const results = $<HTMLElement>('results');
const status = $<HTMLElement>('status');
const tokenInput = $<HTMLInputElement>('token');
const modelSelect = $<HTMLSelectElement>('model');
const authRequired = document.querySelector('meta[name="ctxprobe-auth"]')?.getAttribute('content') === 'required';
let models: Json[] = [];
let answers: Record<string, unknown> = {};

const EXAMPLES: Record<string, unknown> = {
  chunks: {
    id: 'four-chunks',
    chunks: [
      { label: 'instruction', text: 'Answer from the knowledge only.\n\n' },
      { label: 'history', text: 'User: I like baking bread. Do you?\nBot: Bots cannot bake, but bread can be baked on hot stones.\n' },
      { label: 'knowledge', text: 'Knowledge: Bread is baked from flour, water and yeast; early breads were baked on hot stones.\n\n' },
      { label: 'response', text: 'Bot: Early breads were baked on hot stones.' },
    ],
  },
  dialogue: {
    id: 'three-rounds',
    setting: 'persistent',
    messages: [
      { role: 'system', content: 'You are a helpful translator.' },
      { role: 'user', content: 'Translate to French: good morning' },
      { role: 'assistant', content: 'Bonjour.' },
      { role: 'user', content: 'Please always use a formal tone from now on.' },
      { role: 'assistant', content: 'Bonjour, madame.' },
      { role: 'user', content: 'Translate to French: thank you very much' },
      { role: 'assistant', content: 'Je vous remercie infiniment.' },
    ],
  },
  passages: {
    id: 'mtrag-turn',
    messages: [
      { role: 'user', content: 'When does the river flood?' },
      { role: 'assistant', content: 'In spring.' },
      { role: 'user', content: 'And what follows the flood?' },
      { role: 'assistant', content: 'The fields are replanted.' },
    ],
    passages: [
      { label: 'reference', text: 'After the spring flood the farmers replant the fields.' },
      { label: 'noise', text: 'The bridge was rebuilt in 1921.' },
    ],
  },
};

function setStatus(text: string, error = false): void {
  status.textContent = text;
  status.classList.toggle('error', error);
}

/** An API call: JSON in, JSON out (a stream: its messages); errors as the server words them. */
async function call(path: string, body?: unknown, onMessage?: (m: Json) => void): Promise<Json> {
  const headers: Record<string, string> = {};
  if (tokenInput.value) headers.authorization = `Bearer ${tokenInput.value.trim()}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) {
    const error = await res.json().catch(() => ({ message: res.statusText }));
    throw new Error(`${path}: ${error.message ?? res.statusText} (HTTP ${res.status})`);
  }
  if (!onMessage) return res.json();
  // NDJSON: one message a line; a last {"error": …} line is a failure after the first message.
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    buffered += value ?? '';
    const lines = buffered.split('\n');
    buffered = done ? '' : lines.pop()!;
    for (const line of lines.filter((l) => l.trim())) {
      const m = JSON.parse(line);
      if (m.error) throw new Error(`${path}: ${m.error.message}`);
      onMessage(m);
    }
    if (done) return undefined;
  }
}

async function loadModels(): Promise<void> {
  if (authRequired && !tokenInput.value) {
    setStatus('This server asks for a bearer token: enter it above.');
    $<HTMLElement>('token-field').classList.add('needed');
    return;
  }
  try {
    models = (await call('/v1/list-models')).models;
    modelSelect.replaceChildren(...models.map((m) => new Option(`${m.name} (${m.family}, ${m.layers} layers)`, m.name)));
    fillLayers();
    setStatus(`${models.length} model${models.length === 1 ? '' : 's'} served.`);
  } catch (err) {
    setStatus((err as Error).message, true);
  }
}

function fillLayers(): void {
  const m = models.find((x) => x.name === modelSelect.value) ?? models[0];
  const select = $<HTMLSelectElement>('layer');
  select.replaceChildren(
    new Option('mean of all layers', 'all'),
    ...Array.from({ length: m?.layers ?? 0 }, (_, l) => new Option(`layer ${l}`, String(l))),
  );
}

/** A results card with its title; `wide` spans the grid. */
function card(title: string, wide: boolean): { card: HTMLElement; heading: HTMLElement } {
  const el = document.createElement('div');
  el.className = `card${wide ? ' wide' : ''}`;
  const heading = document.createElement('h2');
  heading.textContent = title;
  el.append(heading);
  results.append(el);
  return { card: el, heading };
}

/** A card with an SVG figure and its export button. */
function figureCard(title: string, svg: SVGSVGElement, file: string, wide = false): HTMLElement {
  // A figure is fitted to its card (style.css); one over 640 px (many layers or chunks)
  // spans the grid, so that fitting it does not shrink its text past reading.
  const { card: el, heading } = card(title, wide || Number(svg.getAttribute('width')) > 640);
  const button = document.createElement('button');
  button.type = 'button';
  button.textContent = 'Export SVG';
  button.className = 'export-svg';
  button.addEventListener('click', () => download(svgFile(svg), `${file}.svg`));
  heading.append(button);
  el.append(svg);
  return el;
}

/** A card with a note under its title (the text view, the generated response). */
function textCard(title: string, note: string, wide = true): HTMLElement {
  const { card: el } = card(title, wide);
  const p = document.createElement('p');
  p.className = 'note';
  p.textContent = note;
  el.append(p);
  return el;
}

function download(blob: Blob, name: string): void {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

const rows = (m: Json): number[][] => Array.from({ length: m.rows }, (_, r) => m.values.slice(r * m.cols, (r + 1) * m.cols).map(Number));
const meanRows = (matrix: number[][]) => (matrix[0] ?? []).map((_, c) => matrix.reduce((s, r) => s + r[c]!, 0) / matrix.length);

/** The sample without its response, to generate one in its place: chat messages lose the
 * last assistant turn (and ask for the next one), chunks lose the query chunk at the end. */
function promptOf(sample: Json, query: string[]): Json {
  const rest = attributionFields(sample);
  if (Array.isArray(rest.messages) && rest.messages.length) {
    const messages = rest.messages.at(-1).role === 'assistant' ? rest.messages.slice(0, -1) : rest.messages;
    return { ...rest, messages, addGenerationPrompt: true };
  }
  const chunks: Json[] = rest.chunks ?? [];
  const last = chunks.at(-1);
  return { ...rest, chunks: chunks.length > 1 && (!query.length || query.includes(last.label)) ? chunks.slice(0, -1) : chunks };
}

/** A ProbeSample's fields that an AttributionSample has too (all but the query and exclusions). */
function attributionFields(sample: Json): Json {
  const { queryLabels: _a, query_labels: _b, excludePositions: _c, exclude_positions: _d, ...common } = sample;
  return common;
}

function readSample(): { sample: Json; target?: string; ignored: string[] } {
  const text = $<HTMLTextAreaElement>('sample').value.trim();
  if (!text) throw new Error('paste a sample first (or open a file, or pick an example)');
  let record: unknown;
  try {
    record = JSON.parse(text);
  } catch {
    // A JSONL file pasted whole: its first line.
    try {
      record = JSON.parse(text.split('\n')[0]!);
    } catch (err) {
      throw new Error(`the sample is not JSON: ${(err as Error).message}`);
    }
  }
  if (Array.isArray(record) && record.every((m) => m && typeof m === 'object' && 'role' in m)) record = { messages: record };
  if (!record || typeof record !== 'object' || Array.isArray(record)) throw new Error('the sample must be a JSON object');
  return viewerSample(record as Record<string, unknown>);
}

async function analyse(): Promise<void> {
  const run = $<HTMLButtonElement>('run');
  run.disabled = true;
  results.replaceChildren();
  answers = {};
  $<HTMLButtonElement>('export-json').disabled = true;
  try {
    const { sample, target, ignored } = readSample();
    const model = modelSelect.value;
    const typed = $<HTMLInputElement>('query')
      .value.split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const query = typed.length ? typed : target ? [target] : (sample.queryLabels ?? sample.query_labels ?? []);
    setStatus(`Probing${ignored.length ? ` (set aside: ${ignored.join(', ')})` : ''}…`);
    const probeRequest = {
      model,
      samples: [{ ...sample, queryLabels: query }],
      pool: $<HTMLSelectElement>('pool').value,
      withLogprobs: true,
      withTokens: true,
    };
    const probe = await call('/v1/probe', probeRequest);
    answers.probe = probe;
    const s = probe.samples[0];
    const labels: string[] = s.spans.map((x: Json) => x.label);
    drawProbe(probe, labels);
    if ($<HTMLSelectElement>('colour').value === 'mass') await colourByMass(model, { ...sample, queryLabels: query }, probe);
    else colourByLogprob(s);

    // Attribution and generation are panels of their own: one failing says so in its card
    // and in the status, and the others are still drawn (an attribution refusal used to
    // stop the page before the generated response).
    const failed: string[] = [];
    const panel = async (name: string, body: () => Promise<void>) => {
      try {
        await body();
      } catch (err) {
        failed.push(name);
        textCard(`${name}: not drawn`, (err as Error).message).classList.add('failed');
      }
    };
    if ($<HTMLInputElement>('attribute').checked) await panel('Attribution', () => drawAttribution(model, sample, query, labels));
    if ($<HTMLInputElement>('generate').checked) await panel('Generated response', () => drawGeneration(model, sample, s.queryLabels));
    setStatus(
      `Done: ${s.numTokens} tokens, ${labels.length} chunks${ignored.length ? `; set aside: ${ignored.join(', ')}` : ''}${failed.length ? `; not drawn: ${failed.join(', ')} (see their cards)` : ''}.`,
    );
    $<HTMLButtonElement>('export-json').disabled = false;
  } catch (err) {
    setStatus((err as Error).message, true);
  } finally {
    run.disabled = false;
  }
}

/** The probe's figures: votes, mass, the round heatmap. */
function drawProbe(probe: Json, labels: string[]): void {
  const s = probe.samples[0];
  const queryText = s.queryLabels.join(', ');
  figureCard(
    `Attention votes per layer (query: ${queryText})`,
    layerBars(rows(s.votes), labels, 'Argmax votes of the query tokens per layer'),
    'votes',
  );
  figureCard(
    `Attention mass per layer (query: ${queryText})`,
    layerCells(rows(s.mass), labels, 'Attention mass per layer and chunk'),
    'mass',
  );
  figureCard(
    `Round heatmap (${probe.pool} pooling)`,
    roundHeatmap(rows(s.heatmap), labels, `Query segment → key segment, ${probe.pool} over layers and heads`),
    'heatmap',
  );
}

/** The text coloured by where the query chunk looks: its rows' raw attention, averaged over
 * the layer chosen (or all that fit the model's raw-attention cap) and every head. */
async function colourByMass(model: string, sample: Json, probe: Json): Promise<void> {
  const s = probe.samples[0];
  const queryText = s.queryLabels.join(', ');
  const querySpans = s.spans.filter((x: Json) => s.queryLabels.includes(x.label));
  let layer = $<HTMLSelectElement>('layer').value;
  const heads = Array.from({ length: probe.heads }, (_, h) => h);
  const first = querySpans.reduce((m: number, x: Json) => Math.min(m, x.start), Infinity);
  const last = querySpans.reduce((m: number, x: Json) => Math.max(m, x.end), -Infinity);
  // Every layer of a large model over a long sample can be more than the model's raw
  // attention cap (ListModels says it): then the middle layer alone, said so.
  const cap = Number(models.find((m) => m.name === probe.model)?.maxRawAttentionBytes ?? Infinity);
  const fits = probe.layers * probe.heads * (last - first) * s.numTokens * 2 <= cap;
  const capped = layer === 'all' && !fits;
  if (capped) layer = String(Math.floor(probe.layers / 2));
  const slices: Json[] = [];
  const layers = layer === 'all' ? Array.from({ length: probe.layers }, (_, l) => l) : [Number(layer)];
  await call('/v1/raw-attention', { model, sample, layers, heads, queryStart: first, queryEnd: last, dtype: 'ATTENTION_FLOAT16' }, (m) =>
    slices.push(m),
  );
  const mass = keyMass(slices, s.numTokens);
  // Scaled over the 2nd–98th percentile after the first token (most models' attention
  // sink): scaled by the largest, a few sinks left every other token pale, and the
  // near-uniform attention of a small model made nearly every token dark.
  const range = charts.robustRange(mass.slice(1));
  const card = textCard(
    `The text, coloured by where the query chunk looks`,
    `Mean attention of the ${queryText} tokens (${last - first} queries) on each token, from those that can see it, ${layer === 'all' ? 'over all layers' : `layer ${layer}${capped ? " (all layers are over the model's raw-attention cap)" : ''}`} and all heads; darker is more (scale: ${range[0].toPrecision(3)} to ${range[1].toPrecision(3)}, the 2nd to 98th percentile after the first token).`,
  );
  card.append(tokenText(s, mass.map(charts.scaledTo(range)), 'blues', (t) => `attention ${mass[t]!.toFixed(4)}`));
  answers.keyMass = mass;
}

/** The text coloured by each query-chunk token's log-prob (surprisal). */
function colourByLogprob(s: Json): void {
  const queryText = s.queryLabels.join(', ');
  const querySpans = s.spans.filter((x: Json) => s.queryLabels.includes(x.label));
  // query_logprobs: each query-chunk token after the sample's first, in order.
  const positions = querySpans
    .flatMap((x: Json) => Array.from({ length: x.end - x.start }, (_, k) => x.start + k))
    .filter((t: number) => t > 0);
  const values: (number | undefined)[] = new Array(s.numTokens).fill(undefined);
  const lps: number[] = s.queryLogprobs.map(Number);
  // Surprisal over its 2nd–98th percentile: divided by the worst, a weak model's
  // log-probs (all far from 0) made nearly every token dark.
  const range = charts.robustRange(lps.map((v) => -v));
  const scaled = charts.scaledTo(range);
  positions.forEach((t: number, k: number) => (values[t] = scaled(-lps[k]!)));
  const card = textCard(
    'The text, coloured by per-token log-prob',
    `Query-chunk tokens (${queryText}): darker is less likely given everything before (scale: ${range[0].toFixed(2)} to ${range[1].toFixed(2)} nats of surprisal, the 2nd to 98th percentile); sum ${Number(s.queryLogprob).toFixed(3)} nats over ${lps.length} tokens.`,
  );
  card.append(tokenText(s, values, 'reds', (t) => (values[t] === undefined ? '' : `log-prob ${lps[positions.indexOf(t)]!.toFixed(3)}`)));
}

/** What each chunk contributes to the query's log-likelihood (remove / mask), and the
 * history sweep. */
async function drawAttribution(model: string, sample: Json, query: string[], labels: string[]): Promise<void> {
  setStatus('Attributing…');
  const history = labels.filter((l) => l === 'history' || /^(user|assistant)#/.test(l)).length;
  const sweep = Array.from({ length: Math.min(history, 4) }, (_, k) => k);
  const attribution = await call('/v1/attribute', {
    model,
    samples: [{ ...attributionFields(sample), targetLabel: query[0] ?? '' }],
    interventions: ['INTERVENTION_REMOVE', 'INTERVENTION_MASK'],
    historySweep: sweep,
  });
  answers.attribution = attribution;
  const a = attribution.samples[0];
  const delta = (e: Json) => (e ? Number(e.delta) : undefined);
  figureCard(
    `Attribution: Δ log-likelihood of ${a.spans[a.target].label}`,
    effectBars(
      a.chunks.map((c: Json) => ({ label: c.label, remove: delta(c.remove), mask: delta(c.mask) })),
      `Removing or masking each chunk: Δ log p(${a.spans[a.target].label}) (unchanged: ${Number(a.logprob).toFixed(2)} nats)`,
    ),
    'attribution',
  );
  if (a.sweep.length)
    figureCard(
      'History sweep',
      sweepLines(
        a.sweep.map((p: Json) => ({ keep: p.keep, remove: delta(p.remove), mask: delta(p.mask) })),
        'Keeping only the last h history turns',
      ),
      'sweep',
    );
}

/** The model's own response in place of the sample's, and where each of its tokens looked. */
async function drawGeneration(model: string, sample: Json, queryLabels: string[]): Promise<void> {
  setStatus('Generating…');
  const prompt = promptOf(sample, queryLabels);
  const card = textCard(
    'Generated response',
    `From the sample without its ${prompt.messages?.length ? 'last assistant turn' : 'last chunk'}; greedy at temperature 0.`,
  );
  const out = document.createElement('div');
  out.className = 'generated';
  card.append(out);
  const steps: Json[] = [];
  let spans: Json[] = [];
  await call(
    '/v1/generate',
    {
      model,
      prompt,
      sampling: {
        maxTokens: Number($<HTMLInputElement>('max-tokens').value) || 32,
        temperature: Number($<HTMLInputElement>('temperature').value) || 0,
      },
      attention: true,
    },
    (m) => {
      if (m.spans?.length) spans = m.spans;
      steps.push(m);
      out.textContent += m.text;
    },
  );
  answers.generation = steps;
  if (steps.length && steps[0].mass) {
    const bins = [...uniqueLabels(spans.map((x: Json) => x.label)), 'response'];
    const values = steps.map((m) => meanRows(rows(m.mass)));
    figureCard(
      'Where each generated token looked',
      tokenCells(
        steps.map((m) => m.text),
        values,
        bins,
        'Attention mass of each generated token over the prompt chunks and the response so far',
      ),
      'generation-attention',
      true,
    );
  }
}

async function openFile(file: File): Promise<void> {
  const text = await file.text();
  const lines = text.split('\n').filter((l) => l.trim());
  // A JSONL file: its first line (one sample at a time); a JSON file: as it is.
  $<HTMLTextAreaElement>('sample').value =
    file.name.endsWith('.jsonl') && lines.length > 0 ? JSON.stringify(JSON.parse(lines[0]!), null, 1) : text;
  setStatus(`Opened ${file.name}${file.name.endsWith('.jsonl') ? ` (line 1 of ${lines.length})` : ''}.`);
}

tokenInput.value = sessionStorage.getItem('ctxprobe-token') ?? '';
tokenInput.addEventListener('change', () => {
  sessionStorage.setItem('ctxprobe-token', tokenInput.value);
  void loadModels();
});
modelSelect.addEventListener('change', fillLayers);
for (const b of document.querySelectorAll<HTMLButtonElement>('button.example')) {
  b.addEventListener('click', () => ($<HTMLTextAreaElement>('sample').value = JSON.stringify(EXAMPLES[b.dataset.example!], null, 1)));
}
$<HTMLInputElement>('file').addEventListener('change', (e) => {
  const file = (e.target as HTMLInputElement).files?.[0];
  if (file) openFile(file).catch((err) => setStatus((err as Error).message, true));
});
$<HTMLButtonElement>('run').addEventListener('click', () => void analyse());
$<HTMLFormElement>('token-field').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem('ctxprobe-token', tokenInput.value);
  void loadModels();
});
$<HTMLButtonElement>('export-json').addEventListener('click', () =>
  download(new Blob([JSON.stringify(answers, null, 1)], { type: 'application/json' }), 'ctxprobe-answers.json'),
);
if (!authRequired) $<HTMLElement>('token-field').hidden = true;
void loadModels();
