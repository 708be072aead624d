// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { UInt64Value as _google_protobuf_UInt64Value, UInt64Value__Output as _google_protobuf_UInt64Value__Output } from '../../google/protobuf/UInt64Value.js';

export interface SamplingOptions {
  /**
   * 0: greedy (the argmax, lowest id on ties)
   */
  'temperature'?: (number | string);
  /**
   * 0 or 1: off
   */
  'topP'?: (number | string);
  /**
   * 0: off
   */
  'topK'?: (number);
  /**
   * 0: off
   */
  'minP'?: (number | string);
  /**
   * same seed, same tokens, whatever shares the passes; unset: random
   */
  'seed'?: (_google_protobuf_UInt64Value | null);
  /**
   * tokens to generate per choice (0: 16)
   */
  'maxTokens'?: (number);
  /**
   * end a choice where one begins in its text (across tokens); not returned
   */
  'stop'?: (string)[];
  /**
   * choices (0: 1)
   */
  'n'?: (number);
  /**
   * alternatives per generated token (top)
   */
  'logprobs'?: (number);
  'ignoreEos'?: (boolean);
}

export interface SamplingOptions__Output {
  /**
   * 0: greedy (the argmax, lowest id on ties)
   */
  'temperature': (number);
  /**
   * 0 or 1: off
   */
  'topP': (number);
  /**
   * 0: off
   */
  'topK': (number);
  /**
   * 0: off
   */
  'minP': (number);
  /**
   * same seed, same tokens, whatever shares the passes; unset: random
   */
  'seed': (_google_protobuf_UInt64Value__Output | null);
  /**
   * tokens to generate per choice (0: 16)
   */
  'maxTokens': (number);
  /**
   * end a choice where one begins in its text (across tokens); not returned
   */
  'stop': (string)[];
  /**
   * choices (0: 1)
   */
  'n': (number);
  /**
   * alternatives per generated token (top)
   */
  'logprobs': (number);
  'ignoreEos': (boolean);
}
