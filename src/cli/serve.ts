// `ctxprobe serve` (the server, its flags and signals) and `ctxprobe health`.
import { Command, Option } from 'commander';
import {
  DEFAULT_REPOSITORY,
  loadModel,
  readRepositoryEntries,
  type FailedModel,
  type LoadedModel,
  type ModelEntry,
} from '../serving/repository.js';
import { ConfigError } from '../common/errors.js';
import { CtxprobeServer } from '../server.js';
import { resolveSecurity, type TlsFiles } from '../serving/security.js';
import { entriesFrom, int, log, mallocAdvice, portOrOff, withModelFlags, type ModelFlags } from './common.js';
import { LoadLog } from '../serving/load-log.js';

/** A signal repeated within this many ms is one delivery (see `drainOnSignals`). */
const DUPLICATE_SIGNAL_MS = 100;

/** The flags of `serve`, as commander parses them (each may come from its environment variable). */
interface ServeFlags extends ModelFlags {
  models: string;
  name?: string;
  host: string;
  port: number;
  healthPort: number;
  httpPort: number;
  metricsHost: string;
  metricsTls?: boolean;
  metricsAuth?: boolean;
  tlsCert?: string;
  tlsKey?: string;
  tlsClientCa?: string;
  httpPlaintext?: boolean;
  authTokenFile?: string;
  metricsPort: number;
  maxQueueDelayMs: number;
  maxRoundTokens?: number;
  maxQueuedTokens: number;
  maxItems: number;
  maxTextBytes: number;
  maxScoredTokens: number;
  maxAnswerValues: number;
  maxContinuations: number;
  tokenizerWorkers: number;
  maxMessageBytes: number;
  drainTimeoutMs: number;
  logLevel: 'debug' | 'info';
}

/** The memory rule in one line, under the flags of `serve --help`; the table it points to is
 * the load's own plan (src/engine/memory.ts, printed by bench/memory-table.ts). */
export const MEMORY_HELP =
  'Memory: a model needs its weights at rest (4 bytes a parameter in F32 or BF16 widened, 2 in BF16 kept as stored, about 0.9 in a Q4_K_M GGUF) ' +
  'plus about 2.5 GiB at the defaults (up to 4.5 kept as stored); one that does not fit is refused at load. Needs of 1B/3B/8B and the flag to use: docs/models.md#memory';

export function registerServe(program: Command): void {
  withLimitFlags(
    withListenFlags(withModelFlags(program.command('serve').description('serve the models of a repository (or one --model) over gRPC'))),
  )
    .addHelpText('after', `\n${MEMORY_HELP}`)
    .action(serve);
}

/** Where and how `serve` listens: the repository, addresses and ports, TLS and tokens. */
function withListenFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--models <dir>', 'model repository: one JSON config per model').default(DEFAULT_REPOSITORY).env('CTXPROBE_MODELS'),
    )
    .addOption(new Option('--name <name>', 'name to serve --model under').env('CTXPROBE_MODEL_NAME'))
    .addOption(new Option('--host <host>', 'address to bind').default('127.0.0.1').env('CTXPROBE_HOST'))
    .addOption(new Option('--port <port>', 'gRPC port').default(50051).argParser(int('port')).env('CTXPROBE_PORT'))
    .addOption(
      new Option('--health-port <port>', 'plaintext port with only grpc.health.v1, answered off the main thread (-1: none)')
        .default(-1)
        .argParser(portOrOff)
        .env('CTXPROBE_HEALTH_PORT'),
    )
    .addOption(
      new Option('--http-port <port>', 'OpenAI-compatible HTTP port (/v1/completions; -1: none)')
        .default(8000)
        .argParser(portOrOff)
        .env('CTXPROBE_HTTP_PORT'),
    )
    .addOption(
      new Option('--metrics-host <host>', 'address of the Prometheus endpoint (its own; not --host)')
        .default('127.0.0.1')
        .env('CTXPROBE_METRICS_HOST'),
    )
    .addOption(new Option('--metrics-tls', 'serve /metrics over the TLS identity of --tls-cert, too').env('CTXPROBE_METRICS_TLS'))
    .addOption(new Option('--metrics-auth', 'require the bearer tokens on /metrics, too').env('CTXPROBE_METRICS_AUTH'))
    .addOption(new Option('--tls-cert <file>', 'PEM certificate chain: serve gRPC and HTTP over TLS').env('CTXPROBE_TLS_CERT'))
    .addOption(new Option('--tls-key <file>', 'PEM private key of --tls-cert').env('CTXPROBE_TLS_KEY'))
    .addOption(
      new Option('--tls-client-ca <file>', 'PEM CA bundle: both ports require client certificates it signed (mutual TLS)').env(
        'CTXPROBE_TLS_CLIENT_CA',
      ),
    )
    .addOption(
      new Option(
        '--http-plaintext',
        'serve the HTTP port without TLS though --tls-cert is given (behind a gateway that carries TLS, e.g. to an InferencePool); tokens still apply',
      ).env('CTXPROBE_HTTP_PLAINTEXT'),
    )
    .addOption(
      new Option('--auth-token-file <file>', 'bearer tokens, one per line: every call but health checks needs one').env(
        'CTXPROBE_AUTH_TOKEN_FILE',
      ),
    )
    .addOption(
      new Option('--metrics-port <port>', 'Prometheus /metrics port (-1: none)')
        .default(9464)
        .argParser(portOrOff)
        .env('CTXPROBE_METRICS_PORT'),
    );
}

/** What `serve` takes on: batching, request limits, tokenizer threads, the drain, the log. */
function withLimitFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option('--max-queue-delay-ms <ms>', 'how long a request may wait for others to batch with')
        .default(5)
        .argParser(int('max-queue-delay-ms'))
        .env('CTXPROBE_MAX_QUEUE_DELAY_MS'),
    )
    .addOption(
      new Option('--max-round-tokens <n>', 'tokens gathered per scheduling round (default: 4 × max batch tokens)')
        .argParser(int('max-round-tokens'))
        .env('CTXPROBE_MAX_ROUND_TOKENS'),
    )
    .addOption(
      new Option('--max-queued-tokens <n>', 'queued tokens per model before RESOURCE_EXHAUSTED')
        .default(1 << 20)
        .argParser(int('max-queued-tokens'))
        .env('CTXPROBE_MAX_QUEUED_TOKENS'),
    )
    .addOption(
      new Option('--max-items <n>', 'items per Score / ScoreRolling call')
        .default(4096)
        .argParser(int('max-items'))
        .env('CTXPROBE_MAX_ITEMS'),
    )
    .addOption(
      new Option('--max-text-bytes <n>', 'UTF-8 bytes of text (contexts, continuations, chunks, prompts) per request')
        .default(8 * 2 ** 20)
        .argParser(int('max-text-bytes'))
        .env('CTXPROBE_MAX_TEXT_BYTES'),
    )
    .addOption(
      new Option('--max-scored-tokens <n>', 'tokens in one answer: scored tokens of a request, tokens of a Tokenize')
        .default(2 ** 17)
        .argParser(int('max-scored-tokens'))
        .env('CTXPROBE_MAX_SCORED_TOKENS'),
    )
    .addOption(
      new Option('--max-answer-values <n>', 'values in one answer: log-probs, alternatives, attention statistics, heatmap cells')
        .default(2 ** 18)
        .argParser(int('max-answer-values'))
        .env('CTXPROBE_MAX_ANSWER_VALUES'),
    )
    .addOption(
      new Option('--max-continuations <n>', 'continuations per Score item')
        .default(256)
        .argParser(int('max-continuations'))
        .env('CTXPROBE_MAX_CONTINUATIONS'),
    )
    .addOption(
      new Option('--tokenizer-workers <n>', 'worker threads that tokenise for each model (0: on the event loop)')
        .default(1)
        .argParser(int('tokenizer-workers'))
        .env('CTXPROBE_TOKENIZER_WORKERS'),
    )
    .addOption(
      new Option('--max-message-bytes <n>', 'largest gRPC message, each way')
        .default(64 * 1024 * 1024)
        .argParser(int('max-message-bytes'))
        .env('CTXPROBE_MAX_MESSAGE_BYTES'),
    )
    .addOption(
      new Option('--drain-timeout-ms <ms>', 'on SIGTERM, how long queued and running calls may take before they are refused')
        .default(30_000)
        .argParser(int('drain-timeout-ms'))
        .env('CTXPROBE_DRAIN_TIMEOUT_MS'),
    )
    .addOption(
      new Option('--log-level <level>', 'debug logs one line per call')
        .choices(['debug', 'info'])
        .default('info')
        .env('CTXPROBE_LOG_LEVEL'),
    );
}

/** The ports first (health NOT_SERVING), then each model as it loads, then SERVING; a
 * signal drains and stops it at any point. */
async function serve(flags: ServeFlags): Promise<void> {
  const serverLog = (l: Record<string, unknown>) => (l.level !== 'debug' || flags.logLevel === 'debug') && log(l);
  // The token may also come as a value in CTXPROBE_AUTH_TOKEN (e.g. from a Kubernetes
  // secret); there is no flag for it, as process arguments are visible to every user.
  const { tls, tokens: authTokens } = resolveSecurity({
    tlsCert: flags.tlsCert,
    tlsKey: flags.tlsKey,
    tlsClientCa: flags.tlsClientCa,
    authTokenFile: flags.authTokenFile,
    authToken: process.env.CTXPROBE_AUTH_TOKEN,
  });
  const server = await CtxprobeServer.start({
    tls,
    httpPlaintext: flags.httpPlaintext,
    authTokens,
    metricsTls: flags.metricsTls,
    metricsAuth: flags.metricsAuth,
    host: flags.host,
    port: flags.port,
    metricsHost: flags.metricsHost,
    metricsPort: flags.metricsPort,
    healthPort: flags.healthPort,
    httpPort: flags.httpPort,
    maxMessageBytes: flags.maxMessageBytes,
    maxItemsPerRequest: flags.maxItems,
    maxTextBytes: flags.maxTextBytes,
    maxScoredTokens: flags.maxScoredTokens,
    maxAnswerValues: flags.maxAnswerValues,
    tokenizerWorkers: flags.tokenizerWorkers,
    batcher: { maxQueueDelayMs: flags.maxQueueDelayMs, maxRoundTokens: flags.maxRoundTokens, maxQueuedTokens: flags.maxQueuedTokens },
    log: serverLog,
    onModelLost: (model, err) => {
      // Every later call would fail: health is NOT_SERVING, and the orchestrator restarts us.
      log({ level: 'error', event: 'session_host_lost', model, message: err.message, exitCode: 70 });
      server?.forceClose();
      process.exitCode = 70;
      setTimeout(() => process.exit(70), 100).unref();
    },
  });
  if (process.env.CTXPROBE_TEST_HOOKS === '1')
    process.on('SIGUSR2', () => {
      for (const m of server.models.values()) m.engine.exitHostForTest();
    });
  const malloc = mallocAdvice();
  if (malloc) log({ level: 'warn', event: 'malloc', message: malloc });
  logListening(server, flags, tls, authTokens);
  const shutdown = drainOnSignals(server, flags.drainTimeoutMs);
  await loadModels(server, flags, shutdown);
}

/** The `listening` line: each port, its security, health (NOT_SERVING until the models are loaded). */
function logListening(server: CtxprobeServer, flags: ServeFlags, tls: TlsFiles | undefined, authTokens: string[]): void {
  const httpHost = flags.host.includes(':') ? `[${flags.host}]` : flags.host;
  const httpTls = tls !== undefined && !flags.httpPlaintext;
  const httpBase = server.httpPort === undefined ? undefined : `${httpTls ? 'https' : 'http'}://${httpHost}:${server.httpPort}`;
  log({
    level: 'info',
    event: 'listening',
    address: server.address,
    metricsPort: server.metricsPort,
    httpPort: server.httpPort,
    // The HTTP/JSON API's document and the viewer page, where a browser finds them.
    ...(httpBase ? { viewer: `${httpBase}/ui/`, openapi: `${httpBase}/openapi.json` } : {}),
    healthPort: server.healthPort,
    metricsHost: flags.metricsHost,
    tls: tls ? (tls.clientCa ? 'mutual' : 'server') : 'off',
    ...(tls && flags.httpPlaintext ? { httpTls: 'off' } : {}),
    auth: authTokens.length > 0 ? 'bearer' : 'off',
    health: 'NOT_SERVING',
  });
}

/** What a stop needs to know of the start-up: whether it began, and the model being loaded. */
interface Shutdown {
  /** A signal came: the models left are not loaded. */
  stopping: boolean;
  /** The model being loaded, if any: its session thread may be inside onnxruntime, and
   * exiting then aborted the process (`terminate called after throwing an instance of
   * 'Napi::Error'`, exit 134) where a drain should end with 0. The stop waits for it and
   * frees it; no model loads after a signal. */
  loading: Promise<LoadedModel> | undefined;
}

/** SIGTERM drains: health NOT_SERVING, new calls UNAVAILABLE, queued and running calls
 * finish — for at most --drain-timeout-ms, after which what is left is refused and every
 * connection closed. A second signal exits at once. */
function drainOnSignals(server: CtxprobeServer, drainTimeoutMs: number): Shutdown {
  const shutdown: Shutdown = { stopping: false, loading: undefined };
  let stoppedAt = 0;
  const stop = async (signal: string) => {
    // One signal can arrive twice: a supervisor's SIGTERM to the process group reaches
    // the server and npm, which forwards it (npm start execs the server). Within
    // DUPLICATE_SIGNAL_MS of the first it is that signal again, not a second one.
    if (shutdown.stopping && Date.now() - stoppedAt < DUPLICATE_SIGNAL_MS) return;
    if (shutdown.stopping) {
      log({ level: 'warn', event: 'stopped', signal, how: 'second signal: exiting at once' });
      process.exit(0);
    }
    shutdown.stopping = true;
    stoppedAt = Date.now();
    log({ level: 'info', event: 'draining', signal, deadlineMs: drainTimeoutMs });
    const how = await server.close(drainTimeoutMs);
    await shutdown.loading?.then(
      (m) => m.engine.release(),
      () => {},
    );
    log({ level: how === 'drained' ? 'info' : 'warn', event: 'stopped', how });
    process.exit(0);
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void stop(signal));
  return shutdown;
}

/** Each model of the flags, loaded and added in turn (none after a signal); then SERVING.
 * A model that cannot be loaded (its config, its checkpoint, its device) is logged with its
 * file and reason and not served, and the others are; if none loads, the start fails. */
async function loadModels(server: CtxprobeServer, flags: ServeFlags, shutdown: Shutdown): Promise<void> {
  const { entries, failed } = modelsOf(flags);
  for (const f of failed) modelFailed(server, f, f.file);
  for (const entry of entries) {
    if (shutdown.stopping) return;
    // Each step of the load, logged as it goes and told by /health (serving/load-log.ts).
    const progress = new LoadLog(entry.name, log);
    server.service.loadState = () => progress.state();
    shutdown.loading = loadModel({ ...entry, maxContinuations: entry.maxContinuations ?? flags.maxContinuations }, progress.listener);
    let m: LoadedModel;
    try {
      m = await shutdown.loading;
    } catch (e) {
      progress.end();
      shutdown.loading = undefined;
      // One checkpoint served as --model fails the start as before.
      if (flags.model) throw e;
      const f = { name: entry.name, file: entry.path, reason: (e as Error).message };
      modelFailed(server, f, entry.configFile);
      failed.push(f);
      continue;
    }
    progress.end();
    if (shutdown.stopping) return; // the stop frees it
    shutdown.loading = undefined;
    logLoaded(entry, m);
    server.addModel(m);
  }
  if (server.models.size === 0) {
    const reasons = failed.map((f) => `${f.name}: ${f.reason}`).join('; ');
    throw new ConfigError(`no model of ${flags.models} could be loaded (${reasons || 'the repository has no *.json model config'})`);
  }
  server.setServing();
  log({
    level: 'info',
    event: 'serving',
    address: server.address,
    models: [...server.models.keys()],
    ...(failed.length > 0 && { failedModels: failed.map((f) => f.name) }),
  });
}

/** The models to load and the configs of the repository that are none (--model: no such). */
function modelsOf(flags: ServeFlags): { entries: ModelEntry[]; failed: FailedModel[] } {
  if (flags.model) return { entries: entriesFrom(flags), failed: [] };
  const { entries, failed } = readRepositoryEntries(flags.models);
  return { entries: entriesFrom(flags, entries), failed };
}

/** A model that is not served: logged with its file (its checkpoint, or its config when
 * that is what is wrong), its config file and why. */
function modelFailed(server: CtxprobeServer, f: FailedModel, config: string | undefined): void {
  log({ level: 'error', event: 'model_failed', model: f.name, file: f.file, ...(config && { config }), message: f.reason });
  server.service.addFailed(f.name, f.reason);
}

function logLoaded(entry: ModelEntry, m: LoadedModel): void {
  const { memory, ...info } = m.engine.info;
  log({
    level: 'info',
    event: 'model_loaded',
    model: entry.name,
    path: entry.path,
    seconds: +m.loadSeconds.toFixed(3),
    ...info,
    ...(m.engine.device.bufferCache !== undefined && { gpuBufferCache: m.engine.device.bufferCache }),
    ...(m.engine.device.probeSession !== undefined && { probeSession: m.engine.device.probeSession }),
    maxBatchTokens: m.scorer.maxBatchTokens,
    prefixCacheBytes: m.scorer.cache?.budget ?? 0,
    // Weights onnxruntime would have read from the file for the session's life, held in a
    // private copy instead; `weightsMapped`: files the process still maps (none on the CPU).
    heldWeightBytes: m.engine.weights.heldBytes,
    weightsMapped: m.engine.weights.mapped ?? 'unknown',
    // Last: what a user checks first on a big model.
    ...(memory !== undefined && { memory }),
  });
  if (entry.synthetic)
    log({
      level: 'warn',
      event: 'random_weights',
      model: entry.name,
      message: 'this model has random weights; pass --model PATH (a checkpoint folder or a .gguf file) for a real checkpoint',
    });
}

export function registerHealth(program: Command): void {
  program
    .command('health')
    .description('exit 0 if the server reports SERVING (grpc.health.v1), 1 otherwise: for container health checks')
    .addOption(new Option('--address <host:port>', 'server address').default('127.0.0.1:50051').env('CTXPROBE_HEALTH_ADDRESS'))
    .option('--service <name>', 'service to check (empty: the whole server)', '')
    .addOption(new Option('--tls-ca <file>', 'PEM CA to verify a TLS server with').env('CTXPROBE_HEALTH_TLS_CA'))
    .addOption(new Option('--tls-cert <file>', 'PEM client certificate, for a server with mutual TLS').env('CTXPROBE_HEALTH_TLS_CERT'))
    .addOption(new Option('--tls-key <file>', 'PEM key of --tls-cert').env('CTXPROBE_HEALTH_TLS_KEY'))
    .addOption(
      new Option('--server-name <name>', "the name in the server's certificate, when --address is not it (e.g. 127.0.0.1 in a pod)").env(
        'CTXPROBE_HEALTH_SERVER_NAME',
      ),
    )
    .option('--timeout-ms <ms>', 'give up after', int('timeout-ms'), 3000)
    .action(async (flags) => {
      const { checkHealth } = await import('../serving/health.js');
      const status = await checkHealth(flags.address, {
        service: flags.service,
        tlsCa: flags.tlsCa,
        tlsCert: flags.tlsCert,
        tlsKey: flags.tlsKey,
        serverName: flags.serverName,
        timeoutMs: flags.timeoutMs,
      });
      console.log(status);
      process.exit(status === 'SERVING' ? 0 : 1);
    });
}
