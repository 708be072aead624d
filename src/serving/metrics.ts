// Prometheus metrics (prom-client), served on their own HTTP port at /metrics.
import http from 'node:http';
import https from 'node:https';
import { httpsOptions, type TlsMaterial } from './security.js';
import client from 'prom-client';

/** What the cache gauges read of a prefix cache. */
export interface WatchedCache {
  readonly budget: number;
  stats(): { bytes: number; entries: number };
}

/** What the model server protocol's gauges read of a model's scheduler (core/batcher.ts). */
export interface WatchedScheduler {
  readonly requestsWaiting: number;
  readonly requestsRunning: number;
  kvUse(): { bytes: number; budgetBytes: number; bytesPerToken: number };
}

/** Tokens per block in `ctxprobe_cache_config_info`: the block an endpoint picker hashes
 * prompts by (as blockSizeTokens × 4 characters) and sizes its per-pod index in. ctxprobe's
 * prefix cache is token-granular, so any size is exact for it; 16 (vLLM's default) keeps
 * the index at budget / 16 entries while a 64-character block still falls inside a turn. */
export const KV_BLOCK_TOKENS = 16;

export class Metrics {
  // Registered in the order they are listed here (the order /metrics lists them in), after
  // prom-client's defaults.
  readonly registry = registryWithDefaults();
  private readonly registers = [this.registry];
  /** Each model's prefix cache, for the cache gauges. */
  private readonly caches = new Map<string, WatchedCache>();
  /** Each model's scheduler, for the model server protocol's gauges. */
  private readonly schedulers = new Map<string, WatchedScheduler>();

  // Calls (gRPC and HTTP alike).
  readonly requests: client.Counter<'method' | 'code'> = new client.Counter({
    name: 'ctxprobe_requests_total',
    help: 'gRPC calls by method and status code',
    labelNames: ['method', 'code'],
    registers: this.registers,
  });
  readonly requestSeconds: client.Histogram<'method'> = new client.Histogram({
    name: 'ctxprobe_request_duration_seconds',
    help: 'gRPC call latency, from arrival to answer',
    labelNames: ['method'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: this.registers,
  });

  // The work: what was scored and generated, what the model ran, what the cache saved it.
  readonly itemsScored: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_items_scored_total',
    help: 'Continuations and rolling texts scored',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly tokensScored: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_tokens_scored_total',
    help: 'Tokens whose log-prob was returned',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly tokensGenerated: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_generated_tokens_total',
    help: 'Tokens generated (every choice, up to and with the one that ended it)',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly tokensComputed: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_tokens_computed_total',
    help: 'Tokens run through the model (a shared prefix counts once)',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly tokensRequested: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_tokens_requested_total',
    help: 'Input tokens of the scored sequences (what computing each alone would run)',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly cacheTokensReused: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_prefix_cache_tokens_reused_total',
    help: 'Input tokens whose KV came from the prefix cache instead of being computed',
    labelNames: ['model'],
    registers: this.registers,
  });

  // The prefix cache, its gauges read from each model's cache when scraped: pins released
  // between rounds (a generation that ends) show at once, not at the next round.
  readonly cacheBytes: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_prefix_cache_bytes',
    help: 'KV bytes held by the prefix cache',
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.caches, (cache) => cache.stats().bytes),
  });
  readonly cacheBudgetBytes: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_prefix_cache_budget_bytes',
    help: 'KV bytes the prefix cache may keep between rounds',
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.caches, (cache) => cache.budget),
  });
  readonly cacheEntries: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_prefix_cache_entries',
    help: 'Nodes of the prefix cache trie',
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.caches, (cache) => cache.stats().entries),
  });
  readonly cacheEvictions: client.Counter<'model'> = new client.Counter({
    name: 'ctxprobe_prefix_cache_evictions_total',
    help: 'Prefix cache nodes evicted to stay within the budget',
    labelNames: ['model'],
    registers: this.registers,
  });

  // Scheduling rounds and the forward passes they ran.
  readonly batchUnits: client.Histogram<'model'> = new client.Histogram({
    name: 'ctxprobe_batch_size',
    help: 'Scored sequences per scheduling round',
    labelNames: ['model'],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    registers: this.registers,
  });
  readonly batchTokens: client.Histogram<'model'> = new client.Histogram({
    name: 'ctxprobe_batch_tokens',
    help: 'Tokens per scheduling round (before prefix sharing)',
    labelNames: ['model'],
    buckets: [64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    registers: this.registers,
  });
  readonly queueWaitSeconds: client.Histogram<'model'> = new client.Histogram({
    name: 'ctxprobe_queue_wait_seconds',
    help: 'Time a request waited in the model queue',
    labelNames: ['model'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: this.registers,
  });
  readonly forwardSeconds: client.Histogram<'model'> = new client.Histogram({
    name: 'ctxprobe_forward_seconds',
    help: 'Engine time of one scheduling round',
    labelNames: ['model'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: this.registers,
  });
  readonly forwardPasses: client.Counter<'model' | 'kind'> = new client.Counter({
    name: 'ctxprobe_forward_passes_total',
    help: 'Forward passes run by the engine (kind: probe when some of its rows probe, else score), whatever requests they served',
    labelNames: ['model', 'kind'],
    registers: this.registers,
  });
  readonly forwardPassBytes: client.Counter<'model' | 'what'> = new client.Counter({
    name: 'ctxprobe_forward_pass_bytes_total',
    help: "Bytes across the session boundary of forward passes: inputs, past_kv (read in place on the CPU), outputs, present_kv (the new slots' KV, kept)",
    labelNames: ['model', 'what'],
    registers: this.registers,
  });
  readonly forwardPassTokens: client.Counter<'model' | 'kind'> = new client.Counter({
    name: 'ctxprobe_forward_pass_tokens_total',
    help: 'Tokens of the forward passes as run: rows × padded length (kind: probe when some of its rows probe, else score)',
    labelNames: ['model', 'kind'],
    registers: this.registers,
  });

  // What is waiting and running now; model loads.
  readonly unitsQueued: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_queued_items',
    help: 'Scored sequences waiting in the queue',
    labelNames: ['model'],
    registers: this.registers,
  });
  readonly unitsInFlight: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_in_flight_items',
    help: 'Scored sequences in the running round',
    labelNames: ['model'],
    registers: this.registers,
  });
  // The model server protocol of the Gateway API Inference Extension: what an endpoint
  // picker scores pods by (queue, running, KV-cache use; the block size of its prefix
  // index), read from each model's scheduler when scraped.
  readonly requestsWaiting: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_requests_waiting',
    help: "Requests the scheduler cannot take into its next round (the round's tokens are spent before their turn): nonzero only while the queue holds more than a round's worth",
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.schedulers, (s) => s.requestsWaiting),
  });
  readonly requestsRunning: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_requests_running',
    help: 'Requests with items in the running round or in the next one (in whole or in part)',
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.schedulers, (s) => s.requestsRunning),
  });
  readonly kvCacheUsage: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_kv_cache_usage_ratio',
    help: "KV held (the prefix cache's and the running passes') over its budget (the prefix cache budget plus one pass's past and new positions), 0 to 1",
    labelNames: ['model'],
    registers: this.registers,
    collect: readEach(this.schedulers, (s) => {
      const { bytes, budgetBytes } = s.kvUse();
      return budgetBytes > 0 ? Math.min(1, bytes / budgetBytes) : 0;
    }),
  });
  readonly cacheConfigInfo: client.Gauge<'model' | 'block_size' | 'num_gpu_blocks'> = new client.Gauge({
    name: 'ctxprobe_cache_config_info',
    help: 'Always 1: block_size is the block in tokens an endpoint picker hashes prompts by, num_gpu_blocks the KV budget in such blocks',
    labelNames: ['model', 'block_size', 'num_gpu_blocks'],
    registers: this.registers,
    collect: cacheConfigOfEach(this.schedulers),
  });
  readonly callsInFlight: client.Gauge = new client.Gauge({
    name: 'ctxprobe_calls_in_flight',
    help: 'Calls (gRPC and HTTP) being answered; a drain waits for them',
    registers: this.registers,
  });
  readonly modelLoadSeconds: client.Gauge<'model'> = new client.Gauge({
    name: 'ctxprobe_model_load_seconds',
    help: 'Time to load each model',
    labelNames: ['model'],
    registers: this.registers,
  });

  /** Report `model`'s prefix cache in the gauges, as it is when scraped. */
  watchCache(model: string, cache: WatchedCache): void {
    this.caches.set(model, cache);
  }

  /** Report `model`'s requests waiting and running and its KV use, as they are when scraped. */
  watchScheduler(model: string, scheduler: WatchedScheduler): void {
    this.schedulers.set(model, scheduler);
  }

  /** Serve /metrics over HTTP (or HTTPS with `tls`; a bearer token with `checkToken`);
   * resolves with the bound port. */
  async serve(
    host: string,
    port: number,
    options: { tls?: TlsMaterial; checkToken?: (header: string | undefined) => boolean } = {},
  ): Promise<{ port: number; close(): Promise<void> }> {
    const handler: http.RequestListener = (req, res) => {
      if (options.checkToken && !options.checkToken(req.headers.authorization)) {
        res.writeHead(401, { 'WWW-Authenticate': 'Bearer' });
        res.end('authorization: a valid "Bearer <token>" is required\n');
      } else if (req.method === 'GET' && req.url?.split('?')[0] === '/metrics') {
        this.registry.metrics().then(
          (body) => {
            res.writeHead(200, { 'Content-Type': this.registry.contentType });
            res.end(body);
          },
          (err: Error) => {
            res.writeHead(500);
            res.end(err.message);
          },
        );
      } else {
        res.writeHead(404);
        res.end('not found: metrics are at /metrics\n');
      }
    };
    const server = options.tls ? https.createServer(httpsOptions(options.tls), handler) : http.createServer(handler);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    const address = server.address();
    return {
      port: typeof address === 'object' && address ? address.port : port,
      close: () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    };
  }
}

/** A registry with prom-client's default metrics (process_resident_memory_bytes, nodejs_heap_*, …). */
function registryWithDefaults(): client.Registry {
  const registry = new client.Registry();
  client.collectDefaultMetrics({ register: registry });
  return registry;
}

/** A gauge's collect: what `read` says of each watched model's cache or scheduler. */
function readEach<T>(watched: ReadonlyMap<string, T>, read: (it: T) => number) {
  return function (this: client.Gauge<'model'>) {
    for (const [model, it] of watched) this.set({ model }, read(it));
  };
}

/** The info gauge's collect: one series of value 1 per model, its block size and budget in
 * blocks as labels (what vLLM's cache_config_info carries). */
function cacheConfigOfEach(schedulers: ReadonlyMap<string, WatchedScheduler>) {
  return function (this: client.Gauge<'model' | 'block_size' | 'num_gpu_blocks'>) {
    this.reset();
    for (const [model, s] of schedulers) {
      const { budgetBytes, bytesPerToken } = s.kvUse();
      const blocks = Math.floor(budgetBytes / (KV_BLOCK_TOKENS * bytesPerToken));
      this.set({ model, block_size: String(KV_BLOCK_TOKENS), num_gpu_blocks: String(blocks) }, 1);
    }
  };
}
