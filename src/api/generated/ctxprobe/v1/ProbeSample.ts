// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Chunk as _ctxprobe_v1_Chunk, Chunk__Output as _ctxprobe_v1_Chunk__Output } from '../../ctxprobe/v1/Chunk.js';
import type { ChatMessage as _ctxprobe_v1_ChatMessage, ChatMessage__Output as _ctxprobe_v1_ChatMessage__Output } from '../../ctxprobe/v1/ChatMessage.js';

export interface ProbeSample {
  'id'?: (string);
  /**
   * Either labelled chunks, or chat messages rendered with the model's chat template
   * (one segment per message, labelled `system`, `user#1`, `assistant#1`, `user#2`, …).
   */
  'chunks'?: (_ctxprobe_v1_Chunk)[];
  'messages'?: (_ctxprobe_v1_ChatMessage)[];
  /**
   * text chunks: run the tokenizer's special tokens (BOS)
   */
  'addSpecialTokens'?: (boolean);
  /**
   * query chunks of the distribution; default: the last chunk
   */
  'queryLabels'?: (string)[];
  /**
   * token positions removed from the key side (e.g. 0: a BOS sink)
   */
  'excludePositions'?: (number)[];
  /**
   * Chat messages: render the next assistant turn's prompt too, and further template
   * arguments as a JSON object (enable_thinking, date_string, tools, …).
   */
  'addGenerationPrompt'?: (boolean);
  'chatTemplateKwargsJson'?: (string);
}

export interface ProbeSample__Output {
  'id': (string);
  /**
   * Either labelled chunks, or chat messages rendered with the model's chat template
   * (one segment per message, labelled `system`, `user#1`, `assistant#1`, `user#2`, …).
   */
  'chunks': (_ctxprobe_v1_Chunk__Output)[];
  'messages': (_ctxprobe_v1_ChatMessage__Output)[];
  /**
   * text chunks: run the tokenizer's special tokens (BOS)
   */
  'addSpecialTokens': (boolean);
  /**
   * query chunks of the distribution; default: the last chunk
   */
  'queryLabels': (string)[];
  /**
   * token positions removed from the key side (e.g. 0: a BOS sink)
   */
  'excludePositions': (number)[];
  /**
   * Chat messages: render the next assistant turn's prompt too, and further template
   * arguments as a JSON object (enable_thinking, date_string, tools, …).
   */
  'addGenerationPrompt': (boolean);
  'chatTemplateKwargsJson': (string);
}
