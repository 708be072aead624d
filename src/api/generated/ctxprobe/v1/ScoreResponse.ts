// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ItemScore as _ctxprobe_v1_ItemScore, ItemScore__Output as _ctxprobe_v1_ItemScore__Output } from '../../ctxprobe/v1/ItemScore.js';

export interface ScoreResponse {
  'model'?: (string);
  'items'?: (_ctxprobe_v1_ItemScore)[];
}

export interface ScoreResponse__Output {
  'model': (string);
  'items': (_ctxprobe_v1_ItemScore__Output)[];
}
