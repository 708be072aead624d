// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ProbeSample as _ctxprobe_v1_ProbeSample, ProbeSample__Output as _ctxprobe_v1_ProbeSample__Output } from '../../ctxprobe/v1/ProbeSample.js';
import type { AttentionDType as _ctxprobe_v1_AttentionDType, AttentionDType__Output as _ctxprobe_v1_AttentionDType__Output } from '../../ctxprobe/v1/AttentionDType.js';

export interface RawAttentionRequest {
  'model'?: (string);
  'sample'?: (_ctxprobe_v1_ProbeSample | null);
  'layers'?: (number)[];
  'heads'?: (number)[];
  'queryStart'?: (number);
  /**
   * exclusive; 0: to the end
   */
  'queryEnd'?: (number);
  'dtype'?: (_ctxprobe_v1_AttentionDType);
}

export interface RawAttentionRequest__Output {
  'model': (string);
  'sample': (_ctxprobe_v1_ProbeSample__Output | null);
  'layers': (number)[];
  'heads': (number)[];
  'queryStart': (number);
  /**
   * exclusive; 0: to the end
   */
  'queryEnd': (number);
  'dtype': (_ctxprobe_v1_AttentionDType__Output);
}
