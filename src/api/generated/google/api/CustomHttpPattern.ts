// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface CustomHttpPattern {
  'kind'?: (string);
  'path'?: (string);
}

export interface CustomHttpPattern__Output {
  'kind': (string);
  'path': (string);
}
