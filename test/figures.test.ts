// The probe figures as a person sees them: the HTML report rendered in headless
// Chromium (Debian's chromium, driven by playwright-core), checking what is drawn.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Prober, type ProbeAnswer } from '../src/requests/probe.js';
import { attributionSvg, figuresHtml, probeReportHtml } from '../src/eval/figures.js';
import { prepareAttribution, type SampleAttribution } from '../src/requests/attribution.js';
import { Scorer } from '../src/core/scorer.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = fs.existsSync(CHROMIUM);
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
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
    page = await browser.newPage();
    await page.goto(`file://${file}`);
  });
  afterAll(async () => {
    await browser?.close();
    await engine?.release();
  });

  it('draws the mean chunk distributions as stacked bars whose heights are the shares', async () => {
    const charts = await page.$$eval('svg.distribution', (svgs: SVGSVGElement[]) =>
      svgs.map((svg) => ({
        title: svg.querySelector('.title')!.textContent,
        legend: [...svg.querySelectorAll('text.legend')].map((t) => t.textContent),
        bars: [...svg.querySelectorAll('rect.bar')].map((r) => ({
          layer: Number(r.getAttribute('data-layer')),
          label: r.getAttribute('data-label'),
          value: Number(r.getAttribute('data-value')),
          height: (r as SVGRectElement).getBBox().height,
        })),
      })),
    );
    expect(charts.map((c: any) => c.title)).toEqual([
      'Argmax votes per layer (mean of 2 samples)',
      'Attention mass per layer (mean of 2 samples)',
    ]);
    const L = engine.config.numLayers;
    charts.forEach((chart: any, k: number) => {
      const expected = k === 0 ? answer.mean!.votes : answer.mean!.mass;
      expect(chart.legend).toEqual(['instruction', 'history', 'knowledge', 'response']);
      expect(chart.bars).toHaveLength(L * 4);
      for (let l = 0; l < L; l++) {
        const bars = chart.bars.filter((b: any) => b.layer === l);
        bars.forEach((b: any, c: number) => expect(Math.abs(b.value - expected[l]![c]!)).toBeLessThan(1e-9));
        // Each stack fills the full 220 px axis (shares sum to 1), split in proportion.
        const total = bars.reduce((a: number, b: any) => a + b.height, 0);
        expect(Math.abs(total - 220)).toBeLessThan(0.5);
        bars.forEach((b: any) => expect(Math.abs(b.height - 220 * b.value)).toBeLessThan(0.05));
      }
    });
  });

  it('draws each heatmap lower-triangular with labelled axes, darkest at the maximum', async () => {
    const maps = await page.$$eval('svg.heatmap', (svgs: SVGSVGElement[]) =>
      svgs.map((svg) => ({
        rows: [...svg.querySelectorAll('text.row-label')].map((t) => t.textContent),
        cols: [...svg.querySelectorAll('text.col-label')].map((t) => t.textContent),
        cells: [...svg.querySelectorAll('rect.cell')].map((r) => ({
          row: Number(r.getAttribute('data-row')),
          col: Number(r.getAttribute('data-col')),
          value: Number(r.getAttribute('data-value')),
          fill: getComputedStyle(r).fill,
        })),
      })),
    );
    expect(maps).toHaveLength(3); // the mean and each of the two samples
    const matrices = [answer.mean!.heatmap!, answer.samples[0]!.heatmap, answer.samples[1]!.heatmap];
    maps.forEach((m: any, k: number) => {
      expect(m.rows).toEqual(['instruction', 'history', 'knowledge', 'response']);
      expect(m.cols).toEqual(m.rows);
      expect(m.cells).toHaveLength(10);
      m.cells.forEach((c: any) => {
        expect(c.col).toBeLessThanOrEqual(c.row);
        expect(Math.abs(c.value - matrices[k]![c.row]![c.col]!)).toBeLessThan(1e-9);
      });
      const darkest = m.cells.reduce((a: any, c: any) => (c.value > a.value ? c : a));
      expect(darkest.fill).toBe('rgb(255, 0, 0)');
    });
    const shot = await page.screenshot({ fullPage: true });
    expect(shot.length).toBeGreaterThan(10_000);
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
    const bars = await page.$$eval('svg.attribution rect.bar', (rects: SVGRectElement[]) =>
      rects.map((r) => ({ label: r.getAttribute('data-label'), kind: r.getAttribute('data-intervention'), value: Number(r.getAttribute('data-value')), box: { x: r.getBBox().x, width: r.getBBox().width } })),
    );
    const zero = await page.$eval('svg.attribution line', (l: SVGLineElement) => Number(l.getAttribute('x1')));
    expect(bars).toHaveLength(answer.chunks.length * 2);
    const max = Math.max(...bars.map((b: any) => Math.abs(b.value)));
    answer.chunks.forEach((c) => {
      for (const kind of ['remove', 'mask'] as const) {
        const bar = bars.find((b: any) => b.label === c.label && b.kind === kind);
        expect(bar.value).toBe(c[kind]!.delta);
        expect(Math.abs(bar.box.width - (200 * Math.abs(bar.value)) / max)).toBeLessThan(0.02);
        if (bar.value < 0) expect(Math.abs(bar.box.x + bar.box.width - zero)).toBeLessThan(0.02);
        else expect(Math.abs(bar.box.x - zero)).toBeLessThan(0.02);
      }
    });
  });
});
