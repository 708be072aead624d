// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { TopToken as _ctxprobe_v1_TopToken, TopToken__Output as _ctxprobe_v1_TopToken__Output } from '../../ctxprobe/v1/TopToken.js';
import type { Matrix as _ctxprobe_v1_Matrix, Matrix__Output as _ctxprobe_v1_Matrix__Output } from '../../ctxprobe/v1/Matrix.js';
import type { Span as _ctxprobe_v1_Span, Span__Output as _ctxprobe_v1_Span__Output } from '../../ctxprobe/v1/Span.js';

export interface GenerateResponse {
  'choice'?: (number);
  'tokenId'?: (number);
  /**
   * log p(token | prompt and the tokens before it): Score's bits
   */
  'logprob'?: (number | string);
  'top'?: (_ctxprobe_v1_TopToken)[];
  /**
   * text this token makes final (incremental; stop strings held back)
   */
  'text'?: (string);
  /**
   * "" while running, then "stop" (EOS or a stop string) or "length"
   */
  'finishReason'?: (string);
  /**
   * With attention: [layers × (prompt chunks + 1)] — the last column is the response so far.
   */
  'votes'?: (_ctxprobe_v1_Matrix | null);
  'votesExcluded'?: (number | string)[];
  'mass'?: (_ctxprobe_v1_Matrix | null);
  'massExcluded'?: (number | string)[];
  /**
   * In the first message of each choice: the prompt's chunks (their labels name the
   * attention columns, then "response") and its length.
   */
  'spans'?: (_ctxprobe_v1_Span)[];
  'promptTokens'?: (number);
}

export interface GenerateResponse__Output {
  'choice': (number);
  'tokenId': (number);
  /**
   * log p(token | prompt and the tokens before it): Score's bits
   */
  'logprob': (number);
  'top': (_ctxprobe_v1_TopToken__Output)[];
  /**
   * text this token makes final (incremental; stop strings held back)
   */
  'text': (string);
  /**
   * "" while running, then "stop" (EOS or a stop string) or "length"
   */
  'finishReason': (string);
  /**
   * With attention: [layers × (prompt chunks + 1)] — the last column is the response so far.
   */
  'votes': (_ctxprobe_v1_Matrix__Output | null);
  'votesExcluded': (number)[];
  'mass': (_ctxprobe_v1_Matrix__Output | null);
  'massExcluded': (number)[];
  /**
   * In the first message of each choice: the prompt's chunks (their labels name the
   * attention columns, then "response") and its length.
   */
  'spans': (_ctxprobe_v1_Span__Output)[];
  'promptTokens': (number);
}
