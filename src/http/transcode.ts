// HTTP/JSON for every RPC, from the `google.api.http` rules in the proto — the rule
// grpc-gateway, Envoy's gRPC-JSON transcoder and Google's APIs read — and no route
// written by hand. Each rule becomes a fastify route that runs the same body as gRPC:
//
//   JSON body / query ─parseMessage─> fromObject ─encode─> requestDeserialize ─┐
//                                                                               v
//   JSON answer <─formatMessage─ decode <─responseSerialize─ answer <─ ApiMethod (src/api)
//
// so a request reaches the body exactly as gRPC would decode it, and an answer leaves as
// the bytes gRPC would send, printed by protobuf's JSON mapping (src/api/json-mapping.ts).
// Streams (server streaming, ScoreStream) answer newline-delimited JSON, one message a
// line, or server-sent events (`data: <message>`) when the client accepts
// text/event-stream; ScoreStream takes its messages as a JSON array or NDJSON lines, the
// lines dispatched as they arrive (a client that streams its body gets answers meanwhile,
// as over gRPC).
// A failure before the first message is an HTTP error; after it, a last
// `{"error": status}` line (SSE: an `error` event). Errors are google.rpc.Status-shaped:
// {code: <gRPC code number>, message, details: []}, with the HTTP status of the error
// table (src/http/status.ts). The deadline is the `grpc-timeout` header (gRPC's own
// format: 30S, 500m …, as grpc-gateway takes it); a client that hangs up cancels.
import { PassThrough, type Readable } from 'node:stream';
import protobuf from 'protobufjs';
import type { MethodDefinition } from '@grpc/proto-loader';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { parseJsonBody } from './json-body.js';
import { ConfigError, InvalidArgumentError, TooLargeError, errorMessage } from '../common/errors.js';
import type { CallContext, Service } from '../serving/service.js';
import { apiServices } from '../api/methods.js';
import { checkedText, type ApiMethod } from '../api/method-kinds.js';
import { loadDefinition } from '../api/proto.js';
import { apiRoot, fieldNamed, formatMessage, parseMessage } from '../api/json-mapping.js';
import { codeOf } from '../api/status.js';
import { clientGone } from './logprobs.js';
import { toHttpError } from './status.js';

export const HTTP_VERBS = ['get', 'put', 'post', 'delete', 'patch'] as const;

/** One RPC's HTTP binding, as its rule declares it. */
export interface HttpBinding {
  service: string; // ctxprobe.v1.Scoring
  name: string; // Score
  verb: (typeof HTTP_VERBS)[number];
  path: string;
  /** `*`: the whole request is the body; empty: no body (fields from the query). */
  body: '*' | '';
  method: protobuf.Method;
  requestType: protobuf.Type;
  responseType: protobuf.Type;
  kind: ApiMethod['kind'];
}

/** The `(google.api.http)` rule of every method that has one; a rule this transcoder
 * cannot serve (path variables, custom verbs, additional bindings, response_body, a body
 * naming one field) is refused here, naming its method, rather than served wrongly. */
export function httpBindings(root = apiRoot()): HttpBinding[] {
  const bindings: HttpBinding[] = [];
  const services = root.lookup('ctxprobe.v1') as protobuf.Namespace;
  for (const service of services.nestedArray.filter((n): n is protobuf.Service => n instanceof protobuf.Service)) {
    for (const method of service.methodsArray) {
      const options = (method.parsedOptions ?? []) as Record<string, unknown>[];
      const rule = options.find((o) => '(google.api.http)' in o)?.['(google.api.http)'] as Record<string, unknown> | undefined;
      if (!rule) continue;
      const where = `${service.name}.${method.name}'s (google.api.http) rule`;
      const verbs = HTTP_VERBS.filter((v) => typeof rule[v] === 'string');
      const unsupported = Object.keys(rule).filter((k) => !(HTTP_VERBS as readonly string[]).includes(k) && k !== 'body');
      if (verbs.length !== 1 || unsupported.length > 0)
        throw new ConfigError(`${where}: one of ${HTTP_VERBS.join(', ')} and body only (has ${Object.keys(rule).join(', ')})`);
      const verb = verbs[0]!;
      const path = rule[verb] as string;
      if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(path))
        throw new ConfigError(`${where}: ${path}: only literal paths are served (no {variables} or :verbs)`);
      const body = (rule.body ?? '') as string;
      if (body !== '*' && body !== '') throw new ConfigError(`${where}: body "${body}": only "*" or none`);
      if ((verb === 'get' || verb === 'delete') !== (body === ''))
        throw new ConfigError(`${where}: ${verb} ${body ? 'with' : 'without'} a body`);
      method.resolve();
      const kind = method.requestStream ? 'each-message' : method.responseStream ? 'server-stream' : 'unary';
      bindings.push({
        service: service.fullName.replace(/^\./, ''),
        name: method.name,
        verb,
        path,
        body,
        method,
        requestType: method.resolvedRequestType!,
        responseType: method.resolvedResponseType!,
        kind,
      });
    }
  }
  return bindings;
}

/** What the transcoded routes share with the app's hooks: the route config that marks
 * them (metrics label, error shape) and where a failure answered in-band is noted. */
export interface TranscodeHooks {
  /** The call failed after its answer began (a stream's last line): record it so. */
  failed(req: FastifyRequest, err: unknown): void;
  /** The body limit (--max-message-bytes): fastify's own parsers apply it; an NDJSON body,
   * read as it arrives, is counted here. */
  bodyLimit: number;
}

export function registerTranscoded(app: FastifyInstance, service: Service, hooks: TranscodeHooks): HttpBinding[] {
  const def = loadDefinition();
  const bodies = apiServices(service) as unknown as Record<string, Record<string, ApiMethod>>;
  const bindings = httpBindings();
  // ScoreStream's messages may come one JSON value a line: the body stays a stream, read
  // by the route as it arrives.
  app.addContentTypeParser('application/x-ndjson', (_req, payload, done) => done(null, { ndjson: payload }));
  for (const b of bindings) {
    const serial = (def[b.service] as unknown as Record<string, MethodDefinition<object, object>>)[b.name]!;
    const body = bodies[b.service]![b.name]!;
    if (body.kind !== b.kind) throw new ConfigError(`${b.service}.${b.name}: the proto says ${b.kind}, its body is ${body.kind}`);
    const decode = (json: unknown, field = '') => {
      const message = b.requestType.fromObject(parseMessage(b.requestType, json, field));
      return serial.requestDeserialize(Buffer.from(b.requestType.encode(message).finish()));
    };
    const encode = (answer: object) => formatMessage(b.responseType, b.responseType.decode(serial.responseSerialize(answer)));
    app.route({
      method: b.verb.toUpperCase() as 'GET',
      url: b.path,
      config: { rpc: b.name },
      handler: async (req, reply) => {
        const call = callContext(req, reply);
        if (body.kind === 'unary') {
          const request = checkedText(decode(b.body ? bodyOf(req) : fromQuery(b.requestType, req.query)));
          return reply.type('application/json').send(JSON.stringify(encode(await body.run(request, call))));
        }
        const out = streamOut(req, reply);
        try {
          if (body.kind === 'server-stream') {
            const request = checkedText(decode(bodyOf(req)));
            await body.run(request, call, (answer) => out.write(encode(answer as object)));
          } else if (isNdjson(req.body)) {
            await answerAsTheyArrive(req.body.ndjson, hooks.bodyLimit, call, {
              decode: (m, i) => decode(m, `message ${i}`),
              answer: (m, i, c) => body.answer(m, i, c),
              write: (answer) => out.write(encode(answer as object)),
            });
          } else {
            const requests = messagesOf(req).map((m, i) => decode(m, `message ${i}`));
            await Promise.all(requests.map(async (m, i) => out.write(encode((await body.answer(m, i, call)) as object))));
          }
        } catch (err) {
          if (!out.started) throw err; // nothing sent yet: an HTTP error
          hooks.failed(req, err);
          out.error(err);
        }
        return out.end();
      },
    });
  }
  return bindings;
}

/** The google.rpc.Status-shaped error body and its HTTP status. */
export function statusBody(err: unknown): { status: number; body: { code: number; message: string; details: unknown[] } } {
  return { status: toHttpError(err).status, body: { code: codeOf(err), message: errorMessage(err), details: [] } };
}

/** The call's cancellation (the client hung up) and deadline (`grpc-timeout`). */
function callContext(req: FastifyRequest, reply: FastifyReply): CallContext {
  const header = req.headers['grpc-timeout'];
  if (header === undefined) return { signal: clientGone(reply) };
  const m = typeof header === 'string' ? /^(\d{1,8})([HMSmun])$/.exec(header) : null;
  if (!m)
    throw new InvalidArgumentError(
      'grpc-timeout',
      `expected digits and a unit (H, M, S, m, u, n), as gRPC writes it (30S, 500m); got ${JSON.stringify(header)}`,
    );
  const ms = Number(m[1]) * { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 }[m[2] as 'H'];
  return { signal: clientGone(reply), deadline: Date.now() + ms };
}

function bodyOf(req: FastifyRequest): unknown {
  const body = req.body as unknown;
  if (body === undefined) throw new InvalidArgumentError('body', 'a JSON request is required (Content-Type: application/json)');
  if (isNdjson(body)) throw new InvalidArgumentError('body', 'one JSON message (application/json) is expected here');
  return body;
}

const isNdjson = (v: unknown): v is { ndjson: Readable } =>
  typeof v === 'object' && v !== null && 'ndjson' in v && Object.keys(v).length === 1;

/** A streamed call's messages when the body came whole: a JSON array or one object. */
function messagesOf(req: FastifyRequest): unknown[] {
  const body = req.body as unknown;
  if (body === undefined)
    throw new InvalidArgumentError('body', 'messages are required: a JSON array, or one JSON object a line (application/x-ndjson)');
  return Array.isArray(body) ? body : [body];
}

/** An NDJSON body's messages as they arrive: per chunk, its complete lines parsed, each by
 * the rule for a JSON body (strict UTF-8, no key twice) and named as the message it is
 * (`message 0` is the first non-blank line), as its decoding and its answer name it. */
async function* ndjsonChunks(body: Readable, limit: number): AsyncGenerator<unknown[]> {
  let pending: Buffer[] = []; // the line begun and not yet ended, as it came
  let index = 0;
  let bytes = 0;
  const parse = (line: Buffer): unknown[] => (isBlank(line) ? [] : [parseJsonBody(line, `message ${index++}`)]);
  for await (const chunk of body as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    if (bytes > limit) throw new TooLargeError(`body: over the limit of ${limit} bytes (--max-message-bytes)`);
    // Lines are cut on the byte 0x0A, which no multi-byte UTF-8 sequence contains.
    const messages: unknown[] = [];
    let from = 0;
    for (let nl = chunk.indexOf(0x0a); nl >= 0; nl = chunk.indexOf(0x0a, from)) {
      pending.push(chunk.subarray(from, nl));
      messages.push(...parse(Buffer.concat(pending)));
      pending = [];
      from = nl + 1;
    }
    if (from < chunk.length) pending.push(chunk.subarray(from));
    yield messages;
  }
  yield parse(Buffer.concat(pending));
}

/** A line of JSON whitespace only (a trailing CR included). */
const isBlank = (line: Buffer) => line.every((b) => b === 0x20 || b === 0x09 || b === 0x0d);

/** Each NDJSON message answered as soon as it is ready, dispatched as its line arrives.
 * A chunk's lines are all decoded before any of them is dispatched, so a body that
 * arrives at once is refused whole when one line is bad (an HTTP error, nothing answered),
 * as a JSON array is. The first failure stops the reading and cancels the messages still
 * running; answers after it are not written. */
async function answerAsTheyArrive<Req, Res>(
  body: Readable,
  limit: number,
  call: CallContext,
  each: {
    decode: (json: unknown, index: number) => Req;
    answer: (req: Req, index: number, call: CallContext) => Promise<Res>;
    write: (answer: Res) => void;
  },
): Promise<void> {
  const stop = new AbortController();
  const running: CallContext = { ...call, signal: call.signal ? AbortSignal.any([call.signal, stop.signal]) : stop.signal };
  const pending: Promise<void>[] = [];
  let failure: { err: unknown } | undefined;
  let index = 0;
  try {
    for await (const messages of ndjsonChunks(body, limit)) {
      const requests = messages.map((json) => {
        const i = index++;
        return { i, m: each.decode(json, i) };
      });
      for (const { i, m } of requests) {
        pending.push(
          each.answer(m, i, running).then(
            (a) => void (failure || each.write(a)),
            (err: unknown) => void (failure ??= { err }),
          ),
        );
      }
      if (failure) break;
    }
  } catch (err) {
    failure ??= { err };
  }
  if (failure) {
    stop.abort();
    body.resume(); // the rest of the body is read and dropped
  }
  await Promise.all(pending);
  if (failure) throw failure.err;
}

/** A GET's query as the JSON its request's fields would have: each key a field (JSON or
 * proto name), repeated when given more than once; booleans from true/false. */
function fromQuery(type: protobuf.Type, query: unknown): unknown {
  const out: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries((query ?? {}) as Record<string, string | string[]>)) {
    const f = fieldNamed(type, key);
    if (!f || (f.resolvedType instanceof protobuf.Type && !f.repeated)) {
      throw new InvalidArgumentError(key, `unknown query parameter: ${type.name} has no scalar field ${JSON.stringify(key)}`);
    }
    const values = (Array.isArray(raw) ? raw : [raw]).map((v) =>
      f.type === 'bool' ? (v === 'true' ? true : v === 'false' ? false : v) : v,
    );
    out[key] = f.repeated ? values : values.at(-1);
  }
  return out;
}

/** A streamed answer, begun by its first message (so a failure before it can still be an
 * HTTP error): NDJSON, or SSE when the client asked for text/event-stream. */
function streamOut(req: FastifyRequest, reply: FastifyReply) {
  const sse = (req.headers.accept ?? '').includes('text/event-stream');
  const pipe = new PassThrough();
  let started = false;
  const begin = () => {
    if (started) return;
    started = true;
    void reply
      .header('cache-control', 'no-cache')
      .type(sse ? 'text/event-stream' : 'application/x-ndjson')
      .send(pipe);
  };
  return {
    get started() {
      return started;
    },
    write(message: unknown) {
      begin();
      pipe.write(sse ? `data: ${JSON.stringify(message)}\n\n` : `${JSON.stringify(message)}\n`);
    },
    error(err: unknown) {
      const { body } = statusBody(err);
      pipe.write(sse ? `event: error\ndata: ${JSON.stringify(body)}\n\n` : `${JSON.stringify({ error: body })}\n`);
    },
    end(): FastifyReply {
      begin(); // a stream with no message is still a 200 with an empty body
      pipe.end();
      return reply;
    },
  };
}
