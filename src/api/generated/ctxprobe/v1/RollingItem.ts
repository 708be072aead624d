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
  /**
   * KIEval's loss: the first token is context only (no prefix token, never predicted);
   * tokens 1..n−1 are scored.
   */
  'skipFirstToken'?: (boolean);
  /**
   * more k values, answered from the same pass (KIEval sweeps 5–60)
   */
  'minKPercents'?: (number | string)[];
  /**
   * Fewer than one token at k (⌊n·k/100⌋ = 0): false averages the single lowest; true
   * (KIEval) reports the text as skipped for that k.
   */
  'minKSkipShort'?: (boolean);
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
  /**
   * KIEval's loss: the first token is context only (no prefix token, never predicted);
   * tokens 1..n−1 are scored.
   */
  'skipFirstToken': (boolean);
  /**
   * more k values, answered from the same pass (KIEval sweeps 5–60)
   */
  'minKPercents': (number)[];
  /**
   * Fewer than one token at k (⌊n·k/100⌋ = 0): false averages the single lowest; true
   * (KIEval) reports the text as skipped for that k.
   */
  'minKSkipShort': (boolean);
  'input'?: "text"|"tokenIds";
}
