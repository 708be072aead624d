// Generation over the OpenAI dialect, as vLLM serves it (what lm-evaluation-harness's
// `local-completions` / `local-chat-completions` and the openai client send):
//   POST /v1/completions        max_tokens > 1, sampling, n, stop, logprobs N, echo, stream
//   POST /v1/chat/completions   the model's chat template with add_generation_prompt,
//                               logprobs + top_logprobs in the chat shape, stream
// Streams are server-sent events (`data: {chunk}`), ending `data: [DONE]`. Options this
// server does not implement (penalties, logit_bias, best_of, suffix) are refused by name.
import crypto from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { InvalidArgumentError } from '../common/errors.js';
import type { ChoiceResult, TokenEvent } from '../requests/generate.js';
import { checkSamplingOptions, type SamplingParams } from '../requests/sampling.js';
import type { EchoScore } from '../requests/scoring.js';
import { chatText } from '../requests/segments.js';
import type { ServedModel, Service } from '../serving/service.js';
import { toHttpError } from './status.js';
import { toJson } from './json.js';
import { clientGone, positionTop, sequenceTexts, tokenKeys, topTexts, withSpare } from './logprobs.js';

/** The sampling fields both routes share (OpenAI's, and vLLM's top_k / min_p). */
export const SAMPLING_PROPERTIES = {
  temperature: { type: 'number', minimum: 0 },
  top_p: { type: 'number' },
  top_k: { type: 'integer' },
  min_p: { type: 'number' },
  seed: { type: 'integer' },
  stop: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }, { type: 'null' }] },
  n: { type: 'integer', minimum: 1 },
  stream: { type: 'boolean' },
  stream_options: {
    anyOf: [{ type: 'null' }, { type: 'object', additionalProperties: false, properties: { include_usage: { type: 'boolean' } } }],
  },
  ignore_eos: { type: 'boolean' },
  // Refused unless neutral (checkUnsupported).
  presence_penalty: { type: 'number' },
  frequency_penalty: { type: 'number' },
  repetition_penalty: { type: 'number' },
  logit_bias: { anyOf: [{ type: 'object' }, { type: 'null' }] },
  best_of: { anyOf: [{ type: 'integer' }, { type: 'null' }] },
  user: { type: 'string' },
} as const;

export interface SamplingBody {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number;
  stop?: string | string[] | null;
  n?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean } | null;
  ignore_eos?: boolean;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  logit_bias?: Record<string, number> | null;
  best_of?: number | null;
  suffix?: string | null;
}

const stopStrings = (stop: SamplingBody['stop']): string[] => (stop == null ? [] : typeof stop === 'string' ? [stop] : stop);

/** Options this server does not implement, refused by name unless they ask for nothing. */
function checkUnsupported(b: SamplingBody): void {
  const refuse = (field: string) => {
    throw new InvalidArgumentError(field, 'is not supported by this server (leave it out)');
  };
  if ((b.presence_penalty ?? 0) !== 0) refuse('presence_penalty');
  if ((b.frequency_penalty ?? 0) !== 0) refuse('frequency_penalty');
  if ((b.repetition_penalty ?? 1) !== 1) refuse('repetition_penalty');
  if (b.logit_bias && Object.keys(b.logit_bias).length > 0) refuse('logit_bias');
  if (b.best_of != null && b.best_of !== (b.n ?? 1)) refuse('best_of');
  if (b.suffix) refuse('suffix');
}

/** The options of a scoring request (completions with max_tokens 0 or 1, greedy; the
 * sampling fields are in its schema too): refused as generation refuses them — options
 * this server does not implement unless neutral, values out of range — with the same
 * messages, so none is taken and then ignored. (A stop string with max_tokens 1 makes it
 * a generation: wantsGeneration.) */
export function checkScoringOptions(b: SamplingBody): void {
  checkSamplingOptions(samplingParams(b, 1, 0));
}

export function samplingParams(b: SamplingBody, maxTokens: number, logprobs: number): SamplingParams {
  checkUnsupported(b);
  return {
    temperature: b.temperature ?? 1,
    topP: b.top_p ?? 1,
    // vLLM: -1 (and 0) mean no top-k.
    topK: b.top_k === undefined || b.top_k === -1 ? 0 : b.top_k,
    minP: b.min_p ?? 0,
    ...(b.seed !== undefined ? { seed: b.seed } : {}),
    maxTokens,
    stop: stopStrings(b.stop),
    n: b.n ?? 1,
    logprobs,
    ignoreEos: b.ignore_eos ?? false,
  };
}

/** Answer whole (`run` returns the answer), or as a stream of chunks (`run` gets a
 * function that sends one and returns the last chunk, usage, or nothing). Errors after the stream began go out
 * as an `error` event, as vLLM sends them. */
export async function respond(
  reply: FastifyReply,
  stream: boolean,
  run: (send?: (chunk: unknown) => void) => Promise<unknown>,
): Promise<FastifyReply> {
  if (!stream) return reply.type('application/json').send(toJson(await run()));
  const out = new PassThrough();
  const send = (chunk: unknown) => out.write(`data: ${toJson(chunk)}\n\n`);
  void reply.header('cache-control', 'no-cache').type('text/event-stream').send(out);
  try {
    const last = await run(send);
    if (last) send(last);
  } catch (err) {
    const { body } = toHttpError(err);
    send(body);
  }
  out.end('data: [DONE]\n\n');
  return reply;
}

// ---- chat ------------------------------------------------------------------------------

export const CHAT_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['messages'],
  properties: {
    model: { type: 'string' },
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role', 'content'],
        additionalProperties: false,
        properties: {
          // The roles of OpenAI's chat API; a template sees no other (a typo, "wizard", was
          // rendered as a role of its own).
          role: {
            enum: ['system', 'developer', 'user', 'assistant', 'tool'],
            description: 'one of system, developer, user, assistant, tool',
          },
          content: {
            anyOf: [
              { type: 'string' },
              {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['type', 'text'],
                  additionalProperties: false,
                  properties: { type: { const: 'text' }, text: { type: 'string' } },
                },
              },
            ],
            description: 'a string or a list of {"type": "text", "text": …} parts is required',
          },
          // Passed to the template with the message, as transformers' apply_chat_template
          // passes the whole message (templates read message.name, message.tool_call_id);
          // any other field (tool_calls among them) is refused by name.
          name: { type: 'string' },
          tool_call_id: { type: 'string' },
        },
      },
    },
    max_tokens: { anyOf: [{ type: 'integer', minimum: 1 }, { type: 'null' }], description: 'a whole number ≥ 1 (or null) is required' },
    max_completion_tokens: {
      anyOf: [{ type: 'integer', minimum: 1 }, { type: 'null' }],
      description: 'a whole number ≥ 1 (or null) is required',
    },
    logprobs: { anyOf: [{ type: 'boolean' }, { type: 'null' }], description: 'true, false or null is required' },
    top_logprobs: { anyOf: [{ type: 'integer', minimum: 0 }, { type: 'null' }], description: 'a whole number ≥ 0 (or null) is required' },
    add_generation_prompt: { type: 'boolean' },
    continue_final_message: { type: 'boolean' },
    chat_template_kwargs: { anyOf: [{ type: 'object' }, { type: 'null' }] },
    ...SAMPLING_PROPERTIES,
  },
};

interface ChatBody extends SamplingBody {
  model?: string;
  messages: { role: string; content: string | { type: 'text'; text: string }[]; name?: string; tool_call_id?: string }[];
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  add_generation_prompt?: boolean;
  continue_final_message?: boolean;
  chat_template_kwargs?: Record<string, unknown> | null;
}

export async function chatCompletions(service: Service, m: ServedModel, body: ChatBody, reply: FastifyReply): Promise<FastifyReply> {
  if (body.continue_final_message)
    throw new InvalidArgumentError('continue_final_message', 'is not supported by this server (leave it out)');
  const tok = m.engine.tokenizer;
  // The fields a template may read, only those given (so that `is defined` holds as in Python).
  const messages = body.messages.map(({ content, ...rest }) => ({
    ...rest,
    content: typeof content === 'string' ? content : content.map((p) => p.text).join(''),
  }));
  service.checkTextBytes(messages, 'messages');
  const text = await chatText(tok, messages, 'messages', {
    addGenerationPrompt: body.add_generation_prompt ?? true,
    kwargs: body.chat_template_kwargs ?? {},
  });
  // The template writes the special tokens it wants (BOS included): none are added.
  const prompt = await tok.encodeAsync(text, false);
  const logprobs = body.logprobs ? (body.top_logprobs ?? 0) : 0;
  if (!body.logprobs && (body.top_logprobs ?? 0) > 0) throw new InvalidArgumentError('top_logprobs', 'needs "logprobs": true');
  // Unset: up to the model's length, as vLLM.
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? Math.max(1, m.scorer.maxLength - prompt.length);
  const params = samplingParams(body, maxTokens, logprobs);
  service.checkGenerate(m, [prompt], params, {
    logprobs: 'top_logprobs',
    max_tokens: body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens',
  });
  params.logprobs = withSpare(m, logprobs, false);
  const id = `chatcmpl-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const head = { id, object: 'chat.completion.chunk', created, model: m.entry.name };
  const call = { signal: clientGone(reply) };
  const usage = (results: ChoiceResult[]) => {
    const completion = results.reduce((n, r) => n + r.tokens.length, 0);
    return { prompt_tokens: prompt.length, completion_tokens: completion, total_tokens: prompt.length + completion };
  };
  // Each token's text where it stands (generate.ts reads them in place), its alternatives' too.
  const chatLogprobs = (texts: string[], lps: number[], tops: { ids: number[]; logprobs: number[] }[], altTexts: string[][]) => ({
    content: texts.map((token, k) => ({
      token,
      logprob: lps[k]!,
      bytes: [...Buffer.from(token, 'utf8')],
      top_logprobs: tops[k]
        ? topTexts(tops[k]!, altTexts[k]!, logprobs).map(([tt, lp]) => ({ token: tt, logprob: lp, bytes: [...Buffer.from(tt, 'utf8')] }))
        : [],
    })),
  });
  return respond(reply, body.stream === true, async (send) => {
    if (send) {
      for (let i = 0; i < params.n; i++)
        send({ ...head, choices: [{ index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] });
    }
    const [results] = await service.generate(m, [prompt], params, call, (_, events: TokenEvent[]) => {
      if (!send) return;
      for (const e of events) {
        const lp = body.logprobs ? chatLogprobs([e.tokenText], [e.logprob], e.top ? [e.top] : [], e.topTexts ? [e.topTexts] : []) : null;
        if (e.text || lp)
          send({ ...head, choices: [{ index: e.choice, delta: e.text ? { content: e.text } : {}, logprobs: lp, finish_reason: null }] });
        if (e.finish) send({ ...head, choices: [{ index: e.choice, delta: {}, logprobs: null, finish_reason: e.finish }] });
      }
    });
    if (send) return body.stream_options?.include_usage ? { ...head, choices: [], usage: usage(results!) } : undefined;
    return {
      id,
      object: 'chat.completion',
      created,
      model: m.entry.name,
      choices: results!.map((r) => ({
        index: r.choice,
        message: { role: 'assistant', content: r.text },
        logprobs: body.logprobs ? chatLogprobs(r.tokenTexts, r.logprobs, r.top, r.topTexts) : null,
        finish_reason: r.finish,
        token_ids: r.tokens,
      })),
      usage: usage(results!),
    };
  });
}

// ---- completions -----------------------------------------------------------------------

/** The completions body as far as generation reads it. */
export interface CompletionsGenerationBody extends SamplingBody {
  max_tokens?: number;
  echo?: boolean;
  logprobs?: number | null;
  return_tokens_as_token_ids?: boolean;
}

/** Whether a completions request generates: more than one token, a stream, several
 * choices, sampling, or one token that a stop string may end. max_tokens 0 or 1 at
 * temperature 0 (or unset) is the scoring path lm-evaluation-harness's loglikelihood
 * requests take (echo, greedy next token). */
export function wantsGeneration(b: CompletionsGenerationBody): boolean {
  const maxTokens = b.max_tokens ?? 16;
  return (
    maxTokens > 1 || b.stream === true || (b.n ?? 1) > 1 || (b.temperature ?? 0) > 0 || (maxTokens === 1 && stopStrings(b.stop).length > 0)
  );
}

export async function generateCompletions(
  service: Service,
  m: ServedModel,
  body: CompletionsGenerationBody,
  prompts: { ids: number[]; text?: string; added?: boolean[] }[],
  reply: FastifyReply,
): Promise<FastifyReply> {
  const maxTokens = body.max_tokens ?? 16;
  if (maxTokens === 0)
    throw new InvalidArgumentError('max_tokens', 'must be ≥ 1 to generate (0 scores the prompt: leave out stream, n and temperature)');
  const want = body.logprobs ?? null;
  const params = samplingParams(body, maxTokens, want ?? 0);
  const ids = prompts.map((p) => p.ids);
  service.checkGenerate(m, ids, params);
  params.logprobs = withSpare(m, want ?? 0, body.return_tokens_as_token_ids === true);
  const call = { signal: clientGone(reply) };
  const echo = body.echo === true;
  // The prompt's own log-probs, when echoed with them, come from a scoring pass (which also
  // puts the prompt into the prefix cache for the generation that follows).
  const echoed = echo && want !== null ? await service.echo(m, ids, want, call) : undefined;
  const promptText = (i: number) => prompts[i]!.text ?? service.tokenTexts(m, ids[i]!).join('');
  const id = `cmpl-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const head = { id, object: 'text_completion', created, model: m.entry.name };
  const n = params.n;
  const offsets = prompts.map((_, i) => Array.from({ length: n }, () => (echo ? promptText(i).length : 0)));
  // As vLLM's return_tokens_as_token_ids: tokens and top_logprobs keys as `token_id:N`.
  const asIds = body.return_tokens_as_token_ids === true;
  const { tokenLogprobs, echoLogprobs } = completionLogprobs(m, { prompts, offsets, want, asIds, echoed });
  return respond(reply, body.stream === true, async (send) => {
    if (send && echo) {
      prompts.forEach((_, i) => {
        for (let c = 0; c < n; c++)
          send({
            ...head,
            choices: [{ index: i * n + c, text: promptText(i), logprobs: echoed ? echoLogprobs(i) : null, finish_reason: null }],
          });
      });
    }
    const results = await service.generate(m, ids, params, call, (i, events) => {
      if (!send) return;
      for (const e of events) {
        const lp =
          want !== null
            ? tokenLogprobs(i, e.choice, {
                tokens: [e.token],
                texts: [e.tokenText],
                lps: [e.logprob],
                top: e.top ? [e.top] : [],
                topTexts: e.topTexts ? [e.topTexts] : [],
              })
            : null;
        send({
          ...head,
          choices: [
            {
              index: i * n + e.choice,
              text: e.text,
              logprobs: lp,
              finish_reason: e.finish ?? null,
              ...(e.finish ? { stop_reason: null } : {}),
            },
          ],
        });
      }
    });
    if (send) return body.stream_options?.include_usage ? { ...head, choices: [], usage: completionUsage(ids, results) } : undefined;
    return {
      ...head,
      object: 'text_completion',
      choices: results.flatMap((choices, i) =>
        choices.map((r) => {
          let logprobs: unknown = null;
          if (want !== null) {
            const gen = tokenLogprobs(i, r.choice, {
              tokens: r.tokens,
              texts: r.tokenTexts,
              lps: r.logprobs,
              top: r.top,
              topTexts: r.topTexts,
            });
            logprobs = echoed
              ? Object.fromEntries(Object.entries(echoLogprobs(i)).map(([k, v]) => [k, [...(v as unknown[]), ...(gen as any)[k]]]))
              : gen;
          }
          return {
            index: i * n + r.choice,
            text: (echo ? promptText(i) : '') + r.text,
            logprobs,
            finish_reason: r.finish,
            token_ids: r.tokens,
          };
        }),
      ),
      usage: completionUsage(ids, results),
    };
  });
}

/** The logprobs objects of a completion's choices, as OpenAI writes them: tokens (keyed as
 * `asIds` says), their log-probs, the `want` most likely alternatives, and text offsets; a
 * choice's offsets (`offsets[prompt][choice]`) run on from where its text so far ends. */
function completionLogprobs(
  m: ServedModel,
  o: {
    prompts: { ids: number[]; added?: boolean[] }[];
    offsets: number[][];
    want: number | null;
    asIds: boolean;
    /** The prompts' own scores, when they are echoed with log-probs. */
    echoed: EchoScore[] | undefined;
  },
) {
  const { prompts, offsets, want, asIds, echoed } = o;
  const ids = prompts.map((p) => p.ids);
  type Alternatives = { ids: number[]; logprobs: number[] };
  // One entry a token: its N most likely alternatives, or with logprobs 0 the token itself.
  const tops = (
    tokens: number[],
    texts: string[],
    lps: number[],
    alternatives: (Alternatives | undefined)[],
    altTexts: (string[] | undefined)[],
  ) => tokens.map((id, k) => positionTop({ id, logprob: lps[k]!, text: texts[k]! }, alternatives[k], altTexts[k], want ?? 0, asIds));
  /** Generated tokens, with their texts and alternatives' as read where they stand (generate.ts). */
  const tokenLogprobs = (
    i: number,
    c: number,
    g: { tokens: number[]; texts: string[]; lps: number[]; top: Alternatives[]; topTexts: string[][] },
  ) => ({
    tokens: tokenKeys(g.tokens, g.texts, asIds),
    token_logprobs: g.lps,
    top_logprobs: tops(g.tokens, g.texts, g.lps, g.top, g.topTexts),
    text_offset: g.texts.map((t) => {
      const at = offsets[i]![c]!;
      offsets[i]![c] = at + t.length;
      return at;
    }),
  });
  const echoLogprobs = (i: number) => {
    const e = echoed![i]!;
    // Text prompts echo as given: the special tokens their encoding added take no text.
    const added = prompts[i]!.added ?? [];
    const { texts, alternativeTexts } = sequenceTexts(m, ids[i]!, [null, ...e.top.slice(0, -1)], [], added);
    let at = 0;
    return {
      tokens: tokenKeys(ids[i]!, texts, asIds),
      token_logprobs: [null, ...e.promptLogprobs],
      top_logprobs: [null, ...tops(ids[i]!.slice(1), texts.slice(1), e.promptLogprobs, e.top.slice(0, -1), alternativeTexts.slice(1))],
      text_offset: texts.map((t, k) => ((at += added[k] ? 0 : t.length), at - (added[k] ? 0 : t.length))),
    };
  };
  return { tokenLogprobs, echoLogprobs };
}

/** OpenAI's usage: the prompts' tokens and every choice's generated ones. */
function completionUsage(ids: number[][], results: ChoiceResult[][]) {
  const promptTokens = ids.reduce((k, p) => k + p.length, 0);
  const completion = results.flat().reduce((k, r) => k + r.tokens.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion };
}
