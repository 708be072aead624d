// The request and answer shapes of continuation, rolling and echo scoring (lm-evaluation-harness
// semantics); scoring.ts turns requests into units and units' scores into these answers.
import type { Segment } from './segments.js';
import type { TopK } from '../core/units.js';

export type TextOrTokens = string | number[];

export interface LoglikelihoodRequest {
  context: TextOrTokens;
  continuations: TextOrTokens[];
  /** Run the tokenizer's post-processor (adds BOS where it does) on text input. */
  addBos?: boolean;
  /** Also return the k most likely tokens at each continuation position. */
  topK?: number;
  /** `left` (harness default): drop context tokens from the left; `error`: refuse. */
  truncation?: 'left' | 'error';
  /** How error messages name this request (default `items[i]`). */
  field?: string;
  /** Also the context's own log-probs: each context token after the first given all
   * before it (CHARPEval App. A ranks by the whole sequence's perplexity). */
  contextLogprobs?: boolean;
  /** Also score each continuation after this neutral context (same kind as the context),
   * for unconditional normalisation (KIEval's cloze step). */
  unconditionalContext?: TextOrTokens;
  /** The context as labelled chunks (their texts or ids, joined, are `context`): each
   * continuation then also gets its attention over them, from the same forward pass. */
  contextChunks?: ContextChunk[];
  /** With `contextChunks`: token positions removed from the key side (e.g. 0, a BOS sink). */
  excludePositions?: number[];
}

export interface ContextChunk {
  label: string;
  text?: string;
  ids?: number[];
}

/** The label the continuation's own tokens carry among the context chunks. */
export const CONTINUATION_LABEL = 'continuation';

/** One item with a chunked context, encoded exactly as `prepareLoglikelihood` encodes it
 * (`_encode_pair`), with each chunk's token span in the context. */
export interface ChunkedPair {
  field: string;
  context: number[];
  segments: Segment[];
  continuations: { field: string; ids: number[]; numChars: number; numBytes: number }[];
}

/** The context's own log-likelihood: tokens 1..n−1 of its encoding, each given all before it. */
export interface ContextScore {
  tokenIds: number[];
  tokenLogprobs: number[];
  logprob: number;
  numTokens: number;
}

/** A continuation scored after the neutral context. */
export interface UnconditionalScore {
  logprob: number;
  numTokens: number;
  tokenLogprobs: number[];
  /** The conditional log-prob minus this one: log p(cont | context) − log p(cont | neutral). */
  difference: number;
}

export interface ContinuationScore {
  logprob: number;
  isGreedy: boolean;
  tokenIds: number[];
  tokenLogprobs: number[];
  tokenGreedy: boolean[];
  numTokens: number;
  /** Length of the continuation as given, in Unicode code points (Python's len). */
  numChars: number;
  numBytes: number;
  topK?: TopK[];
  /** Context tokens dropped from the left to fit the maximum length. */
  truncatedTokens: number;
  /** logprob ÷ numTokens (per-token length normalisation). */
  meanLogprob: number;
  /** With `contextLogprobs`: the item's context scored on its own (one object per item). */
  context?: ContextScore;
  /** With `unconditionalContext`. */
  unconditional?: UnconditionalScore;
  /** With `contextChunks`: where the continuation's tokens attend, from the same pass. */
  attention?: ContinuationAttention;
}

/** A continuation's attention over the context chunks and itself (the last segment):
 * the probe's per-layer votes and mass with the continuation as the query chunk. */
export interface ContinuationAttention {
  labels: string[];
  segments: Segment[];
  votes: number[][];
  votesExcluded: number[];
  mass: number[][];
  massExcluded: number[];
}

export interface RollingRequest {
  text: TextOrTokens;
  /** Min-K% Prob's k, in percent (Shi et al. 2023); default 20. */
  minKPercent?: number;
  /** More k values, each answered from the same log-probs (KIEval sweeps 5–60%). */
  minKPercents?: number[];
  /** Min-K% over fewer tokens than one lowest: `at-least-one` (default) averages the single
   * lowest; `skip` (KIEval) reports the text as skipped for that k. */
  minKRule?: 'at-least-one' | 'skip';
  /** KIEval's loss: the first token is context only (no prefix token before it, never
   * predicted); tokens 1..n−1 are scored. */
  skipFirstToken?: boolean;
}

export interface MinK {
  kPercent: number;
  /** Tokens averaged: ⌊n·k/100⌋ (at least one, unless skipped). */
  count: number;
  /** Their mean log-prob; NaN when skipped. */
  logprob: number;
  skipped: boolean;
}

export interface RollingScore {
  logprob: number;
  numTokens: number;
  /** −mean token log-prob (KIEval's average LM loss). */
  meanLoss: number;
  perplexity: number;
  minKPercent: number;
  /** Mean of the lowest ⌊n·k/100⌋ (at least one) token log-probs; NaN when skipped. */
  minKLogprob: number;
  /** Every k asked for (`minKPercent` first). */
  minK: MinK[];
  tokenIds: number[];
  tokenLogprobs: number[];
  numWindows: number;
}

/** The echo answer for one prompt. */
export interface EchoScore {
  /** log p(prompt[t] | prompt[..t]) for t = 1..n-1. */
  promptLogprobs: number[];
  /** Top-k alternatives at positions 0..n-1 (the last one is the next-token distribution). */
  top: TopK[];
  nextToken: number;
  nextLogprob: number;
  length: number;
}
