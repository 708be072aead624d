// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

export const AttentionDType = {
  ATTENTION_FLOAT32: 'ATTENTION_FLOAT32',
  ATTENTION_FLOAT16: 'ATTENTION_FLOAT16',
} as const;

export type AttentionDType =
  | 'ATTENTION_FLOAT32'
  | 0
  | 'ATTENTION_FLOAT16'
  | 1

export type AttentionDType__Output = typeof AttentionDType[keyof typeof AttentionDType]
