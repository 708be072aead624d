// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface MinK {
  'kPercent'?: (number | string);
  /**
   * tokens averaged
   */
  'count'?: (number);
  /**
   * their mean log-prob (NaN when skipped)
   */
  'logprob'?: (number | string);
  'skipped'?: (boolean);
}

export interface MinK__Output {
  'kPercent': (number);
  /**
   * tokens averaged
   */
  'count': (number);
  /**
   * their mean log-prob (NaN when skipped)
   */
  'logprob': (number);
  'skipped': (boolean);
}
