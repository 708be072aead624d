// An OpenAI-compatible HTTP endpoint for log-likelihood work, so lm-evaluation-harness's
// `local-completions` model drives the server unchanged:
//   POST /v1/completions   prompt: text or token ids (one or a batch), echo, logprobs,
//                          max_tokens 0 or 1 (this server scores; it does not generate)
//   POST /tokenize, POST /detokenize, GET /tokenizer_info, GET /v1/models
// It validates and translates JSON into the serving layer's calls (the same queues,
// prefix sharing and limits as gRPC); errors map to statuses in status.ts only.
import http from 'node:http';
import crypto from 'node:crypto';
import { InvalidArgumentError, NotFoundError, TooLargeError, UnauthenticatedError } from '../errors.js';
import type { ServedModel, Service } from '../serving/service.js';
import { toHttpError } from './status.js';

export interface OpenAIOptions {
  /** When given, `Authorization: Bearer <token>` must satisfy it. */
  checkToken?: (header: string | undefined) => boolean;
  maxBodyBytes?: number;
}

type Route = (body: any, res: http.ServerResponse) => Promise<unknown> | unknown;

export function openaiHandler(service: Service, options: OpenAIOptions = {}): http.RequestListener {
  const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;

  const modelName = (name: unknown): string | undefined => {
    if (name === undefined || name === null || name === '') return undefined;
    if (typeof name !== 'string') throw new InvalidArgumentError('model', 'a model name (string) is required');
    return name;
  };

  const routes: Record<string, Route> = {
    'POST /v1/completions': (body, res) => completions(service.model(modelName(body.model)), body, res),
    'GET /v1/models': () => ({
      object: 'list',
      data: service.listModels().map((m) => ({ id: m.name, object: 'model', owned_by: 'ctxprobe', max_model_len: m.maxLength })),
    }),
    'POST /tokenize': (body) => {
      const name = modelName(body.model);
      if (typeof body.prompt !== 'string') throw new InvalidArgumentError('prompt', 'a string is required');
      const { ids } = service.tokenize(name, [body.prompt], body.add_special_tokens ?? true)[0]!;
      return { count: ids.length, max_model_len: service.info(service.model(name, false)).maxLength, tokens: ids };
    },
    'POST /detokenize': (body) => {
      if (!Array.isArray(body.tokens) || !body.tokens.every((t: unknown) => Number.isInteger(t)))
        throw new InvalidArgumentError('tokens', 'a list of token ids is required');
      return { prompt: service.detokenize(modelName(body.model), body.tokens) };
    },
    'GET /tokenizer_info': (body) => service.tokenizerInfo(modelName(body.model)),
  };

  async function completions(m: ServedModel, body: any, res: http.ServerResponse) {
    const { prompts, texts: promptTexts } = toPrompts(body.prompt, (text) => service.encodePrompt(m, text));
    const maxTokens = body.max_tokens ?? 16;
    if (maxTokens !== 0 && maxTokens !== 1)
      throw new InvalidArgumentError(
        'max_tokens',
        `${maxTokens} is not supported; this server scores (0) or predicts one greedy token (1)`,
      );
    if ((body.n ?? 1) !== 1) throw new InvalidArgumentError('n', 'only 1 is supported');
    const echo = body.echo === true;
    const logprobs: number | null = body.logprobs ?? null;
    if (logprobs !== null && (!Number.isInteger(logprobs) || logprobs < 0))
      throw new InvalidArgumentError('logprobs', 'a whole number ≥ 0 is required');
    // A client that goes away takes its work out of the queue.
    const gone = new AbortController();
    res.once('close', () => res.writableFinished || gone.abort());
    const scores = await service.echo(m, prompts, logprobs ?? 0, { signal: gone.signal });
    const choices = scores.map((s, i) => {
      const ids = [...(echo ? prompts[i]! : []), ...(maxTokens === 1 ? [s.nextToken] : [])];
      const lps: (number | null)[] = [...(echo ? [null, ...s.promptLogprobs] : []), ...(maxTokens === 1 ? [s.nextLogprob] : [])];
      // top_logprobs[t] is the distribution the token at t was drawn from: position t-1's.
      const tops = [...(echo ? [null, ...s.top.slice(0, -1)] : []), ...(maxTokens === 1 ? [s.top.at(-1)!] : [])];
      const texts = service.tokenTexts(m, ids);
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
                  const shown = t.ids.slice(0, Math.max(1, logprobs));
                  service.tokenTexts(m, shown).forEach((key, k) => {
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
    const route = `${req.method} ${(req.url ?? '').split('?')[0]}`;
    const handler = routes[route];
    // Metric labels come from the route table, never from the raw path.
    const record = service.begin(handler ? route.replace(/^\w+ /, 'http ') : 'http other');
    const send = (status: number, payload: unknown, err?: unknown) => {
      record.end(String(status), err);
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(payload));
    };
    const fail = (err: unknown) => {
      const { status, body } = toHttpError(err);
      send(status, body, err);
    };
    if (options.checkToken && !options.checkToken(req.headers.authorization)) {
      return fail(new UnauthenticatedError('authorization: a valid "Bearer <token>" is required'));
    }
    if (!handler) return fail(new NotFoundError('route', `no route ${route}`));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= maxBody) chunks.push(c);
    });
    req.on('end', () => {
      Promise.resolve()
        .then(() => {
          if (size > maxBody) throw new TooLargeError(`body: request body over ${maxBody} bytes`);
          const text = Buffer.concat(chunks).toString('utf8');
          let body: any = {};
          if (text.trim()) {
            try {
              body = JSON.parse(text);
            } catch {
              throw new InvalidArgumentError('body', 'the request body is not JSON');
            }
          }
          if (req.method === 'GET') body = Object.fromEntries(new URL(req.url ?? '/', 'http://x').searchParams);
          return handler(body, res);
        })
        .then((payload) => send(200, payload), fail);
    });
  };
}

/** `prompt` as the OpenAI API allows it: a string, a list of strings, a list of token
 * ids, or a list of lists of token ids. */
function toPrompts(prompt: unknown, encode: (text: string) => number[]): { prompts: number[][]; texts: (string | undefined)[] } {
  const isIds = (x: unknown): x is number[] => Array.isArray(x) && x.every((t) => Number.isInteger(t));
  if (typeof prompt === 'string') return { prompts: [encode(prompt)], texts: [prompt] };
  if (isIds(prompt) && prompt.length > 0) return { prompts: [prompt], texts: [undefined] };
  if (Array.isArray(prompt) && prompt.length > 0) {
    const prompts = prompt.map((p, i) => {
      if (typeof p === 'string') return encode(p);
      if (isIds(p)) return p;
      throw new InvalidArgumentError(`prompt[${i}]`, 'a string or a list of token ids is required');
    });
    return { prompts, texts: prompt.map((p) => (typeof p === 'string' ? p : undefined)) };
  }
  throw new InvalidArgumentError('prompt', 'a string, a list of token ids, or a list of either is required');
}
