// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Span as _ctxprobe_v1_Span, Span__Output as _ctxprobe_v1_Span__Output } from '../../ctxprobe/v1/Span.js';
import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from '../../ctxprobe/v1/Matrix.js';

export interface SampleProbe {
  'id'?: (string);
  'spans'?: (_ctxprobe_v1_Span)[];
  'numTokens'?: (number);
  'queryLabels'?: (string)[];
  /**
   * [layers × chunks]: argmax votes, each row sums to 1
   */
  'votes'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [layers]: share whose overall argmax is an excluded key
   */
  'votesExcluded'?: (number | string)[];
  /**
   * [layers × chunks]: attention mass, rows renormalised without excluded keys
   */
  'mass'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [layers]: mean mass on excluded keys
   */
  'massExcluded'?: (number | string)[];
  /**
   * [(layers·heads) × chunks], when per_head
   */
  'votesPerHead'?: (_ctxprobe_v1_Matrix | null);
  'massPerHead'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [segments × segments], lower-triangular: query row → key column
   */
  'heatmap'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [segments]: the heatmap reduction over excluded keys
   */
  'heatmapExcluded'?: (number | string)[];
  /**
   * With skip_heatmap: tokens before the first query token computed for this probe, and
   * taken from the prefix cache (both 0 when the probe ran the whole sample).
   */
  'prefixTokensComputed'?: (number);
  'prefixTokensReused'?: (number);
  /**
   * With with_logprobs: log p(token | all before it) for each query-chunk token after the
   * sample's first, in order, and their sum.
   */
  'queryLogprobs'?: (number | string)[];
  'queryLogprob'?: (number | string);
  /**
   * With with_tokens: the sample's tokens, [num_tokens], and each one's text as it reads in
   * the sample (" upon"; "" for a byte that ends inside a character, whose last byte carries
   * it): joined, they are the sample's text.
   */
  'tokenIds'?: (number)[];
  'tokens'?: (string)[];
}

export interface SampleProbe__Output {
  'id': (string);
  'spans': (_ctxprobe_v1_Span__Output)[];
  'numTokens': (number);
  'queryLabels': (string)[];
  /**
   * [layers × chunks]: argmax votes, each row sums to 1
   */
  'votes': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [layers]: share whose overall argmax is an excluded key
   */
  'votesExcluded': (number)[];
  /**
   * [layers × chunks]: attention mass, rows renormalised without excluded keys
   */
  'mass': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [layers]: mean mass on excluded keys
   */
  'massExcluded': (number)[];
  /**
   * [(layers·heads) × chunks], when per_head
   */
  'votesPerHead': (_ctxprobe_v1_Matrix__Output | null);
  'massPerHead': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [segments × segments], lower-triangular: query row → key column
   */
  'heatmap': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [segments]: the heatmap reduction over excluded keys
   */
  'heatmapExcluded': (number)[];
  /**
   * With skip_heatmap: tokens before the first query token computed for this probe, and
   * taken from the prefix cache (both 0 when the probe ran the whole sample).
   */
  'prefixTokensComputed': (number);
  'prefixTokensReused': (number);
  /**
   * With with_logprobs: log p(token | all before it) for each query-chunk token after the
   * sample's first, in order, and their sum.
   */
  'queryLogprobs': (number)[];
  'queryLogprob': (number);
  /**
   * With with_tokens: the sample's tokens, [num_tokens], and each one's text as it reads in
   * the sample (" upon"; "" for a byte that ends inside a character, whose last byte carries
   * it): joined, they are the sample's text.
   */
  'tokenIds': (number)[];
  'tokens': (string)[];
}
