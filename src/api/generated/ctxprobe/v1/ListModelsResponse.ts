// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ModelInfo as _ctxprobe_v1_ModelInfo, ModelInfo__Output as _ctxprobe_v1_ModelInfo__Output } from '../../ctxprobe/v1/ModelInfo.js';

export interface ListModelsResponse {
  'models'?: (_ctxprobe_v1_ModelInfo)[];
}

export interface ListModelsResponse__Output {
  'models': (_ctxprobe_v1_ModelInfo__Output)[];
}
