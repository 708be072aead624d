// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Tokens as _ctxprobe_v1_Tokens, Tokens__Output as _ctxprobe_v1_Tokens__Output } from '../../ctxprobe/v1/Tokens.js';

export interface RollingItem {
  'id'?: (string);
  'text'?: (string);
  'tokenIds'?: (_ctxprobe_v1_Tokens | null);
  /**
   * Min-K% Prob's k in percent; 0 means the default, 20
   */
  'minKPercent'?: (number | string);
  'input'?: "text"|"tokenIds";
}

export interface RollingItem__Output {
  'id': (string);
  'text'?: (string);
  'tokenIds'?: (_ctxprobe_v1_Tokens__Output | null);
  /**
   * Min-K% Prob's k in percent; 0 means the default, 20
   */
  'minKPercent': (number);
  'input'?: "text"|"tokenIds";
}
