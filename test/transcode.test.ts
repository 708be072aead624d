// HTTP/JSON transcoding from the proto's google.api.http rules: for every annotated
// method, the same request over gRPC and over HTTP/JSON gets the same answer (compared
// field by field under protobuf's JSON mapping: float32 digits, 64-bit integers as
// strings, bytes as base64); the mapping's refusals name the field; errors are
// google.rpc.Status-shaped with the error table's HTTP status; deadline, cancellation,
// metrics, bearer tokens and TLS as on the gRPC side; /openapi.json lists every method.
import fs from 'node:fs';
import https from 'node:https';
import { request as httpRequest } from 'node:http';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CtxprobeServer } from '../src/server.js';
import type { LoadedModel } from '../src/serving/repository.js';
import { httpBindings } from '../src/http/transcode.js';
import { openApiDocument } from '../src/http/openapi.js';
import { buildHttpApp, routesOf } from '../src/http/app.js';
import { OPENAI_ROUTE_DOCS } from '../src/http/openai-schemas.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import { client, scoringClient, scrape, serveModel, streamed, unary } from './helpers.js';

const CHUNKS = [
  { label: 'instruction', text: 'You answer from the passage.' },
  { label: 'knowledge', text: ' Passage: the river floods in spring.' },
  { label: 'history', text: ' User: when does it flood? Bot: in spring.' },
  { label: 'response', text: ' User: are you sure? Bot: yes, in spring' },
];
const SAMPLE = { id: 's1', chunks: CHUNKS };

/** Each annotated method: its gRPC service, a request (proto-loader form = JSON form
 * here, as every field name below is one word or given in lowerCamelCase), and how its
 * answers are compared (streams: messages in order, or sorted by a key). */
const CASES: Record<
  string,
  { service: 'Scoring' | 'Probing' | 'Generation'; request: Record<string, unknown>; json?: unknown; sortBy?: (m: any) => string }
> = {
  ListModels: { service: 'Scoring', request: {} },
  Tokenize: { service: 'Scoring', request: { texts: ['Hello there', 'the river'], addSpecialTokens: true } },
  Score: {
    service: 'Scoring',
    request: {
      items: [
        { id: 'a', contextText: 'User: hi Bot:', continuationsText: [' hello', ' bye'], topK: 2 },
        { id: 'b', contextChunks: CHUNKS.slice(0, 3), continuationsText: [' in spring'], excludePositions: [1] },
      ],
    },
  },
  ScoreRolling: {
    service: 'Scoring',
    request: { items: [{ id: 'r', text: 'the river floods in spring and the fields drink', minKPercents: [10, 50] }] },
  },
  ScoreStream: {
    service: 'Scoring',
    request: {
      messages: [
        { item: { id: 'x', contextText: 'Hi', continuationsText: [' there'] } },
        { item: { id: 'y', contextIds: { ids: [5, 6] }, continuationsIds: [{ ids: [7] }] } },
        { model: 'nope', item: { id: 'z' } },
      ],
    },
    sortBy: (m) => m.item.id,
  },
  Probe: {
    service: 'Probing',
    request: {
      samples: [SAMPLE, { ...SAMPLE, id: 's2', queryLabels: ['history'] }],
      perHead: true,
      withLogprobs: true,
      withTokens: true,
      pool: 'POOL_MEAN',
    },
  },
  RawAttention: { service: 'Probing', request: { sample: SAMPLE, layers: [0, 1], heads: [1], dtype: 'ATTENTION_FLOAT16' } },
  Attribute: {
    service: 'Probing',
    request: {
      samples: [{ id: 'a', chunks: CHUNKS, targetLabel: 'response' }],
      interventions: ['INTERVENTION_REMOVE', 'INTERVENTION_MASK'],
      historySweep: [1],
    },
  },
  Generate: {
    service: 'Generation',
    request: {
      prompt: { chunks: CHUNKS.slice(0, 3) },
      sampling: { maxTokens: 4, temperature: 0.8, seed: { value: 11 }, n: 2, logprobs: 2 },
      attention: true,
    },
    // A wrapper is its bare value in JSON; a 64-bit one a string.
    json: {
      prompt: { chunks: CHUNKS.slice(0, 3) },
      sampling: { maxTokens: 4, temperature: 0.8, seed: '11', n: 2, logprobs: 2 },
      attention: true,
    },
  },
};

/** The gRPC object (proto-loader: floats as float32 doubles, longs as numbers, bytes
 * as Buffers, the set oneof named) agrees with the JSON value under the JSON mapping. */
function expectSame(grpcValue: any, json: any, at = 'answer'): void {
  if (Buffer.isBuffer(grpcValue)) return expect(json, at).toBe(grpcValue.toString('base64'));
  if (Array.isArray(grpcValue)) {
    expect(Array.isArray(json), at).toBe(true);
    expect(json.length, at).toBe(grpcValue.length);
    grpcValue.forEach((v, i) => expectSame(v, json[i], `${at}[${i}]`));
    return;
  }
  if (grpcValue !== null && typeof grpcValue === 'object') {
    expect(typeof json, at).toBe('object');
    for (const key of Object.keys(json)) expect(grpcValue, `${at}: JSON key ${key} is no field`).toHaveProperty(key);
    for (const [key, v] of Object.entries(grpcValue)) {
      if (key in json) expectSame(v, json[key], `${at}.${key}`);
      // Absent from JSON: an unset message, or proto-loader's name of the set oneof member.
      else expect(v === null || v === undefined || (typeof v === 'string' && v in json), `${at}.${key} missing`).toBe(true);
    }
    return;
  }
  if (typeof grpcValue === 'number') {
    if (Number.isNaN(grpcValue)) return expect(json, at).toBe('NaN');
    const x = typeof json === 'string' ? Number(json) : json; // 64-bit integers come as strings
    expect(typeof x, at).toBe('number');
    // A float field prints its shortest float32 digits; a double its own.
    expect(x === grpcValue || Math.fround(x) === grpcValue, `${at}: ${json} vs ${grpcValue}`).toBe(true);
    return;
  }
  expect(json, at).toEqual(grpcValue);
}

async function http(base: string, route: string, init: RequestInit & { json?: unknown } = {}) {
  const headers = new Headers(init.headers);
  if (init.json !== undefined) headers.set('content-type', 'application/json');
  const res = await fetch(base + route, {
    method: init.json === undefined ? init.method : 'POST',
    ...init,
    headers,
    body: init.json !== undefined ? JSON.stringify(init.json) : init.body,
  });
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  const lines = type.startsWith('application/x-ndjson')
    ? text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];
  return { status: res.status, type, text, body: type.startsWith('application/json') ? JSON.parse(text) : undefined, lines };
}

describe('HTTP/JSON transcoding', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let base: string;
  beforeAll(async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 });
    ({ model, server, base } = await serveModel('m', fx.dir));
  });
  afterAll(async () => {
    await server?.drain();
    await model?.engine.release();
  });

  it('has a rule for every RPC, and a case here for every rule', () => {
    const bound = httpBindings()
      .map((b) => b.name)
      .sort();
    expect(bound).toEqual(Object.keys(CASES).sort());
    expect(bound).toHaveLength(9);
  });

  for (const binding of httpBindings()) {
    it(`${binding.name}: the same answer over gRPC and over ${binding.verb.toUpperCase()} ${binding.path}`, async () => {
      const c = CASES[binding.name]!;
      const stub = client(c.service, server.port);
      try {
        let viaGrpc: any[];
        if (binding.kind === 'each-message') {
          viaGrpc = await new Promise((resolve, reject) => {
            const out: any[] = [];
            const call = stub[binding.name]();
            call.on('data', (m: any) => out.push(m));
            call.on('error', reject);
            call.on('end', () => resolve(out));
            for (const m of c.request.messages as unknown[]) call.write(m);
            call.end();
          });
        } else if (binding.kind === 'server-stream') viaGrpc = await streamed(stub, binding.name, c.request);
        else viaGrpc = [await unary(stub, binding.name, c.request)];

        const body = c.json ?? (binding.kind === 'each-message' ? c.request.messages : c.request);
        const res = binding.verb === 'get' ? await http(base, binding.path) : await http(base, binding.path, { json: body });
        expect(res.status, res.text).toBe(200);
        let viaHttp = binding.kind === 'unary' ? [res.body] : res.lines;
        if (c.sortBy) {
          viaGrpc = [...viaGrpc].sort((a, b) => c.sortBy!(a).localeCompare(c.sortBy!(b)));
          viaHttp = [...viaHttp].sort((a, b) => c.sortBy!(a).localeCompare(c.sortBy!(b)));
        }
        expect(viaHttp.length).toBe(viaGrpc.length);
        expect(viaGrpc.length).toBeGreaterThan(0);
        viaGrpc.forEach((m, i) => expectSame(m, viaHttp[i], `${binding.name}[${i}]`));
      } finally {
        stub.close();
      }
    });
  }

  it("with_tokens: a probe returns the sample's tokens, split as Tokenize splits its text", async () => {
    const probe = await http(base, '/v1/probe', { json: { samples: [SAMPLE], withTokens: true } });
    const tokens = await http(base, '/v1/tokenize', { json: { texts: [CHUNKS.map((c) => c.text).join('')], addSpecialTokens: false } });
    const s = probe.body.samples[0];
    expect(s.tokenIds).toEqual(tokens.body.results[0].ids);
    // Each token's text: the token decoded on its own.
    const alone = await Promise.all(
      s.tokenIds.slice(0, 12).map(async (id: number) => (await http(base, '/detokenize', { json: { tokens: [id] } })).body.prompt),
    );
    expect(s.tokens.slice(0, 12)).toEqual(alone);
    expect(s.tokenIds).toHaveLength(s.numTokens);
    const without = await http(base, '/v1/probe', { json: { samples: [SAMPLE] } });
    expect([without.body.samples[0].tokenIds, without.body.samples[0].tokens]).toEqual([[], []]);
  });

  it('takes proto field names as well as lowerCamelCase, enums by number, 64-bit integers as strings, null as unset', async () => {
    const camel = await http(base, '/v1/generate', {
      json: { prompt: { chunks: CHUNKS.slice(0, 2) }, sampling: { maxTokens: 3, temperature: 1, seed: '99' } },
    });
    const snake = await http(base, '/v1/generate', {
      json: { prompt: { chunks: CHUNKS.slice(0, 2), add_special_tokens: null }, sampling: { max_tokens: 3, temperature: 1, seed: 99 } },
    });
    expect(camel.status).toBe(200);
    expect(snake.lines.map((l) => l.tokenId)).toEqual(camel.lines.map((l) => l.tokenId));
    const byName = await http(base, '/v1/probe', { json: { samples: [SAMPLE], pool: 'POOL_MEAN' } });
    const byNumber = await http(base, '/v1/probe', { json: { samples: [SAMPLE], pool: 1 } });
    expect(byName.body.pool).toBe('mean');
    expect(byNumber.body).toEqual(byName.body);
  });

  it('refuses what the mapping does not allow, naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [{ samples: [{ ...SAMPLE, chunk: [] }] }, /^samples\[0\]\.chunk: unknown field/],
      [{ samples: [SAMPLE], perHead: 'yes' }, /^per_head: expected bool, got string "yes"/],
      [{ samples: [SAMPLE], pool: 'POOL_MEDIAN' }, /^pool: expected one of POOL_MAX, POOL_MEAN/],
      [{ samples: [SAMPLE], per_head: true, perHead: false }, /^per_head: given twice \(as per_head and perHead\)/],
      [{ samples: SAMPLE }, /^samples: expected an array, got an object/],
      [
        { samples: [{ chunks: [{ label: 'a', text: 'x', ids: { ids: [1] } }] }] },
        /^samples\[0\]\.chunks\[0\]\.content: set one of its fields, not text and ids/,
      ],
      [
        { samples: [{ chunks: [{ label: 'a', ids: { ids: [-1] } }] }] },
        /^samples\[0\]\.chunks\[0\]\.ids\.ids\[0\]: -1 is out of range for uint32/,
      ],
      [
        { samples: [{ chunks: [{ label: 'a', ids: { ids: [1.5] } }] }] },
        /^samples\[0\]\.chunks\[0\]\.ids\.ids\[0\]: expected uint32, got number 1.5/,
      ],
      [[SAMPLE], /^body: expected an object \(ProbeRequest\), got an array/],
    ];
    for (const [json, message] of cases) {
      const res = await http(base, '/v1/probe', { json });
      expect(res.status, JSON.stringify(json)).toBe(400);
      expect(Object.keys(res.body)).toEqual(['code', 'message', 'details']);
      expect(res.body.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(res.body.message).toMatch(message);
      expect(res.body.details).toEqual([]);
    }
    // A lone surrogate escape is no UTF-8 text: refused as gRPC refuses invalid bytes.
    const lone = await http(base, '/v1/tokenize', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"texts":["ok","bad \\ud800"]}',
    });
    expect(lone.status).toBe(400);
    expect(lone.body.message).toBe('texts[1]: is not valid UTF-8');
    // One rule everywhere (field defects #13, #14): raw invalid bytes were scored as U+FFFD,
    // the OpenAI routes took lone surrogates, and a key given twice kept its last value.
    const raw = (route: string, body: Buffer | string) =>
      http(base, route, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : new Uint8Array(body),
      });
    const before = Buffer.from('{"samples":[{"chunks":[{"label":"a","text":"caf');
    const bytes = await raw('/v1/probe', Buffer.concat([before, Buffer.from([0xc3, 0x28]), Buffer.from('"}]}]}')]));
    expect([bytes.status, bytes.body.message]).toEqual([400, `body: is not valid UTF-8 (at byte ${before.length})`]);
    const completion = await raw('/v1/completions', '{"prompt":"bad \\ud800","max_tokens":1}');
    expect([completion.status, completion.body.error?.message]).toEqual([400, 'prompt: is not valid UTF-8']);
    const chat = await raw('/v1/chat/completions', '{"messages":[{"role":"user","content":"\\udc00"}]}');
    expect([chat.status, chat.body.error?.message]).toEqual([400, 'messages[0].content: is not valid UTF-8']);
    const twice = await raw('/v1/completions', '{"prompt":"a","max_tokens":1,"max_tokens":2}');
    expect([twice.status, twice.body.error?.message]).toEqual([400, 'max_tokens: given twice in the JSON']);
    const nestedTwice = await raw('/v1/tokenize', '{"texts":["a"],"options":{"x":1,"x":2}}');
    expect([nestedTwice.status, nestedTwice.body.message]).toEqual([400, 'options.x: given twice in the JSON']);
    const proto = await raw('/v1/tokenize', '{"texts":["a"],"__proto__":{"x":1}}');
    expect(proto.status).toBe(400);
    // GET takes the request's scalar fields from the query, and nothing else.
    const query = await http(base, '/v1/list-models?verbose=1');
    expect(query.status).toBe(400);
    expect(query.body.message).toMatch(/^verbose: unknown query parameter/);
  });

  it("answers the serving layer's errors with the error table's HTTP status and the gRPC code", async () => {
    const unknown = await http(base, '/v1/probe', { json: { model: 'nope', samples: [SAMPLE] } });
    expect([unknown.status, unknown.body.code]).toEqual([404, grpc.status.NOT_FOUND]);
    expect(unknown.body.message).toMatch(/no model named "nope"/);
    const tooMany = await http(base, '/v1/raw-attention', { json: { sample: SAMPLE, queryStart: 99, queryEnd: 98 } });
    expect([tooMany.status, tooMany.body.code]).toEqual([400, grpc.status.INVALID_ARGUMENT]);
    const notJson = await http(base, '/v1/probe', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' });
    expect([notJson.status, notJson.body.code]).toEqual([415, grpc.status.INVALID_ARGUMENT]);
    // A stream refused before its first message is an HTTP error too.
    const noPrompt = await http(base, '/v1/generate', { json: { sampling: { maxTokens: 2 } } });
    expect([noPrompt.status, noPrompt.body]).toEqual([400, { code: 3, message: 'prompt: required', details: [] }]);
  });

  it('ScoreStream takes NDJSON lines, answers each (a bad one in-band), and server-sent events on request', async () => {
    const lines = CASES.ScoreStream!.request.messages as unknown[];
    const ndjson = await http(base, '/v1/score-stream', {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: lines.map((l) => JSON.stringify(l)).join('\n') + '\n',
    });
    expect(ndjson.type).toMatch(/^application\/x-ndjson/);
    const byId = Object.fromEntries(ndjson.lines.map((l) => [l.item.id, l]));
    expect(byId.z.errorCode).toBe(grpc.status.NOT_FOUND);
    expect(byId.x.errorCode).toBe(0);
    expect(byId.x.item.continuations[0].numTokens).toBeGreaterThan(0);
    const broken = await http(base, '/v1/score-stream', {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: '{"item":{}}\n{oops\n',
    });
    expect([broken.status, broken.body.message]).toEqual([400, expect.stringMatching(/^message 1: is not JSON/)]);
    // A line is held to the rule for a JSON body, and named as the message it is, whichever
    // step refuses it (field defects #13, #14): a line's invalid bytes were scored as
    // U+FFFD and named 'message 1.\ufffd\ufffd', its key given twice kept the last value,
    // and the same line was 'body line 2' when not JSON and 'message 1' when not a message.
    const sendLines = (body: Buffer) =>
      http(base, '/v1/score-stream', { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body: new Uint8Array(body) });
    const first = Buffer.from('{"item":{"id":"a","contextText":"Hi","continuationsText":[" there"]}}\n\r\n');
    const refusals: [Buffer, unknown][] = [
      [Buffer.concat([first, Buffer.from('{"item":{"'), Buffer.from([0xc3, 0x28]), Buffer.from('":1}}\n')]), 'message 1: is not valid UTF-8 (at byte 10)'],
      [Buffer.concat([first, Buffer.from('{"item":{"id":"b","id":"c"}}\n')]), 'message 1.item.id: given twice in the JSON'],
      [Buffer.concat([first, Buffer.from('{"item":{"contextText":"\\ud800"}}\n')]), 'message 1.item.context_text: is not valid UTF-8'],
      [Buffer.concat([first, Buffer.from('{"item":{"bogus":1}}')]), 'message 1.item.bogus: unknown field: ScoreItem has no field "bogus"'],
      [Buffer.concat([first, Buffer.from('{oops}\n')]), expect.stringMatching(/^message 1: is not JSON: /)],
    ];
    for (const [body, message] of refusals) {
      const res = await sendLines(body);
      expect([res.status, res.body.message]).toEqual([400, message]);
    }
    // A line cut across chunks still parses: one byte at a time.
    const trickle = await new Promise<number>((resolve) => {
      const req = httpRequest(`${base}/v1/score-stream`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      const bytes = Buffer.from('{"item":{"id":"é","contextText":"Hi","continuationsText":[" there"]}}\n');
      const next = (i: number) => (i < bytes.length ? req.write(bytes.subarray(i, i + 1), () => setImmediate(next, i + 1)) : req.end());
      next(0);
    });
    expect(trickle).toBe(200);
    const sse = await http(base, '/v1/generate', {
      json: { prompt: { chunks: CHUNKS.slice(0, 1) }, sampling: { maxTokens: 2 } },
      headers: { accept: 'text/event-stream' },
    });
    expect(sse.type).toMatch(/^text\/event-stream/);
    const events = sse.text.split('\n\n').filter(Boolean);
    expect(events).toHaveLength(2);
    expect(events.every((e) => e.startsWith('data: {'))).toBe(true);
    expect(JSON.parse(events[1]!.slice(6)).finishReason).toBe('length');
  });

  it('ScoreStream answers an NDJSON line as it arrives, while the client is still sending its body', async () => {
    const [x, y] = CASES.ScoreStream!.request.messages as unknown[];
    const url = new URL(`${base}/v1/score-stream`);
    const req = httpRequest({
      host: url.hostname,
      port: url.port,
      path: url.pathname,
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
    });
    const answers: any[] = [];
    let firstAnswer!: () => void;
    const first = new Promise<void>((resolve) => (firstAnswer = resolve));
    const ended = new Promise<number>((resolve, reject) => {
      req.on('error', reject);
      req.on('response', (res) => {
        res.setEncoding('utf8');
        let rest = '';
        res.on('data', (chunk: string) => {
          const lines = (rest + chunk).split('\n');
          rest = lines.pop()!;
          for (const line of lines.filter(Boolean)) answers.push(JSON.parse(line));
          if (answers.length > 0) firstAnswer();
        });
        res.on('end', () => resolve(res.statusCode!));
      });
    });
    req.write(JSON.stringify(x) + '\n'); // chunked: the body stays open
    await first;
    expect(answers.map((a) => a.item.id)).toEqual(['x']);
    req.end(JSON.stringify(y) + '\n');
    expect(await ended).toBe(200);
    expect(answers.map((a) => [a.item.id, a.errorCode])).toEqual([
      ['x', 0],
      ['y', 0],
    ]);
  });

  it('refuses an NDJSON body over --max-message-bytes with 413, naming the limit', async () => {
    const small = await CtxprobeServer.start({ port: 0, metricsPort: -1, httpPort: 0, maxMessageBytes: 1000 });
    try {
      const res = await http(`http://127.0.0.1:${small.httpPort}`, '/v1/score-stream', {
        method: 'POST',
        headers: { 'content-type': 'application/x-ndjson' },
        body: JSON.stringify({ item: { id: 'x', contextText: 'a'.repeat(2000), continuationsText: ['b'] } }) + '\n',
      });
      expect([res.status, res.body.message]).toEqual([413, 'body: over the limit of 1000 bytes (--max-message-bytes)']);
    } finally {
      await small.drain();
    }
  });

  it('takes a deadline in grpc-timeout, refuses a malformed one, and records calls as gRPC does', async () => {
    const before = await scrape(server.metricsPort!);
    const late = await http(base, '/v1/score', { json: CASES.Score!.request, headers: { 'grpc-timeout': '1n' } });
    expect([late.status, late.body.code]).toEqual([504, grpc.status.DEADLINE_EXCEEDED]);
    const roomy = await http(base, '/v1/score', { json: CASES.Score!.request, headers: { 'grpc-timeout': '30S' } });
    expect(roomy.status).toBe(200);
    // 597 hours is past what setTimeout keeps (2³¹−1 ms): it expired at once. A far
    // deadline is no deadline, over HTTP and over gRPC.
    const far = await http(base, '/v1/score', { json: CASES.Score!.request, headers: { 'grpc-timeout': '597H' } });
    expect(far.status).toBe(200);
    const grpcFar = await new Promise<any>((resolve) =>
      scoringClient(server.port).Score(CASES.Score!.request, { deadline: Date.now() + 25 * 86_400_000 }, (err: any, res: any) =>
        resolve(err ?? res),
      ),
    );
    expect(grpcFar.code).toBeUndefined();
    expect(grpcFar.results ?? grpcFar.items).toBeDefined();
    const bad = await http(base, '/v1/score', { json: CASES.Score!.request, headers: { 'grpc-timeout': '5 seconds' } });
    expect([bad.status, bad.body.message]).toEqual([400, expect.stringMatching(/^grpc-timeout: expected digits and a unit/)]);
    const after = await scrape(server.metricsPort!);
    const delta = (code: string) =>
      (after.get(`ctxprobe_requests_total{method="Score",code="${code}"}`) ?? 0) -
      (before.get(`ctxprobe_requests_total{method="Score",code="${code}"}`) ?? 0);
    expect([delta('OK'), delta('DEADLINE_EXCEEDED'), delta('INVALID_ARGUMENT')]).toEqual([3, 1, 1]);
  });

  it('cancels a stream whose client hangs up', async () => {
    const before = await scrape(server.metricsPort!);
    const controller = new AbortController();
    const res = await fetch(`${base}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: { chunks: CHUNKS.slice(0, 1) }, sampling: { maxTokens: 200, ignoreEos: true } }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read(); // the first token has come
    controller.abort();
    let after = await scrape(server.metricsPort!);
    for (let i = 0; i < 100 && (after.get('ctxprobe_calls_in_flight') ?? 0) > 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = await scrape(server.metricsPort!);
    }
    expect(after.get('ctxprobe_calls_in_flight')).toBe(0);
    const key = 'ctxprobe_requests_total{method="Generate",code="CANCELLED"}';
    expect((after.get(key) ?? 0) - (before.get(key) ?? 0)).toBe(1);
    // Fewer than the 200 tokens asked for were made.
    const made = (m: Map<string, number>) =>
      [...m].filter(([k]) => k.startsWith('ctxprobe_generated_tokens_total')).reduce((s, [, v]) => s + v, 0);
    expect(made(after) - made(before)).toBeLessThan(200);
  });

  it('serves an OpenAPI 3 document listing every annotated method, built from the proto', async () => {
    const res = await http(base, '/openapi.json');
    expect(res.status).toBe(200);
    const doc = res.body;
    expect(doc.openapi).toMatch(/^3\./);
    const operations = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([p, verbs]) =>
      Object.entries(verbs).map(([verb, op]) => `${verb.toUpperCase()} ${p} ${op.operationId}`),
    );
    expect(operations.sort()).toEqual(
      [...httpBindings().map((b) => `${b.verb.toUpperCase()} ${b.path} ${b.name}`), ...OPENAI_ROUTE_DOCS.map((r) => `${r.verb.toUpperCase()} ${r.path} ${r.operationId}`)].sort(),
    );
    // Every route the server answers is in it, but the viewer's files and the document
    // itself (field defects #4: the OpenAI-compatible, tokenizer and health routes were not).
    const app = buildHttpApp(server.service);
    await app.ready();
    const answered = routesOf(app).filter((r) => !/^GET \/(ui\b|favicon\.ico|openapi\.json)/.test(r));
    expect([...answered].sort()).toEqual(Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([p, verbs]) => Object.keys(verbs).map((v) => `${v.toUpperCase()} ${p}`)).sort());
    await app.close();
    // The OpenAI routes' bodies are described by the schemas they validate with: a body the
    // document calls invalid is refused, naming the same field.
    const chatSchema = doc.paths['/v1/chat/completions'].post.requestBody.content['application/json'].schema;
    expect(chatSchema.properties.messages.items.properties.role.enum).not.toContain('wizard');
    const wizard = await http(base, '/v1/chat/completions', { json: { messages: [{ role: 'wizard', content: 'hi' }] } });
    expect([wizard.status, wizard.body.error?.message]).toEqual([400, `messages[0].role: ${chatSchema.properties.messages.items.properties.role.description}`]);
    expect(doc.paths['/health'].get.security).toEqual([]);
    // The built file is the document the proto gives now.
    expect(doc).toEqual(JSON.parse(JSON.stringify(openApiDocument(doc.info.version))));
    // Every reference resolves, and a message's properties are its fields' JSON names.
    const refs = JSON.stringify(doc).match(/#\/components\/schemas\/[\w.]+/g)!;
    for (const ref of refs) expect(doc.components.schemas, ref).toHaveProperty([ref.split('/').at(-1)!]);
    expect(Object.keys(doc.components.schemas['ctxprobe.v1.ScoreItem'].properties)).toContain('continuationsText');
    expect(doc.components.schemas['google.protobuf.UInt64Value']).toMatchObject({ type: 'string', format: 'uint64' });
    // And it is a valid OpenAPI 3.1 document, as a widely used validator reads it.
    const { default: SwaggerParser } = await import('@apidevtools/swagger-parser');
    const validated = await SwaggerParser.validate(JSON.parse(res.text));
    expect(Object.keys(validated.paths ?? {})).toHaveLength(httpBindings().length + OPENAI_ROUTE_DOCS.length);
  });
});

/** Writes a request head, then `size` bytes of body (or `afterContinue` once the server
 * says 100 Continue), as fast as the socket takes them, reading nothing until it is done;
 * what the server sent back, and the first write error. */
async function rawExchange(port: number, head: string, size: number, afterContinue?: string) {
  const sock = net.connect(port, '127.0.0.1');
  let reply = '';
  let error: string | undefined;
  let sent = 0;
  sock.on('data', (d) => {
    reply += d;
    if (afterContinue !== undefined && reply.startsWith('HTTP/1.1 100 ')) {
      sock.write(afterContinue);
      afterContinue = undefined;
    }
  });
  sock.on('error', (e) => (error ??= (e as NodeJS.ErrnoException).code ?? e.message));
  const closed = new Promise((resolve) => sock.on('close', resolve));
  sock.write(head);
  const chunk = Buffer.alloc(1 << 16, 0x61);
  while (sent < size && !error) {
    const piece = chunk.subarray(0, Math.min(chunk.length, size - sent));
    sent += piece.length;
    if (!sock.write(piece)) await new Promise((resolve) => sock.once('drain', resolve).once('close', resolve));
  }
  await closed;
  return { reply, error, sent };
}

describe('HTTP/JSON limits', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  beforeAll(async () => {
    const { loadModel } = await import('../src/serving/repository.js');
    model = await loadModel({ name: 'm', path: makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1, maxMessageBytes: 4096, maxItemsPerRequest: 2 });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => {
    await server?.drain();
    await model?.engine.release();
  });

  it("refuses a body over --max-message-bytes (413) and items over --max-items, as gRPC's limits do", async () => {
    const base = `http://127.0.0.1:${server.httpPort}`;
    const big = await http(base, '/v1/tokenize', { json: { texts: ['x'.repeat(5000)] } });
    expect([big.status, big.body.code]).toEqual([413, grpc.status.RESOURCE_EXHAUSTED]);
    expect(big.body.message).toMatch(/^body: over the limit of 4096 bytes/);
    const many = await http(base, '/v1/probe', { json: { samples: [SAMPLE, SAMPLE, SAMPLE] } });
    expect([many.status, many.body.code]).toEqual([400, grpc.status.INVALID_ARGUMENT]);
    expect(many.body.message).toMatch(/^samples: /);
  });

  // A client that writes its whole body before it reads (a raw socket here) got EPIPE: the
  // server answered 413 and closed the socket under it (field defects #8).
  it('lets a client that sends a body over the limit read its 413: the rest is read and dropped, and Expect: 100-continue is answered 413 without inviting the body', async () => {
    for (const route of ['/v1/completions', '/v1/score']) {
      const size = 24_000_000;
      const sent = await rawExchange(server.httpPort!, `POST ${route} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n`, size);
      expect([sent.error, sent.sent]).toEqual([undefined, size]);
      expect(sent.reply).toMatch(/^HTTP\/1\.1 413 /);
      expect(sent.reply).toContain('over the limit of 4096 bytes (--max-message-bytes)');
    }
    // The body is not invited: the 413 comes first, with nothing sent.
    const early = await rawExchange(server.httpPort!, 'POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 5000\r\n\r\n', 0);
    expect(early.reply).toMatch(/^HTTP\/1\.1 413 /);
    // Under the limit, the body is invited and answered.
    const body = JSON.stringify({ texts: ['the river'] });
    const invited = await rawExchange(server.httpPort!, `POST /v1/tokenize HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: ${body.length}\r\n\r\n`, 0, body);
    expect(invited.reply).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
  });
});

describe('HTTP/JSON behind TLS and bearer tokens', () => {
  const TOKEN = 'http-token-0123456789abcdef';
  let model: LoadedModel;
  let server: CtxprobeServer;
  let certs: ReturnType<typeof makeCertificates>;
  beforeAll(async () => {
    certs = makeCertificates(tempDir('certs'));
    const { loadModel } = await import('../src/serving/repository.js');
    model = await loadModel({ name: 'm', path: makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir, threads: 1 });
    server = await CtxprobeServer.start({
      port: 0,
      httpPort: 0,
      metricsPort: -1,
      tls: { cert: certs.serverCert, key: certs.serverKey },
      authTokens: [TOKEN],
    });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => {
    await server?.drain();
    await model?.engine.release();
  });

  function get(route: string, method = 'GET', token?: string, body?: unknown): Promise<{ status: number; text: string }> {
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          host: 'localhost',
          port: server.httpPort,
          path: route,
          method,
          ca: fs.readFileSync(certs.ca),
          headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
        },
        (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode!, text }));
        },
      );
      req.on('error', reject);
      req.end(body ? JSON.stringify(body) : undefined);
    });
  }

  it('answers with the token over TLS, refuses without it, and keeps /ui/ and /openapi.json open', async () => {
    const ok = await get('/v1/probe', 'POST', TOKEN, { samples: [SAMPLE] });
    expect(ok.status, ok.text).toBe(200);
    expect(JSON.parse(ok.text).samples[0].id).toBe('s1');
    for (const token of [undefined, 'wrong-token-0123456789abcdef']) {
      const refused = await get('/v1/probe', 'POST', token, { samples: [SAMPLE] });
      expect(refused.status).toBe(401);
      expect(JSON.parse(refused.text)).toEqual({
        code: grpc.status.UNAUTHENTICATED,
        message: 'authorization: a valid "Bearer <token>" is required',
        details: [],
      });
    }
    expect((await get('/v1/list-models')).status).toBe(401);
    for (const open of ['/ui/', '/openapi.json', '/ui/vendor/plot.umd.min.js', '/favicon.ico'])
      expect((await get(open)).status, open).toBe(200);
  });

  it('is not served in plaintext', async () => {
    const err = await fetch(`http://localhost:${server.httpPort}/v1/list-models`).catch((e) => e);
    expect(err).toBeInstanceOf(Error);
  });
});
