// The hooks through which a tap (kernels/probe-tap.ts) watches the decoder without living in
// it: the decoder calls them, and reads as the model alone.
import type { GraphBuilder } from '../graph/builder.js';
import type { ModelConfig } from './families.js';

/** Hooks through which a tap watches the decoder without living in it. */
export interface DecoderTap {
  /** Once, before the first layer: declare inputs; `allowed` is the [B,T,S] bool mask. */
  begin(g: GraphBuilder, model: TapModel): void;
  /** Layer `layer`'s attention probabilities, float32 [B, kv_heads, group, T, S]. */
  attentionProbs(layer: number, probs: string): void;
  /** After a layer: the hidden state the next layer reads (the tap may order itself first). */
  afterLayer(layer: number, hidden: string): string;
  /** After the last layer: the tap's outputs. */
  end(): void;
}

export interface TapModel {
  config: ModelConfig;
  allowed: string;
  /** A float32 value in the compute dtype. */
  toCompute(x: string): string;
}
