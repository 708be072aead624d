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
}

//   logits [N,V] ──log-softmax (builder)──► logp [N,V] ─┬─GatherElements(target)──► logprobs [N]
//                                            ├─ReduceMax──► best [N] ──GreaterOrEqual(logprobs)──► greedy [N]
//                                            ├─TopK(k)──► topk_logprobs [N,k], topk_ids [N,k]
//                                            └─Gather(next_rows)──► next_logprobs [M,V]
export function logprobKernel(g: GraphBuilder, logits: string, vocab: number, targetIds: string, topK: string, nextRows: string): LogprobOutputs {
  return g.scope('logprobs', () => {
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
  });
}
