// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Chunk as _ctxprobe_v1_Chunk, Chunk__Output as _ctxprobe_v1_Chunk__Output } from '../../ctxprobe/v1/Chunk.js';
import type { ChatMessage as _ctxprobe_v1_ChatMessage, ChatMessage__Output as _ctxprobe_v1_ChatMessage__Output } from '../../ctxprobe/v1/ChatMessage.js';

export interface AttributionSample {
  'id'?: (string);
  /**
   * Labelled chunks or chat messages, as in ProbeSample.
   */
  'chunks'?: (_ctxprobe_v1_Chunk)[];
  'messages'?: (_ctxprobe_v1_ChatMessage)[];
  'addSpecialTokens'?: (boolean);
  'addGenerationPrompt'?: (boolean);
  'chatTemplateKwargsJson'?: (string);
  /**
   * the target chunk: the last one with this label; default the last chunk
   */
  'targetLabel'?: (string);
  /**
   * chunks to ablate, each on its own; default every chunk before the target
   */
  'ablateLabels'?: (string)[];
}

export interface AttributionSample__Output {
  'id': (string);
  /**
   * Labelled chunks or chat messages, as in ProbeSample.
   */
  'chunks': (_ctxprobe_v1_Chunk__Output)[];
  'messages': (_ctxprobe_v1_ChatMessage__Output)[];
  'addSpecialTokens': (boolean);
  'addGenerationPrompt': (boolean);
  'chatTemplateKwargsJson': (string);
  /**
   * the target chunk: the last one with this label; default the last chunk
   */
  'targetLabel': (string);
  /**
   * chunks to ablate, each on its own; default every chunk before the target
   */
  'ablateLabels': (string)[];
}
