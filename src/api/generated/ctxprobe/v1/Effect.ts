// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface Effect {
  /**
   * the target's log-likelihood under the intervention
   */
  'logprob'?: (number | string);
  /**
   * its target tokens (remove may re-tokenise the target's edge)
   */
  'numTokens'?: (number);
  /**
   * logprob − the unchanged sample's
   */
  'delta'?: (number | string);
  /**
   * mean log-prob per token − the unchanged sample's
   */
  'meanDelta'?: (number | string);
  /**
   * per target token, when the target's tokens are unchanged (always for mask)
   */
  'tokenDeltas'?: (number | string)[];
}

export interface Effect__Output {
  /**
   * the target's log-likelihood under the intervention
   */
  'logprob': (number);
  /**
   * its target tokens (remove may re-tokenise the target's edge)
   */
  'numTokens': (number);
  /**
   * logprob − the unchanged sample's
   */
  'delta': (number);
  /**
   * mean log-prob per token − the unchanged sample's
   */
  'meanDelta': (number);
  /**
   * per target token, when the target's tokens are unchanged (always for mask)
   */
  'tokenDeltas': (number)[];
}
