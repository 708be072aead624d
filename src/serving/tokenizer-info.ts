// What a remote tokenizer needs of a served model: lm-evaluation-harness's `tokenizer_info`,
// as vLLM serves it at GET /tokenizer_info.
import type { TextTokenizer } from '../text/tokenizer.js';

/** What a remote tokenizer needs (lm-evaluation-harness's `tokenizer_info`, as vLLM
 * serves it): the special tokens as strings — tokenizer_config.json may hold them as
 * `{"__type": "AddedToken", "content": …}` objects, or not at all — and their ids. */
export function tokenizerInfo(tok: TextTokenizer, limits: { maxLength: number; vocabSize: number }): Record<string, unknown> {
  const text = (v: unknown) =>
    typeof v === 'string' ? v : typeof (v as { content?: unknown })?.content === 'string' ? (v as { content: string }).content : undefined;
  const special = (key: string, id: number | undefined) => text(tok.config[key]) ?? (id !== undefined ? tok.tokenString(id) : null);
  const { added_tokens_decoder: _decoder, ...config } = tok.config;
  return {
    ...config,
    bos_token: special('bos_token', tok.bosId),
    eos_token: special('eos_token', tok.eosId),
    unk_token: text(tok.config.unk_token) ?? null,
    pad_token: text(tok.config.pad_token) ?? null,
    chat_template: tok.chatTemplate ?? null,
    model_max_length: limits.maxLength,
    bos_token_id: tok.bosId ?? null,
    eos_token_id: tok.eosId ?? null,
    vocab_size: limits.vocabSize,
  };
}
