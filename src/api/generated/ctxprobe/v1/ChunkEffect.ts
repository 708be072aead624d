// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Effect as _ctxprobe_v1_Effect, Effect__Output as _ctxprobe_v1_Effect__Output } from '../../ctxprobe/v1/Effect.js';

export interface ChunkEffect {
  /**
   * the chunk's index in `spans`
   */
  'index'?: (number);
  'label'?: (string);
  'start'?: (number);
  'end'?: (number);
  /**
   * when asked for
   */
  'remove'?: (_ctxprobe_v1_Effect | null);
  'mask'?: (_ctxprobe_v1_Effect | null);
}

export interface ChunkEffect__Output {
  /**
   * the chunk's index in `spans`
   */
  'index': (number);
  'label': (string);
  'start': (number);
  'end': (number);
  /**
   * when asked for
   */
  'remove': (_ctxprobe_v1_Effect__Output | null);
  'mask': (_ctxprobe_v1_Effect__Output | null);
}
