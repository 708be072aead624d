// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { AttributionSample as _ctxprobe_v1_AttributionSample, AttributionSample__Output as _ctxprobe_v1_AttributionSample__Output } from '../../ctxprobe/v1/AttributionSample.js';
import type { Intervention as _ctxprobe_v1_Intervention, Intervention__Output as _ctxprobe_v1_Intervention__Output } from '../../ctxprobe/v1/Intervention.js';

export interface AttributeRequest {
  'model'?: (string);
  'samples'?: (_ctxprobe_v1_AttributionSample)[];
  /**
   * default both
   */
  'interventions'?: (_ctxprobe_v1_Intervention)[];
  /**
   * also: everything before the target but the ablated chunks dropped
   */
  'keepOnly'?: (boolean);
  /**
   * also: only the last h history turns kept, for each h (at most 256 points)
   */
  'historySweep'?: (number)[];
  /**
   * History turns: chunks with these labels; default `history` for chunks, and the user and
   * assistant messages before the target for chat messages.
   */
  'historyLabels'?: (string)[];
  /**
   * random keep/drop patterns over the ablated chunks (each kept with p = ½), ≤ 4096 per sample
   */
  'randomSubsets'?: (number);
  /**
   * sample i draws its patterns from a stream of (seed, i)
   */
  'seed'?: (number);
  'subsetIntervention'?: (_ctxprobe_v1_Intervention);
}

export interface AttributeRequest__Output {
  'model': (string);
  'samples': (_ctxprobe_v1_AttributionSample__Output)[];
  /**
   * default both
   */
  'interventions': (_ctxprobe_v1_Intervention__Output)[];
  /**
   * also: everything before the target but the ablated chunks dropped
   */
  'keepOnly': (boolean);
  /**
   * also: only the last h history turns kept, for each h (at most 256 points)
   */
  'historySweep': (number)[];
  /**
   * History turns: chunks with these labels; default `history` for chunks, and the user and
   * assistant messages before the target for chat messages.
   */
  'historyLabels': (string)[];
  /**
   * random keep/drop patterns over the ablated chunks (each kept with p = ½), ≤ 4096 per sample
   */
  'randomSubsets': (number);
  /**
   * sample i draws its patterns from a stream of (seed, i)
   */
  'seed': (number);
  'subsetIntervention': (_ctxprobe_v1_Intervention__Output);
}
