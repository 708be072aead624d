// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { TopToken as _ctxprobe_v1_TopToken, TopToken__Output as _ctxprobe_v1_TopToken__Output } from '../../ctxprobe/v1/TopToken.js';

export interface TopTokens {
  'tokens'?: (_ctxprobe_v1_TopToken)[];
}

export interface TopTokens__Output {
  'tokens': (_ctxprobe_v1_TopToken__Output)[];
}
