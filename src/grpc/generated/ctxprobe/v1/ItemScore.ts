// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ContinuationScore as _ctxprobe_v1_ContinuationScore, ContinuationScore__Output as _ctxprobe_v1_ContinuationScore__Output } from '../../ctxprobe/v1/ContinuationScore.js';

export interface ItemScore {
  'id'?: (string);
  'continuations'?: (_ctxprobe_v1_ContinuationScore)[];
}

export interface ItemScore__Output {
  'id': (string);
  'continuations': (_ctxprobe_v1_ContinuationScore__Output)[];
}
