// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Long } from '@grpc/proto-loader';

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
  'seed'?: (number | string | Long);
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
  '_seed'?: "seed";
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
  'seed'?: (number);
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
  '_seed'?: "seed";
}
