// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.


export interface TokenIds {
  'ids'?: (number)[];
  /**
   * The vocabulary's pieces of the ids (`▁the`, `Ġthe`, `<0x0A>`), as Hugging Face's
   * convert_ids_to_tokens gives them: not text. Probe's tokens and OpenAI answers give text.
   */
  'tokens'?: (string)[];
}

export interface TokenIds__Output {
  'ids': (number)[];
  /**
   * The vocabulary's pieces of the ids (`▁the`, `Ġthe`, `<0x0A>`), as Hugging Face's
   * convert_ids_to_tokens gives them: not text. Probe's tokens and OpenAI answers give text.
   */
  'tokens': (string)[];
}
