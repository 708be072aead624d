// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { MinK as _ctxprobe_v1_MinK, MinK__Output as _ctxprobe_v1_MinK__Output } from '../../ctxprobe/v1/MinK.js';

export interface RollingScore {
  'id'?: (string);
  'logprob'?: (number | string);
  'numTokens'?: (number);
  /**
   * −mean token log-prob
   */
  'meanLoss'?: (number | string);
  'perplexity'?: (number | string);
  'minKPercent'?: (number | string);
  /**
   * mean of the lowest ⌊n·k/100⌋ (≥ 1) token log-probs; NaN when skipped
   */
  'minKLogprob'?: (number | string);
  'tokenLogprobs'?: (number | string)[];
  'numWindows'?: (number);
  /**
   * every k asked for, min_k_percent first
   */
  'minK'?: (_ctxprobe_v1_MinK)[];
}

export interface RollingScore__Output {
  'id': (string);
  'logprob': (number);
  'numTokens': (number);
  /**
   * −mean token log-prob
   */
  'meanLoss': (number);
  'perplexity': (number);
  'minKPercent': (number);
  /**
   * mean of the lowest ⌊n·k/100⌋ (≥ 1) token log-probs; NaN when skipped
   */
  'minKLogprob': (number);
  'tokenLogprobs': (number)[];
  'numWindows': (number);
  /**
   * every k asked for, min_k_percent first
   */
  'minK': (_ctxprobe_v1_MinK__Output)[];
}
