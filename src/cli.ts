// ctxprobe command line: `serve` (the gRPC server) and `score` (one-off scoring as JSON).
import fs from 'node:fs';
import path from 'node:path';
import { Command, Option, InvalidArgumentError } from 'commander';
import { DEFAULT_REPOSITORY, loadModel, readRepository, type ModelEntry } from './repository.js';
import { CtxprobeServer } from './server.js';
import { resolveSecurity } from './security.js';
import type { ComputeDType } from './dtypes.js';
import type { ProbeSample } from './probe.js';

const int = (name: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${name} must be a whole number ≥ 0`);
  return n;
};

const portOrOff = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < -1 || n > 65535) throw new InvalidArgumentError('must be a port, 0 (any free port) or -1 (none)');
  return n;
};

/** A text given on the command line: `@FILE` reads FILE (`@@…` is a literal `@…`), `-`
 * reads standard input. */
function textArgument(value: string, flag: string): string {
  const read = (file: string | number) => {
    try {
      return fs.readFileSync(file, 'utf8');
    } catch (e) {
      throw new InvalidArgumentError(
        `${flag}: cannot read ${file === 0 ? 'standard input' : file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      );
    }
  };
  if (value === '-') return read(0);
  if (value.startsWith('@@')) return value.slice(1);
  if (value.startsWith('@')) return read(value.slice(1));
  return value;
}

/** glibc raises its mmap threshold after large frees (up to 32 MiB), so the per-layer
 * tensors of a long row come from heap arenas that do not shrink: measured on 32k-token
 * rolling scoring, 3.7 GiB peak above the model vs 2.1 GiB with a fixed 1 MiB threshold.
 * The variable must be set before the process starts (`npm start` and the images do). */
function mallocAdvice(): string | undefined {
  const glibc = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header?.glibcVersionRuntime;
  if (process.platform !== 'linux' || !glibc || process.env.MALLOC_MMAP_THRESHOLD_) return undefined;
  return 'MALLOC_MMAP_THRESHOLD_ is not set: glibc keeps the memory of long rows in its heap (32k-token rolling scoring peaks at 3.7 GiB above the model instead of 2.1 GiB); start with MALLOC_MMAP_THRESHOLD_=1048576 (npm start and the container images do)';
}

const log = (line: Record<string, unknown>) => process.stderr.write(JSON.stringify({ time: new Date().toISOString(), ...line }) + '\n');

interface ModelFlags {
  model?: string;
  cpuMemArena?: 'on' | 'off';
  device?: string;
  dtype?: ComputeDType;
  threads?: number;
  maxLength?: number;
  maxBatchTokens?: number;
  prefixCacheBytes?: number;
}

function withModelFlags(cmd: Command): Command {
  return cmd
    .addOption(new Option('--model <dir>', 'a Hugging Face checkpoint folder (default: the small default model)').env('CTXPROBE_MODEL'))
    .addOption(new Option('--device <device>', 'cpu, cuda or cuda:N').env('CTXPROBE_DEVICE'))
    .addOption(new Option('--dtype <dtype>', 'compute dtype').choices(['float32', 'float16', 'bfloat16']).env('CTXPROBE_DTYPE'))
    .addOption(new Option('--threads <n>', 'CPU threads (0: one per core)').argParser(int('threads')).env('CTXPROBE_THREADS'))
    .addOption(
      new Option('--cpu-mem-arena <on|off>', "onnxruntime's CPU memory arena (default off: memory goes back after large requests)")
        .choices(['on', 'off'])
        .env('CTXPROBE_CPU_MEM_ARENA'),
    )
    .addOption(
      new Option('--max-length <n>', "context length (default: the model's)").argParser(int('max-length')).env('CTXPROBE_MAX_LENGTH'),
    )
    .addOption(
      new Option('--max-batch-tokens <n>', 'padded tokens per forward pass')
        .argParser(int('max-batch-tokens'))
        .env('CTXPROBE_MAX_BATCH_TOKENS'),
    )
    .addOption(
      new Option('--prefix-cache-bytes <n>', 'KV bytes of the prefix cache kept across requests (default 1 GiB; 0: none)')
        .argParser(int('prefix-cache-bytes'))
        .env('CTXPROBE_PREFIX_CACHE_BYTES'),
    );
}

/** The models to serve: one checkpoint from --model, else every config in the repository. */
function entriesFrom(flags: ModelFlags & { models?: string; name?: string }): ModelEntry[] {
  const overrides = {
    ...(flags.device !== undefined && { device: flags.device }),
    ...(flags.dtype !== undefined && { dtype: flags.dtype }),
    ...(flags.threads !== undefined && { threads: flags.threads }),
    ...(flags.cpuMemArena !== undefined && { cpuMemArena: flags.cpuMemArena === 'on' }),
    ...(flags.maxLength !== undefined && { maxLength: flags.maxLength }),
    ...(flags.maxBatchTokens !== undefined && { maxBatchTokens: flags.maxBatchTokens }),
    ...(flags.prefixCacheBytes !== undefined && { prefixCacheBytes: flags.prefixCacheBytes }),
  };
  if (flags.model) {
    const dir = path.resolve(flags.model);
    return [{ name: flags.name ?? path.basename(dir), path: dir, ...overrides }];
  }
  return readRepository(flags.models ?? DEFAULT_REPOSITORY).map((e) => ({ ...e, ...overrides }));
}

const program = new Command('ctxprobe').description('Log-likelihoods and attention statistics of causal LMs, served over gRPC');

withModelFlags(program.command('serve').description('serve the models of a repository (or one --model) over gRPC'))
  .addOption(new Option('--models <dir>', 'model repository: one JSON config per model').default(DEFAULT_REPOSITORY).env('CTXPROBE_MODELS'))
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
    new Option('--auth-token-file <file>', 'bearer tokens, one per line: every call but health checks needs one').env(
      'CTXPROBE_AUTH_TOKEN_FILE',
    ),
  )
  .addOption(
    new Option('--metrics-port <port>', 'Prometheus /metrics port (-1: none)')
      .default(9464)
      .argParser(portOrOff)
      .env('CTXPROBE_METRICS_PORT'),
  )
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
    new Option('--log-level <level>', 'debug logs one line per call').choices(['debug', 'info']).default('info').env('CTXPROBE_LOG_LEVEL'),
  )
  .action(async (flags) => {
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
    log({
      level: 'info',
      event: 'listening',
      address: server.address,
      metricsPort: server.metricsPort,
      httpPort: server.httpPort,
      healthPort: server.healthPort,
      metricsHost: flags.metricsHost,
      tls: tls ? (tls.clientCa ? 'mutual' : 'server') : 'off',
      auth: authTokens.length > 0 ? 'bearer' : 'off',
      health: 'NOT_SERVING',
    });
    // SIGTERM drains: health NOT_SERVING, new calls UNAVAILABLE, queued and running calls
    // finish — for at most --drain-timeout-ms, after which what is left is refused and
    // every connection closed. A second signal exits at once.
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) {
        log({ level: 'warn', event: 'stopped', signal, how: 'second signal: exiting at once' });
        process.exit(0);
      }
      stopping = true;
      log({ level: 'info', event: 'draining', signal, deadlineMs: flags.drainTimeoutMs });
      const how = await server.close(flags.drainTimeoutMs);
      log({ level: how === 'drained' ? 'info' : 'warn', event: 'stopped', how });
      process.exit(0);
    };
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void stop(signal));
    for (const entry of entriesFrom(flags)) {
      const m = await loadModel({ ...entry, maxContinuations: entry.maxContinuations ?? flags.maxContinuations });
      log({
        level: 'info',
        event: 'model_loaded',
        model: entry.name,
        path: entry.path,
        seconds: +m.loadSeconds.toFixed(3),
        ...m.engine.info,
        prefixCacheBytes: m.scorer.cache?.budget ?? 0,
      });
      if (entry.synthetic)
        log({
          level: 'warn',
          event: 'random_weights',
          model: entry.name,
          message: 'this model has random weights; pass --model DIR for a real checkpoint',
        });
      server.addModel(m);
    }
    server.setServing();
    log({ level: 'info', event: 'serving', address: server.address, models: [...server.models.keys()] });
  });

withModelFlags(program.command('score').description('score continuations of a context (or --rolling texts) and print JSON'))
  .option('--context <text>', 'the context (@FILE: read from FILE; -: standard input)', '')
  .option('--continuation <text...>', 'one or more continuations (each may be @FILE)')
  .option('--rolling <text...>', 'texts to score with rolling log-likelihood instead (each may be @FILE, or -)')
  .option('--min-k <percent>', 'Min-K% Prob k for --rolling', parseFloat, 20)
  .option('--add-bos', 'add the tokenizer special tokens (BOS) to the text', false)
  .option('--top-k <k>', 'also print the k most likely tokens per position', int('top-k'), 0)
  .action(async (flags) => {
    if (!flags.rolling && !flags.continuation) throw new InvalidArgumentError('give --continuation TEXT… or --rolling TEXT…');
    flags.context = textArgument(flags.context, '--context');
    flags.continuation = (flags.continuation as string[] | undefined)?.map((t) => textArgument(t, '--continuation'));
    flags.rolling = (flags.rolling as string[] | undefined)?.map((t) => textArgument(t, '--rolling'));
    const [entry] = entriesFrom(flags);
    const m = await loadModel(entry!);
    const tok = m.engine.tokenizer;
    if (flags.rolling) {
      const results = await m.scorer.rolling((flags.rolling as string[]).map((text) => ({ text, minKPercent: flags.minK })));
      console.log(JSON.stringify({ model: entry!.name, rolling: results }, null, 2));
    } else {
      const [results] = await m.scorer.loglikelihood([
        { context: flags.context, continuations: flags.continuation, addBos: flags.addBos, topK: flags.topK },
      ]);
      const pretty = results!.map((r, i) => ({
        continuation: flags.continuation[i],
        ...r,
        tokens: r.tokenIds.map((id) => tok.tokenString(id)),
        topK: r.topK?.map((t) => t.ids.map((id, k) => ({ id, token: tok.tokenString(id), logprob: t.logprobs[k] }))),
      }));
      console.log(JSON.stringify({ model: entry!.name, context: flags.context, results: pretty }, null, 2));
    }
    await m.engine.release();
  });

withModelFlags(
  program.command('probe').description('attention statistics over labelled chunks or chat messages; JSON, HTML or SVG figures'),
)
  .option(
    '--samples <file>',
    'JSON: an array of samples ({chunks: [{label, text}]} or {messages: [{role, content}]}, queryLabels, excludePositions)',
  )
  .option('--chunk <label=text...>', 'one sample from inline chunks, in order (label=@FILE reads the text from FILE)')
  .option('--messages <file>', 'one sample from a JSON array of chat messages (rendered with the model chat template)')
  .option('--query <label...>', 'query chunk labels (default: the last chunk)')
  .option('--exclude <position...>', 'token positions to remove from the key side (e.g. 0 for a BOS sink)')
  .option('--add-special-tokens', "run the tokenizer's special tokens (BOS) on text chunks", false)
  .addOption(new Option('--pool <pool>', 'heatmap pool over layers and heads').choices(['max', 'mean']).default('max'))
  .addOption(new Option('--query-reduce <r>', 'heatmap query-side reducer').choices(['mean', 'max', 'sum']).default('mean'))
  .addOption(new Option('--key-reduce <r>', 'heatmap key-side reducer').choices(['mean', 'max', 'sum']).default('max'))
  .option('--per-head', 'include [layers × heads × chunks]', false)
  .option('--html <file>', 'write an HTML report with the figures')
  .option('--svg <prefix>', 'write PREFIX-votes.svg, PREFIX-mass.svg and PREFIX-heatmap-N.svg')
  .action(async (flags) => {
    const { Prober } = await import('./probe.js');
    const { probeReportHtml, distributionSvg, heatmapSvg } = await import('./figures.js');
    let samples: ProbeSample[];
    if (flags.samples) {
      const raw = JSON.parse(fs.readFileSync(flags.samples, 'utf8'));
      samples = Array.isArray(raw) ? raw : raw.samples;
    } else if (flags.messages) {
      samples = [{ messages: JSON.parse(fs.readFileSync(flags.messages, 'utf8')) }];
    } else if (flags.chunk) {
      samples = [{ chunks: chunkArguments(flags.chunk) }];
    } else {
      throw new InvalidArgumentError('give --samples FILE, --messages FILE or --chunk label=text…');
    }
    samples = samples.map((s) => ({
      ...s,
      addSpecialTokens: s.addSpecialTokens ?? flags.addSpecialTokens,
      queryLabels: s.queryLabels ?? flags.query,
      excludePositions: s.excludePositions ?? (flags.exclude as string[] | undefined)?.map(Number),
    }));
    const [entry] = entriesFrom(flags);
    const m = await loadModel(entry!);
    const answer = await new Prober(m.engine).probe(samples, {
      pool: flags.pool,
      queryReduce: flags.queryReduce,
      keyReduce: flags.keyReduce,
      perHead: flags.perHead,
    });
    if (flags.html) writeFile(flags.html, probeReportHtml(answer, 'ctxprobe attention report', entry!.name));
    if (flags.svg) {
      const first = answer.mean ?? { ...answer.samples[0]!, labels: answer.samples[0]!.labels };
      writeFile(`${flags.svg}-votes.svg`, distributionSvg(first.votes, first.labels, 'Argmax votes per layer'));
      writeFile(`${flags.svg}-mass.svg`, distributionSvg(first.mass, first.labels, 'Attention mass per layer'));
      answer.samples.forEach((s, i) =>
        writeFile(`${flags.svg}-heatmap-${i}.svg`, heatmapSvg(s.heatmap, s.labels, `Sample ${i} heatmap`)),
      );
    }
    console.log(JSON.stringify({ model: entry!.name, ...answer }, null, 2));
    await m.engine.release();
  });

/** Inline chunks: `label=text` each (`label=@FILE` reads the text from FILE). */
function chunkArguments(values: string[]): { label: string; text: string }[] {
  return values.map((c) => {
    const eq = c.indexOf('=');
    if (eq <= 0) throw new InvalidArgumentError(`--chunk ${JSON.stringify(c)}: write label=text`);
    return { label: c.slice(0, eq), text: textArgument(c.slice(eq + 1), `--chunk ${c.slice(0, eq)}`) };
  });
}

const interventionList = (value: string) => {
  const list = value.split(',').map((v) => v.trim());
  for (const v of list) if (v !== 'remove' && v !== 'mask') throw new InvalidArgumentError(`unknown intervention ${JSON.stringify(v)} (remove, mask)`);
  return list as ('remove' | 'mask')[];
};

const sweepList = (value: string) =>
  value.split(',').map((v) => {
    if (v.trim() === 'all') return 2 ** 31 - 1;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`history sweep values are whole numbers ≥ 0 or "all" (got ${JSON.stringify(v)})`);
    return n;
  });

withModelFlags(
  program.command('attribute').description("what each chunk contributes to a target chunk's log-likelihood (remove / mask), as JSON; SVG bars"),
)
  .option('--samples <file>', 'JSON: an array of samples ({chunks} or {messages}, target, ablate)')
  .option('--chunk <label=text...>', 'one sample from inline chunks, in order (label=@FILE reads the text from FILE)')
  .option('--messages <file>', 'one sample from a JSON array of chat messages')
  .option('--target <label>', 'the target chunk (default: the last)')
  .option('--ablate <label...>', 'chunks to ablate (default: every chunk before the target)')
  .option('--add-special-tokens', "run the tokenizer's special tokens (BOS) on text chunks", false)
  .option('--interventions <list>', 'remove,mask (default both)', interventionList)
  .option('--keep-only', 'also: everything before the target but the ablated chunks dropped', false)
  .option('--sweep <list>', 'also: only the last h history turns kept, e.g. 0,1,2,3,all', sweepList)
  .option('--history-label <label...>', 'labels of history turns (default: history; chat: user and assistant messages)')
  .option('--subsets <n>', 'random keep/drop patterns with a least-squares fit', int('subsets'), 0)
  .option('--seed <n>', 'seed of the patterns', int('seed'), 0)
  .option('--svg <prefix>', 'write PREFIX-N.svg: Δ log-likelihood per chunk of sample N')
  .action(async (flags) => {
    const { prepareAttribution } = await import('./attribution.js');
    const { attributionSvg } = await import('./figures.js');
    let samples: import('./attribution.js').AttributionSample[];
    if (flags.samples) {
      const raw = JSON.parse(fs.readFileSync(flags.samples, 'utf8'));
      samples = Array.isArray(raw) ? raw : raw.samples;
    } else if (flags.messages) samples = [{ messages: JSON.parse(fs.readFileSync(flags.messages, 'utf8')) }];
    else if (flags.chunk) samples = [{ chunks: chunkArguments(flags.chunk) }];
    else throw new InvalidArgumentError('give --samples FILE, --messages FILE or --chunk label=text…');
    samples = samples.map((s) => ({ ...s, addSpecialTokens: s.addSpecialTokens ?? flags.addSpecialTokens, target: s.target ?? flags.target, ablate: s.ablate ?? flags.ablate }));
    const [entry] = entriesFrom(flags);
    const m = await loadModel(entry!);
    const prepared = await prepareAttribution(m.engine, samples, {
      interventions: flags.interventions,
      keepOnly: flags.keepOnly,
      historySweep: flags.sweep,
      historyLabels: flags.historyLabel,
      subsets: flags.subsets,
      seed: flags.seed,
    });
    const { scores, work } = await m.scorer.scoreUnits(prepared.units);
    const answers = prepared.finish(scores);
    if (flags.svg) {
      answers.forEach((a, i) =>
        writeFile(
          `${flags.svg}-${i}.svg`,
          attributionSvg(
            a.chunks.map((c) => ({ label: `${c.index} ${c.label}`, values: { remove: c.remove?.delta, mask: c.mask?.delta } })),
            `Sample ${i}: Δ log-likelihood of ${a.spans[a.target]!.label} per chunk`,
            'Δ log-likelihood (nats)',
          ),
        ),
      );
    }
    console.log(JSON.stringify({ model: entry!.name, variants: prepared.units.length, tokensComputed: work.tokensComputed, tokensRequested: work.tokensRequested, samples: answers }, null, 2));
    await m.engine.release();
  });

// ---- research workflows: clients of a server (given, or started here on --model) ----

const evalCmd = program.command('eval').description('research workflows: CHARPEval, RefuteBench-style attention, chunk attribution, contamination checks');

function withConnection(cmd: Command): Command {
  return cmd
    .addOption(new Option('--server <host:port>', 'a running ctxprobe server (default: start one here on --model)').env('CTXPROBE_SERVER'))
    .addOption(new Option('--model <dir>', 'checkpoint for the server started here (default: the default model)').env('CTXPROBE_MODEL'))
    .option('--model-name <name>', 'which served model to use (default: the server default)')
    .addOption(new Option('--threads <n>', 'CPU threads of the server started here').argParser(int('threads')))
    .addOption(new Option('--token-file <file>', 'bearer token for --server').env('CTXPROBE_TOKEN_FILE'))
    .addOption(new Option('--tls-ca <file>', 'CA to verify a TLS --server').env('CTXPROBE_TLS_CA'))
    .option('--out <dir>', 'where results.json, report.md and figures go');
}

async function connect(flags: any) {
  const { EvalClient } = await import('./eval/client.js');
  const token = flags.tokenFile ? fs.readFileSync(flags.tokenFile, 'utf8').split('\n')[0]!.trim() : undefined;
  return EvalClient.connect({ server: flags.server, model: flags.model, threads: flags.threads, token, tlsCa: flags.tlsCa });
}

/** Write a figure or report where the user asked, making its folder (`--svg out/attr`). */
function writeFile(file: string, content: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
}

async function writeOutputs(dir: string, files: Record<string, string>) {
  const path = await import('node:path');
  fs.mkdirSync(dir, { recursive: true });
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content);
  log({ level: 'info', event: 'written', dir, files: Object.keys(files) });
}

withConnection(
  evalCmd
    .command('charpeval <data>')
    .description('6-way response selection (acc, acc_norm, top-ranked type), optionally with the attention analysis'),
)
  .option('--shots <k>', 'few-shot demonstrations between the instruction and the sample', int('shots'), 0)
  .option('--demos <file>', 'demonstrations (JSONL, same format; default: other samples of the data)')
  .option('--attention', 'also the per-layer chunk distribution of the response tokens (Appendix C.1)', false)
  .action(async (data: string, flags) => {
    const { runCharpeval, charpMarkdown } = await import('./eval/charpeval.js');
    const { readJsonl } = await import('./eval/client.js');
    const { distributionSvg } = await import('./figures.js');
    const client = await connect(flags);
    try {
      const report = await runCharpeval(client, readJsonl(data), {
        shots: flags.shots,
        demos: flags.demos ? readJsonl(flags.demos) : undefined,
        attention: flags.attention,
        model: flags.modelName,
      });
      const files: Record<string, string> = { 'results.json': JSON.stringify(report, null, 2), 'report.md': charpMarkdown(report) };
      if (report.attention) {
        files['attention-votes.svg'] = distributionSvg(
          report.attention.votes,
          report.attention.labels,
          `CHARPEval: response-token attention argmax per layer (${report.model})`,
        );
        files['attention-mass.svg'] = distributionSvg(
          report.attention.mass,
          report.attention.labels,
          `CHARPEval: response-token attention mass per layer (${report.model})`,
        );
      }
      await writeOutputs(flags.out ?? 'eval-out/charpeval', files);
      console.log(charpMarkdown(report));
    } finally {
      await client.close();
    }
  });

withConnection(
  evalCmd
    .command('refute <dialogues>')
    .description("round heatmaps per dialogue and averaged, and the last response's attention per round"),
)
  .option('--plain', 'render messages as "Role: content" instead of the model chat template', false)
  .addOption(new Option('--pool <pool>', 'pool over layers and heads').choices(['max', 'mean']).default('max'))
  .action(async (file: string, flags) => {
    const { runRefute, refuteMarkdown } = await import('./eval/refute.js');
    const { readJsonl } = await import('./eval/client.js');
    const { heatmapSvg } = await import('./figures.js');
    const client = await connect(flags);
    try {
      const report = await runRefute(client, readJsonl(file), { plain: flags.plain, pool: flags.pool, model: flags.modelName });
      const files: Record<string, string> = { 'results.json': JSON.stringify(report, null, 2), 'report.md': refuteMarkdown(report) };
      report.dialogues.forEach(
        (d, i) =>
          (files[`heatmap-${i}.svg`] = heatmapSvg(d.heatmap, d.labels, `Dialogue ${d.id}: attention between rounds (${report.pool} pool)`)),
      );
      if (report.meanHeatmap) {
        files['heatmap-mean.svg'] = heatmapSvg(
          report.meanHeatmap.values,
          report.meanHeatmap.labels,
          `Mean of ${report.meanHeatmap.dialogues} dialogues (${report.pool} pool)`,
        );
      }
      await writeOutputs(flags.out ?? 'eval-out/refute', files);
      console.log(refuteMarkdown(report));
    } finally {
      await client.close();
    }
  });

withConnection(
  evalCmd
    .command('attribute <data>')
    .description("what each chunk contributes to the target's log-likelihood (remove / mask), per sample and per label, with CHARP's history sweep"),
)
  .option('--interventions <list>', 'remove,mask (default both)', interventionList)
  .option('--sweep <list>', 'only the last h history turns kept, e.g. 0,1,2,3,all (CHARP §3.5)', sweepList)
  .option('--batch <n>', 'samples per call', int('batch'), 4)
  .action(async (file: string, flags) => {
    const { runAttribute, attributeMarkdown } = await import('./eval/attribute.js');
    const { readJsonl } = await import('./eval/client.js');
    const { attributionSvg, figuresHtml } = await import('./figures.js');
    const client = await connect(flags);
    try {
      const report = await runAttribute(client, readJsonl(file), { interventions: flags.interventions, sweep: flags.sweep, model: flags.modelName, batch: Math.max(1, flags.batch) });
      const unit = 'Δ log-likelihood of the target (nats)';
      const figures: Record<string, string> = {
        'attribution-mean.svg': attributionSvg(
          report.meanByLabel.map((m) => ({ label: `${m.label} (${m.chunks})`, values: { remove: m.remove, mask: m.mask } })),
          `Mean Δ per chunk label over ${report.samples.length} samples (${report.model})`,
          unit,
        ),
      };
      report.samples.forEach(
        (s, i) =>
          (figures[`attribution-${i}.svg`] = attributionSvg(
            s.chunks.map((c) => ({ label: `${c.index} ${c.label}`, values: { remove: c.remove, mask: c.mask } })),
            `Sample ${s.id}: Δ per chunk (target ${s.target})`,
            unit,
          )),
      );
      await writeOutputs(flags.out ?? 'eval-out/attribute', {
        'results.json': JSON.stringify(report, null, 2),
        'report.md': attributeMarkdown(report),
        ...figures,
        'report.html': figuresHtml(`Chunk attribution — ${report.model}`, `${report.samples.length} samples; interventions: ${report.interventions.join(', ')}`, Object.values(figures)),
      });
      console.log(attributeMarkdown(report));
    } finally {
      await client.close();
    }
  });

withConnection(evalCmd.command('contamination').description('mean LM loss and Min-K% Prob of two text sets, their difference and ROC AUC'))
  .requiredOption('--a <file>', 'set A (JSONL with "text", or one text per line)')
  .requiredOption('--b <file>', 'set B')
  .option('--min-k <percent>', 'Min-K% Prob k', parseFloat, 20)
  .action(async (flags) => {
    const { runContamination, contaminationMarkdown, readTexts } = await import('./eval/contamination.js');
    const client = await connect(flags);
    try {
      const report = await runContamination(client, readTexts(flags.a), readTexts(flags.b), {
        minKPercent: flags.minK,
        model: flags.modelName,
      });
      await writeOutputs(flags.out ?? 'eval-out/contamination', {
        'results.json': JSON.stringify(report, null, 2),
        'report.md': contaminationMarkdown(report),
      });
      console.log(contaminationMarkdown(report));
    } finally {
      await client.close();
    }
  });

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
    const { checkHealth } = await import('./health.js');
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

program.parseAsync().catch((err) => {
  log({ level: 'error', message: (err as Error).message });
  process.exit(1);
});
