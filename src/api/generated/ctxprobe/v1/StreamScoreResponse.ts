// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { ItemScore as _ctxprobe_v1_ItemScore, ItemScore__Output as _ctxprobe_v1_ItemScore__Output } from '../../ctxprobe/v1/ItemScore.js';

export interface StreamScoreResponse {
  'model'?: (string);
  /**
   * the answer, with the item's id
   */
  'item'?: (_ctxprobe_v1_ItemScore | null);
  /**
   * a google.rpc.Code; 0 (OK) when the item was scored
   */
  'errorCode'?: (number);
  /**
   * names the offending field, like the unary calls' status
   */
  'errorMessage'?: (string);
}

export interface StreamScoreResponse__Output {
  'model': (string);
  /**
   * the answer, with the item's id
   */
  'item': (_ctxprobe_v1_ItemScore__Output | null);
  /**
   * a google.rpc.Code; 0 (OK) when the item was scored
   */
  'errorCode': (number);
  /**
   * names the offending field, like the unary calls' status
   */
  'errorMessage': (string);
}
