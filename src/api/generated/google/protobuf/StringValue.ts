// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface StringValue {
  'value'?: (string);
}

export interface StringValue__Output {
  'value': (string);
}
