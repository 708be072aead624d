// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Intervention as _ctxprobe_v1_Intervention, Intervention__Output as _ctxprobe_v1_Intervention__Output } from '../../ctxprobe/v1/Intervention.js';
import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from '../../ctxprobe/v1/Matrix.js';

export interface SubsetFit {
  'intervention'?: (_ctxprobe_v1_Intervention);
  /**
   * the ablated chunks: the patterns' columns
   */
  'chunks'?: (number)[];
  /**
   * [patterns × chunks]: 1 where the chunk was kept
   */
  'patterns'?: (_ctxprobe_v1_Matrix | null);
  /**
   * the target's log-likelihood under each pattern
   */
  'logprobs'?: (number | string)[];
  /**
   * Least squares of logprob ≈ intercept + Σ weight · kept (ridge 1e-6 on the weights).
   */
  'intercept'?: (number | string);
  'weights'?: (number | string)[];
  'r2'?: (number | string);
}

export interface SubsetFit__Output {
  'intervention': (_ctxprobe_v1_Intervention__Output);
  /**
   * the ablated chunks: the patterns' columns
   */
  'chunks': (number)[];
  /**
   * [patterns × chunks]: 1 where the chunk was kept
   */
  'patterns': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * the target's log-likelihood under each pattern
   */
  'logprobs': (number)[];
  /**
   * Least squares of logprob ≈ intercept + Σ weight · kept (ridge 1e-6 on the weights).
   */
  'intercept': (number);
  'weights': (number)[];
  'r2': (number);
}
