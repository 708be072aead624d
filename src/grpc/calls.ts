// What every gRPC handler shares: model lookup, queueing on the batcher with the call's
// cancellation and deadline, counting and logging each call, and turning errors into
// statuses that name the offending field.
import * as grpc from '@grpc/grpc-js';
import type { LoadedModel } from '../repository.js';
import type { Metrics } from '../metrics.js';
import { Batcher, CancelledError, QueueFullError, type Submitted } from '../batcher.js';
import { ScoringError, type Prepared } from '../scoring.js';

export class StatusError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
  ) {
    super(message);
  }
}

export interface ServedModel extends LoadedModel {
  batcher: Batcher;
}

export interface ServiceContext {
  models: Map<string, ServedModel>;
  /** Served when a request names no model: the first configured. */
  defaultModel(): ServedModel | undefined;
  loading(): boolean;
  draining(): boolean;
  metrics: Metrics;
  maxItemsPerRequest: number;
  log(line: Record<string, unknown>): void;
  /** Calls being answered, for draining. */
  inFlight: { count: number };
}

export type Unary = (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => void;

/** What queueing needs of any call: its cancellation and its deadline. */
type Call = Pick<grpc.ServerUnaryCall<any, any>, 'getDeadline'> & {
  on(e: 'cancelled', f: () => void): unknown;
  removeListener(e: 'cancelled', f: () => void): unknown;
};

export function callHelpers(ctx: ServiceContext) {
  const model = (name: string, forWork = true): ServedModel => {
    if (forWork && ctx.draining()) throw new StatusError(grpc.status.UNAVAILABLE, 'server is draining: send to another replica');
    const m = name ? ctx.models.get(name) : ctx.defaultModel();
    if (m) return m;
    if (ctx.loading()) throw new StatusError(grpc.status.UNAVAILABLE, 'models are still loading: wait for health SERVING');
    throw new StatusError(
      grpc.status.NOT_FOUND,
      `model: no model named ${JSON.stringify(name)} (serving: ${[...ctx.models.keys()].join(', ')})`,
    );
  };
  const checkItems = (items: unknown[]) => {
    if (items.length === 0) throw new StatusError(grpc.status.INVALID_ARGUMENT, 'items: at least one item is needed');
    if (items.length > ctx.maxItemsPerRequest) {
      throw new StatusError(
        grpc.status.INVALID_ARGUMENT,
        `items: ${items.length} items, over the limit of ${ctx.maxItemsPerRequest} per call`,
      );
    }
  };

  /** Queue prepared units on the model's batcher; answer them when scored. */
  async function run<T>(m: ServedModel, prepared: Prepared<T>, call: Call): Promise<T> {
    const scores = await queued(m.batcher.submit(prepared.units), call);
    const name = m.entry.name;
    ctx.metrics.itemsScored.inc({ model: name }, prepared.units.length);
    ctx.metrics.tokensScored.inc(
      { model: name },
      prepared.units.reduce((n, u) => n + u.targets.length, 0),
    );
    return prepared.finish(scores);
  }

  /** Wait for queued work; the call's cancellation or deadline takes it out of the queue. */
  async function queued<T>(submitted: Submitted<T>, call: Call): Promise<T> {
    const onCancel = () => submitted.cancel();
    call.on('cancelled', onCancel);
    const deadline = call.getDeadline();
    const deadlineMs = deadline instanceof Date ? deadline.getTime() : Number(deadline);
    const timer = Number.isFinite(deadlineMs) ? setTimeout(onCancel, Math.max(0, deadlineMs - Date.now())) : undefined;
    try {
      return await submitted.result;
    } catch (err) {
      if (err instanceof CancelledError && Date.now() >= deadlineMs) {
        throw new StatusError(grpc.status.DEADLINE_EXCEEDED, 'deadline exceeded before the work was done');
      }
      throw err;
    } finally {
      clearTimeout(timer);
      call.removeListener('cancelled', onCancel);
    }
  }

  // Run a unary body; count it, log it, map errors to statuses; never let one escape.
  const unary =
    (method: string, body: (req: any, call: grpc.ServerUnaryCall<any, any>) => Promise<unknown> | unknown): Unary =>
    (call, callback) => {
      const started = performance.now();
      ctx.inFlight.count++;
      Promise.resolve()
        .then(() => body(call.request, call))
        .then(
          (response) => finishCall(method, started, { code: grpc.status.OK }, () => callback(null, response)),
          (err: unknown) => {
            const status = toStatus(err);
            finishCall(method, started, status, () => callback(status));
          },
        );
    };

  const finishCall = (method: string, started: number, status: { code: grpc.status; details?: string }, send: () => void) => {
    ctx.inFlight.count--;
    const code = grpc.status[status.code];
    ctx.metrics.requests.inc({ method, code });
    ctx.metrics.requestSeconds.observe({ method }, (performance.now() - started) / 1000);
    const level = status.code === grpc.status.INTERNAL || status.code === grpc.status.UNKNOWN ? 'error' : 'debug';
    ctx.log({ level, method, code, ms: +(performance.now() - started).toFixed(2), ...(status.details ? { message: status.details } : {}) });
    send();
  };

  return { model, checkItems, run, queued, unary, finishCall };
}

export function toStatus(err: unknown): grpc.StatusObject {
  const metadata = new grpc.Metadata();
  if (err instanceof StatusError) return { code: err.code, details: err.message, metadata };
  if (err instanceof ScoringError) return { code: grpc.status.INVALID_ARGUMENT, details: err.message, metadata };
  if (err instanceof QueueFullError) return { code: grpc.status.RESOURCE_EXHAUSTED, details: err.message, metadata };
  if (err instanceof CancelledError) return { code: grpc.status.CANCELLED, details: 'the call was cancelled', metadata };
  return { code: grpc.status.INTERNAL, details: `internal error: ${(err as Error)?.message ?? String(err)}`, metadata };
}
