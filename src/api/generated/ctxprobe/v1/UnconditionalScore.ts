// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface UnconditionalScore {
  /**
   * the continuation after the neutral context
   */
  'logprob'?: (number | string);
  'numTokens'?: (number);
  'tokenLogprobs'?: (number | string)[];
  /**
   * log p(cont | context) − log p(cont | neutral context)
   */
  'difference'?: (number | string);
}

export interface UnconditionalScore__Output {
  /**
   * the continuation after the neutral context
   */
  'logprob': (number);
  'numTokens': (number);
  'tokenLogprobs': (number)[];
  /**
   * log p(cont | context) − log p(cont | neutral context)
   */
  'difference': (number);
}
