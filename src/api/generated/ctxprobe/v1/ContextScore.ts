// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface ContextScore {
  /**
   * the context's tokens after its first
   */
  'tokenIds'?: (number)[];
  /**
   * each given all before it
   */
  'tokenLogprobs'?: (number | string)[];
  'logprob'?: (number | string);
  'numTokens'?: (number);
}

export interface ContextScore__Output {
  /**
   * the context's tokens after its first
   */
  'tokenIds': (number)[];
  /**
   * each given all before it
   */
  'tokenLogprobs': (number)[];
  'logprob': (number);
  'numTokens': (number);
}
