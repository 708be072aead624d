// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface ChatMessage {
  /**
   * system, user, assistant, …
   */
  'role'?: (string);
  'content'?: (string);
}

export interface ChatMessage__Output {
  /**
   * system, user, assistant, …
   */
  'role': (string);
  'content': (string);
}
