// In-graph scoring kernel: logits → per-token log-probs, greedy flags, top-k.
//
// The full logits tensor `[scored, vocab]` is consumed here, inside the graph; only
// `[scored]` and `[scored, k]` tensors leave it.
import type { GraphBuilder } from '../src/graph/builder.js';

export interface LogprobOutputs {
  logprobs: string; // [scored] float32: log p(target | prefix)
  greedy: string; // [scored] bool: target == argmax (first index on ties, as torch)
  topkLogprobs: string; // [scored, k] float32, descending
  topkIds: string; // [scored, k] int64
}

//   logits [N,V] ──ReduceLogSumExp──► lse [N,1] ─────────────┐
//      │ ├──GatherElements(target)──► target_logit [N,1] ──Sub──► logprobs [N]
//      │ ├──ArgMax──► argmax [N] ──Equal(target)──► greedy [N]
//      │ └──TopK(k)──► values [N,k] ──Sub(lse)──► topk_logprobs, topk_ids
export function logprobKernel(g: GraphBuilder, logits: string, targetIds: string, topK: string): LogprobOutputs {
  return g.scope('logprobs', () => {
    const lse = g.node('ReduceLogSumExp', [logits, g.ints([1], 'axis_1')], { name: 'lse', attrs: { keepdims: 1 } });
    const target = g.node('Unsqueeze', [targetIds, g.ints([1], 'axis_1')], { name: 'target' });
    const targetLogit = g.node('GatherElements', [logits, target], { name: 'target_logit', attrs: { axis: 1 } });
    const logprob2d = g.node('Sub', [targetLogit, lse], { name: 'logprob' });
    const logprobs = g.node('Squeeze', [logprob2d, g.ints([1], 'axis_1')], { name: 'logprobs' });
    const argmax = g.node('ArgMax', [logits], { name: 'argmax', attrs: { axis: 1, keepdims: 0, select_last_index: 0 } });
    const greedy = g.node('Equal', [argmax, targetIds], { name: 'greedy' });
    const [values, topkIds] = g.nodeN('TopK', 'topk', [logits, topK], { outputs: 2, attrs: { axis: 1, largest: 1, sorted: 1 } });
    const topkLogprobs = g.node('Sub', [values!, lse], { name: 'topk_logprobs' });
    return { logprobs, greedy, topkLogprobs, topkIds: topkIds! };
  });
}
