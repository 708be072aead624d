// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { SampleAttribution as _ctxprobe_v1_SampleAttribution, SampleAttribution__Output as _ctxprobe_v1_SampleAttribution__Output } from '../../ctxprobe/v1/SampleAttribution.js';

export interface AttributeResponse {
  'model'?: (string);
  'samples'?: (_ctxprobe_v1_SampleAttribution)[];
}

export interface AttributeResponse__Output {
  'model': (string);
  'samples': (_ctxprobe_v1_SampleAttribution__Output)[];
}
