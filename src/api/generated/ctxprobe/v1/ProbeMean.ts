// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from '../../ctxprobe/v1/Matrix.js';

export interface ProbeMean {
  'labels'?: (string)[];
  'votes'?: (_ctxprobe_v1_Matrix | null);
  'votesExcluded'?: (number | string)[];
  'mass'?: (_ctxprobe_v1_Matrix | null);
  'massExcluded'?: (number | string)[];
  'heatmap'?: (_ctxprobe_v1_Matrix | null);
}

export interface ProbeMean__Output {
  'labels': (string)[];
  'votes': (_ctxprobe_v1_Matrix__Output | null);
  'votesExcluded': (number)[];
  'mass': (_ctxprobe_v1_Matrix__Output | null);
  'massExcluded': (number)[];
  'heatmap': (_ctxprobe_v1_Matrix__Output | null);
}
