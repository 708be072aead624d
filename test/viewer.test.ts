// The viewer page (/ui/) in headless Chromium (Debian's chromium, driven by
// playwright-core), as a researcher uses it: paste a 4-chunk sample, then a 3-round
// dialogue (with a generated response), press Analyse, read the figures, export one as
// SVG — with no console error at any point, and again behind a bearer token. What is
// drawn is checked against the same calls made directly over HTTP/JSON. Screenshots go
// to test/artifacts/ (CI keeps them).
import { CHROMIUM, haveChromium, launchChromium, marksOutside } from './chromium.js';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CtxprobeServer } from '../src/server.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

if (!haveChromium) console.warn(`skipping the viewer tests: no Chromium at ${CHROMIUM} (apt-get install chromium)`);
const ARTIFACTS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'artifacts');

const FOUR_CHUNKS = {
  id: 'four',
  chunks: [
    { label: 'instruction', text: 'Answer from the knowledge only.\n\n' },
    { label: 'history', text: 'User: I like baking bread. Do you?\nBot: Bots cannot bake.\n' },
    { label: 'knowledge', text: 'Knowledge: early breads were baked on hot stones.\n\n' },
    { label: 'response', text: 'Bot: Early breads were baked on hot stones.' },
  ],
};
// A RefuteBench line: its "setting" is no ProbeSample field, set aside by the page.
const DIALOGUE = {
  id: 'transient-1',
  setting: 'transient',
  messages: [
    { role: 'system', content: 'You are a helpful translator.' },
    { role: 'user', content: 'Translate to French: good morning' },
    { role: 'assistant', content: 'Bonjour.' },
    { role: 'user', content: 'Use a more formal tone for this one.' },
    { role: 'assistant', content: 'Bonjour, madame.' },
    { role: 'user', content: 'Translate to French: thank you' },
    { role: 'assistant', content: 'Merci beaucoup.' },
  ],
};

/** A page that records every console error, page error and failed or refused request. */
async function openPage(browser: any, url: string) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 900 }, acceptDownloads: true });
  const problems: string[] = [];
  page.on('console', (m: any) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  page.on('pageerror', (e: Error) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r: any) => problems.push(`failed: ${r.url()}`));
  page.on('response', (r: any) => r.status() >= 400 && problems.push(`HTTP ${r.status()}: ${r.url()}`));
  await page.goto(url);
  return { page, problems };
}

async function analyse(page: any, sample: unknown, options: { generate?: boolean; colour?: string } = {}) {
  await page.fill('#sample', JSON.stringify(sample, null, 1));
  await page.setChecked('#generate', options.generate ?? false);
  if (options.colour) await page.selectOption('#colour', options.colour);
  await page.click('button:has-text("Analyse")');
  await page.waitForFunction(
    () => {
      const s = document.querySelector('#status')!;
      return s.textContent!.startsWith('Done') || s.classList.contains('error');
    },
    null,
    { timeout: 60_000 },
  );
  return page.textContent('#status');
}

/** Every figure's kind, and the <title> texts of its marks. */
const figures = (page: any): Promise<{ kind: string; titles: string[]; texts: string[] }[]> =>
  page.$$eval('svg.figure', (svgs: SVGSVGElement[]) =>
    svgs.map((s) => ({
      kind: s.getAttribute('class')!.replace('figure ', ''),
      titles: [...s.querySelectorAll('g[aria-label] title')].map((t) => t.textContent!),
      texts: [...s.querySelectorAll('g[aria-label="text"] text')].map((t) => t.textContent!),
    })),
  );

/** A mark's value as its title prints it (4 significant digits). */
const titleValue = (title: string) => Number(/: (-?[\d.]+(?:e[+-]?\d+)?)/.exec(title)![1]);
const near = (printed: number, value: number) => Math.abs(printed - value) <= 5e-4 * Math.max(Math.abs(value), 1e-3);

const matrixRows = (m: any): number[][] => Array.from({ length: m.rows }, (_, r) => m.values.slice(r * m.cols, (r + 1) * m.cols));

describe.skipIf(!haveChromium)('the viewer page in Chromium', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let browser: any;
  let base: string;
  beforeAll(async () => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 512, chatTemplate: 'chatml' });
    model = await loadModel({ name: 'chat', path: fx.dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1 });
    server.addModel(model);
    server.setServing();
    base = `http://127.0.0.1:${server.httpPort}`;
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.drain();
    await model?.engine.release();
  });

  it('draws a 4-chunk sample: votes, mass and heatmap as the probe answers them, attribution bars, the text coloured', async () => {
    const { page, problems } = await openPage(browser, `${base}/ui/`);
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    expect(await page.isHidden('#token-field')).toBe(true); // this server asks for none
    const status = await analyse(page, FOUR_CHUNKS);
    expect(status).toMatch(/^Done: \d+ tokens, 4 chunks/);
    const drawn = await figures(page);
    expect(drawn.map((f) => f.kind)).toEqual(['layer-bars', 'layer-cells', 'round-heatmap', 'effect-bars', 'sweep-bars']);

    // The same probe, asked directly: the page draws its numbers.
    const probe = await (
      await fetch(`${base}/v1/probe`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'chat', samples: [{ ...FOUR_CHUNKS, queryLabels: ['response'] }] }),
      })
    ).json();
    const s = probe.samples[0];
    const labels = ['instruction', 'history', 'knowledge', 'response'];
    const votes = matrixRows(s.votes);
    const expected = votes.flatMap((row, l) => row.map((v, c) => [`layer ${l}, ${labels[c]}`, v] as const));
    expect(drawn[0]!.titles.map((t) => t.split(':')[0])).toEqual(expected.map(([name]) => name));
    drawn[0]!.titles.forEach((t, i) => expect(near(titleValue(t), expected[i]![1]), t).toBe(true));
    const mass = matrixRows(s.mass);
    expect(drawn[1]!.texts).toEqual(mass.flatMap((row) => row.map((v) => v.toFixed(2))));
    const heat = matrixRows(s.heatmap);
    expect(drawn[2]!.texts).toEqual(heat.flatMap((row, q) => row.filter((_, k) => k <= q).map((v) => v.toFixed(2))));
    // Attribution: one bar per chunk before the response and intervention.
    expect(drawn[3]!.titles).toHaveLength(2 * 3);
    expect(drawn[3]!.titles[0]).toMatch(/^instruction, remove: -?\d/);

    // The text: every token of the sample, coloured by the query chunk's attention.
    const tokens = await page.$$eval('.tokens .tok', (ts: HTMLElement[]) => ts.map((t) => t.dataset.value));
    expect(tokens).toHaveLength(s.numTokens);
    expect(tokens.every((v: string) => v !== '')).toBe(true);
    // Each token's shade: the mean attention on it of the response rows that can see it
    // (all layers and heads, from RawAttention in float32 here), over the 2nd–98th
    // percentile after the first token (field defects #6: scaled by the largest, nearly
    // every token was dark).
    const [first, end] = [s.spans[3].start, s.spans[3].end];
    const raw = await fetch(`${base}/v1/raw-attention`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat', sample: { ...FOUR_CHUNKS, queryLabels: ['response'] }, layers: Array.from({ length: probe.layers }, (_, l) => l), heads: Array.from({ length: probe.heads }, (_, h) => h), queryStart: first, queryEnd: end }),
    });
    const sum = new Array<number>(s.numTokens).fill(0);
    const seen = new Array<number>(s.numTokens).fill(0);
    const rawText = await raw.text();
    expect(raw.status, rawText.slice(0, 300)).toBe(200);
    for (const slice of rawText.split('\n').filter(Boolean).map((l) => JSON.parse(l))) {
      const values = new Float32Array(Uint8Array.from(Buffer.from(slice.data, 'base64')).buffer);
      for (let q = 0; q < slice.queries; q++) {
        for (let k = 0; k <= first + q; k++) {
          sum[k]! += values[q * slice.keys + k]!;
          seen[k]!++;
        }
      }
    }
    const mean = sum.map((v, k) => v / seen[k]!);
    const after = [...mean.slice(1)].sort((a, b) => a - b);
    const quantile = (p: number) => after[Math.floor((after.length - 1) * p)]! + (((after.length - 1) * p) % 1) * (after[Math.floor((after.length - 1) * p) + 1]! - after[Math.floor((after.length - 1) * p)]!);
    const [lo, hi] = [quantile(0.02), quantile(0.98)];
    // float16 on the page, float32 here: within a few float16 steps of the range.
    mean.forEach((v, k) => expect(Math.abs(Number(tokens[k]) - Math.max(0, Math.min(1, (v - lo) / (hi - lo)))), `token ${k}`).toBeLessThan(0.02));
    const dark = tokens.filter((v: string) => Number(v) > 0.55).length / tokens.length;
    expect(dark).toBeLessThan(0.9);

    // Export: the figure as an SVG file.
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('.card:has(svg.round-heatmap) button.export-svg')]);
    const file = path.join(ARTIFACTS, 'viewer-round-heatmap.svg');
    await download.saveAs(file);
    const svg = fs.readFileSync(file, 'utf8');
    expect(svg).toMatch(/^<\?xml version="1.0" encoding="UTF-8"\?>\n<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    expect(svg).toContain('Query segment → key segment');
    expect((svg.match(/<title>/g) ?? []).length).toBe(10); // the lower triangle of 4 × 4
    await page.screenshot({ path: path.join(ARTIFACTS, 'viewer-four-chunks.png'), fullPage: true });
    // Every bar, label and legend is in sight, in two cards a row and in the narrowest card
    // (a 600 px window): the attribution figure was 648 px wide, its card cut the mask bar
    // and the axis label to "Δ log-likelihood (na".
    expect(await marksOutside(page)).toEqual([]);
    await page.setViewportSize({ width: 600, height: 900 });
    expect(await marksOutside(page)).toEqual([]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('draws a 3-round dialogue and a generated response with where each token looked', async () => {
    const { page, problems } = await openPage(browser, `${base}/ui/`);
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    await page.fill('#max-tokens', '6');
    const status = await analyse(page, DIALOGUE, { generate: true, colour: 'logprob' });
    expect(status).toMatch(/^Done: \d+ tokens, 7 chunks; set aside: setting\.$/);
    const drawn = await figures(page);
    expect(drawn.map((f) => f.kind)).toEqual(['layer-bars', 'layer-cells', 'round-heatmap', 'effect-bars', 'sweep-lines', 'token-cells']);
    // Seven segments: system, three user turns, three assistant turns; the heatmap's lower triangle.
    expect(drawn[2]!.texts).toHaveLength((7 * 8) / 2);
    // The history sweep: one point per kept count and intervention.
    expect(drawn[4]!.titles.length).toBeGreaterThanOrEqual(2);

    // The response the page generated is what Generate gives for the dialogue without its
    // last answer (greedy, 6 tokens).
    const res = await fetch(`${base}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'chat',
        prompt: { id: 'transient-1', messages: DIALOGUE.messages.slice(0, -1), addGenerationPrompt: true },
        sampling: { maxTokens: 6 },
      }),
    });
    const steps = (await res.text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(await page.textContent('.generated')).toBe(steps.map((m) => m.text).join(''));
    // A row of cells per generated token, a column per prompt segment (the six messages
    // before the answer) and the response.
    expect(steps[0].spans).toHaveLength(6);
    expect(drawn[5]!.titles).toHaveLength(steps.length * 7);
    // Log-prob colouring: exactly the query chunk's tokens are coloured.
    const coloured = await page.$$eval('.tokens .tok', (ts: HTMLElement[]) => ts.filter((t) => t.dataset.value !== '').length);
    expect(coloured).toBeGreaterThan(0);
    await page.screenshot({ path: path.join(ARTIFACTS, 'viewer-dialogue.png'), fullPage: true });
    expect(await marksOutside(page)).toEqual([]); // the sweep's lines and the token cells too
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a dialogue opened by the user (no system message) is attributed and answered; a panel that fails leaves the others drawn', async () => {
    const { page, problems } = await openPage(browser, `${base}/ui/`);
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    await page.fill('#max-tokens', '6');
    // Its history swept to none leaves the target first: predicted from the empty-context
    // token now; the whole call failed before, and the page drew neither attribution nor
    // the generated response (field defects #1).
    const userFirst = { ...DIALOGUE, messages: DIALOGUE.messages.slice(1) };
    expect(await analyse(page, userFirst, { generate: true })).toMatch(/^Done: \d+ tokens, 6 chunks; set aside: setting\.$/);
    expect((await figures(page)).map((f) => f.kind)).toEqual([
      'layer-bars',
      'layer-cells',
      'round-heatmap',
      'effect-bars',
      'sweep-lines',
      'token-cells',
    ]);
    expect((await page.textContent('.generated'))!.length).toBeGreaterThan(0);
    // A generation the server refuses (more tokens than the model's context): its card
    // says why, the attribution is still drawn, and the status says what was not drawn.
    await page.evaluate(() => ((document.querySelector('#max-tokens') as HTMLInputElement).max = ''));
    await page.fill('#max-tokens', '100000');
    expect(await analyse(page, userFirst, { generate: true })).toMatch(/not drawn: Generated response/);
    expect((await figures(page)).map((f) => f.kind)).toContain('effect-bars');
    expect(await page.textContent('.card:has-text("Generated response: not drawn")')).toMatch(/max_tokens/);
    expect(problems.filter((p) => !p.includes('400'))).toEqual([]);
    await page.close();
  });

  it("reads an mtRAG line as the runners do: the passages are chunks of the last question's message", async () => {
    const { page, problems } = await openPage(browser, `${base}/ui/`);
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    await page.click('button[data-example="passages"]');
    await page.setChecked('#attribute', false);
    await page.click('button:has-text("Analyse")');
    await page.waitForFunction(() => (document.querySelector('#status')!.textContent ?? '').startsWith('Done'), null, { timeout: 60_000 });
    const ticks = await page.$$eval('svg.round-heatmap g[aria-label="y-axis tick label"] text', (ts: Element[]) =>
      ts.map((t) => t.textContent),
    );
    // user, assistant, then the last user turn's passages and question, then the response.
    expect(ticks).toEqual(['user#1', 'assistant#1', 'reference', 'noise', 'question', 'assistant#2']);
    expect(await page.$$eval('svg.figure', (s: Element[]) => s.length)).toBe(3); // no attribution asked
    expect(problems).toEqual([]);
    await page.close();
  });

  it('opens a JSONL file (its first line) and names what is wrong with a bad sample', async () => {
    const { page, problems } = await openPage(browser, `${base}/ui/`);
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    const jsonl = path.join(ARTIFACTS, 'viewer-input.jsonl');
    fs.writeFileSync(jsonl, `${JSON.stringify(DIALOGUE)}\n${JSON.stringify(FOUR_CHUNKS)}\n`);
    await page.setInputFiles('#file', jsonl);
    await page.waitForFunction(() => (document.querySelector('#status')!.textContent ?? '').startsWith('Opened'));
    expect(JSON.parse(await page.inputValue('#sample'))).toEqual(DIALOGUE);
    await page.fill('#sample', JSON.stringify({ chunks: [{ label: 'a', text: 'x', ids: { ids: [1] } }] }));
    await page.click('button:has-text("Analyse")');
    await page.waitForSelector('#status.error');
    // The server's refusal, field named (a 400 is the answer, not a page fault: allowed here).
    expect(await page.textContent('#status')).toMatch(/samples\[0\]\.chunks\[0\]\.content: set one of its fields/);
    expect(problems.filter((p) => !p.includes('400'))).toEqual([]);
    await page.close();
  });
});

describe('the viewer page, as another site would use it', () => {
  let server: CtxprobeServer;
  beforeAll(async () => {
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1 });
  });
  afterAll(async () => server?.drain());

  it('sends a Content-Security-Policy, nosniff and frame protection with the page and its files', async () => {
    for (const route of ['/ui/', '/ui/style.css', '/ui/src/http/ui/app.js', '/favicon.ico']) {
      const res = await fetch(`http://127.0.0.1:${server.httpPort}${route}`);
      expect(res.status, route).toBe(200);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp, route).toContain("frame-ancestors 'none'");
      expect(csp, route).toContain("script-src 'self'");
      expect(res.headers.get('x-content-type-options'), route).toBe('nosniff');
      expect(res.headers.get('x-frame-options'), route).toBe('DENY');
    }
  });

  it.skipIf(!haveChromium)('cannot be framed by another page', async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      const url = `http://127.0.0.1:${server.httpPort}/ui/`;
      await page.setContent(`<iframe id="f" src="${url}"></iframe>`);
      await page.waitForTimeout(1500);
      // The frame's document never becomes the viewer (Chromium blocks it, leaving an error page).
      const frame = page.frames().find((f: any) => f.url().startsWith(url));
      const loaded = frame ? await frame.evaluate(() => document.querySelector('#sample') !== null).catch(() => false) : false;
      expect(loaded).toBe(false);
    } finally {
      await browser.close();
    }
  });
});

describe.skipIf(!haveChromium)('the viewer behind a bearer token', () => {
  const TOKEN = 'viewer-token-0123456789abcdef';
  let model: LoadedModel;
  let server: CtxprobeServer;
  let browser: any;
  let middle: number;
  beforeAll(async () => {
    // A raw-attention cap that one layer of the sample's response rows fits and all do not.
    const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir;
    const sizing = await loadModel({ name: 'm', path: dir, threads: 1 });
    const [probed] = (await sizing.prober.probe([{ chunks: FOUR_CHUNKS.chunks }])).samples;
    const response = probed!.segments.at(-1)!;
    const oneLayer = sizing.engine.config.numHeads * (response.end - response.start) * probed!.numTokens * 2;
    middle = Math.floor(sizing.engine.config.numLayers / 2);
    expect(sizing.engine.config.numLayers).toBeGreaterThan(1);
    await sizing.engine.release();
    model = await loadModel({ name: 'm', path: dir, threads: 1, maxRawAttentionBytes: Math.ceil(1.5 * oneLayer) });
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1, authTokens: [TOKEN] });
    server.addModel(model);
    server.setServing();
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await server?.drain();
    await model?.engine.release();
  });

  it('asks for the token before any call, then sends it with every call; keeps under the raw-attention cap', async () => {
    const { page, problems } = await openPage(browser, `http://127.0.0.1:${server.httpPort}/ui/`);
    const seen: string[] = [];
    page.on(
      'request',
      (r: any) => r.url().includes('/v1/') && seen.push(`${r.url().replace(/^.*\/v1\//, '')} ${r.headers().authorization ?? '-'}`),
    );
    await page.waitForFunction(() => (document.querySelector('#status')!.textContent ?? '').includes('bearer token'));
    expect(seen).toEqual([]);
    await page.fill('#token', TOKEN);
    await page.press('#token', 'Enter');
    await page.waitForFunction(() => (document.querySelector('#model') as HTMLSelectElement).options.length > 0);
    expect(await analyse(page, FOUR_CHUNKS)).toMatch(/^Done/);
    expect(seen.length).toBeGreaterThanOrEqual(4); // list-models, probe, raw-attention, attribute
    // All layers are over this model's raw-attention cap: the text view shows the middle
    // layer, says so, and asked for nothing the server would refuse.
    expect(await page.textContent('.card:has(.tokens) p.note')).toContain(
      `layer ${middle} (all layers are over the model's raw-attention cap)`,
    );
    expect(seen.every((s) => s.endsWith(`Bearer ${TOKEN}`))).toBe(true);
    await page.screenshot({ path: path.join(ARTIFACTS, 'viewer-token.png'), fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  });
});
