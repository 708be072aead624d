// How long a vocabulary's tokens may be, checked before a tokenizer is built from them.
// @huggingface/tokenizers matches added and special tokens through a trie of one node per
// character (about 200 bytes a character: one 10 MB control token took 2 GB, one of 100 MB
// ended the process), and the SentencePiece merges of a GGUF vocabulary split each token
// at every character. Real vocabularies' longest tokens are a few hundred characters (a
// byte-level token of 128 bytes; runs of spaces in code models), special tokens a few dozen.
import { CheckpointError } from '../common/errors.js';

export const TOKEN_CAPS = {
  /** Characters (UTF-16 units) of one token. */
  tokenChars: 1024,
  /** Characters of every added and special token together (Gemma 3: about 70,000). */
  addedChars: 1 << 20,
} as const;

/** Refuse a token of `tokens` (the list `key` names, by index) longer than
 * TOKEN_CAPS.tokenChars, and the added tokens among them (`added(i)`) longer than
 * TOKEN_CAPS.addedChars together. */
export function checkTokenLengths(file: string, key: string, tokens: readonly unknown[], added: (i: number) => boolean): void {
  let addedChars = 0;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    if (typeof t !== 'string') continue;
    if (t.length > TOKEN_CAPS.tokenChars)
      throw new CheckpointError(
        `${file}: ${key}[${i}] is a token of ${t.length} characters, more than the ${TOKEN_CAPS.tokenChars} a token may have`,
      );
    if (added(i)) addedChars += t.length;
  }
  if (addedChars > TOKEN_CAPS.addedChars)
    throw new CheckpointError(
      `${file}: ${key}: its added and special tokens have ${addedChars} characters together, more than the ${TOKEN_CAPS.addedChars} they may have`,
    );
}
