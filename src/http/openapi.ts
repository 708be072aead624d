// The OpenAPI 3 document of the HTTP/JSON API, derived from the proto: a path per
// `google.api.http` rule, a schema per message in its JSON mapping (lowerCamelCase
// properties, enums by name, 64-bit integers as strings, wrappers as bare values),
// the proto's comments as descriptions. `npm run build` writes it to dist/openapi.json
// (scripts/build-assets.mjs); the server serves that file at /openapi.json.
import protobuf from 'protobufjs';
import { apiRoot, jsonName, WRAPPERS } from '../api/json-mapping.js';
import { httpBindings, type HttpBinding } from './transcode.js';
import { OPENAI_ROUTE_DOCS, type RouteDoc } from './openai-schemas.js';

type Schema = Record<string, unknown>;

const STATUS_SCHEMA: Schema = {
  type: 'object',
  description: 'google.rpc.Status: the gRPC code number, the message naming the field at fault, no details',
  properties: {
    code: { type: 'integer', format: 'int32', description: 'gRPC status code (3: INVALID_ARGUMENT, 5: NOT_FOUND, …)' },
    message: { type: 'string' },
    details: { type: 'array', items: { type: 'object' } },
  },
  required: ['code', 'message', 'details'],
};

const OPENAI_ERROR_SCHEMA: Schema = {
  type: 'object',
  description: "An error as OpenAI's API writes it: the message names the field at fault",
  properties: {
    error: {
      type: 'object',
      properties: {
        message: { type: 'string' },
        type: { type: 'string', description: 'invalid_request_error, authentication_error, not_found_error, …' },
        code: { type: 'integer', description: 'the HTTP status' },
      },
      required: ['message', 'type', 'code'],
    },
  },
  required: ['error'],
};

const ERRORS: [string, string][] = [
  ['400', 'bad input (the field named)'],
  ['401', 'missing or wrong bearer token'],
  ['404', 'unknown model'],
  ['413', 'over a size limit'],
  ['429', "the model's queue is full"],
  ['499', 'cancelled by the client'],
  ['500', 'the checkpoint, device or a setting cannot do this, or a bug'],
  ['503', 'loading or draining'],
  ['504', 'the deadline (grpc-timeout) passed'],
];

export function openApiDocument(version: string, bindings: HttpBinding[] = httpBindings(apiRoot())): Schema {
  const schemas: Record<string, Schema> = { Status: STATUS_SCHEMA, OpenAIError: OPENAI_ERROR_SCHEMA };
  const ref = (t: protobuf.Type) => {
    const name = t.fullName.replace(/^\./, '');
    if (!(name in schemas)) {
      schemas[name] = {}; // placeholder: recursive types end here
      schemas[name] = messageSchema(t, ref);
    }
    return { $ref: `#/components/schemas/${name}` };
  };
  const paths: Record<string, Schema> = {};
  for (const b of bindings) {
    const message = ref(b.responseType);
    const streamed = b.kind !== 'unary';
    const errors = Object.fromEntries(
      ERRORS.map(([status, why]) => [
        status,
        { description: why, content: { 'application/json': { schema: { $ref: '#/components/schemas/Status' } } } },
      ]),
    );
    const request = ref(b.requestType);
    paths[b.path] = {
      [b.verb]: {
        operationId: b.name,
        tags: [b.service.split('.').at(-1)],
        summary: firstSentence(b.method.comment),
        description: [
          b.method.comment ?? '',
          `gRPC: ${b.service}/${b.name}.`,
          streamed
            ? 'Answers stream: one JSON message a line (application/x-ndjson), or server-sent events (`data: <message>`) with `Accept: text/event-stream`; a failure after the first message is a last line `{"error": Status}` (SSE: an `error` event).'
            : '',
          b.kind === 'each-message'
            ? 'Body: the messages as a JSON array, or one JSON object a line (application/x-ndjson); each is answered as soon as it is ready, matched by item id.'
            : '',
        ]
          .filter(Boolean)
          .join('\n\n'),
        parameters: [
          {
            name: 'grpc-timeout',
            in: 'header',
            required: false,
            description: 'deadline, as gRPC writes it: digits and a unit (H, M, S, m, u, n), e.g. 30S or 500m',
            schema: { type: 'string', pattern: '^\\d{1,8}[HMSmun]$' },
          },
          ...(b.body ? [] : queryParameters(b.requestType)),
        ],
        ...(b.body
          ? {
              requestBody: {
                required: true,
                content:
                  b.kind === 'each-message'
                    ? { 'application/json': { schema: { type: 'array', items: request } }, 'application/x-ndjson': { schema: request } }
                    : { 'application/json': { schema: request } },
              },
            }
          : {}),
        responses: {
          '200': {
            description: streamed ? `a stream of ${b.responseType.name}` : b.responseType.name,
            content: streamed
              ? { 'application/x-ndjson': { schema: message }, 'text/event-stream': { schema: message } }
              : { 'application/json': { schema: message } },
          },
          ...errors,
        },
      },
    };
  }
  for (const r of OPENAI_ROUTE_DOCS) paths[r.path] = { [r.verb]: routeOperation(r) };
  return {
    openapi: '3.1.0',
    info: {
      title: 'ctxprobe HTTP/JSON API',
      version,
      description:
        "Every gRPC method of proto/ctxprobe/v1/ctxprobe.proto over HTTP/JSON, transcoded from its google.api.http rule; bodies and answers in protobuf's JSON mapping. Beside them, OpenAI-compatible completions and chat, vLLM's tokenizer routes and a health check, with their own JSON (snake_case fields, OpenAI's error shape). With bearer tokens configured, send `Authorization: Bearer <token>` (not to /health).",
    },
    components: { schemas, securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ bearer: [] }, {}],
    paths,
  };
}

/** An OpenAI-compatible, tokenizer or health route: the JSON schema it validates its body
 * with (OpenAPI 3.1's schemas are JSON Schema), its answer, OpenAI-shaped errors. */
function routeOperation(r: RouteDoc): Schema {
  const errorBody = { content: { 'application/json': { schema: { $ref: '#/components/schemas/OpenAIError' } } } };
  const errors = r.open
    ? { '503': { description: 'loading or draining', content: { 'application/json': { schema: r.answer.schema } } } }
    : Object.fromEntries(
        ERRORS.filter(([status]) => status !== '504').map(([status, why]) => [status, { description: why, ...errorBody }]),
      );
  return {
    operationId: r.operationId,
    tags: [r.tag],
    summary: r.summary,
    ...(r.open ? { security: [] } : {}),
    ...(r.query ? { parameters: Object.entries(r.query).map(([name, schema]) => ({ name, in: 'query', required: false, schema })) } : {}),
    ...(r.body ? { requestBody: { required: true, content: { 'application/json': { schema: r.body } } } } : {}),
    responses: {
      '200': {
        description: r.answer.description,
        content: {
          'application/json': { schema: r.answer.schema },
          ...(r.answer.streams ? { 'text/event-stream': { schema: { type: 'string' } } } : {}),
        },
      },
      ...errors,
    },
  };
}

const firstSentence = (text: string | null | undefined) =>
  (text ?? '')
    .split(/(?<=\.)\s/)[0]!
    .replace(/\s+/g, ' ')
    .trim();

function messageSchema(t: protobuf.Type, ref: (t: protobuf.Type) => Schema): Schema {
  if (WRAPPERS.has(t.fullName.replace(/^\./, ''))) return fieldSchema(t.fields.value!, ref);
  const properties: Record<string, Schema> = {};
  for (const f of t.fieldsArray) {
    const one = fieldSchema(f, ref);
    const described = (s: Schema) => {
      const notes = [f.comment, f.partOf ? `one of ${f.partOf.name}: ${f.partOf.oneof.join(', ')}` : ''].filter(Boolean).join('; ');
      return notes ? (s.$ref ? { allOf: [s], description: notes } : { ...s, description: notes }) : s;
    };
    properties[jsonName(f.name)] = described(
      f.map ? { type: 'object', additionalProperties: one } : f.repeated ? { type: 'array', items: one } : one,
    );
  }
  return { type: 'object', description: t.comment ?? undefined, properties, additionalProperties: false };
}

function fieldSchema(f: protobuf.Field, ref: (t: protobuf.Type) => Schema): Schema {
  const r = f.resolvedType;
  if (r instanceof protobuf.Type) return ref(r);
  if (r instanceof protobuf.Enum) return { type: 'string', enum: Object.keys(r.values) };
  switch (f.type) {
    case 'string':
      return { type: 'string' };
    case 'bool':
      return { type: 'boolean' };
    case 'bytes':
      return { type: 'string', format: 'byte' };
    case 'float':
    case 'double':
      return {
        oneOf: [
          { type: 'number', format: f.type },
          { type: 'string', enum: ['NaN', 'Infinity', '-Infinity'] },
        ],
      };
    case 'int64':
    case 'sint64':
    case 'sfixed64':
    case 'uint64':
    case 'fixed64':
      return { type: 'string', format: f.type === 'uint64' || f.type === 'fixed64' ? 'uint64' : 'int64', pattern: '^-?\\d+$' };
    default:
      return {
        type: 'integer',
        format: f.type.startsWith('u') || f.type === 'fixed32' ? 'uint32' : 'int32',
        ...(f.type.startsWith('u') ? { minimum: 0 } : {}),
      };
  }
}

function queryParameters(t: protobuf.Type): Schema[] {
  return t.fieldsArray
    .filter((f) => !(f.resolvedType instanceof protobuf.Type))
    .map((f) => ({
      name: jsonName(f.name),
      in: 'query',
      required: false,
      schema: f.repeated ? { type: 'array', items: fieldSchema(f, () => ({})) } : fieldSchema(f, () => ({})),
    }));
}
