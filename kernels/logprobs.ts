// In-graph scoring kernel: logits → per-token log-probs, greedy flags, top-k.
//
// The full logits tensor `[scored, vocab]` is consumed here, inside the graph; only
// `[scored]` and `[scored, k]` tensors leave it. Measured on [2040, 32000] (2 threads):
// LogSoftmax + GatherElements 100 ms against ReduceLogSumExp + Sub 140 ms; ReduceMax
// 10 ms against ArgMax 63 ms; TopK with k = 0 costs nothing, so callers that want no
// alternatives feed k = 0 (onnxruntime runs every node whatever the fetched outputs).
import type { GraphBuilder } from '../src/graph/builder.js';

export interface LogprobOutputs {
  logprobs: string; // [scored] float32: log p(target | prefix)
  greedy: string; // [scored] bool: the target's logit is the maximum
  topkLogprobs: string; // [scored, k] float32, descending
  topkIds: string; // [scored, k] int64
  /** [M, vocab] float32: whole distributions of the scored positions `next_rows` names
   * (a generation step samples its next token from one; M rows of vocab, not N). */
  nextLogprobs: string;
  /** WebGPU: each row's most likely token ([scored] int64, the lowest id on a tie, as TopK
   * orders) and its log-prob ([scored], the bits of topk_logprobs' first column), for
   * passes that want only that: the engine then feeds k = 0 (engine.ts). */
  top1?: { ids: string; logprobs: string };
}

export function logprobKernel(g: GraphBuilder, logits: string, vocab: number, targetIds: string, topK: string, nextRows: string): LogprobOutputs {
  return g.scope('logprobs', () => {
    const form = g.provider.logSoftmax ? fromLogSoftmax : fromLogits;
    return form(g, logits, vocab, targetIds, topK, nextRows);
  });
}

//   logits [N,V] ──LogSoftmax──► logp [N,V] ─┬─GatherElements(target)──► logprobs [N]
//                                            ├─ReduceMax──► best [N] ──GreaterOrEqual(logprobs)──► greedy [N]
//                                            ├─TopK(k)──► topk_logprobs [N,k], topk_ids [N,k]
//                                            └─Gather(next_rows)──► next_logprobs [M,V]
function fromLogSoftmax(g: GraphBuilder, logits: string, vocab: number, targetIds: string, topK: string, nextRows: string): LogprobOutputs {
  const logp = g.logSoftmax(logits, vocab);
  const target = g.node('Unsqueeze', [targetIds, g.ints([1])], { name: 'target' });
  const targetLogp = g.node('GatherElements', [logp, target], { name: 'target_logprob', attrs: { axis: 1 } });
  const logprobs = g.node('Squeeze', [targetLogp, g.ints([1])], { name: 'logprobs' });
  // Greedy as the harness means it (argmax == target); on an exact tie for the maximum
  // every maximal token counts as greedy, where torch's argmax would pick the first.
  const best = g.node('ReduceMax', [logp, g.ints([1])], { name: 'best', attrs: { keepdims: 0 } });
  const greedy = g.node('GreaterOrEqual', [logprobs, best], { name: 'greedy' });
  const [topkLogprobs, topkIds] = g.nodeN('TopK', 'topk', [logp, topK], { outputs: 2, attrs: { axis: 1, largest: 1, sorted: 1 } });
  // The same LogSoftmax row a score gathers from: a sampled token's log-prob is the bits
  // Score gives it.
  const nextLogprobs = g.node('Gather', [logp, nextRows], { name: 'next_logprobs', attrs: { axis: 0 } });
  return { logprobs, greedy, topkLogprobs: topkLogprobs!, topkIds: topkIds!, nextLogprobs };
}

// Without a LogSoftmax kernel (WebGPU) the log-softmax is never a tensor: each value the outputs hold is its logit
// minus the row's lse, gathered first and subtracted after — the bits x − lse has in
// the whole [N,V] tensor. A tensor of the logits' size is a buffer the provider makes for
// the pass (over its cache's largest size, 160 MiB, from about 850 scored rows at 49,152
// tokens), and the maximum of x − lse is the maximum of x minus lse, rounding being
// monotonic; so TopK and ReduceMax read the logits, and only lse's own Sub and Exp stay
// vocabulary-wide.
//   logits [N,V] ─logSumExp─► max [N,1], lse [N,1]
//   logits ─GatherElements(target)─ − lse ──► logprobs [N];   max − lse ─► best [N] ─GreaterOrEqual(logprobs)─► greedy
//   logits ─TopK(k)─ values − lse ──► topk_logprobs, topk_ids;   logits, lse ─Gather(next_rows)─ − ─► next_logprobs [M,V]
function fromLogits(g: GraphBuilder, logits: string, vocab: number, targetIds: string, topK: string, nextRows: string): LogprobOutputs {
  const { max, lse } = g.logSumExp(logits, vocab);
  const target = g.node('Unsqueeze', [targetIds, g.ints([1])], { name: 'target' });
  const targetLogit = g.node('GatherElements', [logits, target], { name: 'target_logit', attrs: { axis: 1 } });
  const logprobs = g.node('Squeeze', [g.node('Sub', [targetLogit, lse], { name: 'target_logprob' }), g.ints([1])], { name: 'logprobs' });
  const best = g.node('Squeeze', [g.node('Sub', [max, lse], { name: 'best_logprob' }), g.ints([1])], { name: 'best' });
  const greedy = g.node('GreaterOrEqual', [logprobs, best], { name: 'greedy' });
  const [topkLogits, topkIds] = g.nodeN('TopK', 'topk', [logits, topK], { outputs: 2, attrs: { axis: 1, largest: 1, sorted: 1 } });
  const topkLogprobs = g.node('Sub', [topkLogits!, lse], { name: 'topk_logprobs' });
  const nextLogits = g.node('Gather', [logits, nextRows], { name: 'next_logits', attrs: { axis: 0 } });
  const nextLse = g.node('Gather', [lse, nextRows], { name: 'next_lse', attrs: { axis: 0 } });
  const nextLogprobs = g.node('Sub', [nextLogits, nextLse], { name: 'next_logprobs' });
  const top1 = g.provider.topOneByReduction ? topToken(g, logits, max, best, vocab) : undefined;
  return { logprobs, greedy, topkLogprobs, topkIds: topkIds!, nextLogprobs, ...(top1 ? { top1 } : {}) };
}

// The provider's TopK sorts a whole row whatever k is: 49,152 logits padded to 65,536 and
// sorted by 136 dispatches of a bitonic network (138 with its copies in and out; H100,
// 2026-11-27: 1.6 ms of a greedy decode step's 22 ms of device time, and the host's cost of
// 138 dispatches). A greedy step wants the top token only: the row's first maximum
// (`firstMaxIndex`), and the best log-prob the greedy flag has.
//   logits, max ─firstMaxIndex(token ids)─► top1_ids [N];   best ─► top1_logprobs [N]
function topToken(g: GraphBuilder, logits: string, max: string, best: string, vocab: number): { ids: string; logprobs: string } {
  return g.scope('top1', () => {
    const ids = g.namedConstant(`/model/constants/FLOAT/${vocab}/token_ids`, 'float32', [vocab], Array.from({ length: vocab }, (_, i) => i));
    return { ids: g.firstMaxIndex(logits, max, ids, false, 'ids'), logprobs: best };
  });
}
