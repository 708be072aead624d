// Helpers for tests that talk to a real server on loopback.
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { loadPackage } from '../src/grpc/proto.js';
import { healthClientConstructor } from '../src/serving/health.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';

const require = createRequire(import.meta.url);

export function scoringClient(port: number): any {
  const { v1 } = loadPackage();
  return new v1.Scoring(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

/** A server on free ports (gRPC, HTTP, metrics) serving one model of `dir`, serving. */
export async function serveModel(name: string, dir: string): Promise<{ model: LoadedModel; server: CtxprobeServer; base: string }> {
  const model = await loadModel({ name, path: dir, threads: 1 });
  const server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0 });
  server.addModel(model);
  server.setServing();
  return { model, server, base: `http://127.0.0.1:${server.httpPort}` };
}

/** POST a JSON body; the answer's status, content type, text and (when JSON) body. */
export async function postJson(base: string, route: string, body: unknown): Promise<{ status: number; type: string; text: string; body: any }> {
  const res = await fetch(base + route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type') ?? '', text, body: text.startsWith('{') ? JSON.parse(text) : undefined };
}

export function client(service: 'Scoring' | 'Probing' | 'Generation', port: number): any {
  const { v1 } = loadPackage();
  return new v1[service](`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

/** A server-streaming call's messages, or its error. */
export function streamed(c: any, method: string, req: unknown, options: grpc.CallOptions = {}): Promise<any[]> {
  return new Promise((resolve, reject) => {
    const out: any[] = [];
    const call = c[method](req, options);
    call.on('data', (m: any) => out.push(m));
    call.on('error', reject);
    call.on('end', () => resolve(out));
  });
}

export function unary(client: any, method: string, req: unknown, options: grpc.CallOptions = {}): Promise<any> {
  return new Promise((resolve, reject) =>
    client[method](req, options, (err: grpc.ServiceError | null, res: any) => (err ? reject(err) : resolve(res))),
  );
}

export function healthClient(port: number): any {
  return new (healthClientConstructor())(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

export function reflectionClient(port: number): any {
  const protoPath = path.join(
    path.dirname(require.resolve('@grpc/reflection/package.json')),
    'build/proto/grpc/reflection/v1/reflection.proto',
  );
  const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(protoPath, { keepCase: true })) as any;
  return new pkg.grpc.reflection.v1.ServerReflection(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

/** Parse Prometheus text format into `name{labels}` → value. */
export async function scrape(port: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (!m) throw new Error(`unparseable metrics line: ${line}`);
    values.set(m[1]!, Number(m[2]));
  }
  return values;
}

/** lm-evaluation-harness openai_completions.py: parse_logprobs. */
export function harnessParse(out: any, ctxlens: number[]): [number, boolean][] {
  return out.choices.map((choice: any, i: number) => {
    const ctxlen = ctxlens[i]!;
    const tokenLogprobs: number[] = choice.logprobs.token_logprobs.slice(ctxlen, -1);
    const top: Record<string, number>[] = choice.logprobs.top_logprobs.slice(ctxlen, -1);
    const logprob = tokenLogprobs.reduce((a, b) => a + b, 0);
    const isGreedy = tokenLogprobs.every((tok, k) => tok === Math.max(...Object.values(top[k]!)));
    return [logprob, isGreedy];
  });
}

/** A Vulkan driver is installed (the --device webgpu tests skip without one; .ci/run installs
 * Mesa's lavapipe). */
export const VULKAN_DRIVERS = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d'].some(
  (d) => fs.existsSync(d) && fs.readdirSync(d).some((f) => f.endsWith('.json')),
);
