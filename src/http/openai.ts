// An OpenAI-compatible HTTP endpoint for log-likelihood work, so lm-evaluation-harness's
// `local-completions` model drives the server unchanged:
//   POST /v1/completions   prompt: text or token ids (one or a batch), echo, logprobs,
//                          max_tokens 0 or 1 (this server scores; it does not generate)
//   POST /tokenize, POST /detokenize, GET /tokenizer_info, GET /v1/models
// Requests go through each model's batcher, with its prefix sharing and limits.
import http from 'node:http';
import crypto from 'node:crypto';
import type { ServedModel, ServiceContext } from '../grpc/calls.js';
import { QueueFullError } from '../batcher.js';
import { ScoringError, type EchoScore } from '../scoring.js';

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = 'invalid_request_error',
  ) {
    super(message);
  }
}

export interface OpenAIOptions {
  /** When non-empty, `Authorization: Bearer <token>` is required. */
  checkToken?: (header: string | undefined) => boolean;
  maxBodyBytes?: number;
}

export function openaiHandler(ctx: ServiceContext, options: OpenAIOptions = {}): http.RequestListener {
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;

  const model = (name: unknown): ServedModel => {
    if (ctx.draining()) throw new HttpError(503, 'server is draining', 'server_error');
    const m = typeof name === 'string' && name !== '' ? ctx.models.get(name) : ctx.defaultModel();
    if (m) return m;
    if (ctx.loading()) throw new HttpError(503, 'models are still loading', 'server_error');
    throw new HttpError(
      404,
      `model: no model named ${JSON.stringify(name)} (serving: ${[...ctx.models.keys()].join(', ')})`,
      'not_found_error',
    );
  };

  const routes: Record<string, (body: any, res: http.ServerResponse) => Promise<unknown> | unknown> = {
    'POST /v1/completions': (body, res) => completions(model(body.model), body, res),
    'GET /v1/models': () => ({
      object: 'list',
      data: [...ctx.models.values()].map((m) => ({
        id: m.entry.name,
        object: 'model',
        owned_by: 'ctxprobe',
        max_model_len: m.scorer.maxLength,
      })),
    }),
    'POST /tokenize': (body) => {
      const m = model(body.model);
      if (typeof body.prompt !== 'string') throw new HttpError(400, 'prompt: a string is required');
      const tokens = m.engine.tokenizer.encode(body.prompt, body.add_special_tokens ?? true);
      return { count: tokens.length, max_model_len: m.scorer.maxLength, tokens };
    },
    'POST /detokenize': (body) => {
      const m = model(body.model);
      if (!Array.isArray(body.tokens) || !body.tokens.every((t: unknown) => Number.isInteger(t)))
        throw new HttpError(400, 'tokens: a list of token ids is required');
      return { prompt: m.engine.tokenizer.decode(body.tokens) };
    },
    'GET /tokenizer_info': (body) => {
      const m = model(body.model);
      const tok = m.engine.tokenizer;
      return {
        ...tok.config,
        model_max_length: m.scorer.maxLength,
        bos_token_id: tok.bosId ?? null,
        eos_token_id: tok.eosId ?? null,
        vocab_size: m.engine.config.vocabSize,
      };
    },
  };

  async function completions(m: ServedModel, body: any, res: http.ServerResponse) {
    const { prompts, texts: promptTexts } = toPrompts(body.prompt, m);
    const maxTokens = body.max_tokens ?? 16;
    if (maxTokens !== 0 && maxTokens !== 1)
      throw new HttpError(400, `max_tokens: ${maxTokens} is not supported; this server scores (0) or predicts one greedy token (1)`);
    if ((body.n ?? 1) !== 1) throw new HttpError(400, 'n: only 1 is supported');
    const echo = body.echo === true;
    const logprobs: number | null = body.logprobs ?? null;
    if (logprobs !== null && (!Number.isInteger(logprobs) || logprobs < 0))
      throw new HttpError(400, 'logprobs: a whole number ≥ 0 is required');
    const prepared = m.scorer.prepareEcho(prompts, logprobs ?? 0);
    // A client that goes away takes its work out of the queue.
    const submitted = m.batcher.submit(prepared.units);
    res.once('close', () => res.writableFinished || submitted.cancel());
    const scores: EchoScore[] = prepared.finish(await submitted.result);
    const tok = m.engine.tokenizer;
    const piece = (id: number) => tok.decode([id]);
    ctx.metrics.itemsScored.inc({ model: m.entry.name }, prompts.length);
    ctx.metrics.tokensScored.inc(
      { model: m.entry.name },
      prompts.reduce((n, p) => n + p.length, 0),
    );
    const choices = scores.map((s, i) => {
      const ids = [...(echo ? prompts[i]! : []), ...(maxTokens === 1 ? [s.nextToken] : [])];
      const lps: (number | null)[] = [...(echo ? [null, ...s.promptLogprobs] : []), ...(maxTokens === 1 ? [s.nextLogprob] : [])];
      // top_logprobs[t] is the distribution the token at t was drawn from: position t-1's.
      const tops = [...(echo ? [null, ...s.top.slice(0, -1)] : []), ...(maxTokens === 1 ? [s.top.at(-1)!] : [])];
      const texts = ids.map(piece);
      let offset = 0;
      // Text prompts echo as given (without the special tokens their encoding added).
      const echoed = echo ? (promptTexts[i] ?? texts.slice(0, prompts[i]!.length).join('')) : '';
      return {
        index: i,
        text: echoed + (maxTokens === 1 ? texts.at(-1)! : ''),
        finish_reason: 'length',
        logprobs:
          logprobs === null
            ? null
            : {
                tokens: texts,
                token_logprobs: lps,
                top_logprobs: tops.map((t) => {
                  if (!t) return null;
                  const entries: [string, number][] = [];
                  const seen = new Set<string>();
                  t.ids.slice(0, Math.max(1, logprobs)).forEach((id, k) => {
                    const key = piece(id);
                    if (!seen.has(key)) entries.push([key, t.logprobs[k]!]);
                    seen.add(key);
                  });
                  return Object.fromEntries(entries);
                }),
                text_offset: texts.map((t) => ((offset += t.length), offset - t.length)),
              },
      };
    });
    const promptTokens = prompts.reduce((n, p) => n + p.length, 0);
    return {
      id: `cmpl-${crypto.randomUUID()}`,
      object: 'text_completion',
      created: Math.floor(Date.now() / 1000),
      model: m.entry.name,
      choices,
      usage: {
        prompt_tokens: promptTokens,
        completion_tokens: maxTokens * prompts.length,
        total_tokens: promptTokens + maxTokens * prompts.length,
      },
    };
  }

  return (req, res) => {
    const started = performance.now();
    const route = `${req.method} ${(req.url ?? '').split('?')[0]}`;
    const send = (status: number, payload: unknown) => {
      const method = route.replace(/^\w+ /, 'http ');
      ctx.metrics.requests.inc({ method, code: String(status) });
      ctx.metrics.requestSeconds.observe({ method }, (performance.now() - started) / 1000);
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(payload));
    };
    const fail = (err: unknown) => {
      const e =
        err instanceof HttpError
          ? err
          : err instanceof ScoringError
            ? new HttpError(400, err.message)
            : err instanceof QueueFullError
              ? new HttpError(429, err.message, 'rate_limit_error')
              : new HttpError(500, `internal error: ${(err as Error)?.message ?? String(err)}`, 'server_error');
      if (e.status >= 500) ctx.log({ level: 'error', route, message: e.message });
      send(e.status, { error: { message: e.message, type: e.type, code: e.status } });
    };
    if (options.checkToken && !options.checkToken(req.headers.authorization)) {
      return fail(new HttpError(401, 'authorization: a valid "Bearer <token>" is required', 'authentication_error'));
    }
    const handler = routes[route];
    if (!handler) return fail(new HttpError(404, `no route ${route}`, 'not_found_error'));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= maxBody) chunks.push(c);
    });
    req.on('end', () => {
      Promise.resolve()
        .then(() => {
          if (size > maxBody) throw new HttpError(413, `request body over ${maxBody} bytes`);
          const text = Buffer.concat(chunks).toString('utf8');
          let body: any = {};
          if (text.trim()) {
            try {
              body = JSON.parse(text);
            } catch {
              throw new HttpError(400, 'the request body is not JSON');
            }
          }
          if (req.method === 'GET') body = Object.fromEntries(new URL(req.url ?? '/', 'http://x').searchParams);
          ctx.inFlight.count++;
          return Promise.resolve()
            .then(() => handler(body, res))
            .finally(() => ctx.inFlight.count--);
        })
        .then((payload) => send(200, payload), fail);
    });
  };
}

/** `prompt` as the OpenAI API allows it: a string, a list of strings, a list of token
 * ids, or a list of lists of token ids. Text is encoded with the tokenizer's special
 * tokens, as the reference servers do. */
function toPrompts(prompt: unknown, m: ServedModel): { prompts: number[][]; texts: (string | undefined)[] } {
  const isIds = (x: unknown): x is number[] => Array.isArray(x) && x.every((t) => Number.isInteger(t));
  const encode = (text: string) => m.engine.tokenizer.encode(text, true);
  if (typeof prompt === 'string') return { prompts: [encode(prompt)], texts: [prompt] };
  if (isIds(prompt) && prompt.length > 0) return { prompts: [prompt], texts: [undefined] };
  if (Array.isArray(prompt) && prompt.length > 0) {
    const prompts = prompt.map((p, i) => {
      if (typeof p === 'string') return encode(p);
      if (isIds(p)) return p;
      throw new HttpError(400, `prompt[${i}]: a string or a list of token ids is required`);
    });
    return { prompts, texts: prompt.map((p) => (typeof p === 'string' ? p : undefined)) };
  }
  throw new HttpError(400, 'prompt: a string, a list of token ids, or a list of either is required');
}
