// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface TokenizeRequest {
  /**
   * empty: the default model
   */
  'model'?: (string);
  'texts'?: (string)[];
  'addSpecialTokens'?: (boolean);
}

export interface TokenizeRequest__Output {
  /**
   * empty: the default model
   */
  'model': (string);
  'texts': (string)[];
  'addSpecialTokens': (boolean);
}
