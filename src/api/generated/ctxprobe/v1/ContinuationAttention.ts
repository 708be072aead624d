// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Span as _ctxprobe_v1_Span, Span__Output as _ctxprobe_v1_Span__Output } from '../../ctxprobe/v1/Span.js';
import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from '../../ctxprobe/v1/Matrix.js';

/**
 * Where a continuation's tokens attend (Probe's statistics with the continuation as the
 * query chunk): the context chunks' spans, then the continuation's own (`continuation`).
 */
export interface ContinuationAttention {
  'spans'?: (_ctxprobe_v1_Span)[];
  /**
   * [layers × spans]
   */
  'votes'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [layers]
   */
  'votesExcluded'?: (number | string)[];
  /**
   * [layers × spans]
   */
  'mass'?: (_ctxprobe_v1_Matrix | null);
  /**
   * [layers]
   */
  'massExcluded'?: (number | string)[];
}

/**
 * Where a continuation's tokens attend (Probe's statistics with the continuation as the
 * query chunk): the context chunks' spans, then the continuation's own (`continuation`).
 */
export interface ContinuationAttention__Output {
  'spans': (_ctxprobe_v1_Span__Output)[];
  /**
   * [layers × spans]
   */
  'votes': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [layers]
   */
  'votesExcluded': (number)[];
  /**
   * [layers × spans]
   */
  'mass': (_ctxprobe_v1_Matrix__Output | null);
  /**
   * [layers]
   */
  'massExcluded': (number)[];
}
