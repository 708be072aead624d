// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ProbeSample as _ctxprobe_v1_ProbeSample, ProbeSample__Output as _ctxprobe_v1_ProbeSample__Output } from '../../ctxprobe/v1/ProbeSample.js';
import type { Pool as _ctxprobe_v1_Pool, Pool__Output as _ctxprobe_v1_Pool__Output } from '../../ctxprobe/v1/Pool.js';
import type { Reduce as _ctxprobe_v1_Reduce, Reduce__Output as _ctxprobe_v1_Reduce__Output } from '../../ctxprobe/v1/Reduce.js';

export interface ProbeRequest {
  'model'?: (string);
  'samples'?: (_ctxprobe_v1_ProbeSample)[];
  /**
   * heatmap pooling over layers and heads
   */
  'pool'?: (_ctxprobe_v1_Pool);
  /**
   * heatmap: over the query segment's tokens
   */
  'queryReduce'?: (_ctxprobe_v1_Reduce);
  /**
   * heatmap: over the key segment's tokens
   */
  'keyReduce'?: (_ctxprobe_v1_Reduce);
  /**
   * also return [layers × heads × chunks]
   */
  'perHead'?: (boolean);
  /**
   * No heatmap: only the query chunks' rows need attention, so the tokens before the
   * first query token come from the prefix cache (computed into it when missing, KV only)
   * and the probe pass runs from there. Votes and mass are unchanged.
   */
  'skipHeatmap'?: (boolean);
  /**
   * Also return each query-chunk token's log-prob given everything before it, from the
   * same forward pass as the attention statistics.
   */
  'withLogprobs'?: (boolean);
  /**
   * Also return every token of each sample: its id, and its text (the token decoded on its
   * own), for labelling a per-token view of the sample.
   */
  'withTokens'?: (boolean);
}

export interface ProbeRequest__Output {
  'model': (string);
  'samples': (_ctxprobe_v1_ProbeSample__Output)[];
  /**
   * heatmap pooling over layers and heads
   */
  'pool': (_ctxprobe_v1_Pool__Output);
  /**
   * heatmap: over the query segment's tokens
   */
  'queryReduce': (_ctxprobe_v1_Reduce__Output);
  /**
   * heatmap: over the key segment's tokens
   */
  'keyReduce': (_ctxprobe_v1_Reduce__Output);
  /**
   * also return [layers × heads × chunks]
   */
  'perHead': (boolean);
  /**
   * No heatmap: only the query chunks' rows need attention, so the tokens before the
   * first query token come from the prefix cache (computed into it when missing, KV only)
   * and the probe pass runs from there. Votes and mass are unchanged.
   */
  'skipHeatmap': (boolean);
  /**
   * Also return each query-chunk token's log-prob given everything before it, from the
   * same forward pass as the attention statistics.
   */
  'withLogprobs': (boolean);
  /**
   * Also return every token of each sample: its id, and its text (the token decoded on its
   * own), for labelling a per-token view of the sample.
   */
  'withTokens': (boolean);
}
