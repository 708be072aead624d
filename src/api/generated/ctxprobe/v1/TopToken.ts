// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface TopToken {
  'id'?: (number);
  'logprob'?: (number | string);
}

export interface TopToken__Output {
  'id': (number);
  'logprob': (number);
}
