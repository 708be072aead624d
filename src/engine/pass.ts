// One forward pass's inputs and answers, as the engine runs it (engine.ts): its shape, the
// feeds (token ids, positions, key positions, what is scored; probe-feeds.ts for probe
// rows), the outputs it fetches, and the result read from them.
import type { ModelConfig } from '../model/families.js';
import { KEEP_SHAPE } from '../model/ops.js';
import type { ProviderProfile } from '../common/providers.js';
import type { HostTensor } from './session-host.js';
import type { ForwardRequest, ForwardResult, ScoredPosition } from './pass-types.js';
import { PROBE_OUTPUTS, idleProbeFeeds, probeBins, probeFeeds } from './probe-feeds.js';

/** A pass as laid out: B rows of T query slots after P past slots, each row's valid past. */
export interface PassShape {
  B: number;
  T: number;
  P: number;
  pastLengths: number[];
  /** Some row probes: the pass fetches attention statistics. */
  probing: boolean;
  /** Each scored position wants its top token only, read from `top1_*` (TopK gets k = 0). */
  topOne: boolean;
}

/** What shapes a pass's feeds besides the request: the model, what its provider can do,
 * and whether the graph it runs has the probe tap. */
export interface PassContext {
  config: ModelConfig;
  profile: ProviderProfile;
  /** The graph reads probe inputs on every pass (an idle row when none probes). */
  probeTapAlways: boolean;
  /** The graph widens stored weights each pass: it reads `weights_keep_shape`. */
  weightsAsStored: boolean;
}

const int64 = (data: BigInt64Array, dims: number[]): HostTensor => ({ type: 'int64', data, dims });

/** The pass's feeds: its tokens and positions, where each row's keys lie, what is scored,
 * and its probe inputs. */
export function passFeeds(req: ForwardRequest, shape: PassShape, ctx: PassContext): Record<string, HostTensor> {
  const { B, T, P, pastLengths, probing, topOne } = shape;
  const feeds: Record<string, HostTensor> = {
    ...tokenFeeds(req, shape),
    // A gather graph reads where its keys lie from the session thread (kv_rows, kv_steps).
    ...(ctx.profile.ifNodes ? { past_lengths: int64(BigInt64Array.from(pastLengths, BigInt), [B]) } : {}),
    ...scoreFeeds(req.scored, T, ctx.config.vocabSize, topOne ? 0 : req.topK, req.next),
    // A graph with the probe tap reads its inputs on every pass (an idle row when none
    // probes); a graph without it (WebGPU's scoring graph) has none.
    ...(probing ? probeFeeds(req, P, T) : ctx.probeTapAlways ? idleProbeFeeds(B, P + T) : {}),
  };
  // With KV on the device a kept pass of decode steps (four query slots or fewer) also
  // returns its keys and values whole: the next step's past as it lies, with no layout run
  // (workers/session/gather.ts).
  if (ctx.profile.kvOnDevice) feeds.full_slots = int64(BigInt64Array.from([BigInt(req.keepPresent && T <= 4 ? P + T : 0)]), [1]);
  if (ctx.weightsAsStored) feeds[KEEP_SHAPE] = int64(BigInt64Array.of(0n, 0n), [2]);
  if (ctx.config.rope?.long) {
    feeds.sequence_lengths = int64(
      BigInt64Array.from(req.rows, (r) => BigInt(r.sequenceLength ?? r.startPosition + r.tokens.length)),
      [B],
    );
  }
  return feeds;
}

/** Row b's keys: its past's valid slots, then its new tokens, then padding — so the present's
 * valid slots are a prefix of every row, and any pass can be continued. */
function tokenFeeds(req: ForwardRequest, { B, T, P, pastLengths }: PassShape): Record<string, HostTensor> {
  const inputIds = new BigInt64Array(B * T);
  const positionIds = new BigInt64Array(B * T);
  const keyPositions = new BigInt64Array(B * (P + T)).fill(-1n);
  req.rows.forEach((row, b) => {
    const valid = pastLengths[b]!;
    for (let j = 0; j < valid; j++) keyPositions[b * (P + T) + j] = BigInt(j);
    for (const h of row.hidden ?? []) {
      if (h.end > row.startPosition || h.start < 0) throw new Error("engine: hidden keys must lie in the row's past");
      for (let j = h.start; j < h.end; j++) keyPositions[b * (P + T) + j] = -1n;
    }
    row.tokens.forEach((tok, t) => {
      inputIds[b * T + t] = BigInt(tok);
      positionIds[b * T + t] = BigInt(row.startPosition + t);
      keyPositions[b * (P + T) + valid + t] = BigInt(row.startPosition + t);
    });
  });
  return {
    input_ids: int64(inputIds, [B, T]),
    position_ids: int64(positionIds, [B, T]),
    key_positions: int64(keyPositions, [B, P + T]),
  };
}

/** The log-prob head's inputs: which flat positions, which targets, how many
 * alternatives. Reductions over an empty [0, vocab] tensor crash onnxruntime's CPU
 * kernels (SIGFPE), so a pass that scores nothing scores one dummy position, unread;
 * TopK runs whether or not its outputs are fetched, so k = 0 unless asked. */
function scoreFeeds(scored: ScoredPosition[], T: number, vocab: number, topK = 0, next: number[] = []): Record<string, HostTensor> {
  const scoredOrDummy = scored.length > 0 ? scored : [{ row: 0, index: 0, target: 0 }];
  const scoreRows = BigInt64Array.from(scoredOrDummy, (s) => BigInt(s.row * T + s.index));
  const targetIds = BigInt64Array.from(scoredOrDummy, (s) => BigInt(s.target));
  const k = Math.min(Math.max(0, topK), vocab);
  return {
    score_rows: int64(scoreRows, [scoreRows.length]),
    target_ids: int64(targetIds, [targetIds.length]),
    top_k: int64(BigInt64Array.from([BigInt(k)]), [1]),
    next_rows: int64(BigInt64Array.from(next, BigInt), [next.length]),
  };
}

/** The outputs a pass fetches: log-probs and greedy flags of scored positions, their top
 * tokens, whole distributions (`next`), probe statistics and raw slices. */
export function passFetches(req: ForwardRequest, { probing, topOne }: PassShape): string[] {
  const N = req.scored.length;
  const fetches: string[] = [];
  if (N > 0) fetches.push('logprobs', 'greedy');
  if (N > 0 && req.topK > 0) fetches.push(...(topOne ? ['top1_logprobs', 'top1_ids'] : ['topk_logprobs', 'topk_ids']));
  if ((req.next?.length ?? 0) > 0) {
    if (req.next!.some((i) => !(i >= 0 && i < N))) throw new Error('engine: next names a position that is not scored');
    fetches.push('next_logprobs');
  }
  if (fetches.length === 0) fetches.push('logprobs');
  if (probing) {
    fetches.push(...PROBE_OUTPUTS);
    for (const l of req.raw?.layers ?? []) fetches.push(`raw.${l}`);
  }
  return fetches;
}

/** The pass's answer, read from its outputs; `present`: the handle its KV is kept under. */
export function passResult(
  req: ForwardRequest,
  shape: PassShape,
  out: Record<string, HostTensor>,
  present: number | undefined,
): ForwardResult {
  const { T, P, pastLengths, probing, topOne } = shape;
  const N = req.scored.length;
  const result: ForwardResult = {
    logprobs: N > 0 ? (out.logprobs!.data as Float32Array) : new Float32Array(0),
    greedy: N > 0 ? Array.from(out.greedy!.data as Uint8Array, (v) => v !== 0) : [],
    topK: 0,
  };
  if (N > 0 && topOne) {
    result.topK = 1;
    result.topkLogprobs = out.top1_logprobs!.data as Float32Array;
    result.topkIds = out.top1_ids!.data as BigInt64Array;
  } else if (N > 0 && req.topK > 0) {
    result.topK = out.topk_ids!.dims[1]!;
    result.topkLogprobs = out.topk_logprobs!.data as Float32Array;
    result.topkIds = out.topk_ids!.data as BigInt64Array;
  }
  if ((req.next?.length ?? 0) > 0) result.next = out.next_logprobs!.data as Float32Array;
  if (req.keepPresent) {
    result.present = { handle: present!, validLengths: req.rows.map((r, b) => pastLengths[b]! + r.tokens.length), length: P + T };
  }
  if (probing) {
    const f = (name: string) => out[name]!.data as Float32Array;
    result.probe = {
      T,
      S: P + T,
      bins: probeBins(req.rows),
      votes: f('probe.votes'),
      sinkVotes: f('probe.sink_votes'),
      mass: f('probe.mass'),
      sinkMass: f('probe.sink_mass'),
      heat: {
        max: { keyMax: f('heat.max.key_max'), keySum: f('heat.max.key_sum') },
        mean: { keyMax: f('heat.mean.key_max'), keySum: f('heat.mean.key_sum') },
      },
      keyCount: f('heat.key_count'),
      raw: new Map((req.raw?.layers ?? []).map((l) => [l, f(`raw.${l}`)])),
    };
  }
  return result;
}
