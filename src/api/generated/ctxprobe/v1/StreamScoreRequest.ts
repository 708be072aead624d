// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ScoreItem as _ctxprobe_v1_ScoreItem, ScoreItem__Output as _ctxprobe_v1_ScoreItem__Output } from '../../ctxprobe/v1/ScoreItem.js';

export interface StreamScoreRequest {
  /**
   * empty: the default model
   */
  'model'?: (string);
  'item'?: (_ctxprobe_v1_ScoreItem | null);
}

export interface StreamScoreRequest__Output {
  /**
   * empty: the default model
   */
  'model': (string);
  'item': (_ctxprobe_v1_ScoreItem__Output | null);
}
