// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Tokens as _ctxprobe_v1_Tokens, Tokens__Output as _ctxprobe_v1_Tokens__Output } from '../../ctxprobe/v1/Tokens.js';

export interface Chunk {
  /**
   * any label: instruction, history, knowledge, response, …
   */
  'label'?: (string);
  /**
   * text chunks are tokenised as one whole text
   */
  'text'?: (string);
  /**
   * pre-tokenised chunks are concatenated as given
   */
  'ids'?: (_ctxprobe_v1_Tokens | null);
  'content'?: "text"|"ids";
}

export interface Chunk__Output {
  /**
   * any label: instruction, history, knowledge, response, …
   */
  'label': (string);
  /**
   * text chunks are tokenised as one whole text
   */
  'text'?: (string);
  /**
   * pre-tokenised chunks are concatenated as given
   */
  'ids'?: (_ctxprobe_v1_Tokens__Output | null);
  'content'?: "text"|"ids";
}
