// An OpenAI-compatible HTTP endpoint for log-likelihood work, so lm-evaluation-harness's
// `local-completions` model drives the server unchanged (its remote tokenizer included):
//   POST /v1/completions   prompt: text or token ids (one or a batch), echo, logprobs,
//                          max_tokens 0 or 1 at temperature 0: scoring; otherwise it
//                          generates (generation.ts, with /v1/chat/completions)
//   POST /tokenize, POST /detokenize, GET /tokenizer_info, GET /v1/models, GET /health
// On fastify: JSON bodies only (other content types: 415), each validated against a
// JSON schema (no type coercion; unknown fields refused), translated into the serving
// layer's calls. Errors become statuses in status.ts only.
import { parseJsonBody } from './json-body.js';
import { discardRest, refuseOversizedBeforeContinue } from './body-limit.js';
import crypto from 'node:crypto';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import {
  CtxprobeError,
  InvalidArgumentError,
  NotFoundError,
  TooLargeError,
  UnauthenticatedError,
  UnsupportedMediaTypeError,
} from '../common/errors.js';
import { httpsOptions, type TlsMaterial } from '../serving/security.js';
import type { CallRecord, ServedModel, Service } from '../serving/service.js';
import { toHttpError } from './status.js';
import { toJson } from './json.js';
import { clientGone, TOP_SPARE, tokenKeys, topLogprobs } from './logprobs.js';
import { registerTranscoded, statusBody } from './transcode.js';
import { registerViewer } from './viewer.js';
import { codeNameOf } from '../api/status.js';
import { CHAT_SCHEMA, SAMPLING_PROPERTIES, chatCompletions, generateCompletions, wantsGeneration } from './generation.js';

export interface HttpOptions {
  /** When given, `Authorization: Bearer <token>` must satisfy it (all but /health). */
  checkToken?: (header: string | undefined) => boolean;
  maxBodyBytes?: number;
  /** Serve over TLS (mutual TLS when the material has a client CA). */
  tls?: TlsMaterial;
}

/** What a route's config may say: `rpc`, the RPC a transcoded route serves; `open`, no
 * token needed (pages and documents that hold no data). */
export interface RouteConfig {
  rpc?: string;
  open?: boolean;
}

const registeredRoutes = new WeakMap<FastifyInstance, string[]>();

/** The routes an app built here answers, as `POST /v1/probe` (what the OpenAPI test
 * checks the document against). */
export const routesOf = (app: FastifyInstance): readonly string[] => registeredRoutes.get(app) ?? [];

export function buildHttpApp(service: Service, options: HttpOptions = {}): FastifyInstance {
  const bodyLimit = options.maxBodyBytes ?? 64 * 1024 * 1024;
  const app = Fastify({
    bodyLimit,
    ...(options.tls ? { https: httpsOptions(options.tls) } : {}),
    // Types as sent: "1" is not 1 and "yes" is not true; unknown fields are refused.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false, verbose: true } },
    forceCloseConnections: 'idle',
    logger: false,
  });
  refuseOversizedBeforeContinue(app.server, bodyLimit);
  const routes: string[] = [];
  registeredRoutes.set(app, routes);
  app.addHook('onRoute', (r) => {
    for (const verb of [r.method].flat()) if (verb !== 'HEAD') routes.push(`${verb} ${r.url}`);
  });
  // A browser page can post text/plain or a form cross-origin without a preflight:
  // only JSON is taken.
  app.removeContentTypeParser(['text/plain']);
  // JSON by the proto3 rule for text, on every route (json-body.ts).
  app.removeContentTypeParser(['application/json']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as Buffer));
    } catch (e) {
      done(e as Error, undefined);
    }
  });

  // Metric labels come from the route table, never from the raw path; a transcoded RPC is
  // recorded as gRPC records it (its method name, its code's name).
  const rpcOf = (req: FastifyRequest) => (req.routeOptions.config as RouteConfig | undefined)?.rpc;
  const method = (req: FastifyRequest) => rpcOf(req) ?? (req.routeOptions.url ? `http ${req.routeOptions.url}` : 'http other');
  const records = new WeakMap<FastifyRequest, { record?: CallRecord; failure?: unknown }>();
  app.addHook('onRequest', async (req) => {
    records.set(req, {});
    const open = (req.routeOptions.config as RouteConfig | undefined)?.open;
    if (options.checkToken && !open && !options.checkToken(req.headers.authorization)) {
      throw new UnauthenticatedError('authorization: a valid "Bearer <token>" is required');
    }
  });
  // A call is in flight (what a drain waits for) once its body has arrived: a client that
  // never finishes sending one holds no drain. One refused before that is recorded as it ends.
  app.addHook('preValidation', async (req) => {
    const r = records.get(req);
    if (r) r.record ??= service.begin(method(req));
  });
  const end = (req: FastifyRequest, status: number) => {
    const r = records.get(req);
    if (!r) return;
    const code = !rpcOf(req) ? String(status) : r.failure !== undefined ? codeNameOf(r.failure) : status === 499 ? 'CANCELLED' : 'OK';
    (r.record ??= service.begin(method(req))).end(code, r.failure);
  };
  app.addHook('onResponse', async (req, reply) => end(req, reply.statusCode));
  app.addHook('onRequestAbort', async (req) => end(req, 499));
  // A stream whose client hangs up mid-answer never finishes: its call ends with the socket.
  app.addHook('onSend', async (req, reply) => {
    reply.raw.once('close', () => reply.raw.writableFinished || end(req, 499));
  });
  app.setErrorHandler(async (err: FastifyError, req, reply) => {
    // The client may still be sending what was refused: let it finish, to read the 413.
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') await discardRest(req.raw);
    const failure = fromFastify(err, bodyLimit);
    const r = records.get(req);
    if (r) r.failure = failure;
    if (rpcOf(req)) {
      const { status, body } = statusBody(failure);
      return reply.status(status).send(body);
    }
    const { status, body } = toHttpError(failure);
    return reply.status(status).send(body);
  });
  app.setNotFoundHandler((req) => {
    throw new NotFoundError('route', `no route ${req.method} ${req.url.split('?')[0]}`);
  });

  // Every RPC over HTTP/JSON, from the proto's google.api.http rules.
  registerTranscoded(app, service, {
    bodyLimit,
    failed: (req, err) => {
      const r = records.get(req);
      if (r) r.failure = err;
    },
  });
  registerViewer(app, options.checkToken !== undefined);

  const modelName = (name: string | undefined) => (name === '' ? undefined : name);
  const schema = completionsSchema(service.maxItemsPerRequest);

  app.post('/v1/completions', { schema: { body: schema } }, async (req, reply) => {
    const body = req.body as CompletionsBody;
    const m = service.model(modelName(body.model));
    if (wantsGeneration(body)) return generateCompletions(service, m, body, await encodeGiven(service, m, body), reply);
    return reply.type('application/json').send(toJson(await completions(service, m, body, reply)));
  });
  app.post('/v1/chat/completions', { schema: { body: CHAT_SCHEMA } }, async (req, reply) => {
    const body = req.body as Parameters<typeof chatCompletions>[2];
    return chatCompletions(service, service.model(modelName(body.model)), body, reply);
  });
  app.get('/v1/models', async () => ({
    object: 'list',
    data: service.listModels().map((m) => ({ id: m.name, object: 'model', owned_by: 'ctxprobe', max_model_len: m.maxLength })),
  }));
  app.post('/tokenize', { schema: { body: TOKENIZE_SCHEMA } }, async (req) => {
    const body = req.body as { model?: string; prompt: string; add_special_tokens?: boolean };
    const name = modelName(body.model);
    const { ids } = (await service.tokenize(name, [body.prompt], body.add_special_tokens ?? true))[0]!;
    return { count: ids.length, max_model_len: service.info(service.model(name, false)).maxLength, tokens: ids };
  });
  app.post('/detokenize', { schema: { body: DETOKENIZE_SCHEMA } }, async (req) => {
    const body = req.body as { model?: string; tokens: number[] };
    return { prompt: service.detokenize(modelName(body.model), body.tokens) };
  });
  app.get('/tokenizer_info', { schema: { querystring: MODEL_QUERY } }, async (req) =>
    service.tokenizerInfo(modelName((req.query as { model?: string }).model)),
  );
  // For load balancers: 200 while serving, 503 while loading or draining; no token needed.
  app.get('/health', { config: { open: true } satisfies RouteConfig }, async (_req, reply) => {
    const status = service.health();
    return reply.status(status === 'SERVING' ? 200 : 503).send({ status });
  });
  return app;
}

interface CompletionsBody {
  model?: string;
  prompt: string | string[] | number[] | number[][];
  max_tokens?: number;
  echo?: boolean;
  logprobs?: number | null;
  n?: number;
  stream?: boolean;
  add_special_tokens?: boolean;
  return_tokens_as_token_ids?: boolean;
}

async function completions(service: Service, m: ServedModel, body: CompletionsBody, reply: FastifyReply) {
  const maxTokens = body.max_tokens ?? 16;
  const echo = body.echo === true;
  const logprobs = body.logprobs ?? null;
  const prompts = await encodeGiven(service, m, body);
  const want = logprobs ?? 0;
  // As vLLM: tokens and top_logprobs keys as `token_id:N`, so tokens that decode to the
  // same text (byte tokens of one UTF-8 character all decode to U+FFFD) stay apart.
  const asIds = body.return_tokens_as_token_ids === true;
  const scores = await service.echo(
    m,
    prompts.map((p) => p.ids),
    want,
    { signal: clientGone(reply) },
    asIds ? 0 : TOP_SPARE,
  );
  const choices = scores.map((s, i) => {
    const prompt = prompts[i]!;
    const ids = [...(echo ? prompt.ids : []), ...(maxTokens === 1 ? [s.nextToken] : [])];
    const lps: (number | null)[] = [...(echo ? [null, ...s.promptLogprobs] : []), ...(maxTokens === 1 ? [s.nextLogprob] : [])];
    // top_logprobs[t] is the distribution the token at t was drawn from: position t-1's.
    const tops = [...(echo ? [null, ...s.top.slice(0, -1)] : []), ...(maxTokens === 1 ? [s.top.at(-1)!] : [])];
    const texts = service.tokenTexts(m, ids);
    // Text prompts echo as given: the special tokens their encoding added take no text.
    const added = [...(echo ? prompt.added : []), false];
    const echoed = echo ? (prompt.text ?? texts.slice(0, prompt.ids.length).join('')) : '';
    let offset = 0;
    const textOffset = texts.map((t, k) => {
      const at = offset;
      if (!added[k]) offset += t.length;
      return at;
    });
    return {
      index: i,
      text: echoed + (maxTokens === 1 ? texts.at(-1)! : ''),
      finish_reason: 'length',
      logprobs:
        logprobs === null
          ? null
          : {
              tokens: asIds ? tokenKeys(service, m, ids, true) : texts,
              token_logprobs: lps,
              top_logprobs: tops.map((t) => (t ? topLogprobs(service, m, t, Math.max(1, want), asIds) : null)),
              text_offset: textOffset,
            },
    };
  });
  const promptTokens = prompts.reduce((n, p) => n + p.ids.length, 0);
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

/** The prompts of a completions body as token ids (text prompts encoded, with which of
 * their tokens the encoding added). */
async function encodeGiven(service: Service, m: ServedModel, body: CompletionsBody) {
  const given = toPrompts(body.prompt);
  const texts = given.filter((p): p is string => typeof p === 'string');
  const encoded = await service.encodePrompts(m, texts, body.add_special_tokens ?? true);
  return given.map((p) =>
    typeof p === 'string' ? { ...encoded[texts.indexOf(p)]!, text: p } : { ids: p, added: [] as boolean[], text: undefined },
  );
}

/** `prompt` as the OpenAI API allows it (the schema checked the shapes): a string, a
 * list of strings, a list of token ids, or a list of lists of token ids. */
function toPrompts(prompt: CompletionsBody['prompt']): (string | number[])[] {
  if (typeof prompt === 'string') return [prompt];
  if (prompt.every((p) => typeof p === 'number')) return [prompt as number[]];
  return prompt as (string | number[])[];
}

// ---- schemas -----------------------------------------------------------------------------

const tokenIds = { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } };

function completionsSchema(maxPrompts?: number) {
  return {
    type: 'object',
    additionalProperties: false,
    required: ['prompt'],
    properties: {
      model: { type: 'string' },
      prompt: {
        description: 'a string, a list of token ids, or a list of either is required',
        anyOf: [
          { type: 'string' },
          tokenIds,
          {
            type: 'array',
            minItems: 1,
            ...(maxPrompts === undefined ? {} : { maxItems: maxPrompts }),
            items: {
              anyOf: [{ type: 'string' }, tokenIds],
              description: 'a string or a non-empty list of token ids (whole numbers ≥ 0) is required',
            },
          },
        ],
      },
      max_tokens: { type: 'integer', minimum: 0 },
      echo: { type: 'boolean' },
      logprobs: { anyOf: [{ type: 'integer', minimum: 0 }, { type: 'null' }], description: 'a whole number ≥ 0 (or null) is required' },
      add_special_tokens: { type: 'boolean' },
      return_tokens_as_token_ids: { type: 'boolean' },
      suffix: { anyOf: [{ type: 'string' }, { type: 'null' }] },
      ...SAMPLING_PROPERTIES,
    },
  };
}

const TOKENIZE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['prompt'],
  properties: { model: { type: 'string' }, prompt: { type: 'string' }, add_special_tokens: { type: 'boolean' } },
};

const DETOKENIZE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['tokens'],
  properties: { model: { type: 'string' }, tokens: { type: 'array', items: { type: 'integer', minimum: 0 } } },
};

const MODEL_QUERY = { type: 'object', additionalProperties: false, properties: { model: { type: 'string' as const } } };

// ---- the routes in the OpenAPI document (openapi.ts) -----------------------------------------

/** A route of this file as the OpenAPI document describes it: the schema it validates with,
 * what it answers. */
export interface RouteDoc {
  verb: 'get' | 'post';
  path: string;
  operationId: string;
  tag: 'OpenAI-compatible' | 'Tokenizer' | 'Health';
  summary: string;
  body?: object;
  query?: { model: { type: 'string' } };
  answer: { description: string; schema: object; streams?: boolean };
  /** No bearer token needed. */
  open?: boolean;
}

const modelsList = {
  type: 'object',
  properties: {
    object: { const: 'list' },
    data: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          id: { type: 'string' },
          object: { const: 'model' },
          owned_by: { type: 'string' },
          max_model_len: { type: 'integer' },
        },
      },
    },
  },
};

export const OPENAI_ROUTE_DOCS: readonly RouteDoc[] = [
  {
    verb: 'post',
    path: '/v1/completions',
    operationId: 'completions',
    tag: 'OpenAI-compatible',
    summary:
      "OpenAI's completions: scoring (max_tokens 0 or 1 at temperature 0, echo and logprobs, as lm-evaluation-harness's local-completions sends) or generation.",
    body: completionsSchema(),
    answer: {
      description:
        "a text_completion object as OpenAI's API writes it (logprobs: tokens, token_logprobs, top_logprobs, text_offset); with stream: server-sent events ending in data: [DONE]",
      schema: {
        type: 'object',
        properties: { object: { const: 'text_completion' }, choices: { type: 'array' }, usage: { type: 'object' } },
      },
      streams: true,
    },
  },
  {
    verb: 'post',
    path: '/v1/chat/completions',
    operationId: 'chatCompletions',
    tag: 'OpenAI-compatible',
    summary: "OpenAI's chat completions, rendered with the model's chat template (add_generation_prompt unless false).",
    body: CHAT_SCHEMA,
    answer: {
      description: 'a chat.completion object; with stream: chat.completion.chunk events ending in data: [DONE]',
      schema: {
        type: 'object',
        properties: { object: { const: 'chat.completion' }, choices: { type: 'array' }, usage: { type: 'object' } },
      },
      streams: true,
    },
  },
  {
    verb: 'get',
    path: '/v1/models',
    operationId: 'models',
    tag: 'OpenAI-compatible',
    summary: 'The models served, as OpenAI lists them (with max_model_len, as vLLM adds it).',
    answer: { description: 'a list of models', schema: modelsList },
  },
  {
    verb: 'post',
    path: '/tokenize',
    operationId: 'tokenizeText',
    tag: 'Tokenizer',
    summary: "A text's token ids, as vLLM's /tokenize answers (lm-evaluation-harness's remote tokenizer).",
    body: TOKENIZE_SCHEMA,
    answer: {
      description: 'the ids',
      schema: {
        type: 'object',
        properties: {
          count: { type: 'integer' },
          max_model_len: { type: 'integer' },
          tokens: { type: 'array', items: { type: 'integer' } },
        },
      },
    },
  },
  {
    verb: 'post',
    path: '/detokenize',
    operationId: 'detokenize',
    tag: 'Tokenizer',
    summary: "The text of token ids, as vLLM's /detokenize answers.",
    body: DETOKENIZE_SCHEMA,
    answer: { description: 'the text', schema: { type: 'object', properties: { prompt: { type: 'string' } } } },
  },
  {
    verb: 'get',
    path: '/tokenizer_info',
    operationId: 'tokenizerInfo',
    tag: 'Tokenizer',
    summary: "The tokenizer's configuration (tokenizer_config.json) with its special tokens as text, as vLLM's /tokenizer_info answers.",
    query: MODEL_QUERY.properties,
    answer: {
      description: 'the configuration',
      schema: {
        type: 'object',
        properties: {
          bos_token: { type: ['string', 'null'] },
          eos_token: { type: ['string', 'null'] },
          unk_token: { type: ['string', 'null'] },
        },
      },
    },
  },
  {
    verb: 'get',
    path: '/health',
    operationId: 'health',
    tag: 'Health',
    summary: 'For load balancers: 200 while serving, 503 while loading or draining.',
    answer: {
      description: 'SERVING (200) or NOT_SERVING (503)',
      schema: { type: 'object', required: ['status'], properties: { status: { enum: ['SERVING', 'NOT_SERVING'] } } },
    },
    open: true,
  },
];

// ---- translation ----------------------------------------------------------------------------

interface AjvError {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
  parentSchema?: { description?: string };
}

/** A fastify error (validation, body parsing, size) as the server's error model. */
function fromFastify(err: FastifyError, bodyLimit: number): unknown {
  if (err instanceof CtxprobeError) return err;
  if (err.validation) {
    const errors = err.validation as AjvError[];
    // An anyOf failure explains itself best at its own level, not through a branch; the
    // innermost one names the element.
    const anyOf = errors.filter((x) => x.keyword === 'anyOf').sort((a, b) => b.instancePath.length - a.instancePath.length);
    const e = anyOf[0] ?? errors[0]!;
    const path = e.instancePath
      .split('/')
      .slice(1)
      .map((p) => (/^\d+$/.test(p) ? `[${p}]` : `.${p}`))
      .join('')
      .replace(/^\./, '');
    const where = err.validationContext === 'querystring' ? 'query' : 'body';
    if (e.keyword === 'additionalProperties') {
      const key = String(e.params.additionalProperty);
      return new InvalidArgumentError(path ? `${path}.${key}` : key, 'unknown field: this server does not implement it');
    }
    if (e.keyword === 'required') {
      const key = String(e.params.missingProperty);
      return new InvalidArgumentError(path ? `${path}.${key}` : key, 'is required');
    }
    const message =
      (e.keyword === 'anyOf' || e.keyword === 'enum') && e.parentSchema?.description
        ? e.parentSchema.description
        : (e.message ?? 'is invalid');
    return new InvalidArgumentError(path || where, message);
  }
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new TooLargeError(`body: over the limit of ${bodyLimit} bytes (--max-message-bytes)`);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new UnsupportedMediaTypeError('content-type: application/json is required');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new InvalidArgumentError('body', 'a JSON object is required');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new InvalidArgumentError('body', 'the request body is not JSON');
  }
  if (typeof err.statusCode === 'number' && err.statusCode < 500) return new InvalidArgumentError('request', err.message);
  return err;
}
