// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { RollingItem as _ctxprobe_v1_RollingItem, RollingItem__Output as _ctxprobe_v1_RollingItem__Output } from '../../ctxprobe/v1/RollingItem.js';

export interface RollingRequest {
  'model'?: (string);
  'items'?: (_ctxprobe_v1_RollingItem)[];
}

export interface RollingRequest__Output {
  'model': (string);
  'items': (_ctxprobe_v1_RollingItem__Output)[];
}
