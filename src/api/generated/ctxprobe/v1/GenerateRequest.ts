// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ProbeSample as _ctxprobe_v1_ProbeSample, ProbeSample__Output as _ctxprobe_v1_ProbeSample__Output } from '../../ctxprobe/v1/ProbeSample.js';
import type { SamplingOptions as _ctxprobe_v1_SamplingOptions, SamplingOptions__Output as _ctxprobe_v1_SamplingOptions__Output } from '../../ctxprobe/v1/SamplingOptions.js';

export interface GenerateRequest {
  'model'?: (string);
  /**
   * The prompt as a sample: labelled chunks (text or token ids) or chat messages
   * (add_generation_prompt to open the assistant's turn); exclude_positions leave keys out
   * of the attention statistics (e.g. 0: a BOS sink). query_labels does not apply.
   */
  'prompt'?: (_ctxprobe_v1_ProbeSample | null);
  'sampling'?: (_ctxprobe_v1_SamplingOptions | null);
  'attention'?: (boolean);
}

export interface GenerateRequest__Output {
  'model': (string);
  /**
   * The prompt as a sample: labelled chunks (text or token ids) or chat messages
   * (add_generation_prompt to open the assistant's turn); exclude_positions leave keys out
   * of the attention statistics (e.g. 0: a BOS sink). query_labels does not apply.
   */
  'prompt': (_ctxprobe_v1_ProbeSample__Output | null);
  'sampling': (_ctxprobe_v1_SamplingOptions__Output | null);
  'attention': (boolean);
}
