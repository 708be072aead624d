// The server: gRPC (Scoring, Probing, Generation, grpc.health.v1, reflection), an OpenAI-compatible
// HTTP endpoint for lm-evaluation-harness, and Prometheus /metrics.
//
// Lifecycle, as the health service reports it:
//   start()       binds gRPC, the OpenAI-compatible HTTP port and /metrics; health NOT_SERVING
//   addModel()    each loaded model gets its batcher
//   setServing()  health SERVING once every model is loaded
//   drain()       health NOT_SERVING; new work UNAVAILABLE; queued work finishes; exit
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { ReflectionService } from '@grpc/reflection';
import { loadPackage } from './grpc/proto.js';
import { healthPackageDefinition } from './serving/health.js';
import { HealthPort } from './serving/health-port.js';
import { apiServices } from './api/methods.js';
import { grpcHandlers } from './grpc/calls.js';
import { Metrics } from './serving/metrics.js';
import type { LoadedModel } from './serving/repository.js';
import { Service, type ServedModel, type ServiceOptions } from './serving/service.js';
import { loadTls, serverCredentials, tokenChecker, type TlsFiles } from './serving/security.js';
import { bearerAuth } from './grpc/auth.js';
import { buildHttpApp } from './http/app.js';
import type { FastifyInstance } from 'fastify';
import { ConfigError } from './common/errors.js';

export const SCORING_SERVICE = 'ctxprobe.v1.Scoring';
export const PROBING_SERVICE = 'ctxprobe.v1.Probing';
export const GENERATION_SERVICE = 'ctxprobe.v1.Generation';

/** The ports and their security; the serving layer's own options (limits, batcher, log)
 * come with them. */
export interface ServerOptions extends ServiceOptions {
  host?: string;
  /** gRPC port; 0 picks a free one. */
  port?: number;
  /** OpenAI-compatible HTTP port (/v1/completions); 0 picks a free one, -1 (default) none. */
  httpPort?: number;
  /** A plaintext port serving only grpc.health.v1, from a worker thread (0: any free
   * port; -1, the default: none). */
  healthPort?: number;
  /** Prometheus port; 0 picks a free one, -1 serves no metrics. */
  metricsPort?: number;
  /** Address of /metrics; default loopback, whatever `host` is (scrape from a sidecar or
   * set it to the pod address; see deploy/README.md). */
  metricsHost?: string;
  /** Serve /metrics over the server's TLS identity (and client CA), too. */
  metricsTls?: boolean;
  /** Require the bearer tokens on /metrics, too. */
  metricsAuth?: boolean;
  maxMessageBytes?: number;
  /** Serve gRPC and HTTP over TLS (mutual TLS on both when a client CA is given). */
  tls?: TlsFiles;
  /** Serve the HTTP port without TLS though `tls` is given: behind a gateway that carries
   * TLS to the clients and speaks plaintext HTTP to its endpoints, as one routing to an
   * InferencePool does. gRPC keeps TLS; bearer tokens still apply. */
  httpPlaintext?: boolean;
  /** When non-empty, every call but health checks needs `authorization: Bearer <token>`. */
  authTokens?: string[];
  /** Called once when a model's session thread dies (health is NOT_SERVING by then): the
   * process cannot answer any more, so `ctxprobe serve` logs an error and exits non-zero
   * for its orchestrator to restart it. */
  onModelLost?: (model: string, err: Error) => void;
}

export class CtxprobeServer {
  readonly metrics = new Metrics();
  readonly service: Service;
  private readonly health = new HealthImplementation({
    '': 'NOT_SERVING',
    [SCORING_SERVICE]: 'NOT_SERVING',
    [PROBING_SERVICE]: 'NOT_SERVING',
    [GENERATION_SERVICE]: 'NOT_SERVING',
  });
  private healthPortServer?: HealthPort;
  private metricsServer?: { port: number; close(): Promise<void> };
  private httpApp?: FastifyInstance;
  port = 0;

  private constructor(
    private readonly grpcServer: grpc.Server,
    private readonly options: ServerOptions,
  ) {
    this.service = new Service(this.metrics, options);
    // Each configured model's health under `model/<name>`; the server's follows (SERVING
    // while some model answers).
    this.service.onModelHealth((model, status) => {
      this.health.setStatus(modelHealthName(model), status);
      this.healthPortServer?.setStatus(modelHealthName(model), status);
      this.setHealth(this.service.health());
    });
  }

  get models(): Map<string, ServedModel> {
    return this.service.models;
  }

  static async start(options: ServerOptions = {}): Promise<CtxprobeServer> {
    const maxBytes = options.maxMessageBytes ?? 64 * 1024 * 1024;
    const tlsMaterial = options.tls ? loadTls(options.tls) : undefined;
    const credentials = serverCredentials(tlsMaterial);
    const checkToken = options.authTokens?.length ? tokenChecker(options.authTokens) : undefined;
    // A call refused for its token is recorded as its handler records calls (method, code);
    // paths that are not the API's go under one label, so no client mints label values.
    let recordRefusal: (path: string, err: Error) => void = () => {};
    const grpcServer = new grpc.Server({
      'grpc.max_receive_message_length': maxBytes,
      'grpc.max_send_message_length': maxBytes,
      interceptors: options.authTokens?.length ? [bearerAuth(options.authTokens, (path, err) => recordRefusal(path, err))] : [],
    });
    const server = new CtxprobeServer(grpcServer, options);
    const { def, v1 } = loadPackage();
    const methods = apiServices(server.service);
    recordRefusal = (path, err) => {
      const [, service, name] = /^\/([^/]+)\/([^/]+)$/.exec(path) ?? [];
      const known =
        service !== undefined &&
        name !== undefined &&
        Object.hasOwn(methods, service) &&
        Object.hasOwn(methods[service as keyof typeof methods], name);
      server.service.begin(known ? name : 'grpc other').end('UNAUTHENTICATED', err);
    };
    grpcServer.addService(v1.Scoring.service, grpcHandlers(server.service, methods['ctxprobe.v1.Scoring']));
    grpcServer.addService(v1.Probing.service, grpcHandlers(server.service, methods['ctxprobe.v1.Probing']));
    grpcServer.addService(v1.Generation.service, grpcHandlers(server.service, methods['ctxprobe.v1.Generation']));
    server.health.addToServer(grpcServer);
    // Reflection lists the health service too, so grpcurl and grpc_health_probe users find it.
    new ReflectionService({ ...def, ...healthPackageDefinition() }).addToServer(grpcServer);
    const host = options.host ?? '127.0.0.1';
    const address = `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 50051}`;
    server.port = await bound(
      '--port',
      address,
      () =>
        new Promise<number>((resolve, reject) =>
          grpcServer.bindAsync(address, credentials, (err, port) => (err ? reject(err) : resolve(port))),
        ),
    );
    dropUnkeepableDeadlines(grpcServer);
    if ((options.httpPort ?? -1) >= 0) {
      const app = buildHttpApp(server.service, {
        checkToken,
        tls: options.httpPlaintext ? undefined : tlsMaterial,
        maxBodyBytes: options.maxMessageBytes,
      });
      await bound(
        '--http-port',
        `${host}:${options.httpPort}`,
        () => app.listen({ port: options.httpPort, host }),
        () => server.close(),
      );
      server.httpApp = app;
    }
    if ((options.healthPort ?? -1) >= 0) {
      server.healthPortServer = await bound(
        '--health-port',
        `${host}:${options.healthPort}`,
        () =>
          HealthPort.start({
            host,
            port: options.healthPort!,
            statuses: {
              '': 'NOT_SERVING',
              [SCORING_SERVICE]: 'NOT_SERVING',
              [PROBING_SERVICE]: 'NOT_SERVING',
              [GENERATION_SERVICE]: 'NOT_SERVING',
            },
          }),
        () => server.close(),
      );
    }
    if ((options.metricsPort ?? 9464) >= 0) {
      if (options.metricsTls && !tlsMaterial) throw new ConfigError('--metrics-tls needs --tls-cert and --tls-key');
      if (options.metricsAuth && !checkToken)
        throw new ConfigError('--metrics-auth needs bearer tokens (--auth-token-file or CTXPROBE_AUTH_TOKEN)');
      const metricsHost = options.metricsHost ?? '127.0.0.1';
      server.metricsServer = await bound(
        '--metrics-port',
        `${metricsHost}:${options.metricsPort ?? 9464}`,
        () =>
          server.metrics.serve(metricsHost, options.metricsPort ?? 9464, {
            tls: options.metricsTls ? tlsMaterial : undefined,
            checkToken: options.metricsAuth ? checkToken : undefined,
          }),
        () => server.close(),
      );
    }
    return server;
  }

  get address(): string {
    return `${this.options.host ?? '127.0.0.1'}:${this.port}`;
  }

  get httpPort(): number | undefined {
    const a = this.httpApp?.server.address();
    return typeof a === 'object' && a ? a.port : undefined;
  }

  get metricsPort(): number | undefined {
    return this.metricsServer?.port;
  }

  addModel(loaded: LoadedModel): void {
    this.service.addModel(loaded);
    loaded.engine.onHostLost((err) => {
      this.service.markBroken(`model ${loaded.entry.name} cannot run: ${err.message}`);
      this.setHealth('NOT_SERVING');
      this.options.onModelLost?.(loaded.entry.name, err);
    });
  }

  /** What both health services (main port, health port) report, for every service. */
  private setHealth(status: 'SERVING' | 'NOT_SERVING'): void {
    for (const service of ['', SCORING_SERVICE, PROBING_SERVICE, GENERATION_SERVICE]) {
      this.health.setStatus(service, status);
      this.healthPortServer?.setStatus(service, status);
    }
  }

  setServing(): void {
    this.service.setServing();
    this.setHealth(this.service.health());
  }

  get healthPort(): number | undefined {
    return this.healthPortServer?.port;
  }

  /** Stop taking work, finish what is queued and in flight, then close every port. The
   * drain waits for calls, not for connections: once every call has been answered, the
   * transports get CLOSE_GRACE_MS to flush the answers and let clients go, then whatever
   * connection is left is cut. A stream the server has answered but the client never
   * half-closes, or a request whose message never finishes arriving, is no call: it used to
   * hold grpc-js's graceful shutdown, and so the drain, until its deadline (30 s). */
  async drain(): Promise<void> {
    this.setHealth('NOT_SERVING');
    await this.service.drain();
    await Promise.all([
      withGrace(new Promise<void>((resolve) => this.grpcServer.tryShutdown(() => resolve())), () => this.grpcServer.forceShutdown()),
      this.httpApp && withGrace(this.httpApp.close(), () => this.httpApp?.server.closeAllConnections()),
    ]);
    await this.metricsServer?.close();
    await this.healthPortServer?.close();
  }

  /** Drain, then release the models' sessions. With `deadlineMs`, whatever is still
   * running then is refused, every connection closed, and close returns anyway. */
  async close(deadlineMs = Infinity): Promise<'drained' | 'forced'> {
    let timer: NodeJS.Timeout | undefined;
    const outOfTime = new Promise<'forced'>((resolve) => {
      if (Number.isFinite(deadlineMs)) timer = setTimeout(() => resolve('forced'), deadlineMs);
    });
    const draining = this.drain();
    const how = await Promise.race([draining.then(() => 'drained' as const), outOfTime]);
    clearTimeout(timer);
    if (how === 'forced') {
      // What is still running is refused in-band first — UNAVAILABLE, retry elsewhere: a
      // gRPC status, an SSE error event, an NDJSON error line — and the transports get
      // CLOSE_GRACE_MS to send it; cut at once, streams ended with a bare socket close
      // (gRPC clients saw CANCELLED).
      this.service.abortAll();
      let grace: NodeJS.Timeout | undefined;
      await Promise.race([draining, new Promise((resolve) => (grace = setTimeout(resolve, CLOSE_GRACE_MS)))]);
      clearTimeout(grace);
      this.forceClose();
    } else await Promise.all([...this.models.values()].map((m) => m.engine.release()));
    return how;
  }

  /** Refuse queued and running work and drop every connection, at once. */
  forceClose(): void {
    this.service.abortAll();
    this.grpcServer.forceShutdown();
    this.httpApp?.server.closeAllConnections();
    void this.httpApp?.close();
    void this.metricsServer?.close();
    void this.healthPortServer?.close();
  }
}

/** The grpc.health.v1 service name a model's own health is reported under. */
export const modelHealthName = (model: string) => `model/${model}`;

/** How long answered calls' connections may take to flush and close once no call is left:
 * a 64 MiB answer (the message limit) goes out over loopback in ~0.1 s. */
const CLOSE_GRACE_MS = 1000;

/** `closing`, or, if it has not settled within CLOSE_GRACE_MS, `force()` and on. */
async function withGrace(closing: Promise<unknown>, force: () => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), CLOSE_GRACE_MS)));
  const how = await Promise.race([closing.then(() => 'closed' as const), late]);
  clearTimeout(timer);
  if (how === 'late') force();
}

/** grpc-js (1.14.7, server-interceptors.js handleTimeoutHeader) reads a call's grpc-timeout
 * as `(value × unit) | 0`: past 2³¹−1 ms the int32 wraps negative and the call gets
 * DEADLINE_EXCEEDED at once (a client deadline 25 days out, or grpc-timeout 597H). A
 * deadline that far is no deadline: the header is dropped before grpc-js reads it, by a
 * listener put ahead of its own on each HTTP/2 server it bound (its private map of them;
 * test/transcode.test.ts fails if that goes). */
function dropUnkeepableDeadlines(grpcServer: grpc.Server): void {
  const http2Servers = (grpcServer as unknown as { http2Servers?: Map<import('node:events').EventEmitter, unknown> }).http2Servers;
  for (const http2 of http2Servers?.keys() ?? []) {
    http2.prependListener('stream', (_stream: unknown, headers: Record<string, unknown>) => {
      const m = /^(\d+)([HMSmun])$/.exec(String(headers['grpc-timeout'] ?? ''));
      const ms = m ? Number(m[1]) * { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 }[m[2] as 'H'] : 0;
      if (ms > 2 ** 31 - 1) delete headers['grpc-timeout'];
    });
  }
}

/** `listen()` on the address `flag` sets; a failure (the port in use, an address this host
 * does not have) is a ConfigError naming the flag, after `undo()` closes what was bound
 * before it. grpc-js said only "No address added out of total 1 resolved errors". */
async function bound<T>(flag: string, address: string, listen: () => Promise<T>, undo?: () => Promise<unknown>): Promise<T> {
  try {
    return await listen();
  } catch (e) {
    await undo?.().catch(() => undefined);
    const code = (e as NodeJS.ErrnoException).code;
    const inUse = code === 'EADDRINUSE' || /address already in use|No address added/i.test((e as Error).message);
    throw new ConfigError(
      inUse
        ? `${flag}: ${address} is in use (another process listens there): stop it, or give ${flag} another port (0: any free one)`
        : `${flag}: cannot listen on ${address} (${code ?? (e as Error).message})`,
    );
  }
}
