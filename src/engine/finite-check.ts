// The load's last check: one short pass of the model's own graph, whose log-probs must be
// finite. A weight can be finite and still overflow float32 arithmetic (a norm weight of
// 3e38 in an F32 or Q4_K_M file loaded, reported SERVING and scored NaN): no scan of the
// weights sees that, the model's own arithmetic does. Where the pass is not finite, the
// same pass as a probe tells which layer it went wrong in: the first layer whose attention
// is not finite (a layer's attention reads what the layers before it made).
import { CheckpointError } from '../common/errors.js';
import type { ModelConfig } from '../model/families.js';
import type { ForwardRequest, ForwardResult, PassProbe } from './pass-types.js';

/** Refuse a model whose check pass is not finite, naming the layer (`forward`: the engine's). */
export async function checkFinite(model: string, c: ModelConfig, forward: (req: ForwardRequest) => Promise<ForwardResult>): Promise<void> {
  if (finiteResult(await forward(finiteCheckPass(c.vocabSize)))) return;
  const probed = await forward(finiteCheckPass(c.vocabSize, true));
  throw new CheckpointError(nonFiniteRefusal(model, c, probed.probe));
}

/** Tokens of the check pass: spread over the vocabulary. */
const CHECK_TOKENS = 8;

/** The check pass: a few tokens, each position scored, the last one's whole distribution. */
export function finiteCheckPass(vocab: number, probe = false): ForwardRequest {
  const n = Math.max(2, Math.min(CHECK_TOKENS, vocab));
  const tokens = Array.from({ length: n }, (_, i) => Math.floor((i * vocab) / n) % vocab);
  const scored = tokens.slice(1).map((target, index) => ({ row: 0, index, target }));
  return {
    rows: [
      {
        tokens,
        startPosition: 0,
        pastRow: 0,
        // One chunk, every key in it, every token a query: the probe's statistics per layer.
        ...(probe && { probe: { keyBins: tokens.map(() => 0), chunks: 1, queryWeights: tokens.map(() => 1) } }),
      },
    ],
    scored,
    topK: 0,
    next: [scored.length - 1],
    keepPresent: false,
  };
}

const allFinite = (xs: ArrayLike<number> | undefined) => {
  for (let i = 0; i < (xs?.length ?? 0); i++) if (!Number.isFinite(xs![i])) return false;
  return true;
};

/** Whether a check pass's log-probs (its scored positions and the whole distribution) are finite. */
export const finiteResult = (r: ForwardResult) => allFinite(r.logprobs) && allFinite(r.next);

/** The refusal of a model whose check pass was not finite, naming the first layer whose
 * attention was not (from the probe pass's per-layer mass, [1, layers, heads, bins]). */
export function nonFiniteRefusal(model: string, c: ModelConfig, probe: PassProbe | undefined): string {
  const perLayer = c.numHeads * probe!.bins;
  let first = -1;
  for (let l = 0; l < c.numLayers && first < 0; l++)
    if (
      !allFinite(probe!.mass.subarray(l * perLayer, (l + 1) * perLayer)) ||
      !allFinite(probe!.sinkMass.subarray(l * c.numHeads, (l + 1) * c.numHeads))
    )
      first = l;
  const where =
    first < 0
      ? `every layer's attention is finite, so the last layer's MLP, the final norm (model.norm) or the output head makes it`
      : first === 0
        ? 'layer 0 is the first whose attention is not finite: the embedding, or layer 0 (its input norm or attention), makes it'
        : `layer ${first} is the first whose attention is not finite: layer ${first - 1}'s output, or layer ${first}'s input norm or attention, makes it`;
  return (
    `${model}: the model's log-probs are not finite (NaN or infinity) on a short check pass at load — ${where}. ` +
    'A weight is too large for float32 arithmetic (every weight is finite: the scan found no NaN or infinity)'
  );
}
