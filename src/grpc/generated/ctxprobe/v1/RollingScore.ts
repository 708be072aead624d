// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


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
   * mean of the lowest ⌊n·k/100⌋ (≥ 1) token log-probs
   */
  'minKLogprob'?: (number | string);
  'tokenLogprobs'?: (number | string)[];
  'numWindows'?: (number);
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
   * mean of the lowest ⌊n·k/100⌋ (≥ 1) token log-probs
   */
  'minKLogprob': (number);
  'tokenLogprobs': (number)[];
  'numWindows': (number);
}
