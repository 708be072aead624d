// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { TokenIds as _ctxprobe_v1_TokenIds, TokenIds__Output as _ctxprobe_v1_TokenIds__Output } from '../../ctxprobe/v1/TokenIds.js';

export interface TokenizeResponse {
  'results'?: (_ctxprobe_v1_TokenIds)[];
}

export interface TokenizeResponse__Output {
  'results': (_ctxprobe_v1_TokenIds__Output)[];
}
