// The scheduler of one model (the dynamic batcher): one queue, shared by every client
// and every request kind.
//
// Requests arrive as units (core/units.ts): continuations, rolling windows, echoes,
// attribution variants, probe samples, raw attention, generation steps — a kind's `prepare`
// made them. A scheduling round starts when the queue holds a round's worth of tokens or
// its oldest request has waited `maxQueueDelayMs`. It takes units from the queued requests
// in turn, each at most its share of `maxRoundTokens` (the round's tokens over the requests
// waiting), and hands them to the scorer at once, which plans passes (each distinct prefix
// once, across requests and clients; rows of similar length packed into `maxBatchTokens`)
// and runs them. A request with units left goes to the back of the queue, so a large one
// (an attribution of thousands of variants, a generation of many streams) shares every
// round with the small ones that arrive behind it: none waits for more than a round of a
// few passes. A unit longer than a pass runs in links, one a round (links.ts). Cancelled or
// expired requests leave the queue at once; a round whose every request was cancelled stops
// at the next pass.
import { CancelledError, NonFiniteOutputError, OverloadedError, TooLargeError } from '../common/errors.js';
import type { Scorer } from './scorer.js';
import type { PrefixCache } from './prefix-cache.js';
import { LinkChain, linkable, linksOf } from './links.js';
import { nonFiniteIn, queueTokens, type Unit, type UnitScore } from './units.js';

/** What the scheduler reports, by model: prom-client's counter, gauge and histogram
 * shapes, which the serving layer's Metrics has (the core names no layer above it). */
type ByModel = { model: string };
interface Count {
  inc(labels: ByModel, value?: number): void;
}
interface Level extends Count {
  dec(labels: ByModel, value?: number): void;
}
interface Observed {
  observe(labels: ByModel, value: number): void;
}
export interface SchedulerMetrics {
  unitsQueued: Level;
  unitsInFlight: Level;
  queueWaitSeconds: Observed;
  batchUnits: Observed;
  batchTokens: Observed;
  forwardSeconds: Observed;
  tokensComputed: Count;
  tokensRequested: Count;
  cacheTokensReused: Count;
  cacheEvictions: Count;
  /** The cache's bytes, entries and budget, read when scraped. */
  watchCache(model: string, cache: PrefixCache): void;
  /** Requests waiting and running, and the KV held, read when scraped. */
  watchScheduler?(model: string, scheduler: SchedulerState): void;
}

/** What the model server protocol's gauges read of a scheduler. */
export interface SchedulerState {
  readonly requestsWaiting: number;
  readonly requestsRunning: number;
  kvUse(): { bytes: number; budgetBytes: number; bytesPerToken: number };
}

export interface BatcherOptions {
  /** Tokens gathered into one scheduling round (the scorer splits it into passes). */
  maxRoundTokens?: number;
  /** How long the first request in the queue may wait for others to join it. */
  maxQueueDelayMs?: number;
  /** Tokens waiting in the queue before new requests are refused. */
  maxQueuedTokens?: number;
}

/** A unit of a request as the rounds take it: the unit itself, or one link of a long one. */
interface Item {
  job: Job;
  /** The request's unit this item answers for. */
  index: number;
  unit: Unit;
  tokens: number;
  chain?: LinkChain;
}

/** One submitted request: its units, what is left to run, and the scores so far. */
interface Job {
  units: Unit[];
  /** A generation's next step: it runs at the next round without waiting for company
   * (the other running sequences resubmit in the same tick). */
  continuing: boolean;
  /** Tokens not yet taken into a round (its weight in the queue). */
  tokens: number;
  enqueuedAt: number;
  /** Items ready to run: whole units, and each chain's next link once the last has run. */
  ready: Item[];
  /** Units' scores so far; the job answers when every unit has one. */
  scores: UnitScore[];
  done: number;
  chains: LinkChain[];
  /** Its units not yet taken into a round are counted as queued (metrics). */
  queuedUnits: number;
  cancelled: boolean;
  resolve(result: UnitScore[]): void;
  reject(err: unknown): void;
}

export interface Submitted {
  result: Promise<UnitScore[]>;
  /** Drop the request: it leaves the queue (or its answer is discarded if running). */
  cancel(): void;
}

export class Batcher implements SchedulerState {
  readonly maxRoundTokens: number;
  readonly maxQueueDelayMs: number;
  readonly maxQueuedTokens: number;
  /** Positions a link of a long unit covers: one pass (generation prefills in such chunks). */
  readonly linkTokens: number;
  /** Requests with units left to run, in the order the rounds serve them. */
  private readonly queue: Job[] = [];
  private queuedTokens = 0;
  private running = false;
  private runningJobs: Job[] = [];
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private idleWaiters: (() => void)[] = [];
  /** Evictions already counted (the cache's own count only grows). */
  private evictionsSeen = 0;

  constructor(
    private readonly model: string,
    private readonly scorer: Scorer,
    options: BatcherOptions = {},
    private readonly metrics?: SchedulerMetrics,
  ) {
    this.maxRoundTokens = options.maxRoundTokens ?? 4 * scorer.maxBatchTokens;
    this.maxQueueDelayMs = options.maxQueueDelayMs ?? 5;
    this.maxQueuedTokens = options.maxQueuedTokens ?? 1 << 20;
    this.linkTokens = scorer.maxBatchTokens;
    if (scorer.cache) metrics?.watchCache(model, scorer.cache);
    metrics?.watchScheduler?.(model, this);
  }

  get queuedItems(): number {
    return this.queue.reduce((n, j) => n + j.queuedUnits, 0);
  }

  /** Requests the scheduler cannot take into its next round: admitted (queued, not yet
   * answered), neither in the running round nor among those the next round would take —
   * the round's tokens (`maxRoundTokens`) are spent before their turn. Nonzero only while
   * the queue holds more than a round's worth: the scheduler is full (vLLM's
   * num_requests_waiting, requests its running batch has no room for). */
  get requestsWaiting(): number {
    const running = this.requestsInRounds();
    return this.queue.reduce((n, j) => n + (running.has(j) ? 0 : 1), 0);
  }

  /** Requests in the running round (not yet answered) and those the next round would take,
   * in whole or in part. */
  get requestsRunning(): number {
    return this.requestsInRounds().size;
  }

  /** The requests of the running round and of the next (as `nextRound` would take them if
   * it started now), computed when scraped. */
  private requestsInRounds(): Set<Job> {
    const jobs = new Set<Job>();
    for (const j of this.runningJobs) if (!j.cancelled && j.done < j.units.length) jobs.add(j);
    for (const { job } of this.nextRound()) jobs.add(job);
    return jobs;
  }

  kvUse(): { bytes: number; budgetBytes: number; bytesPerToken: number } {
    return this.scorer.kvUse();
  }

  submit(units: Unit[], options: { continuing?: boolean } = {}): Submitted {
    const tokens = units.reduce((n, u) => n + queueTokens(u), 0);
    // A request that can never fit is told so (413-class), not to retry (429).
    if (tokens > this.maxQueuedTokens) {
      return refused(
        new TooLargeError(
          `items: ${tokens} tokens to compute, more than the queue of model ${this.model} holds (${this.maxQueuedTokens}, --max-queued-tokens): send it in parts`,
        ),
      );
    }
    if (this.queuedTokens + tokens > this.maxQueuedTokens) {
      return refused(
        new OverloadedError(`queue of model ${this.model} is full (${this.queuedTokens} tokens waiting, limit ${this.maxQueuedTokens})`),
      );
    }
    if (units.length === 0) return { result: Promise.resolve([]), cancel: () => {} };
    const job = this.newJob(units, tokens, options.continuing ?? false);
    this.queue.push(job);
    this.queuedTokens += tokens;
    this.metrics?.unitsQueued.inc({ model: this.model }, job.queuedUnits);
    this.schedule();
    return {
      result: new Promise<UnitScore[]>((resolve, reject) => {
        job.resolve = resolve;
        job.reject = reject;
      }),
      cancel: () => this.fail(job, new CancelledError()),
    };
  }

  /** A job of `units`: each long unit a chain of links (only with a prefix cache, which
   * carries a link's KV to the next), the others whole. */
  private newJob(units: Unit[], tokens: number, continuing: boolean): Job {
    const job: Job = {
      units,
      continuing,
      tokens,
      enqueuedAt: performance.now(),
      ready: [],
      scores: new Array(units.length),
      done: 0,
      chains: [],
      queuedUnits: units.length,
      cancelled: false,
      resolve: () => {},
      reject: () => {},
    };
    units.forEach((unit, index) => {
      if (this.scorer.cache && linkable(unit, this.linkTokens)) {
        const chain = new LinkChain(linksOf(unit, this.linkTokens));
        job.chains.push(chain);
        job.ready.push(this.linkItem(job, index, chain));
      } else {
        job.ready.push({ job, index, unit, tokens: queueTokens(unit) });
      }
    });
    return job;
  }

  private linkItem(job: Job, index: number, chain: LinkChain): Item {
    const unit = chain.take()!;
    return { job, index, unit, tokens: queueTokens(unit), chain };
  }

  /** Answer `job` with `err` (cancelled, refused, failed): it leaves the queue, its chains'
   * pins are released, and a running round drops its answer. */
  private fail(job: Job, err: unknown): void {
    if (job.cancelled) return;
    job.cancelled = true;
    const at = this.queue.indexOf(job);
    if (at >= 0) this.queue.splice(at, 1);
    this.queuedTokens -= job.tokens;
    this.metrics?.unitsQueued.dec({ model: this.model }, job.queuedUnits);
    job.tokens = 0;
    job.queuedUnits = 0;
    job.ready = [];
    for (const c of job.chains) c.release();
    job.reject(err);
    this.schedule();
  }

  /** Refuse everything still queued with `reason` (a drain that ran out of time); the
   * running round, if any, stops at its next pass when all of its jobs are refused. */
  abortAll(reason: Error): void {
    for (const job of [...this.queue, ...this.runningJobs]) this.fail(job, reason);
    this.schedule();
  }

  /** Resolves once the queue is empty and no round is running (for draining). */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (this.running) return;
    if (this.queue.length === 0) {
      this.idleWaiters.splice(0).forEach((w) => w());
      return;
    }
    // Every queued request waits for a link still running: its round will schedule.
    if (!this.queue.some((j) => j.ready.length > 0)) return;
    if (this.queuedTokens >= this.maxRoundTokens) {
      this.clearTimers();
      void this.runRound();
      return;
    }
    if (this.immediate) return; // a round starts at the end of this tick
    const waited = performance.now() - Math.min(...this.queue.map((j) => j.enqueuedAt));
    if (this.queue.some((j) => j.continuing) || waited >= this.maxQueueDelayMs) {
      // A decode step waits only for the others of its tick, and so does a request that
      // has waited its delay: the generations a round answered resubmit from its promise
      // callbacks, all before the event loop's check phase. (A timer of 0 did this too,
      // but Node makes it 1 ms: about half of a decode step's time between runs on
      // lavapipe's tiny shape, 1.8 ms.)
      clearTimeout(this.timer);
      this.timer = undefined;
      this.immediate = setImmediate(() => {
        this.immediate = undefined;
        if (!this.running && this.queue.length > 0) void this.runRound();
      });
    } else if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        if (!this.running && this.queue.length > 0) void this.runRound();
      }, this.maxQueueDelayMs - waited);
    }
  }

  private clearTimers(): void {
    clearTimeout(this.timer);
    clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
  }

  /** What the next round takes, without taking it: the queued requests with items ready,
   * in turn, each its first `count` items — at most its share of the round's tokens
   * (`maxRoundTokens` over the requests with items ready), and at least one item while the
   * round has room — until the round's tokens are spent. `tokens`: the tokens it takes of
   * the request. The one rule the rounds follow (takeRound) and the gauges report. */
  private nextRound(): { job: Job; count: number; tokens: number }[] {
    const waiting = this.queue.filter((j) => j.ready.length > 0);
    const share = Math.max(1, Math.ceil(this.maxRoundTokens / Math.max(1, waiting.length)));
    const taken: { job: Job; count: number; tokens: number }[] = [];
    let items = 0;
    let tokens = 0;
    for (const job of waiting) {
      if (items > 0 && tokens >= this.maxRoundTokens) break;
      let own = 0;
      let count = 0;
      for (const next of job.ready) {
        const fits =
          (own === 0 && (items === 0 || tokens + next.tokens <= this.maxRoundTokens)) ||
          (own + next.tokens <= share && tokens + next.tokens <= this.maxRoundTokens);
        if (!fits) break;
        count++;
        items++;
        own += next.tokens;
        tokens += next.tokens;
      }
      if (count > 0) taken.push({ job, count, tokens: own });
    }
    return taken;
  }

  /** The items of the next round (nextRound), taken from their requests; then the requests
   * served go to the back of the queue. */
  private takeRound(): Item[] {
    const items: Item[] = [];
    const served: Job[] = [];
    for (const { job, count, tokens } of this.nextRound()) {
      for (const next of job.ready.splice(0, count)) {
        items.push(next);
        job.tokens -= next.tokens;
        this.queuedTokens -= next.tokens;
        if (!next.chain || next.unit.prefix.length === 0) {
          job.queuedUnits--;
          this.metrics?.unitsQueued.dec({ model: this.model });
        }
      }
      if (tokens > 0) served.push(job);
    }
    // Served requests go behind the others; one with nothing ready (a chain's link still
    // running) stays queued until it has.
    for (const job of served) {
      const at = this.queue.indexOf(job);
      this.queue.splice(at, 1);
      if (job.ready.length > 0 || job.done < job.units.length) this.queue.push(job);
    }
    return items;
  }

  private async runRound(): Promise<void> {
    this.running = true;
    const items = this.takeRound();
    const jobs = [...new Set(items.map((i) => i.job))];
    this.runningJobs = jobs;
    const now = performance.now();
    const tokens = items.reduce((n, i) => n + i.tokens, 0);
    for (const j of jobs) this.metrics?.queueWaitSeconds.observe({ model: this.model }, (now - j.enqueuedAt) / 1000);
    this.metrics?.batchUnits.observe({ model: this.model }, items.length);
    this.metrics?.batchTokens.observe({ model: this.model }, tokens);
    this.metrics?.unitsInFlight.inc({ model: this.model }, items.length);
    try {
      await this.score(items);
    } finally {
      this.metrics?.unitsInFlight.dec({ model: this.model }, items.length);
      this.metrics?.forwardSeconds.observe({ model: this.model }, (performance.now() - now) / 1000);
      this.running = false;
      this.runningJobs = [];
      // A request whose wait started now waits from here for its next share.
      for (const j of jobs) j.enqueuedAt = performance.now();
      this.schedule();
    }
  }

  /** Score the items of a round together; if that fails, each request's alone, so one
   * request's failure never costs another client its answer. */
  private async score(items: Item[]): Promise<void> {
    const live = items.filter((i) => !i.job.cancelled);
    if (live.length === 0) return;
    try {
      const scores = await this.scoreItems(live);
      live.forEach((item, k) => this.answered(item, scores[k]!));
    } catch (err) {
      const jobs = [...new Set(live.map((i) => i.job))];
      if (jobs.length === 1) return this.fail(jobs[0]!, err);
      for (const job of jobs) {
        if (job.cancelled) continue; // already answered (cancelled or refused)
        const own = live.filter((i) => i.job === job);
        try {
          const scores = await this.scoreItems(own);
          own.forEach((item, k) => this.answered(item, scores[k]!));
        } catch (e) {
          this.fail(job, e);
        }
      }
    }
  }

  /** An item's score into its request: a link's into its chain (whose next link is then
   * ready), a unit's as it is; the request answers once every unit has its score. */
  private answered(item: Item, score: UnitScore): void {
    const job = item.job;
    if (job.cancelled) {
      score.kept?.release();
      return;
    }
    const bad = nonFiniteIn(score);
    if (bad) {
      score.kept?.release();
      return this.fail(
        job,
        new NonFiniteOutputError(
          `the model computed ${bad} that is not a finite number (NaN or infinity) for this request: its weights overflow float32 on this input`,
        ),
      );
    }
    if (item.chain) {
      item.chain.done(score);
      if (!item.chain.finished) {
        job.ready.unshift(this.linkItem(job, item.index, item.chain));
        return;
      }
      score = item.chain.result();
    }
    job.scores[item.index] = score;
    if (++job.done === job.units.length) {
      const at = this.queue.indexOf(job);
      if (at >= 0) this.queue.splice(at, 1);
      job.resolve(job.scores);
    }
  }

  /** Plan and run the items' units together; the work done goes to the metrics. */
  private async scoreItems(items: Item[]): Promise<UnitScore[]> {
    const jobs = [...new Set(items.map((i) => i.job))];
    const { scores, work } = await this.scorer.scoreUnits(
      items.map((i) => i.unit),
      { shouldStop: () => jobs.every((j) => j.cancelled) },
    );
    const model = { model: this.model };
    this.metrics?.tokensComputed.inc(model, work.tokensComputed);
    this.metrics?.tokensRequested.inc(model, work.tokensRequested);
    this.metrics?.cacheTokensReused.inc(model, work.tokensReused);
    const cache = this.scorer.cache;
    if (this.metrics && cache) {
      // Bytes, entries and budget are read when scraped (Metrics.watchCache).
      const stats = cache.stats();
      this.metrics.cacheEvictions.inc(model, stats.evictions - this.evictionsSeen);
      this.evictionsSeen = stats.evictions;
    }
    return scores;
  }
}

/** A request refused at the door. */
function refused(err: Error): Submitted {
  return { result: Promise.reject(err), cancel: () => {} };
}
