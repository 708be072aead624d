// An OpenAI-compatible HTTP endpoint for log-likelihood work, so lm-evaluation-harness's
// `local-completions` model drives the server unchanged (its remote tokenizer included):
//   POST /v1/completions   prompt: text or token ids (one or a batch), echo, logprobs,
//                          max_tokens 0 or 1 at temperature 0: scoring; otherwise it
//                          generates (generation.ts, with /v1/chat/completions)
//   POST /tokenize, POST /detokenize, GET /tokenizer_info, GET /v1/models, GET /health
// Routes of the app (app.ts: JSON bodies only, tokens, call records, errors as statuses in
// status.ts), each body validated against its JSON schema (openai-schemas.ts: no type
// coercion; unknown fields refused) and translated into the serving layer's calls.
import crypto from 'node:crypto';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ServedModel, Service } from '../serving/service.js';
import { toJson } from './json.js';
import { clientGone, positionTop, sequenceTexts, TOP_SPARE, tokenKeys } from './logprobs.js';
import type { RouteConfig } from './route-config.js';
import {
  CHAT_SCHEMA,
  chatCompletions,
  checkScoringOptions,
  generateCompletions,
  wantsGeneration,
  type CompletionsGenerationBody,
} from './generation.js';
import { completionsSchema, DETOKENIZE_SCHEMA, MODEL_QUERY, TOKENIZE_SCHEMA } from './openai-schemas.js';

/** The OpenAI-compatible routes (completions, chat, models), vLLM's tokenizer routes and
 * the health check; a model named "" is the default one. */
export function registerOpenAiRoutes(app: FastifyInstance, service: Service): void {
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
    if (status === 'SERVING') return reply.status(200).send({ status });
    // Loading: where the load is, so a slow load is told from a hung one.
    const loading = service.loadingNow();
    return reply.status(503).send(loading ? { status: 'LOADING', loading } : { status });
  });
}

interface CompletionsBody extends CompletionsGenerationBody {
  model?: string;
  prompt: string | string[] | number[] | number[][];
  add_special_tokens?: boolean;
}

async function completions(service: Service, m: ServedModel, body: CompletionsBody, reply: FastifyReply) {
  checkScoringOptions(body);
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
    // Text prompts echo as given: the special tokens their encoding added take no text.
    const added = [...(echo ? prompt.added : []), false];
    const { texts, alternativeTexts } = sequenceTexts(m, ids, tops, echo ? [] : prompt.ids, added);
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
              tokens: tokenKeys(ids, texts, asIds),
              token_logprobs: lps,
              top_logprobs: tops.map((t, k) =>
                t ? positionTop({ id: ids[k]!, logprob: lps[k]!, text: texts[k]! }, t, alternativeTexts[k], want, asIds) : null,
              ),
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
