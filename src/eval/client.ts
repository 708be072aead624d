// What the research runners share: a gRPC connection to a ctxprobe server (given by
// address, or started in this process on a model), promise-style calls, a progress bar.
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import cliProgress from 'cli-progress';
import { loadPackage } from '../grpc/proto.js';
import { loadModel, readRepository, type ModelEntry } from '../serving/repository.js';
import { CtxprobeServer } from '../server.js';
import type { ScoringClient } from '../api/generated/ctxprobe/v1/Scoring.js';
import type { ProbingClient } from '../api/generated/ctxprobe/v1/Probing.js';
import type { GenerationClient } from '../api/generated/ctxprobe/v1/Generation.js';
import type { GenerateRequest } from '../api/generated/ctxprobe/v1/GenerateRequest.js';
import type { GenerateResponse__Output } from '../api/generated/ctxprobe/v1/GenerateResponse.js';
import type { ScoreRequest } from '../api/generated/ctxprobe/v1/ScoreRequest.js';
import type { ScoreResponse__Output } from '../api/generated/ctxprobe/v1/ScoreResponse.js';
import type { RollingRequest } from '../api/generated/ctxprobe/v1/RollingRequest.js';
import type { RollingResponse__Output } from '../api/generated/ctxprobe/v1/RollingResponse.js';
import type { ListModelsResponse__Output } from '../api/generated/ctxprobe/v1/ListModelsResponse.js';
import type { ProbeRequest } from '../api/generated/ctxprobe/v1/ProbeRequest.js';
import type { ProbeResponse__Output } from '../api/generated/ctxprobe/v1/ProbeResponse.js';
import type { AttributeRequest } from '../api/generated/ctxprobe/v1/AttributeRequest.js';
import type { AttributeResponse__Output } from '../api/generated/ctxprobe/v1/AttributeResponse.js';

export interface ConnectOptions {
  /** host:port of a running server; otherwise one is started here on `model`. */
  server?: string;
  /** A checkpoint folder or GGUF file for the in-process server (default: the default model). */
  model?: string;
  threads?: number;
  /** Bearer token and CA for a remote server. */
  token?: string;
  tlsCa?: string;
}

export class EvalClient {
  private constructor(
    private readonly scoring: ScoringClient,
    private readonly probing: ProbingClient,
    private readonly generation: GenerationClient,
    private readonly metadata: grpc.Metadata,
    private readonly ownServer?: CtxprobeServer,
  ) {}

  static async connect(options: ConnectOptions): Promise<EvalClient> {
    let address = options.server;
    let own: CtxprobeServer | undefined;
    if (!address) {
      const entry: ModelEntry = options.model
        ? { name: 'model', path: options.model, threads: options.threads }
        : { ...readRepository()[0]!, threads: options.threads };
      own = await CtxprobeServer.start({ port: 0, metricsPort: -1 });
      own.addModel(await loadModel(entry));
      own.setServing();
      address = `127.0.0.1:${own.port}`;
    }
    const { v1 } = loadPackage();
    const creds = options.tlsCa ? grpc.credentials.createSsl(fs.readFileSync(options.tlsCa)) : grpc.credentials.createInsecure();
    const channelOptions = { 'grpc.max_receive_message_length': 256 * 2 ** 20 };
    const md = new grpc.Metadata();
    if (options.token) md.set('authorization', `Bearer ${options.token}`);
    return new EvalClient(
      new v1.Scoring(address, creds, channelOptions),
      new v1.Probing(address, creds, channelOptions),
      new v1.Generation(address, creds, channelOptions),
      md,
      own,
    );
  }

  /** A unary call as a promise, with the connection's metadata. */
  private call<Req, Res>(
    method: (req: Req, md: grpc.Metadata, callback: (err: grpc.ServiceError | null, res?: Res) => void) => unknown,
    req: Req,
  ): Promise<Res> {
    return new Promise((resolve, reject) => method(req, this.metadata, (err, res) => (err ? reject(err) : resolve(res!))));
  }

  score(req: ScoreRequest): Promise<ScoreResponse__Output> {
    return this.call(this.scoring.Score.bind(this.scoring), req);
  }
  rolling(req: RollingRequest): Promise<RollingResponse__Output> {
    return this.call(this.scoring.ScoreRolling.bind(this.scoring), req);
  }
  models(): Promise<ListModelsResponse__Output> {
    return this.call(this.scoring.ListModels.bind(this.scoring), {});
  }
  probe(req: ProbeRequest): Promise<ProbeResponse__Output> {
    return this.call(this.probing.Probe.bind(this.probing), req);
  }
  attribute(req: AttributeRequest): Promise<AttributeResponse__Output> {
    return this.call(this.probing.Attribute.bind(this.probing), req);
  }

  /** Every message of a Generate stream. */
  generate(req: GenerateRequest): Promise<GenerateResponse__Output[]> {
    return new Promise((resolve, reject) => {
      const out: GenerateResponse__Output[] = [];
      const call = this.generation.Generate(req, this.metadata);
      call.on('data', (m: GenerateResponse__Output) => out.push(m));
      call.on('error', reject);
      call.on('end', () => resolve(out));
    });
  }

  async close(): Promise<void> {
    this.scoring.close();
    this.probing.close();
    this.generation.close();
    await this.ownServer?.close();
  }
}

/** Run `work` over items `batch` at a time, `concurrency` batches in flight, with a
 * progress bar on stderr (quiet when stderr is not a terminal). */
export async function forEachBatch<T>(
  items: T[],
  batch: number,
  concurrency: number,
  label: string,
  work: (chunk: T[], start: number) => Promise<void>,
): Promise<void> {
  const bar = new cliProgress.SingleBar(
    { format: `${label} [{bar}] {value}/{total} {duration_formatted} (eta {eta_formatted})`, stream: process.stderr, noTTYOutput: false },
    cliProgress.Presets.shades_classic,
  );
  const show = process.stderr.isTTY;
  if (show) bar.start(items.length, 0);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const start = next;
        next += batch;
        const chunk = items.slice(start, start + batch);
        await work(chunk, start);
        if (show) bar.increment(chunk.length);
      }
    }),
  );
  if (show) bar.stop();
}

export function readJsonl<T>(file: string): T[] {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .map((l, i) => [l.trim(), i + 1] as const)
    .filter(([l]) => l.length > 0)
    .map(([l, n]) => {
      try {
        return JSON.parse(l) as T;
      } catch (e) {
        throw new Error(`${file}:${n}: not JSON (${(e as Error).message})`);
      }
    });
}

/** A row-major gRPC Matrix as nested arrays. */
export function matrixRows(m: { rows: number; cols: number; values: number[] } | null | undefined): number[][] {
  if (!m) return []; // a message field the server left unset
  return Array.from({ length: m.rows }, (_, r) => m.values.slice(r * m.cols, (r + 1) * m.cols));
}
