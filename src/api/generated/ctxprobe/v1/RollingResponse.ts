// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { RollingScore as _ctxprobe_v1_RollingScore, RollingScore__Output as _ctxprobe_v1_RollingScore__Output } from '../../ctxprobe/v1/RollingScore.js';

export interface RollingResponse {
  'model'?: (string);
  'items'?: (_ctxprobe_v1_RollingScore)[];
}

export interface RollingResponse__Output {
  'model': (string);
  'items': (_ctxprobe_v1_RollingScore__Output)[];
}
