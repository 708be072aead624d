// The Probing service over gRPC: answers equal the prober's, raw attention streams in
// float32 and float16, over-large requests are refused, bad samples name their field.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { f16ToF32 } from '../src/common/dtypes.js';
import { Prober } from '../src/requests/probe.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { scoringClient, scrape, unary } from './helpers.js';
import { directScoring } from '../src/requests/scoring.js';

let model: LoadedModel;
let chatModel: LoadedModel;
const HERE = path.dirname(fileURLToPath(import.meta.url));
let server: CtxprobeServer;
let client: any;

const chunks = [
  { label: 'instruction', text: 'Instruction: choose the best response.\n' },
  { label: 'history', text: 'User: Who designed the tower?\n' },
  { label: 'knowledge', text: 'Knowledge: Gustave Eiffel designed it.\n' },
  { label: 'response', text: 'Bot: Eiffel did.' },
];

beforeAll(async () => {
  model = await loadModel({
    name: 'm',
    path: makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 128 }).dir,
    threads: 1,
    maxRawAttentionBytes: 8192,
  });
  // A second model whose template is a chat_template.jinja file (the real Llama 3.3 one).
  const chatDir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 512 }).dir;
  fs.copyFileSync(path.join(HERE, 'chat-templates', 'llama-3.3-instruct.jinja'), path.join(chatDir, 'chat_template.jinja'));
  chatModel = await loadModel({ name: 'chat', path: chatDir, threads: 1 });
  server = await CtxprobeServer.start({ port: 0, metricsPort: 0 });
  server.addModel(model);
  server.addModel(chatModel);
  server.setServing();
  const { v1 } = loadPackage();
  client = new v1.Probing(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
});
afterAll(async () => {
  client?.close();
  await server?.close();
});

const close = (a: number[], b: number[], tol = 1e-6) => a.forEach((v, i) => expect(Math.abs(v - b[i]!)).toBeLessThan(tol));

describe('Probe', () => {
  it('counts its forward passes in /metrics, by kind, with their tokens', async () => {
    const key = (name: string, kind: string) => `ctxprobe_${name}{model="m",kind="${kind}"}`;
    const before = await scrape(server.metricsPort!);
    const res = await unary(client, 'Probe', { model: 'm', samples: [{ chunks }] });
    const after = await scrape(server.metricsPort!);
    const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
    // One short sample with a heatmap: one probe pass over its tokens, no scoring pass.
    const tokens = res.samples[0].spans.at(-1).end;
    expect(delta(key('forward_passes_total', 'probe'))).toBe(1);
    expect(delta(key('forward_pass_tokens_total', 'probe'))).toBe(tokens);
    expect(delta(key('forward_passes_total', 'score'))).toBe(0);
  });

  it('chat messages over gRPC: chunks inside a message, a generation prompt, template arguments as JSON', async () => {
    const messages = (extra = '') => [
      { role: 'system', content: 'Answer from the passages.' },
      {
        role: 'user',
        chunks: [
          { label: 'passage#1', text: 'The tower was built for the fair.\n' },
          { label: 'passage#2', text: 'It opened in 1889.\n' },
          { label: 'question', text: 'When did it open?' + extra },
        ],
      },
      { role: 'assistant', content: 'In 1889.' },
    ];
    const probe = async (sample: Record<string, unknown>) =>
      (await unary(client, 'Probe', { model: 'chat', samples: [sample] })).samples[0];
    const plain = await probe({ messages: messages() });
    expect(plain.spans.map((s: any) => s.label)).toEqual(['system', 'passage#1', 'passage#2', 'question', 'assistant#1']);
    const width = (p: any, k: number) => p.spans[k].end - p.spans[k].start;
    // The generation prompt lengthens the last span; a longer date_string the first.
    const prompted = await probe({ messages: messages(), addGenerationPrompt: true });
    expect(width(prompted, 4)).toBeGreaterThan(width(plain, 4));
    const dated = await probe({
      messages: messages(),
      chatTemplateKwargsJson: JSON.stringify({ date_string: 'the twenty-second day of November, 2026' }),
    });
    expect(width(dated, 0)).toBeGreaterThan(width(plain, 0));
    expect(width(dated, 1)).toBe(width(plain, 1));
    const err = await unary(client, 'Probe', { model: 'chat', samples: [{ messages: messages(), chatTemplateKwargsJson: '[1]' }] }).catch(
      (e) => e,
    );
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/^samples\[0\]\.chat_template_kwargs_json: must be a JSON object/);
  });

  it("skip_heatmap: a dialogue extended round by round computes only what its cache lacks, with the full probe's votes and mass", async () => {
    const rounds = Array.from({ length: 5 }, (_, r) => ({
      label: `round#${r + 1}`,
      text: `U: q${r + 1}?\nB: 188${r}.\n`,
    }));
    const tokensBefore = async (k: number) =>
      (
        await model.engine.tokenizer.encodeAsync(
          rounds
            .slice(0, k)
            .map((c) => c.text)
            .join(''),
          false,
        )
      ).length;
    let previous = 0;
    for (const k of [3, 4, 5]) {
      const sample = { id: `k${k}`, chunks: rounds.slice(0, k) };
      const cached = await unary(client, 'Probe', { samples: [sample], skipHeatmap: true });
      const full = await unary(client, 'Probe', { samples: [sample] });
      const got = cached.samples[0];
      const want = full.samples[0];
      expect(got.heatmap.values).toEqual([]);
      expect(want.heatmap.values.length).toBeGreaterThan(0);
      close(got.votes.values, want.votes.values, 1e-5);
      close(got.mass.values, want.mass.values, 1e-5);
      close(got.massExcluded, want.massExcluded, 1e-5);
      // Everything before the last round is the prefix: what earlier probes cached is reused.
      const prefix = await tokensBefore(k - 1);
      expect(got.prefixTokensReused + got.prefixTokensComputed).toBe(prefix);
      expect(got.prefixTokensReused).toBe(previous);
      expect(want.prefixTokensComputed + want.prefixTokensReused).toBe(0);
      previous = prefix;
    }
  });

  it('answers as the prober does, per sample and as a mean', async () => {
    const samples = [
      { id: 'a', chunks, excludePositions: [0] },
      { id: 'b', chunks: chunks.map((c) => ({ ...c, text: c.text.toUpperCase() })) },
    ];
    const res = await unary(client, 'Probe', { samples, pool: 'POOL_MEAN', keyReduce: 'REDUCE_SUM', perHead: true, withLogprobs: true });
    const direct = await model.prober.probe(
      samples.map((s) => ({ chunks: s.chunks, excludePositions: s.excludePositions })),
      { pool: 'mean', keyReduce: 'sum', perHead: true, logprobs: true },
    );
    expect(res.layers).toBe(2);
    expect(res.heads).toBe(4);
    expect([res.pool, res.queryReduce, res.keyReduce]).toEqual(['mean', 'mean', 'sum']);
    res.samples.forEach((s: any, i: number) => {
      const d = direct.samples[i]!;
      expect(s.id).toBe(samples[i]!.id);
      expect(s.spans.map((x: any) => [x.label, x.start, x.end])).toEqual(d.segments.map((x) => [x.label, x.start, x.end]));
      expect([s.votes.rows, s.votes.cols]).toEqual([2, 4]);
      close(s.votes.values, d.votes.flat());
      close(s.mass.values, d.mass.flat());
      close(s.heatmap.values, d.heatmap.flat());
      close(s.votesExcluded, d.votesExcluded);
      expect([s.votesPerHead.rows, s.votesPerHead.cols]).toEqual([8, 4]);
      close(s.queryLogprobs, d.queryLogprobs!);
      expect(s.queryLogprobs.length).toBe(d.segments.at(-1)!.end - d.segments.at(-1)!.start);
      expect(Math.abs(s.queryLogprob - d.queryLogprob!)).toBeLessThan(1e-4);
    });
    expect(res.hasMean).toBe(true);
    close(res.mean.votes.values, direct.mean!.votes.flat());
    expect(res.mean.labels).toEqual(chunks.map((c) => c.label));
  });

  it('probes chat messages and pre-tokenised chunks', async () => {
    const ids = model.engine.tokenizer.encode('Hello there, how are you?');
    const res = await unary(client, 'Probe', {
      samples: [
        {
          id: 'ids',
          chunks: [
            { label: 'x', ids: { ids: ids.slice(0, 3) } },
            { label: 'y', ids: { ids: ids.slice(3) } },
          ],
          queryLabels: ['y'],
        },
      ],
    });
    expect(res.samples[0].spans.map((s: any) => [s.start, s.end])).toEqual([
      [0, 3],
      [3, ids.length],
    ]);
    expect(res.samples[0].queryLabels).toEqual(['y']);
  });

  it('names bad fields', async () => {
    const cases: [unknown, RegExp][] = [
      [{ samples: [] }, /^samples: at least one sample/],
      [
        {
          samples: [
            {
              chunks: [
                { label: 'a', text: 'x' },
                { label: 'b', ids: { ids: [1] } },
              ],
            },
          ],
        },
        /samples\[0\]\.chunks: every chunk needs text, or every chunk ids/,
      ],
      [{ samples: [{ chunks, queryLabels: ['nope'] }] }, /samples\[0\]\.query_labels\[0\]: no chunk is labelled "nope"/],
      [{ samples: [{ messages: [{ role: 'user', content: 'hi' }] }] }, /samples\[0\]\.messages: the model has no chat template/],
      [{ samples: [{ chunks }], keyReduce: 9 }, /key_reduce: unknown value 9/],
      [{ model: 'x', samples: [{ chunks }] }, /model: no model named "x"/],
      // 130,000 ids in one chunk: spread into a call, they overflowed the stack (INTERNAL).
      [{ samples: [{ chunks: [{ label: 'a', ids: { ids: new Array(130_000).fill(5) } }] }] }, /^samples\[0\]/],
    ];
    for (const [req, message] of cases) {
      const err = await unary(client, 'Probe', req).catch((e) => e);
      expect(err.code, JSON.stringify(req).slice(0, 300)).toBe(message.source.startsWith('model') ? grpc.status.NOT_FOUND : grpc.status.INVALID_ARGUMENT);
      expect(err.details).toMatch(message);
    }
  });
});

describe('Probe with log-probs, the first token of the query chunk excluded from the keys', () => {
  it('skip_heatmap gives every query log-prob the heatmap path gives, the first one included', async () => {
    const tok = model.engine.tokenizer;
    const a = tok.encode('Knowledge: the tower is in Paris.');
    const b = tok.encode(' In Paris, since 1889.');
    const probe = async (skipHeatmap: boolean) =>
      (
        await unary(client, 'Probe', {
          model: 'm',
          samples: [{ chunks: [{ label: 'a', ids: { ids: a } }, { label: 'b', ids: { ids: b } }], queryLabels: ['b'], excludePositions: [a.length] }],
          withLogprobs: true,
          skipHeatmap,
        })
      ).samples[0];
    const [whole, skipped] = [await probe(false), await probe(true)];
    const plain = (await directScoring(model.scorer).loglikelihood([{ context: a, continuations: [b] }]))[0]![0]!;
    expect(whole.queryLogprobs).toHaveLength(b.length);
    expect(skipped.queryLogprobs).toHaveLength(b.length);
    close(skipped.queryLogprobs, whole.queryLogprobs, 1e-5);
    close(skipped.queryLogprobs, plain.tokenLogprobs, 1e-5);
    expect(Math.abs(skipped.queryLogprob - plain.logprob)).toBeLessThan(1e-4);
  });
});

describe('one scheduler for probes and scores', () => {
  it('runs a Probe and a Score sent together in one shared forward pass, each answer as if alone', async () => {
    // A server of its own whose round waits 400 ms, so both calls join it; cold cache.
    const shared = await loadModel({ name: 'm', path: model.entry.path, threads: 1 });
    const own = await CtxprobeServer.start({ port: 0, metricsPort: 0, batcher: { maxQueueDelayMs: 400 } });
    own.addModel(shared);
    own.setServing();
    const { v1 } = loadPackage();
    const probing = new v1.Probing(`127.0.0.1:${own.port}`, grpc.credentials.createInsecure());
    const scoring = scoringClient(own.port);
    try {
      const key = (name: string, kind: string) => `ctxprobe_${name}{model="m",kind="${kind}"}`;
      const before = await scrape(own.metricsPort!);
      const context = 'Knowledge: Gustave Eiffel designed it.\nUser: Who designed the tower?\nBot:';
      const [probe, score] = await Promise.all([
        unary(probing, 'Probe', { model: 'm', samples: [{ chunks }] }),
        unary(scoring, 'Score', { model: 'm', items: [{ contextText: context, continuationsText: [' Eiffel did.'] }] }),
      ]);
      const after = await scrape(own.metricsPort!);
      const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
      // One pass that probes and scores; no pass that only scores.
      expect(delta(key('forward_passes_total', 'probe'))).toBe(1);
      expect(delta(key('forward_passes_total', 'score'))).toBe(0);
      const probeTokens = probe.samples[0].spans.at(-1).end;
      const scoreTokens = score.items[0].continuations[0].numTokens + model.engine.tokenizer.encode(context).length - 1;
      // Both rows, padded to the longer: the pass's tokens are 2 × the longest row.
      expect(delta(key('forward_pass_tokens_total', 'probe'))).toBe(2 * Math.max(probeTokens, scoreTokens));
      // Each answer bit for bit what it is alone (the unbatched path, no server).
      const alone = (await new Prober(model.engine).probe([{ chunks }])).samples[0]!;
      expect(probe.samples[0].votes.values).toEqual(alone.votes.flat().map(Math.fround));
      expect(probe.samples[0].mass.values).toEqual(alone.mass.flat().map(Math.fround));
      expect(probe.samples[0].heatmap.values).toEqual(alone.heatmap.flat().map(Math.fround));
      const plain = (await directScoring(model.scorer).loglikelihood([{ context: model.engine.tokenizer.encode(context), continuations: [model.engine.tokenizer.encode(' Eiffel did.')] }]))[0]![0]!;
      expect(score.items[0].continuations[0].tokenLogprobs).toEqual(plain.tokenLogprobs);
    } finally {
      probing.close();
      scoring.close();
      await own.close();
    }
  });
});

describe('Score with a chunked context (scores and attention from one pass)', () => {
  // CHARPEval's shape: the dialogue's chunks as the context, candidate responses as the
  // continuations; the last chunk ends in a space, which _encode_pair moves to them.
  const context = [
    { label: 'instruction', text: 'Instruction: choose the best response.\n' },
    { label: 'history', text: 'User: Who designed the tower?\n' },
    { label: 'knowledge', text: 'Knowledge: Gustave Eiffel designed it.\nBot: ' },
  ];
  const responses = ['Eiffel did.', 'Nobody knows, sorry.'];
  const score = (req: unknown) => {
    const scoring = scoringClient(server.port);
    return unary(scoring, 'Score', req).finally(() => scoring.close());
  };

  it('gives each continuation the plain Score answer and the Probe statistics of the same tokens', async () => {
    const res = await score({
      model: 'm',
      items: [
        { id: 'chunked', contextChunks: context, continuationsText: responses, excludePositions: [0] },
        { id: 'plain', contextText: context.map((c) => c.text).join(''), continuationsText: responses },
      ],
    });
    const [chunked, plain] = res.items;
    expect([chunked.id, plain.id]).toEqual(['chunked', 'plain']);
    expect(plain.continuations[0].attention).toBeNull();
    for (const [j, c] of chunked.continuations.entries()) {
      const p = plain.continuations[j];
      // The same tokens and, within float error, the same numbers as scoring without chunks.
      expect(c.tokenIds).toEqual(p.tokenIds);
      expect(Math.abs(c.logprob - p.logprob)).toBeLessThan(1e-5);
      close(c.tokenLogprobs, p.tokenLogprobs, 1e-5);
      expect([c.isGreedy, c.tokenGreedy, c.numTokens, c.numChars, c.numBytes]).toEqual([
        p.isGreedy,
        p.tokenGreedy,
        p.numTokens,
        p.numChars,
        p.numBytes,
      ]);
      expect(Math.abs(c.meanLogprob - p.meanLogprob)).toBeLessThan(1e-6);
      // The attention: what Probe answers for the context's tokens with the continuation
      // as the query chunk, computed here over the whole sample (heatmap on, no cache).
      const spans = c.attention.spans;
      expect(spans.map((s: any) => s.label)).toEqual(['instruction', 'history', 'knowledge', 'continuation']);
      const ids = [
        ...model.engine.tokenizer.encode(
          context
            .map((x) => x.text)
            .join('')
            .trimEnd(),
        ),
        ...c.tokenIds,
      ];
      expect(spans.at(-1).end).toBe(ids.length);
      expect(spans.at(-1).end - spans.at(-1).start).toBe(c.tokenIds.length);
      const alone = await new Prober(model.engine).probe([
        {
          chunkIds: spans.map((s: any) => ({ label: s.label, ids: ids.slice(s.start, s.end) })),
          queryLabels: ['continuation'],
          excludePositions: [0],
        },
      ]);
      const a = alone.samples[0]!;
      close(c.attention.votes.values, a.votes.flat(), 1e-5);
      close(c.attention.mass.values, a.mass.flat(), 1e-5);
      close(c.attention.votesExcluded, a.votesExcluded, 1e-5);
      close(c.attention.massExcluded, a.massExcluded, 1e-5);
      expect([c.attention.votes.rows, c.attention.votes.cols]).toEqual([model.engine.config.numLayers, 4]);
    }
  });

  it('a one-token context answers as a plain Score (it used to fail INTERNAL)', async () => {
    const tok = model.engine.tokenizer;
    const one = tok.encode('A');
    expect(one).toHaveLength(1);
    const cont = tok.encode(' In Paris.');
    const res = await score({ model: 'm', items: [{ contextChunks: [{ label: 'a', ids: { ids: one } }], continuationsIds: [{ ids: cont }] }] });
    const plain = (await directScoring(model.scorer).loglikelihood([{ context: one, continuations: [cont] }]))[0]![0]!;
    close(res.items[0].continuations[0].tokenLogprobs, plain.tokenLogprobs, 1e-5);
    expect(res.items[0].continuations[0].attention.spans.map((s: any) => s.label)).toEqual(['a', 'continuation']);
  });

  it('takes token-id chunks, and the answers equal the text ones on the same tokens', async () => {
    const tok = model.engine.tokenizer;
    const idChunks = [
      { label: 'a', ids: { ids: tok.encode('Knowledge: the tower is in Paris.') } },
      { label: 'b', ids: { ids: tok.encode(' Where is it?') } },
    ];
    const cont = tok.encode(' In Paris.');
    const res = await score({ model: 'm', items: [{ contextChunks: idChunks, continuationsIds: [{ ids: cont }] }] });
    const plain = (await directScoring(model.scorer).loglikelihood([{ context: idChunks.flatMap((c) => c.ids.ids), continuations: [cont] }]))[0]![0]!;
    const c = res.items[0].continuations[0];
    expect(Math.abs(c.logprob - plain.logprob)).toBeLessThan(1e-5);
    expect(c.attention.spans.map((s: any) => [s.label, s.start, s.end])).toEqual([
      ['a', 0, idChunks[0]!.ids.ids.length],
      ['b', idChunks[0]!.ids.ids.length, idChunks[0]!.ids.ids.length + idChunks[1]!.ids.ids.length],
      [
        'continuation',
        idChunks[0]!.ids.ids.length + idChunks[1]!.ids.ids.length,
        idChunks[0]!.ids.ids.length + idChunks[1]!.ids.ids.length + cont.length,
      ],
    ]);
    // Each row of votes and mass is a distribution over the spans.
    for (const m of [c.attention.votes, c.attention.mass])
      for (let l = 0; l < m.rows; l++)
        expect(Math.abs(m.values.slice(l * m.cols, (l + 1) * m.cols).reduce((x: number, y: number) => x + y, 0) - 1)).toBeLessThan(1e-5);
  });

  it('names what it refuses', async () => {
    const base = { contextChunks: context, continuationsText: responses };
    const cases: [unknown, RegExp][] = [
      [{ ...base, topK: 2 }, /items\[0\]\.top_k: top-k is not available with context_chunks/],
      [{ ...base, contextLogprobs: true }, /items\[0\]\.context_logprobs: /],
      [{ ...base, unconditionalText: 'Bot:' }, /items\[0\]\.unconditional: /],
      [{ ...base, contextText: 'x' }, /items\[0\]\.context_chunks: set context_chunks or context_text, not both/],
      [
        { ...base, contextChunks: [{ label: 'continuation', text: 'x' }] },
        /items\[0\]\.context_chunks\[0\]\.label: "continuation" is the continuation's own label/,
      ],
      [
        {
          ...base,
          contextChunks: [
            { label: 'a', text: 'x' },
            { label: 'b', ids: { ids: [1] } },
          ],
        },
        /items\[0\]\.context_chunks: every chunk needs text, or every chunk ids/,
      ],
      [{ ...base, excludePositions: [999] }, /items\[0\]\.exclude_positions\[0\]: position 999 is outside the context's/],
      [{ contextText: 'x', continuationsText: ['y'], excludePositions: [0] }, /items\[0\]\.exclude_positions: only with context_chunks/],
      [
        { contextChunks: [{ label: 'a', ids: { ids: [1, 2] } }], continuationsText: ['y'] },
        /items\[0\]\.continuations\[0\]: context chunks and continuations must both be text or both be token ids/,
      ],
      [
        { ...base, contextChunks: [{ label: 'long', text: 'word '.repeat(200) }] },
        /items\[0\]\.continuations\[0\]: context \+ continuation is \d+ tokens, over the maximum length 128/,
      ],
    ];
    for (const [item, message] of cases) {
      const err = await score({ model: 'm', items: [item] }).catch((e) => e);
      expect(err.code, JSON.stringify(item)).toBe(grpc.status.INVALID_ARGUMENT);
      expect(err.details).toMatch(message);
    }
  });
});

describe('Attribute', () => {
  const messages = [
    { role: 'system', content: 'Answer from the passages.' },
    { role: 'user', content: 'Who built the tower?' },
    { role: 'assistant', content: 'Gustave Eiffel.' },
    {
      role: 'user',
      content: '',
      chunks: [
        { label: 'passage#1', text: 'The tower opened in 1889.\n' },
        { label: 'passage#2', text: 'Bananas are yellow.\n' },
        { label: 'question', text: 'When did it open?' },
      ],
    },
    { role: 'assistant', content: 'In 1889.' },
  ];

  it('answers each variant as scoring it alone would, sharing the unchanged prefix (real Llama 3.3 template)', async () => {
    const before = (await scrape(server.metricsPort!)).get('ctxprobe_prefix_cache_tokens_reused_total{model="chat"}') ?? 0;
    const res = await unary(client, 'Attribute', {
      model: 'chat',
      samples: [{ id: 's1', messages }],
      keepOnly: true,
      historySweep: [0, 2],
      randomSubsets: 4,
      seed: 7,
    });
    const a = res.samples[0];
    expect(a.id).toBe('s1');
    expect(a.spans.map((s: any) => s.label)).toEqual([
      'system',
      'user#1',
      'assistant#1',
      'passage#1',
      'passage#2',
      'question',
      'assistant#2',
    ]);
    expect(a.target).toBe(6);
    expect(a.chunks.map((c: any) => c.index)).toEqual([0, 1, 2, 3, 4, 5]);
    // The same variants, prepared in process and each scored alone without any sharing.
    const { prepareAttribution } = await import('../src/requests/attribution.js');
    const { Scorer } = await import('../src/core/scorer.js');
    const alone = new Scorer(chatModel.engine, { prefixSharing: false });
    const prepared = await prepareAttribution(chatModel.engine, [{ messages }], {
      keepOnly: true,
      historySweep: [0, 2],
      subsets: 4,
      seed: 7,
    });
    const scores = [];
    for (const u of prepared.units) scores.push((await alone.scoreUnits([u])).scores[0]!);
    const [want] = prepared.finish(scores);
    expect(Math.abs(a.logprob - want!.base.logprob)).toBeLessThan(1e-4);
    a.chunks.forEach((c: any, k: number) => {
      for (const v of ['remove', 'mask'] as const) {
        expect(Math.abs(c[v].logprob - want!.chunks[k]![v]!.logprob)).toBeLessThan(1e-4);
        expect(Math.abs(c[v].delta - want!.chunks[k]![v]!.delta)).toBeLessThan(1e-4);
      }
      expect(c.mask.tokenDeltas).toHaveLength(a.targetTokens);
    });
    expect(a.sweep.map((p: any) => [p.keep, p.dropped])).toEqual([
      [0, [1, 2]],
      [2, []],
    ]);
    a.sweep.forEach((p: any, k: number) => expect(Math.abs(p.remove.logprob - want!.sweep![k]!.remove!.logprob)).toBeLessThan(1e-4));
    expect(a.subsets.intervention).toBe('INTERVENTION_MASK');
    expect(a.subsets.patterns.rows).toBe(4);
    expect(a.subsets.patterns.cols).toBe(6);
    a.subsets.logprobs.forEach((y: number, n: number) => expect(Math.abs(y - want!.subsets!.logprobs[n]!)).toBeLessThan(1e-4));
    // Mask variants continue the unchanged sequence: the cache served them.
    const after = (await scrape(server.metricsPort!)).get('ctxprobe_prefix_cache_tokens_reused_total{model="chat"}')!;
    expect(after - before).toBeGreaterThan(a.numTokens);
  });

  /** Run `body` while counting the chat model's tokeniser calls. */
  async function countingEncodes(body: (encodes: () => number) => Promise<void>): Promise<void> {
    const tok = chatModel.engine.tokenizer;
    const original = tok.encodeAsync;
    let encodes = 0;
    tok.encodeAsync = (...args) => {
      encodes++;
      return original.apply(tok, args);
    };
    try {
      await body(() => encodes);
    } finally {
      tok.encodeAsync = original;
    }
  }

  it('counts the variants from the request and refuses too many, naming the field, before tokenising anything', async () => {
    await countingEncodes(async (encodes) => {
      const refusal = async (req: Record<string, unknown>) => {
        const err = await unary(client, 'Attribute', { model: 'chat', ...req }).catch((e) => e);
        expect(err.code, JSON.stringify(req).slice(0, 200)).toBe(grpc.status.INVALID_ARGUMENT);
        return err.details as string;
      };
      // The sweep's length is capped on its own.
      expect(await refusal({ samples: [{ messages }], historySweep: Array.from({ length: 300 }, (_, k) => k) })).toBe(
        'history_sweep: 300 points, over the limit of 256',
      );
      // Two samples of 4,096 patterns each (within the per-sample cap): the unchanged sample,
      // 6 chunks × 2 interventions and the patterns, per sample.
      expect(await refusal({ samples: [{ messages }, { messages }], randomSubsets: 4096 })).toBe(
        `random_subsets: ${2 * (1 + 6 * 2 + 4096)} variants to score, over the limit of 4096 per call (--max-items)`,
      );
      const sweep = Array.from({ length: 256 }, (_, k) => k);
      expect(await refusal({ samples: Array.from({ length: 9 }, () => ({ messages })), historySweep: sweep })).toMatch(
        new RegExp(`^history_sweep: ${9 * (1 + 12 + 2 * 256)} variants to score, over the limit of 4096`),
      );
      const wide = { chunks: Array.from({ length: 700 }, (_, k) => ({ label: `p${k}`, text: `p${k} ` })) };
      expect(await refusal({ samples: [wide, wide, wide] })).toMatch(new RegExp(`^samples: ${3 * (1 + 699 * 2)} variants to score`));
      expect(encodes()).toBe(0);
    });
  });

  it('a cancelled call stops preparing its variants', async () => {
    await countingEncodes(async (encodes) => {
      // 8 samples × 40 chunks, each removed on its own: 320 re-tokenisations of 39 chunks.
      const sample = { chunks: Array.from({ length: 40 }, (_, k) => ({ label: `p${k}`, text: `p${k}. ` })) };
      const all = 8 * 40 + 8 * 40 * 39;
      const call = client.Attribute(
        { model: 'chat', samples: Array.from({ length: 8 }, () => sample), interventions: ['INTERVENTION_REMOVE'] },
        () => {},
      );
      while (encodes() < 100) await new Promise((r) => setTimeout(r, 2));
      call.cancel();
      let settled = -1;
      while (settled !== encodes()) {
        settled = encodes();
        await new Promise((r) => setTimeout(r, 300));
      }
      expect(settled).toBeLessThan(all / 4);
    });
  });

  it('names bad fields', async () => {
    const sample = { messages };
    const cases: [unknown, RegExp][] = [
      [{ model: 'chat', samples: [] }, /^samples: at least one sample/],
      [
        { model: 'chat', samples: [sample], interventions: ['INTERVENTION_UNSPECIFIED'] },
        /interventions\[0\]: must be INTERVENTION_REMOVE or INTERVENTION_MASK/,
      ],
      [{ model: 'chat', samples: [{ ...sample, targetLabel: 'nope' }] }, /samples\[0\]\.target: no chunk is labelled "nope"/],
      [{ model: 'chat', samples: [{ ...sample, ablateLabels: ['assistant#2'] }] }, /samples\[0\]\.ablate\[0\]: no chunk before the target/],
      [{ model: 'chat', samples: [sample], randomSubsets: 5000 }, /^random_subsets: must be a whole number in \[0, 4096\]/],
      [{ model: 'm', samples: [sample] }, /samples\[0\]\.messages: the model has no chat template/],
    ];
    for (const [req, message] of cases) {
      const err = await unary(client, 'Attribute', req).catch((e) => e);
      expect(err.code, JSON.stringify(req)).toBe(grpc.status.INVALID_ARGUMENT);
      expect(err.details).toMatch(message);
    }
  });
});

describe('RawAttention', () => {
  const collect = (req: unknown) =>
    new Promise<any[]>((resolve, reject) => {
      const got: any[] = [];
      const stream = client.RawAttention(req);
      stream.on('data', (m: any) => got.push(m));
      stream.on('end', () => resolve(got));
      stream.on('error', reject);
    });

  it('streams one slice per (layer, head), in float32 and float16', async () => {
    const sample = { chunks };
    const slices = await model.prober.raw({ chunks }, { layers: [1], heads: [0, 3], queryStart: 4, queryEnd: 6 });
    for (const dtype of ['ATTENTION_FLOAT32', 'ATTENTION_FLOAT16']) {
      const got = await collect({ sample, layers: [1], heads: [0, 3], queryStart: 4, queryEnd: 6, dtype });
      expect(got.map((m) => [m.layer, m.head, m.queries, m.keys])).toEqual(slices.map((s) => [1, s.head, 2, s.keys]));
      got.forEach((m, k) => {
        const values =
          dtype === 'ATTENTION_FLOAT32'
            ? Array.from(new Float32Array(m.data.buffer.slice(m.data.byteOffset, m.data.byteOffset + m.data.byteLength)))
            : Array.from({ length: m.data.length / 2 }, (_, i) => f16ToF32(m.data.readUInt16LE(i * 2)));
        close(values, Array.from(slices[k]!.values), dtype === 'ATTENTION_FLOAT32' ? 1e-7 : 1e-3);
      });
    }
  });

  it('refuses a request over the size cap with a clear status, and the server goes on', async () => {
    const err = await collect({ sample: { chunks }, layers: [0, 1], heads: [0, 1, 2, 3], dtype: 'ATTENTION_FLOAT32' }).catch((e) => e);
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/^layers: 2 layers × 4 heads × \d+ queries × \d+ keys is .* over the raw-attention limit of 0\.0 MiB/);
    const bad = await collect({ sample: { chunks }, layers: [7], heads: [0] }).catch((e) => e);
    expect(bad.details).toMatch(/^layers\[0\]: layer 7 is outside \[0, 2\)/);
    const ok = await collect({ sample: { chunks }, layers: [0], heads: [1], queryStart: 0, queryEnd: 1 });
    expect(ok).toHaveLength(1);
    const metrics = await scrape(server.metricsPort!);
    expect(metrics.get('ctxprobe_requests_total{method="RawAttention",code="INVALID_ARGUMENT"}')).toBe(2);
  });
});
