// Each token's text as it reads in the text it belongs to, so that a sequence's token texts
// join back into its decoded text (what vLLM and OpenAI answer: " upon", not "upon"). A
// token decoded alone loses what depends on its neighbours: SentencePiece's ▁ is a space
// except at the start of a text, and a character that byte tokens (byte-level BPE, <0xNN>
// fallback) spell in pieces decodes only once all its bytes are there. So a token's text is
// what it adds to the decoded text of the tokens just before it, and a token that ends
// inside a character adds "" until the one that completes it adds the character (vLLM's
// incremental detokenizer: prefix and read offsets).

/** Context tokens a reader starts from: enough for a space's strip and a character's bytes. */
const CONTEXT_TOKENS = 6;
const REPLACEMENT = '\uFFFD';

export class TokenPieces {
  private readonly ids: number[] = [];
  /** ids[prefixStart..] is what each step decodes; ids before readOffset have their text. */
  private prefixStart = 0;
  private readOffset = 0;
  /** decode(ids[prefixStart..readOffset]). */
  private prefixText = '';

  /** `decode` without dropping special tokens; `context`: the tokens before the first one read. */
  constructor(
    private readonly decode: (ids: number[]) => string,
    context: readonly number[] = [],
  ) {
    for (const id of context.slice(-CONTEXT_TOKENS)) this.push(id);
  }

  /** The text `id` adds after the tokens read so far ("" while it ends inside a character). */
  push(id: number): string {
    this.ids.push(id);
    const text = this.decode(this.ids.slice(this.prefixStart));
    if (text.length <= this.prefixText.length || text.endsWith(REPLACEMENT)) return '';
    this.prefixStart = this.readOffset;
    this.readOffset = this.ids.length;
    const piece = text.slice(this.prefixText.length);
    this.prefixText = this.decode(this.ids.slice(this.prefixStart, this.readOffset));
    return piece;
  }

  /** The text `id` would add here, without reading it: an alternative to the next token
   * (with the bytes of a character still waiting, the character it makes, or U+FFFD). */
  peek(id: number): string {
    const text = this.decode([...this.ids.slice(this.prefixStart), id]);
    return text.slice(this.prefixText.length);
  }

  /** What the tokens read add that no push returned yet (bytes of an unfinished character). */
  rest(): string {
    if (this.readOffset === this.ids.length) return '';
    return this.decode(this.ids.slice(this.prefixStart)).slice(this.prefixText.length);
  }

  /** Every token's text of `ids` after `context`; the last one takes what is left over, so
   * that they join into the decoded text. */
  static of(decode: (ids: number[]) => string, ids: readonly number[], context: readonly number[] = []): string[] {
    const reader = new TokenPieces(decode, context);
    const texts = ids.map((id) => reader.push(id));
    if (texts.length > 0) texts[texts.length - 1] += reader.rest();
    return texts;
  }
}
