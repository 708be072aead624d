// HTTP/JSON against gRPC for the same calls on the same server (in a child process, the
// bench model, the default prefix cache; every Score and Probe call a new item, so none
// is answered from it): what transcoding costs per call — parsing and checking
// the JSON by the proto, re-encoding it, printing the answer — for a harness-shaped Score
// (a 400-token context, six 30-token continuations), a 4-chunk Probe of the same size,
// and a 64-token Generate stream. Prints mean milliseconds per call, the ratio and the
// answer bytes, measured in one run; asserts nothing.
import os from 'node:os';
import { benchModelDir, charpevalItems } from './model.js';
import { client, streamed, unary } from '../test/helpers.js';
import { serveCli } from '../test/cli-serve.js';

const rounds = Number(process.env.BENCH_ROUNDS ?? 12);
const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const dir = benchModelDir();
const items = charpevalItems(2 * rounds + 2, 5000);
const server = await serveCli(dir, ['--threads', String(threads), '--metrics-port', '-1', '--http-port', '0']);
const base = `http://127.0.0.1:${server.httpPort}`;

type Item = (typeof items)[number];
const score = (item: Item) => ({ items: [{ id: 'a', contextIds: { ids: item.context }, continuationsIds: item.continuations.map((ids) => ({ ids })) }] });
const sample = (item: Item) => {
  const third = Math.floor(item.context.length / 3);
  return {
    chunks: [
      { label: 'instruction', ids: { ids: item.context.slice(0, third) } },
      { label: 'history', ids: { ids: item.context.slice(third, 2 * third) } },
      { label: 'knowledge', ids: { ids: item.context.slice(2 * third) } },
      { label: 'response', ids: { ids: item.continuations[0]! } },
    ],
  };
};
const probe = (item: Item) => ({ samples: [sample(item)] });
const generate = (item: Item) => ({ prompt: sample(item), sampling: { maxTokens: 64, ignoreEos: true } });

const cases: { name: string; service: 'Scoring' | 'Probing' | 'Generation'; method: string; path: string; body: (item: Item) => object; stream: boolean }[] = [
  { name: 'Score (1 × 6 continuations)', service: 'Scoring', method: 'Score', path: '/v1/score', body: score, stream: false },
  { name: 'Probe (4 chunks, 430 tokens)', service: 'Probing', method: 'Probe', path: '/v1/probe', body: probe, stream: false },
  { name: 'Generate (64 tokens)', service: 'Generation', method: 'Generate', path: '/v1/generate', body: generate, stream: true },
];

const time = async (f: () => Promise<unknown>) => {
  const t = performance.now();
  await f();
  return performance.now() - t;
};

console.log(`HTTP/JSON vs gRPC, ${rounds} calls each, alternating (${threads} threads)`);
console.log('call | gRPC ms | HTTP ms | HTTP ÷ gRPC | HTTP answer bytes');
for (const c of cases) {
  const stub = client(c.service, server.grpcPort);
  const viaGrpc = (item: Item) => (c.stream ? streamed(stub, c.method, c.body(item)) : unary(stub, c.method, c.body(item)));
  let bytes = 0;
  const viaHttp = async (item: Item) => {
    const res = await fetch(base + c.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(c.body(item)) });
    bytes = (await res.arrayBuffer()).byteLength;
    if (res.status !== 200) throw new Error(`${c.path}: HTTP ${res.status}`);
  };
  await viaGrpc(items[0]!);
  await viaHttp(items[1]!); // warm-up
  let g = 0;
  let h = 0;
  for (let r = 1; r <= rounds; r++) {
    g += await time(() => viaGrpc(items[2 * r]!));
    h += await time(() => viaHttp(items[2 * r + 1]!));
  }
  stub.close();
  console.log(`${c.name} | ${(g / rounds).toFixed(1)} | ${(h / rounds).toFixed(1)} | ${(h / g).toFixed(3)} | ${bytes}`);
}
await server.stop();
