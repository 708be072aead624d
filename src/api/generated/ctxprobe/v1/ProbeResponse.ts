// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { SampleProbe as _ctxprobe_v1_SampleProbe, SampleProbe__Output as _ctxprobe_v1_SampleProbe__Output } from '../../ctxprobe/v1/SampleProbe.js';
import type { ProbeMean as _ctxprobe_v1_ProbeMean, ProbeMean__Output as _ctxprobe_v1_ProbeMean__Output } from '../../ctxprobe/v1/ProbeMean.js';

export interface ProbeResponse {
  'model'?: (string);
  'layers'?: (number);
  'heads'?: (number);
  'samples'?: (_ctxprobe_v1_SampleProbe)[];
  /**
   * false when the samples' labels differ
   */
  'hasMean'?: (boolean);
  /**
   * the mean over samples (CHARPEval's Figure 2)
   */
  'mean'?: (_ctxprobe_v1_ProbeMean | null);
  'pool'?: (string);
  'queryReduce'?: (string);
  'keyReduce'?: (string);
}

export interface ProbeResponse__Output {
  'model': (string);
  'layers': (number);
  'heads': (number);
  'samples': (_ctxprobe_v1_SampleProbe__Output)[];
  /**
   * false when the samples' labels differ
   */
  'hasMean': (boolean);
  /**
   * the mean over samples (CHARPEval's Figure 2)
   */
  'mean': (_ctxprobe_v1_ProbeMean__Output | null);
  'pool': (string);
  'queryReduce': (string);
  'keyReduce': (string);
}
