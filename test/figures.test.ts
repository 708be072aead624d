// The CLI's figures as a person sees them: the HTML report and the attribution SVG —
// drawn by the viewer's charts (Observable Plot) into linkedom's document, no browser —
// rendered in headless Chromium (Debian's chromium, driven by playwright-core), checking
// what is drawn against the answers.
import { CHROMIUM, haveChromium, launchChromium, marksOutside } from './chromium.js';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Prober, type ProbeAnswer } from '../src/requests/probe.js';
import { attributionSvg, figuresHtml, probeReportHtml } from '../src/eval/figures.js';
import { prepareAttribution, type SampleAttribution } from '../src/requests/attribution.js';
import { Scorer } from '../src/core/scorer.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';

if (!haveChromium) console.warn(`skipping the figure tests: no Chromium at ${CHROMIUM} (apt-get install chromium)`);

describe.skipIf(!haveChromium)('probe report in Chromium', () => {
  let engine: Engine;
  let answer: ProbeAnswer;
  let page: any;
  let browser: any;
  let file: string;
  beforeAll(async () => {
    engine = await Engine.load(makeFixture({ ...FAMILY_FIXTURES.gpt2!, maxPositions: 128 }).dir, { threads: 1 });
    const chunks = (q: string) => [
      { label: 'instruction', text: 'Instruction: choose the best response.\n' },
      { label: 'history', text: `User: ${q}\n` },
      { label: 'knowledge', text: 'Knowledge: The tower was built in 1889.\n' },
      { label: 'response', text: 'Bot: In 1889.' },
    ];
    answer = await new Prober(engine).probe([{ chunks: chunks('When was it built?') }, { chunks: chunks('How old is the tower?') }]);
    file = path.join(tempDir('report'), 'report.html');
    fs.writeFileSync(file, probeReportHtml(answer, 'test report', 'gpt2'));
    browser = await launchChromium();
    page = await browser.newPage();
    await page.goto(`file://${file}`);
  });
  afterAll(async () => {
    await browser?.close();
    await engine?.release();
  });

  it('draws the mean chunk distributions as stacked bars whose heights are the shares', async () => {
    const charts = await page.$$eval('svg.layer-bars', (svgs: SVGSVGElement[]) =>
      svgs.map((svg) => ({
        title: svg.querySelector('text.title')!.textContent,
        legend: [...svg.querySelectorAll('text.legend-label')].map((t) => t.textContent),
        bars: [...svg.querySelectorAll('g[aria-label="bar"] rect')].map((r) => ({
          title: r.querySelector('title')!.textContent!,
          height: (r as SVGRectElement).getBBox().height,
        })),
      })),
    );
    expect(charts.map((c: any) => c.title)).toEqual([
      'Argmax votes per layer (mean of 2 samples)',
      'Attention mass per layer (mean of 2 samples)',
    ]);
    const L = engine.config.numLayers;
    const labels = ['instruction', 'history', 'knowledge', 'response'];
    charts.forEach((chart: any, k: number) => {
      const expected = k === 0 ? answer.mean!.votes : answer.mean!.mass;
      expect(chart.legend).toEqual(labels);
      expect(chart.bars).toHaveLength(L * 4);
      // The y axis maps a share of 1 to `full` pixels; every bar's height is its share of it.
      const full = chart.bars.reduce((a: number, b: any) => a + b.height, 0) / L;
      for (let l = 0; l < L; l++) {
        labels.forEach((label, c) => {
          const bar = chart.bars.find((b: any) => b.title.startsWith(`layer ${l}, ${label}:`));
          const printed = Number(/: (\S+) \(/.exec(bar.title)![1]);
          expect(Math.abs(printed - expected[l]![c]!)).toBeLessThanOrEqual(5e-4 * Math.max(expected[l]![c]!, 1e-3));
          expect(Math.abs(bar.height - full * expected[l]![c]!)).toBeLessThan(0.05);
        });
        const stack = chart.bars.filter((b: any) => b.title.startsWith(`layer ${l},`)).reduce((a: number, b: any) => a + b.height, 0);
        expect(Math.abs(stack - full)).toBeLessThan(0.1); // shares sum to 1: each stack fills the axis
      }
      expect(full).toBeGreaterThan(150);
    });
  });

  it('draws each heatmap lower-triangular with labelled axes, darkest at the maximum', async () => {
    const maps = await page.$$eval('svg.round-heatmap', (svgs: SVGSVGElement[]) =>
      svgs.map((svg) => ({
        ticks: [...svg.querySelectorAll('g[aria-label="y-axis tick label"] text')].map((t) => t.textContent),
        cols: [...svg.querySelectorAll('g[aria-label="x-axis tick label"] text')].map((t) => t.textContent),
        cells: [...svg.querySelectorAll('g[aria-label="cell"] rect')].map((r) => ({
          title: r.querySelector('title')!.textContent!,
          fill: getComputedStyle(r).fill,
        })),
      })),
    );
    expect(maps).toHaveLength(3); // the mean and each of the two samples
    const labels = ['instruction', 'history', 'knowledge', 'response'];
    const matrices = [answer.mean!.heatmap!, answer.samples[0]!.heatmap, answer.samples[1]!.heatmap];
    const luminance = (fill: string) => {
      const [r, g, b] = fill.match(/\d+/g)!.map(Number);
      return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
    };
    maps.forEach((m: any, k: number) => {
      expect(m.ticks).toEqual(labels);
      expect(m.cols).toEqual(labels);
      expect(m.cells).toHaveLength(10);
      const cells = m.cells.map((c: any) => {
        const [, q, key, value] = /^(\w+) → (\w+): (\S+)$/.exec(c.title)!;
        return { row: labels.indexOf(q!), col: labels.indexOf(key!), value: Number(value), fill: c.fill };
      });
      cells.forEach((c: any) => {
        expect(c.col).toBeLessThanOrEqual(c.row);
        const v = matrices[k]![c.row]![c.col]!;
        expect(Math.abs(c.value - v)).toBeLessThanOrEqual(5e-4 * Math.max(v, 1e-3));
      });
      const darkest = cells.reduce((a: any, c: any) => (luminance(c.fill) < luminance(a.fill) ? c : a));
      expect(darkest.value).toBe(Math.max(...cells.map((c: any) => c.value)));
    });
    const shot = await page.screenshot({ fullPage: true });
    expect(shot.length).toBeGreaterThan(10_000);
  });

  it('keeps every bar, cell and label of every figure inside it', async () => {
    expect(await marksOutside(page)).toEqual([]);
  });
});

describe.skipIf(!haveChromium)('attribution figure in Chromium', () => {
  let engine: Engine;
  let browser: any;
  let page: any;
  let answer: SampleAttribution;
  beforeAll(async () => {
    engine = await Engine.load(makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir, { threads: 1 });
    const prepared = await prepareAttribution(engine, [
      {
        chunks: [
          { label: 'instruction', text: 'Instruction: answer from the knowledge.\n' },
          { label: 'history', text: 'User: Who built the tower?\n' },
          { label: 'knowledge', text: 'Knowledge: Gustave Eiffel built it in 1889.\n' },
          { label: 'response', text: 'Bot: Eiffel, in 1889.' },
        ],
      },
    ]);
    [answer] = prepared.finish((await new Scorer(engine).scoreUnits(prepared.units)).scores) as [SampleAttribution];
    const svg = attributionSvg(
      answer.chunks.map((c) => ({ label: c.label, values: { remove: c.remove!.delta, mask: c.mask!.delta } })),
      'Δ per chunk',
      'Δ log-likelihood (nats)',
    );
    const file = path.join(tempDir('attribution'), 'report.html');
    fs.writeFileSync(file, figuresHtml('attribution', 'test', [svg]));
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] });
    page = await browser.newPage();
    await page.goto(`file://${file}`);
  });
  afterAll(async () => {
    await browser?.close();
    await engine?.release();
  });

  it('draws one bar per chunk and intervention, its length in proportion to |Δ|, left of zero when Δ < 0', async () => {
    const bars = await page.$$eval('svg.effect-bars g[aria-label="bar"] rect', (rects: SVGRectElement[]) =>
      rects.map((r) => {
        const box = r.getBoundingClientRect();
        return { title: r.querySelector('title')!.textContent!, x: box.x, width: box.width };
      }),
    );
    const zero = await page.$eval('svg.effect-bars g[aria-label="rule"] line', (l: SVGLineElement) => l.getBoundingClientRect().x);
    expect(bars).toHaveLength(answer.chunks.length * 2);
    const parsed = bars.map((b: any) => {
      const [, label, kind, value] = /^(\w+), (remove|mask): (\S+)$/.exec(b.title)!;
      return { ...b, label, kind, value: Number(value) };
    });
    // Pixels per nat, from the longest bar.
    const longest = parsed.reduce((a: any, b: any) => (b.width > a.width ? b : a));
    const scale = longest.width / Math.abs(longest.value);
    answer.chunks.forEach((c) => {
      for (const kind of ['remove', 'mask'] as const) {
        const bar = parsed.find((b: any) => b.label === c.label && b.kind === kind);
        const delta = c[kind]!.delta;
        expect(Math.abs(bar.value - delta)).toBeLessThanOrEqual(5e-4 * Math.max(Math.abs(delta), 1e-3));
        expect(Math.abs(bar.width - scale * Math.abs(delta))).toBeLessThan(0.6);
        if (delta < 0) expect(Math.abs(bar.x + bar.width - zero)).toBeLessThan(0.6);
        else expect(Math.abs(bar.x - zero)).toBeLessThan(0.6);
      }
    });
  });

  it('keeps every bar and the axis label inside the figure when masking moves the target most, either way', async () => {
    for (const sign of [1, -1]) {
      const rows = [
        { label: 'instruction', values: { remove: -0.42, mask: -0.31 } },
        { label: 'history', values: { remove: 0.85, mask: 1.2 } },
        { label: 'knowledge', values: { remove: sign * 3.9, mask: sign * 5.7 } },
        { label: 'user#1', values: { remove: 0.1, mask: -0.05 } },
      ];
      const svg = attributionSvg(
        rows,
        'Removing or masking each chunk: Δ log p(response) (unchanged: -12.34 nats)',
        'Δ log-likelihood (nats)',
      );
      const shown = await browser.newPage();
      await shown.setContent(figuresHtml('attribution', 'test', [svg]));
      expect(await shown.$$eval('svg.effect-bars g[aria-label="bar"] rect', (r: Element[]) => r.length)).toBe(8);
      expect(await marksOutside(shown)).toEqual([]);
      await shown.close();
    }
  });
});
