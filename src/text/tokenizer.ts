// Tokenisation with @huggingface/tokenizers (tokenizer.json + tokenizer_config.json).
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { CheckpointError } from '../common/errors.js';
import { readJsonObject } from '../checkpoint/files.js';
import { TokenizerPool } from './tokenizer-pool.js';
import { ChatTemplateProcess } from './chat-template-host.js';
import { describeTemplate, templateError, type TemplateOrigin } from './chat-template.js';

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

  /** Load from a checkpoint directory; `ids` are the model config's BOS/EOS, which win. */
  static load(dir: string, ids: { bos?: number; eos?: number } = {}): TextTokenizer {
    const file = path.join(dir, 'tokenizer.json');
    if (!fs.existsSync(file)) throw new CheckpointError(`${dir}: no tokenizer.json`);
    const json = readJsonObject(file);
    const cfgFile = path.join(dir, 'tokenizer_config.json');
    const cfg: Record<string, any> = fs.existsSync(cfgFile) ? readJsonObject(cfgFile) : {};
    // Newer checkpoints keep the template in its own file, which wins over the config's.
    const jinja = path.join(dir, 'chat_template.jinja');
    const fromJinja = fs.existsSync(jinja);
    if (fromJinja) cfg.chat_template = fs.readFileSync(jinja, 'utf8');
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(json, cfg);
      tokenizer.encode('ok');
    } catch (e) {
      throw new CheckpointError(`${file}: not a tokenizer @huggingface/tokenizers can read (${(e as Error).message})`);
    }
    return new TextTokenizer(tokenizer, cfg, ids, { json, config: cfg }, fromJinja ? jinja : cfgFile);
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

  tokenString(id: number): string {
    return this.tok.id_to_token(id) ?? '';
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
