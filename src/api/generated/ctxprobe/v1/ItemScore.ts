// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ContinuationScore as _ctxprobe_v1_ContinuationScore, ContinuationScore__Output as _ctxprobe_v1_ContinuationScore__Output } from '../../ctxprobe/v1/ContinuationScore.js';
import type { ContextScore as _ctxprobe_v1_ContextScore, ContextScore__Output as _ctxprobe_v1_ContextScore__Output } from '../../ctxprobe/v1/ContextScore.js';

export interface ItemScore {
  'id'?: (string);
  'continuations'?: (_ctxprobe_v1_ContinuationScore)[];
  /**
   * with context_logprobs
   */
  'context'?: (_ctxprobe_v1_ContextScore | null);
}

export interface ItemScore__Output {
  'id': (string);
  'continuations': (_ctxprobe_v1_ContinuationScore__Output)[];
  /**
   * with context_logprobs
   */
  'context': (_ctxprobe_v1_ContextScore__Output | null);
}
