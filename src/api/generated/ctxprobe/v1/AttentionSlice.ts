// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { AttentionDType as _ctxprobe_v1_AttentionDType, AttentionDType__Output as _ctxprobe_v1_AttentionDType__Output } from '../../ctxprobe/v1/AttentionDType.js';

export interface AttentionSlice {
  'layer'?: (number);
  'head'?: (number);
  'queryStart'?: (number);
  'queries'?: (number);
  'keys'?: (number);
  'dtype'?: (_ctxprobe_v1_AttentionDType);
  /**
   * little-endian [queries × keys], row-major
   */
  'data'?: (Buffer | Uint8Array | string);
}

export interface AttentionSlice__Output {
  'layer': (number);
  'head': (number);
  'queryStart': (number);
  'queries': (number);
  'keys': (number);
  'dtype': (_ctxprobe_v1_AttentionDType__Output);
  /**
   * little-endian [queries × keys], row-major
   */
  'data': (Buffer);
}
