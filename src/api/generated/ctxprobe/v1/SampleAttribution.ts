// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Span as _ctxprobe_v1_Span, Span__Output as _ctxprobe_v1_Span__Output } from '../../ctxprobe/v1/Span.js';
import type { ChunkEffect as _ctxprobe_v1_ChunkEffect, ChunkEffect__Output as _ctxprobe_v1_ChunkEffect__Output } from '../../ctxprobe/v1/ChunkEffect.js';
import type { KeepOnlyEffect as _ctxprobe_v1_KeepOnlyEffect, KeepOnlyEffect__Output as _ctxprobe_v1_KeepOnlyEffect__Output } from '../../ctxprobe/v1/KeepOnlyEffect.js';
import type { SweepPoint as _ctxprobe_v1_SweepPoint, SweepPoint__Output as _ctxprobe_v1_SweepPoint__Output } from '../../ctxprobe/v1/SweepPoint.js';
import type { SubsetFit as _ctxprobe_v1_SubsetFit, SubsetFit__Output as _ctxprobe_v1_SubsetFit__Output } from '../../ctxprobe/v1/SubsetFit.js';

export interface SampleAttribution {
  'id'?: (string);
  'spans'?: (_ctxprobe_v1_Span)[];
  'numTokens'?: (number);
  /**
   * index of the target chunk in `spans`
   */
  'target'?: (number);
  /**
   * the target's log-likelihood in the unchanged sample
   */
  'logprob'?: (number | string);
  'targetTokens'?: (number);
  'tokenLogprobs'?: (number | string)[];
  'chunks'?: (_ctxprobe_v1_ChunkEffect)[];
  'keepOnly'?: (_ctxprobe_v1_KeepOnlyEffect | null);
  'sweep'?: (_ctxprobe_v1_SweepPoint)[];
  'subsets'?: (_ctxprobe_v1_SubsetFit | null);
}

export interface SampleAttribution__Output {
  'id': (string);
  'spans': (_ctxprobe_v1_Span__Output)[];
  'numTokens': (number);
  /**
   * index of the target chunk in `spans`
   */
  'target': (number);
  /**
   * the target's log-likelihood in the unchanged sample
   */
  'logprob': (number);
  'targetTokens': (number);
  'tokenLogprobs': (number)[];
  'chunks': (_ctxprobe_v1_ChunkEffect__Output)[];
  'keepOnly': (_ctxprobe_v1_KeepOnlyEffect__Output | null);
  'sweep': (_ctxprobe_v1_SweepPoint__Output)[];
  'subsets': (_ctxprobe_v1_SubsetFit__Output | null);
}
