// Tokenisation with @huggingface/tokenizers (tokenizer.json + tokenizer_config.json, or the
// same built from a GGUF file's metadata: gguf-tokenizer.ts).
import fs from 'node:fs';
import { Tokenizer } from '@huggingface/tokenizers';
import { CheckpointError, shownValue as shown } from '../common/errors.js';
import { FILE_CAPS, checkpointFile, readBounded, readJsonObject, type CheckpointLinks } from '../checkpoint/files.js';
import { TokenizerPool } from './tokenizer-pool.js';
import { ChatTemplateProcess } from './chat-template-host.js';
import { describeTemplate, templateError, type TemplateOrigin } from './chat-template.js';
import { ggufTokenizer } from './gguf-tokenizer.js';
import { checkTokenLengths } from './token-caps.js';
import { TokenPieces } from './token-pieces.js';
import type { GgufFile } from '../checkpoint/gguf.js';

export class TextTokenizer {
  readonly bosId?: number;
  readonly eosId?: number;
  readonly chatTemplate?: string;
  /** The chat template's file (and name in a named list). */
  readonly chatTemplateOrigin?: TemplateOrigin;

  private pool?: TokenizerPool;
  private template?: ChatTemplateProcess;

  private constructor(
    private readonly tok: Tokenizer,
    readonly config: Record<string, any>,
    ids: { bos?: number; eos?: number },
    private readonly source: { json: unknown; config: unknown },
    templateFile: string,
  ) {
    this.bosId = ids.bos ?? this.idOf(config.bos_token);
    this.eosId = ids.eos ?? this.idOf(config.eos_token);
    const template = chatTemplateOf(config);
    this.chatTemplate = template?.text;
    if (template) this.chatTemplateOrigin = { file: templateFile, ...(template.name !== undefined && { name: template.name }) };
  }

  /** Load from a checkpoint directory; `ids` are the model config's BOS/EOS, which win;
   * with `vocabSize` (the model's embedding rows) every token id must lie below it. */
  static load(dir: string, ids: { bos?: number; eos?: number } = {}, vocabSize?: number, links: CheckpointLinks = 'follow'): TextTokenizer {
    const file = checkpointFile(dir, 'tokenizer.json', links);
    if (!fs.existsSync(file)) throw new CheckpointError(`${dir}: no tokenizer.json`);
    const json = readJsonObject(file, CheckpointError, FILE_CAPS.tokenizerJson);
    const cfgFile = checkpointFile(dir, 'tokenizer_config.json', links);
    const cfg: Record<string, any> = fs.existsSync(cfgFile) ? readJsonObject(cfgFile) : {};
    // Newer checkpoints keep the template in its own file, which wins over the config's.
    const jinja = checkpointFile(dir, 'chat_template.jinja', links);
    const fromJinja = fs.existsSync(jinja);
    if (fromJinja) cfg.chat_template = readBounded(jinja, FILE_CAPS.chatTemplate).toString('utf8');
    return TextTokenizer.fromJson(json, cfg, { file, templateFile: fromJinja ? jinja : cfgFile }, ids, vocabSize);
  }

  /** The tokenizer of a GGUF file's metadata (gguf-tokenizer.ts), checked as a tokenizer.json is. */
  static fromGguf(g: GgufFile, ids: { bos?: number; eos?: number } = {}, vocabSize?: number): TextTokenizer {
    const { json, config } = ggufTokenizer(g);
    return TextTokenizer.fromJson(json, config, { file: g.file, templateFile: g.file }, ids, vocabSize);
  }

  /** From a tokenizer.json and tokenizer config in memory; `origin.file` names them in refusals. */
  private static fromJson(
    json: Record<string, any>,
    cfg: Record<string, any>,
    origin: { file: string; templateFile: string },
    ids: { bos?: number; eos?: number },
    vocabSize?: number,
  ): TextTokenizer {
    validateTokenizerJson(json, origin.file, vocabSize);
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(json, cfg);
      tokenizer.encode('ok');
    } catch (e) {
      throw new CheckpointError(`${origin.file}: not a tokenizer @huggingface/tokenizers can read (${(e as Error).message})`);
    }
    return new TextTokenizer(tokenizer, cfg, ids, { json, config: cfg }, origin.templateFile);
  }

  /** Compile the chat template in its own process (src/text/chat-template-host.ts), once:
   * what a model's load does. A template that does not parse (or compile within its
   * bounds) refuses the model, naming its file. */
  async startChatTemplate(): Promise<void> {
    if (this.chatTemplate === undefined || this.template) return;
    this.template = new ChatTemplateProcess(this.chatTemplate);
    const failure = await this.template.start();
    if (!failure) return;
    const origin = this.chatTemplateOrigin!;
    const named = origin.name === undefined ? '' : ` (chat_template ${JSON.stringify(origin.name)})`;
    throw new CheckpointError(`${origin.file}${named}: the chat template ${failure.message}`);
  }

  /** The chat template rendered with `args` in its process, within its bounds; a failure
   * throws the error it answers with (templateError), about `field`. */
  async renderChatTemplate(args: Record<string, unknown>, field: string): Promise<string> {
    if (!this.template) await this.startChatTemplate();
    const result = await this.template!.render(args);
    if ('failure' in result) throw templateError(field, describeTemplate(this.chatTemplateOrigin!), result.failure);
    return result.text;
  }

  /** Test hook: how many times the chat template was compiled. */
  get chatTemplateCompilations(): number {
    return this.template?.compilations ?? 0;
  }

  /** Tokenise in `workers` worker threads from now on (0: on the calling thread). */
  useWorkers(workers: number): void {
    if (workers > 0 && !this.pool) this.pool = new TokenizerPool(this.source.json, this.source.config, workers);
  }

  async close(): Promise<void> {
    await Promise.all([this.pool?.close(), this.template?.close()]);
    this.pool = undefined;
  }

  /** `encode`, off the event loop when workers are on: what request paths use. */
  encodeAsync(text: string, addSpecialTokens = false): Promise<number[]> {
    return this.pool ? this.pool.encode(text, addSpecialTokens) : Promise.resolve(this.encode(text, addSpecialTokens));
  }

  private idOf(token: unknown): number | undefined {
    const content = typeof token === 'string' ? token : (token as { content?: string } | undefined)?.content;
    return content === undefined ? undefined : this.tok.token_to_id(content);
  }

  /** Token ids of `text`; `addSpecialTokens` runs the tokenizer's post-processor (BOS). */
  encode(text: string, addSpecialTokens = false): number[] {
    return this.tok.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  decode(ids: number[]): string {
    return this.tok.decode(ids, { skip_special_tokens: false });
  }

  /** Text of `ids` without special tokens (BOS, EOS, chat markers): what a client reads. */
  decodeText(ids: number[]): string {
    return this.tok.decode(ids, { skip_special_tokens: true });
  }

  /** The vocabulary's piece of `id` (`▁the`, `Ġthe`): what Tokenize answers, not text. */
  tokenString(id: number): string {
    return this.tok.id_to_token(id) ?? '';
  }

  /** Each token's text as it reads after `context` (token-pieces.ts): joined, the texts
   * are what the tokens add to the decoded text (special tokens as written). */
  pieces(ids: readonly number[], context: readonly number[] = []): string[] {
    return TokenPieces.of((x) => this.decode(x), ids, context);
  }

  /** A reader of token texts after `context`, one token at a time (and its alternatives). */
  pieceReader(context: readonly number[] = []): TokenPieces {
    return new TokenPieces((x) => this.decode(x), context);
  }

  /** The token lm-evaluation-harness puts before an empty context: BOS, else EOS. */
  get prefixTokenId(): number {
    const id = this.bosId ?? this.eosId;
    if (id === undefined) throw new CheckpointError('tokenizer has neither a BOS nor an EOS token');
    return id;
  }
}

/** The chat template of a tokenizer config: a string, or the template named `default` of
 * a named list (`[{"name": "default", "template": …}, {"name": "tool_use", …}]`). */
function chatTemplateOf(config: Record<string, any>): { text: string; name?: string } | undefined {
  const t = config.chat_template;
  if (typeof t === 'string') return { text: t };
  if (Array.isArray(t)) {
    const named = t.find((x) => x?.name === 'default') ?? t[0];
    if (typeof named?.template !== 'string') return undefined;
    return { text: named.template, ...(typeof named.name === 'string' && { name: named.name }) };
  }
  return undefined;
}

/** Tokenizer models @huggingface/tokenizers implements. Any other `model.type` it guesses
 * at from the fields present (WordLevel becomes its legacy lookup, which ignores
 * `unk_token` and encodes an unknown word as an undefined id), so it is refused here. */
const MODEL_TYPES = ['BPE', 'WordPiece', 'Unigram'];

/** Refuse a tokenizer.json whose model the library does not implement, or whose token ids
 * (the model's vocabulary, the added tokens) are not integers below `vocabSize`: such an
 * id reaches the graph's Gather and fails there, or (a negative one) wraps around to a
 * valid-looking id. */
export function validateTokenizerJson(json: Record<string, any>, file: string, vocabSize?: number): void {
  const unreadable = (why: string) => new CheckpointError(`${file}: not a tokenizer @huggingface/tokenizers can read (${why})`);
  const model = json.model;
  if (model === null || typeof model !== 'object' || Array.isArray(model)) throw unreadable('model must be an object');
  if (!MODEL_TYPES.includes(model.type)) throw unreadable(`model.type ${shown(model.type)} is not one of ${MODEL_TYPES.join(', ')}`);
  const limit = vocabSize ?? Number.MAX_SAFE_INTEGER;
  const range = vocabSize === undefined ? 'a token id ≥ 0' : `a token id in [0, vocab_size ${vocabSize})`;
  const check = (id: unknown, what: string) => {
    if (!Number.isInteger(id) || (id as number) < 0 || (id as number) >= limit)
      throw new CheckpointError(`${file}: ${what} has id ${shown(id)}, not ${range}`);
  };
  if (model.type === 'Unigram') {
    // Unigram's vocabulary is a list: a piece's id is its index.
    if (!Array.isArray(model.vocab)) throw unreadable('model.vocab must be a list of [piece, score]');
    if (model.vocab.length > limit) check(limit, `model.vocab[${limit}] ${shown(model.vocab[limit]?.[0])}`);
  } else {
    if (model.vocab === null || typeof model.vocab !== 'object' || Array.isArray(model.vocab))
      throw unreadable('model.vocab must map tokens to ids');
    for (const token in model.vocab) check(model.vocab[token], `model.vocab token ${shown(token)}`);
  }
  const added: unknown = json.added_tokens ?? [];
  if (!Array.isArray(added)) throw unreadable('added_tokens must be a list');
  added.forEach((t: any, i) => check(t?.id, `added_tokens[${i}] ${shown(t?.content)}`));
  // Lengths before the library builds anything of them (token-caps.ts).
  const pieces =
    model.type === 'Unigram' ? model.vocab.map((v: unknown) => (Array.isArray(v) ? v[0] : undefined)) : Object.keys(model.vocab);
  checkTokenLengths(file, 'model.vocab', pieces, () => false);
  checkTokenLengths(
    file,
    'added_tokens',
    added.map((t: any) => t?.content),
    () => true,
  );
}
