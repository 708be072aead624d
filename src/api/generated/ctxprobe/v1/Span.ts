// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface Span {
  'label'?: (string);
  /**
   * token span [start, end)
   */
  'start'?: (number);
  'end'?: (number);
}

export interface Span__Output {
  'label': (string);
  /**
   * token span [start, end)
   */
  'start': (number);
  'end': (number);
}
