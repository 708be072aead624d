// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface FloatValue {
  'value'?: (number | string);
}

export interface FloatValue__Output {
  'value': (number);
}
