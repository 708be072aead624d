// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Chunk as _ctxprobe_v1_Chunk, Chunk__Output as _ctxprobe_v1_Chunk__Output } from '../../ctxprobe/v1/Chunk.js';

export interface ChatMessage {
  /**
   * system, user, assistant, …
   */
  'role'?: (string);
  'content'?: (string);
  /**
   * Labelled chunks inside the message (e.g. retrieved passages in one user turn), in place
   * of content: their texts make up the content, each becomes its own segment.
   */
  'chunks'?: (_ctxprobe_v1_Chunk)[];
}

export interface ChatMessage__Output {
  /**
   * system, user, assistant, …
   */
  'role': (string);
  'content': (string);
  /**
   * Labelled chunks inside the message (e.g. retrieved passages in one user turn), in place
   * of content: their texts make up the content, each becomes its own segment.
   */
  'chunks': (_ctxprobe_v1_Chunk__Output)[];
}
