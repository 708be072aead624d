// Generated from proto/ctxprobe/v1/ctxprobe.proto by scripts/proto-types.mjs: do not edit.

import type { Tokens as _ctxprobe_v1_Tokens, Tokens__Output as _ctxprobe_v1_Tokens__Output } from '../../ctxprobe/v1/Tokens.js';
import type { Truncation as _ctxprobe_v1_Truncation, Truncation__Output as _ctxprobe_v1_Truncation__Output } from '../../ctxprobe/v1/Truncation.js';
import type { Chunk as _ctxprobe_v1_Chunk, Chunk__Output as _ctxprobe_v1_Chunk__Output } from '../../ctxprobe/v1/Chunk.js';

export interface ScoreItem {
  /**
   * echoed back; the client's own key for the item
   */
  'id'?: (string);
  'contextText'?: (string);
  'contextIds'?: (_ctxprobe_v1_Tokens | null);
  /**
   * One or more continuations of the same kind as the context. Several continuations
   * share the context's KV cache: it is computed once.
   */
  'continuationsText'?: (string)[];
  'continuationsIds'?: (_ctxprobe_v1_Tokens)[];
  /**
   * text only: run the tokenizer's special tokens (BOS) on both encodings
   */
  'addBos'?: (boolean);
  /**
   * also return the k most likely tokens at each position (0: none)
   */
  'topK'?: (number);
  'truncation'?: (_ctxprobe_v1_Truncation);
  /**
   * Also the context's own log-probs (tokens 1..n−1 of its encoding, each given all before
   * it): with a continuation's, the whole sequence's perplexity (CHARPEval App. A).
   */
  'contextLogprobs'?: (boolean);
  /**
   * Also score every continuation after this neutral context (the same kind as the
   * context), for unconditional normalisation (KIEval's cloze step).
   */
  'unconditionalText'?: (string);
  'unconditionalIds'?: (_ctxprobe_v1_Tokens | null);
  /**
   * The context as labelled chunks (text, or token ids; the continuations' kind), in place
   * of context_text / context_ids: each continuation's score then also carries where its
   * tokens attend among the chunks (votes and mass per layer, the continuation as the
   * query chunk), from the same forward pass. Text chunks are joined into the context and
   * tokenised as it is, so the scores equal the item's without chunks. Not with top_k,
   * context_logprobs or unconditional scoring; never truncated.
   */
  'contextChunks'?: (_ctxprobe_v1_Chunk)[];
  /**
   * with context_chunks: key positions left out (e.g. 0, a BOS sink)
   */
  'excludePositions'?: (number)[];
  /**
   * The context, as text or token ids. Empty text scores after BOS (EOS where the model
   * has none); trailing whitespace moves to the front of every continuation.
   */
  'context'?: "contextText"|"contextIds";
}

export interface ScoreItem__Output {
  /**
   * echoed back; the client's own key for the item
   */
  'id': (string);
  'contextText'?: (string);
  'contextIds'?: (_ctxprobe_v1_Tokens__Output | null);
  /**
   * One or more continuations of the same kind as the context. Several continuations
   * share the context's KV cache: it is computed once.
   */
  'continuationsText': (string)[];
  'continuationsIds': (_ctxprobe_v1_Tokens__Output)[];
  /**
   * text only: run the tokenizer's special tokens (BOS) on both encodings
   */
  'addBos': (boolean);
  /**
   * also return the k most likely tokens at each position (0: none)
   */
  'topK': (number);
  'truncation': (_ctxprobe_v1_Truncation__Output);
  /**
   * Also the context's own log-probs (tokens 1..n−1 of its encoding, each given all before
   * it): with a continuation's, the whole sequence's perplexity (CHARPEval App. A).
   */
  'contextLogprobs': (boolean);
  /**
   * Also score every continuation after this neutral context (the same kind as the
   * context), for unconditional normalisation (KIEval's cloze step).
   */
  'unconditionalText': (string);
  'unconditionalIds': (_ctxprobe_v1_Tokens__Output | null);
  /**
   * The context as labelled chunks (text, or token ids; the continuations' kind), in place
   * of context_text / context_ids: each continuation's score then also carries where its
   * tokens attend among the chunks (votes and mass per layer, the continuation as the
   * query chunk), from the same forward pass. Text chunks are joined into the context and
   * tokenised as it is, so the scores equal the item's without chunks. Not with top_k,
   * context_logprobs or unconditional scoring; never truncated.
   */
  'contextChunks': (_ctxprobe_v1_Chunk__Output)[];
  /**
   * with context_chunks: key positions left out (e.g. 0, a BOS sink)
   */
  'excludePositions': (number)[];
  /**
   * The context, as text or token ids. Empty text scores after BOS (EOS where the model
   * has none); trailing whitespace moves to the front of every continuation.
   */
  'context'?: "contextText"|"contextIds";
}
