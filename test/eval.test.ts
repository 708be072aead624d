// The research runners as clients of a server started in-process on a tiny model:
// CHARPEval's numbers re-derived by hand from the log-likelihoods it reports, few-shot
// prompts, the attention figure against the probe call; RefuteBench-style heatmaps;
// contamination AUC in closed form.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvalClient, readJsonl } from '../src/eval/client.js';
import { RESPONSE_TYPES, buildPrompt, demonstrationsFor, promptParts, runCharpeval, type CharpSample } from '../src/eval/charpeval.js';
import { roundOf, runRefute, type Dialogue } from '../src/eval/refute.js';
import { rocAuc, runContamination } from '../src/eval/contamination.js';
import { attributeMarkdown, runAttribute, toAttributionSample } from '../src/eval/attribute.js';
import { prepareAttribution } from '../src/requests/attribution.js';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober } from '../src/requests/probe.js';
import { renderChatText } from '../src/requests/segments.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { directScoring } from '../src/requests/scoring.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const samples = readJsonl<CharpSample>(path.join(root, 'data/charpeval-sample.jsonl'));
const dialogues = readJsonl<Dialogue>(path.join(root, 'data/refute-sample.jsonl'));

let dir: string;
let client: EvalClient;
let engine: Engine;
beforeAll(async () => {
  dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 2048 }).dir;
  // A real chat template (Llama 3.3) for the mtRAG-style attribution samples.
  fs.copyFileSync(path.join(root, 'test/chat-templates/llama-3.3-instruct.jinja'), path.join(dir, 'chat_template.jinja'));
  client = await EvalClient.connect({ model: dir, threads: 1 });
  engine = await Engine.load(dir, { threads: 1 });
});
afterAll(async () => {
  await client?.close();
  await engine?.release();
});

describe('CHARPEval runner', () => {
  it('reports accuracy and the type distribution that its per-response log-likelihoods imply', async () => {
    const report = await runCharpeval(client, samples);
    expect(report.samples).toBe(3);
    const scorer = new Scorer(engine);
    let correct = 0;
    let correctNorm = 0;
    const top: Record<string, number> = {};
    for (const [i, r] of report.results.entries()) {
      // The log-likelihoods are the scorer's for the paper's prompt + " response".
      const [direct] = await directScoring(scorer).loglikelihood([
        { context: buildPrompt(samples[i]!, []), continuations: RESPONSE_TYPES.map((t) => ` ${samples[i]!.responses[t]}`) },
      ]);
      RESPONSE_TYPES.forEach((t, j) => expect(Math.abs(r.logprobs[t] - direct![j]!.logprob)).toBeLessThan(1e-4));
      // By hand: the best by sum, and by sum per character.
      const best = [...RESPONSE_TYPES].sort((a, b) => r.logprobs[b] - r.logprobs[a])[0]!;
      const bestNorm = [...RESPONSE_TYPES].sort((a, b) => r.logprobs[b] / r.numChars[b] - r.logprobs[a] / r.numChars[a])[0]!;
      expect(r.predicted).toBe(best);
      expect(r.ranks[best]).toBe(1);
      expect(r.numChars.GTRS).toBe([...` ${samples[i]!.responses.GTRS}`].length);
      if (best === 'GTRS') correct++;
      if (bestNorm === 'GTRS') correctNorm++;
      top[best] = (top[best] ?? 0) + 1;
    }
    expect(report.acc).toBe(correct / 3);
    expect(report.accNorm).toBe(correctNorm / 3);
    for (const t of RESPONSE_TYPES) expect(report.topRankedByType[t]).toBe((top[t] ?? 0) / 3);
  });

  it('puts exactly k demonstrations, never the sample itself, between the instruction and the sample', () => {
    for (const k of [0, 1, 2]) {
      samples.forEach((s, i) => {
        const demos = demonstrationsFor(i, samples, undefined, k);
        expect(demos).toHaveLength(k);
        expect(demos).not.toContain(s);
        const prompt = buildPrompt(s, demos);
        expect(prompt.split('\nKnowledge: ').length - 1).toBe(k + 1);
        expect(prompt.startsWith(promptParts(s, demos).instruction)).toBe(true);
        expect(prompt.endsWith(`Knowledge: ${s.knowledge}\n\nBot:`)).toBe(true);
        for (const d of demos) expect(prompt.indexOf(d.responses.GTRS)).toBeLessThan(prompt.indexOf(`User: ${s.user}`));
      });
    }
    expect(() => demonstrationsFor(0, samples, undefined, 3)).toThrow(/3 demonstrations asked, 2 available/);
  });

  it("gives the attention figure the probe call's mean", async () => {
    const report = await runCharpeval(client, samples, { shots: 1, attention: true });
    const chunks = samples.map((s, i) => {
      const p = promptParts(s, demonstrationsFor(i, samples, undefined, 1));
      return [
        { label: 'instruction', text: p.instruction + p.demonstrations },
        { label: 'history', text: p.history },
        { label: 'knowledge', text: p.knowledge + p.bot },
        { label: 'response', text: ` ${s.responses.GTRS}` },
      ];
    });
    const direct = await new Prober(engine).probe(chunks.map((c) => ({ chunks: c, queryLabels: ['response'] })));
    report.attention!.votes.forEach((row, l) => row.forEach((v, c) => expect(Math.abs(v - direct.mean!.votes[l]![c]!)).toBeLessThan(1e-6)));
    report.attention!.mass.forEach((row, l) => row.forEach((v, c) => expect(Math.abs(v - direct.mean!.mass[l]![c]!)).toBeLessThan(1e-6)));
  });

  it('runs from the command line and writes results, a report and figures', async () => {
    const out = tempDir('charp-out');
    await promisify(execFile)(process.execPath, [
      path.join(root, 'bin/ctxprobe.js'),
      'eval',
      'charpeval',
      path.join(root, 'data/charpeval-sample.jsonl'),
      '--model',
      dir,
      '--threads',
      '1',
      '--attention',
      '--out',
      out,
    ]);
    const results = JSON.parse(fs.readFileSync(path.join(out, 'results.json'), 'utf8'));
    expect(results.results).toHaveLength(3);
    expect(fs.readFileSync(path.join(out, 'report.md'), 'utf8')).toMatch(/\| log-likelihood \|/);
    expect(fs.readFileSync(path.join(out, 'attention-votes.svg'), 'utf8')).toMatch(/<svg[^>]*class="figure layer-bars"[\s\S]*aria-label="bar"/);
  });
});

describe('attribution runner', () => {
  const mtrag = {
    id: 'mtrag-1',
    messages: [
      { role: 'user', content: 'Who designed the tower?' },
      { role: 'assistant', content: 'Gustave Eiffel.' },
      { role: 'user', content: 'When did it open?' },
      { role: 'assistant', content: 'In 1889.' },
    ],
    passages: [
      { text: 'The tower opened in 1889 for the World Fair.', label: 'reference' },
      { text: 'Bananas are rich in potassium.', label: 'noise' },
    ],
  };

  it('CHARPEval and mtRAG-style samples: each Δ is the attribution call scored alone, the means are over labels', async () => {
    const records = [samples[0]!, samples[1]!, mtrag];
    const report = await runAttribute(client, records, { sweep: [0, 1, 2 ** 31 - 1] });
    expect(report.samples.map((s) => s.target)).toEqual(['response', 'response', 'assistant#2']);
    // The CHARPEval layout is the text CHARPEval scores: its prompt, then " " + the ground truth.
    const charp = toAttributionSample(samples[0]!, 'line 1');
    expect(charp.chunks!.map((c) => c.text).join('')).toBe(`${buildPrompt(samples[0]!, [])} ${samples[0]!.responses.GTRS}`);
    expect(report.samples[2]!.labels).toEqual(['user#1', 'assistant#1', 'reference', 'noise', 'question', 'assistant#2']);
    const alone = new Scorer(engine, { prefixSharing: false });
    for (const [i, r] of records.entries()) {
      const s = toAttributionSample(r, `line ${i + 1}`);
      const prepared = await prepareAttribution(
        engine,
        [{ chunks: s.chunks?.length ? s.chunks.map((c) => ({ label: c.label!, text: c.text! })) : undefined, messages: s.messages as never, target: s.targetLabel || undefined }],
        { historySweep: [0, 1, 2 ** 31 - 1] },
      );
      const scores = [];
      for (const u of prepared.units) scores.push((await alone.scoreUnits([u])).scores[0]!);
      const [want] = prepared.finish(scores);
      const got = report.samples[i]!;
      expect(Math.abs(got.logprob - want!.base.logprob)).toBeLessThan(1e-4);
      got.chunks.forEach((c, k) => {
        expect(Math.abs(c.remove! - want!.chunks[k]!.remove!.delta)).toBeLessThan(1e-4);
        expect(Math.abs(c.mask! - want!.chunks[k]!.mask!.delta)).toBeLessThan(1e-4);
      });
      got.sweep.forEach((p, k) => expect(Math.abs(p.mask! - want!.sweep![k]!.mask!.delta)).toBeLessThan(1e-4));
    }
    // Mean per label, by hand.
    const history = report.samples.flatMap((s) => s.chunks.filter((c) => c.label === 'history'));
    const byLabel = report.meanByLabel.find((m) => m.label === 'history')!;
    expect(byLabel.chunks).toBe(history.length);
    expect(byLabel.remove).toBeCloseTo(history.reduce((a, c) => a + c.remove!, 0) / history.length, 10);
    expect(report.meanByLabel.map((m) => m.label)).toEqual(['instruction', 'history', 'user', 'knowledge', 'user#1', 'assistant#1', 'reference', 'noise', 'question']);
    // Keeping every turn changes nothing.
    report.samples.forEach((s) => expect(Math.abs(s.sweep.at(-1)!.remove!)).toBeLessThan(1e-9));
  });

  it('runs from the command line and writes results, a report and figures', async () => {
    const out = tempDir('attribute-out');
    const data = path.join(out, 'data.jsonl');
    fs.writeFileSync(data, [samples[0], mtrag].map((r) => JSON.stringify(r)).join('\n') + '\n');
    await promisify(execFile)(process.execPath, [path.join(root, 'bin/ctxprobe.js'), 'eval', 'attribute', data, '--model', dir, '--threads', '1', '--sweep', '0,all', '--out', out]);
    const results = JSON.parse(fs.readFileSync(path.join(out, 'results.json'), 'utf8'));
    expect(results.samples).toHaveLength(2);
    expect(results.meanSweep.map((p: any) => [p.keep, p.samples])).toEqual([
      [0, 2],
      [2 ** 31 - 1, 2],
    ]);
    const report = fs.readFileSync(path.join(out, 'report.md'), 'utf8');
    expect(report).toMatch(/## Mean Δ per chunk label/);
    // Read as a sentence (it said "with the chunk remove / maskd").
    expect(report).toContain(
      "2 samples. Δ = the target's log-likelihood (nats, summed over its tokens) with the chunk removed / masked, minus the unchanged sample's: negative means the chunk supported the target.",
    );
    const masked = attributeMarkdown({ ...results, interventions: ['mask'] });
    expect(masked).toContain('with the chunk masked, minus');
    expect(fs.readFileSync(path.join(out, 'attribution-mean.svg'), 'utf8')).toMatch(/<svg[^>]*class="figure effect-bars"[\s\S]*, mask: /);
    expect(fs.readFileSync(path.join(out, 'report.html'), 'utf8')).toMatch(/class="figure effect-bars"/);
  });
});

describe('RefuteBench runner', () => {
  it('gives each dialogue its probe heatmap, the mean, and the last response share per round', async () => {
    const report = await runRefute(client, dialogues, { plain: true });
    expect(report.dialogues).toHaveLength(2);
    const labels = ['system', 'user#1', 'assistant#1', 'user#2', 'assistant#2', 'user#3', 'assistant#3'];
    for (const d of report.dialogues) {
      expect(d.labels).toEqual(labels);
      const total = Object.values(d.lastResponseShare).reduce((a, b) => a + b, 0);
      expect(Math.abs(total - 1)).toBeLessThan(1e-5);
      expect(Object.keys(d.lastResponseShare).sort()).toEqual(['0', '1', '2', '3']);
    }
    expect(report.meanHeatmap!.dialogues).toBe(2);
    const m = report.meanHeatmap!.values;
    m.forEach((row, i) =>
      row.forEach((v, j) =>
        expect(Math.abs(v - (report.dialogues[0]!.heatmap[i]![j]! + report.dialogues[1]!.heatmap[i]![j]!) / 2)).toBeLessThan(1e-9),
      ),
    );
    // The runner's heatmap is the probe's for the same plain rendering.
    const d0 = dialogues[0]!;
    const chunks = d0.messages.map((msg, i) => ({
      label: labels[i]!,
      text: `${msg.role[0]!.toUpperCase()}${msg.role.slice(1)}: ${msg.content}\n\n`,
    }));
    const direct = await new Prober(engine).probe([{ chunks, queryLabels: ['assistant#3'], excludePositions: [0] }]);
    direct.samples[0]!.heatmap.forEach((row, i) =>
      row.forEach((v, j) => expect(Math.abs(v - report.dialogues[0]!.heatmap[i]![j]!)).toBeLessThan(1e-6)),
    );
    expect(roundOf('assistant#3')).toBe('3');
  });

  it("--generate plays each dialogue with the model's own responses (each the greedy chain after the dialogue so far), then probes it", async () => {
    const out = tempDir('refute-generate');
    await promisify(execFile)(process.execPath, [
      path.join(root, 'bin/ctxprobe.js'), 'eval', 'refute', path.join(root, 'data/refute-sample.jsonl'),
      '--model', dir, '--threads', '1', '--generate', '--max-tokens', '5', '--out', out,
    ]);
    const played = readJsonl<Dialogue>(path.join(out, 'dialogues.jsonl'));
    const results = JSON.parse(fs.readFileSync(path.join(out, 'results.json'), 'utf8'));
    expect(results.dialogues.map((d: any) => d.labels)).toEqual(played.map(() => ['system', 'user#1', 'assistant#1', 'user#2', 'assistant#2', 'user#3', 'assistant#3']));
    const scorer = new Scorer(engine, { prefixSharing: false });
    const tok = engine.tokenizer;
    const stops = new Set([...engine.config.eosTokenIds, tok.eosId]);
    for (const [i, d] of played.entries()) {
      // The user turns as given, in order; every assistant turn the model's.
      expect(d.messages.filter((m) => m.role !== 'assistant')).toEqual(dialogues[i]!.messages.filter((m) => m.role !== 'assistant'));
      for (const [k, m] of d.messages.entries()) {
        if (m.role !== 'assistant') continue;
        const prompt = tok.encode(renderChatText(tok, d.messages.slice(0, k), 'messages', tok.chatTemplate, { addGenerationPrompt: true }), false);
        const chain: number[] = [];
        while (chain.length < 5) {
          const [[s]] = (await directScoring(scorer).loglikelihood([{ context: [...prompt, ...chain], continuations: [[0]], topK: 1 }])) as any;
          const next = s.topK[0].ids[0];
          chain.push(next);
          if (stops.has(next)) break;
        }
        expect(m.content).toBe(tok.decodeText(chain));
      }
    }
    // Sampled with a seed: the same dialogues again, and not the greedy ones.
    const sampled = async () => {
      const dir2 = tempDir('refute-sampled');
      await promisify(execFile)(process.execPath, [
        path.join(root, 'bin/ctxprobe.js'), 'eval', 'refute', path.join(root, 'data/refute-sample.jsonl'),
        '--model', dir, '--threads', '1', '--generate', '--max-tokens', '5', '--temperature', '1.5', '--seed', '3', '--out', dir2,
      ]);
      return fs.readFileSync(path.join(dir2, 'dialogues.jsonl'), 'utf8');
    };
    const first = await sampled();
    expect(await sampled()).toBe(first);
    expect(first).not.toBe(fs.readFileSync(path.join(out, 'dialogues.jsonl'), 'utf8'));
  });
});

describe('contamination', () => {
  it('computes ROC AUC in closed form', () => {
    expect(rocAuc([3, 4], [1, 2])).toBe(1);
    expect(rocAuc([1, 2], [3, 4])).toBe(0);
    expect(rocAuc([1, 2], [1, 2])).toBe(0.5);
    expect(rocAuc([2], [1, 2, 3])).toBe(0.5); // one win, one tie, one loss
    expect(rocAuc([1, 3], [2])).toBe(0.5);
  });

  it('scores both sets with the rolling loss and Min-K%, and their difference', async () => {
    const a = ['Once upon a time, there was a little girl named Lily.', 'The weather today is sunny and warm.'];
    const b = ['Zebra quantum violet lamp seventeen.', 'Cologne carnival picnic lemonade hills.', 'Knowledge: tower.'];
    const report = await runContamination(client, a, b, { minKPercent: 30 });
    const scorer = new Scorer(engine);
    const direct = await directScoring(scorer).rolling([...a, ...b].map((text) => ({ text, minKPercent: 30 })));
    [...report.a, ...report.b].forEach((s, i) => {
      expect(Math.abs(s.meanLoss - direct[i]!.meanLoss)).toBeLessThan(1e-6);
      expect(Math.abs(s.minKLogprob - direct[i]!.minKLogprob)).toBeLessThan(1e-6);
    });
    const mean = (xs: number[]) => xs.reduce((x, y) => x + y, 0) / xs.length;
    expect(
      Math.abs(report.summary.meanLossDifference - (mean(report.a.map((s) => s.meanLoss)) - mean(report.b.map((s) => s.meanLoss)))),
    ).toBeLessThan(1e-12);
    expect(report.summary.aucMeanLoss).toBe(
      rocAuc(
        report.a.map((s) => -s.meanLoss),
        report.b.map((s) => -s.meanLoss),
      ),
    );
  });
});
