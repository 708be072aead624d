// The JSON schemas the OpenAI-compatible, tokenizer and health routes (openai.ts) validate
// their bodies with, and those routes as the OpenAPI document (openapi.ts) describes them:
// data only, so the document is made without the routes' code.
import { CHAT_SCHEMA, SAMPLING_PROPERTIES } from './generation.js';

// ---- schemas -----------------------------------------------------------------------------

const tokenIds = { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } };

export function completionsSchema(maxPrompts?: number) {
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

export const TOKENIZE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['prompt'],
  properties: { model: { type: 'string' }, prompt: { type: 'string' }, add_special_tokens: { type: 'boolean' } },
};

export const DETOKENIZE_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['tokens'],
  properties: { model: { type: 'string' }, tokens: { type: 'array', items: { type: 'integer', minimum: 0 } } },
};

export const MODEL_QUERY = { type: 'object', additionalProperties: false, properties: { model: { type: 'string' as const } } };

// ---- the routes in the OpenAPI document (openapi.ts) -----------------------------------------

/** A route of openai.ts as the OpenAPI document describes it: the schema it validates with,
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
      description: 'SERVING (200), LOADING with where the load is (503), or NOT_SERVING (503)',
      schema: {
        type: 'object',
        required: ['status'],
        properties: {
          status: { enum: ['SERVING', 'LOADING', 'NOT_SERVING'] },
          loading: {
            type: 'object',
            description:
              'the model loading now: its step, the fraction of the step done (null: a step with no measure), seconds in the step and left (estimated)',
            properties: {
              model: { type: 'string' },
              step: { type: 'string' },
              what: { type: 'string' },
              fraction: { type: ['number', 'null'] },
              stepSeconds: { type: 'number' },
              etaSeconds: { type: ['number', 'null'] },
              seconds: { type: 'number' },
            },
          },
        },
      },
    },
    open: true,
  },
];
