// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { TopTokens as _ctxprobe_v1_TopTokens, TopTokens__Output as _ctxprobe_v1_TopTokens__Output } from '../../ctxprobe/v1/TopTokens.js';
import type { UnconditionalScore as _ctxprobe_v1_UnconditionalScore, UnconditionalScore__Output as _ctxprobe_v1_UnconditionalScore__Output } from '../../ctxprobe/v1/UnconditionalScore.js';
import type { ContinuationAttention as _ctxprobe_v1_ContinuationAttention, ContinuationAttention__Output as _ctxprobe_v1_ContinuationAttention__Output } from '../../ctxprobe/v1/ContinuationAttention.js';

export interface ContinuationScore {
  /**
   * sum of the continuation's token log-probs
   */
  'logprob'?: (number | string);
  /**
   * every continuation token is the argmax
   */
  'isGreedy'?: (boolean);
  'tokenIds'?: (number)[];
  'tokenLogprobs'?: (number | string)[];
  'tokenGreedy'?: (boolean)[];
  'numTokens'?: (number);
  /**
   * code points of the continuation as given (acc_norm)
   */
  'numChars'?: (number);
  /**
   * UTF-8 bytes (acc_bytes)
   */
  'numBytes'?: (number);
  /**
   * per continuation token, when top_k > 0
   */
  'topK'?: (_ctxprobe_v1_TopTokens)[];
  /**
   * context tokens dropped from the left
   */
  'truncatedTokens'?: (number);
  /**
   * logprob ÷ num_tokens
   */
  'meanLogprob'?: (number | string);
  /**
   * with unconditional_text / unconditional_ids
   */
  'unconditional'?: (_ctxprobe_v1_UnconditionalScore | null);
  /**
   * with context_chunks
   */
  'attention'?: (_ctxprobe_v1_ContinuationAttention | null);
}

export interface ContinuationScore__Output {
  /**
   * sum of the continuation's token log-probs
   */
  'logprob': (number);
  /**
   * every continuation token is the argmax
   */
  'isGreedy': (boolean);
  'tokenIds': (number)[];
  'tokenLogprobs': (number)[];
  'tokenGreedy': (boolean)[];
  'numTokens': (number);
  /**
   * code points of the continuation as given (acc_norm)
   */
  'numChars': (number);
  /**
   * UTF-8 bytes (acc_bytes)
   */
  'numBytes': (number);
  /**
   * per continuation token, when top_k > 0
   */
  'topK': (_ctxprobe_v1_TopTokens__Output)[];
  /**
   * context tokens dropped from the left
   */
  'truncatedTokens': (number);
  /**
   * logprob ÷ num_tokens
   */
  'meanLogprob': (number);
  /**
   * with unconditional_text / unconditional_ids
   */
  'unconditional': (_ctxprobe_v1_UnconditionalScore__Output | null);
  /**
   * with context_chunks
   */
  'attention': (_ctxprobe_v1_ContinuationAttention__Output | null);
}
