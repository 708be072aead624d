// The HTTP app: one fastify instance for every route (the transcoded RPCs of transcode.ts,
// the OpenAI-compatible, tokenizer and health routes of openai.ts, the viewer and the
// OpenAPI document of viewer.ts), and what they share. JSON bodies only (other content
// types: 415), each validated against a JSON schema (no type coercion; unknown fields
// refused); every call recorded once (metrics, what a drain waits for) and its token
// checked; errors become statuses in status.ts (the RPCs: google.rpc.Status) only.
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from 'fastify';
import {
  CtxprobeError,
  InvalidArgumentError,
  NotFoundError,
  TooLargeError,
  UnauthenticatedError,
  UnsupportedMediaTypeError,
} from '../common/errors.js';
import { codeNameOf } from '../api/status.js';
import { httpsOptions, type TlsMaterial } from '../serving/security.js';
import type { CallRecord, Service } from '../serving/service.js';
import { discardRest, refuseOversizedBeforeContinue } from './body-limit.js';
import { parseJsonBody } from './json-body.js';
import { registerOpenAiRoutes } from './openai.js';
import type { RouteConfig } from './route-config.js';
import { toHttpError } from './status.js';
import { registerTranscoded, statusBody } from './transcode.js';
import { registerViewer } from './viewer.js';

export interface HttpOptions {
  /** When given, `Authorization: Bearer <token>` must satisfy it (all but /health). */
  checkToken?: (header: string | undefined) => boolean;
  maxBodyBytes?: number;
  /** Serve over TLS (mutual TLS when the material has a client CA). */
  tls?: TlsMaterial;
}

const registeredRoutes = new WeakMap<FastifyInstance, string[]>();

/** The routes an app built here answers, as `POST /v1/probe` (what the OpenAPI test
 * checks the document against). */
export const routesOf = (app: FastifyInstance): readonly string[] => registeredRoutes.get(app) ?? [];

/** Every HTTP route over `service`, its hooks and its error handling, ready to listen. */
export function buildHttpApp(service: Service, options: HttpOptions = {}): FastifyInstance {
  const bodyLimit = options.maxBodyBytes ?? 64 * 1024 * 1024;
  const app = createApp(bodyLimit, options.tls);
  // Hooks run in the order they are added: the call's record first, then the routes' own.
  const failed = recordCalls(app, service, options.checkToken);
  answerErrors(app, bodyLimit, failed);
  // Every RPC over HTTP/JSON, from the proto's google.api.http rules.
  registerTranscoded(app, service, { bodyLimit, failed });
  registerViewer(app, options.checkToken !== undefined);
  registerOpenAiRoutes(app, service);
  return app;
}

/** The fastify instance: its body limit, TLS, validation, the routes it records (for
 * `routesOf`) and JSON as the one body type. */
function createApp(bodyLimit: number, tls: TlsMaterial | undefined): FastifyInstance {
  const app = Fastify({
    bodyLimit,
    ...(tls ? { https: httpsOptions(tls) } : {}),
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
  return app;
}

// Metric labels come from the route table, never from the raw path; a transcoded RPC is
// recorded as gRPC records it (its method name, its code's name).
const rpcOf = (req: FastifyRequest) => (req.routeOptions.config as RouteConfig | undefined)?.rpc;
const methodOf = (req: FastifyRequest) => rpcOf(req) ?? (req.routeOptions.url ? `http ${req.routeOptions.url}` : 'http other');

/** Where a call's failure is noted, for its record to end with. */
type NoteFailure = (req: FastifyRequest, failure: unknown) => void;

/** Every request a call of `service` (its metrics, what a drain waits for), from its first
 * hook, which also checks its token (a refused token is a call too). */
function recordCalls(app: FastifyInstance, service: Service, checkToken: HttpOptions['checkToken']): NoteFailure {
  const records = new WeakMap<FastifyRequest, { record?: CallRecord; failure?: unknown }>();
  app.addHook('onRequest', async (req) => {
    records.set(req, {});
    const open = (req.routeOptions.config as RouteConfig | undefined)?.open;
    if (checkToken && !open && !checkToken(req.headers.authorization)) {
      throw new UnauthenticatedError('authorization: a valid "Bearer <token>" is required');
    }
  });
  const end = (req: FastifyRequest, status: number) => {
    const r = records.get(req);
    if (!r) return;
    const code = !rpcOf(req) ? String(status) : r.failure !== undefined ? codeNameOf(r.failure) : status === 499 ? 'CANCELLED' : 'OK';
    (r.record ??= service.begin(methodOf(req))).end(code, r.failure);
  };
  // A call is in flight (what a drain waits for) once its body has arrived: a client that
  // never finishes sending one holds no drain. One refused before that is recorded as it ends.
  // From then on a client that hangs up ends the call with its socket (499, CANCELLED): an
  // answer sent to a closed socket never finishes, so `onResponse` never comes (a
  // non-streaming call cut off mid-work stayed in flight for good, uncounted, and held
  // every later drain to its deadline), and the work stops at its next pass.
  app.addHook('preValidation', async (req, reply) => {
    const r = records.get(req);
    if (!r || r.record) return;
    r.record = service.begin(methodOf(req));
    if (req.raw.socket?.destroyed) return end(req, 499);
    reply.raw.once('close', () => reply.raw.writableFinished || end(req, 499));
  });
  app.addHook('onResponse', async (req, reply) => end(req, reply.statusCode));
  app.addHook('onRequestAbort', async (req) => end(req, 499));
  return (req, failure) => {
    const r = records.get(req);
    if (r) r.failure = failure;
  };
}

/** Errors as the route's dialect writes them (an RPC's google.rpc.Status, else OpenAI's
 * shape), noted on the call; an unknown route is NOT_FOUND. */
function answerErrors(app: FastifyInstance, bodyLimit: number, noteFailure: NoteFailure): void {
  app.setErrorHandler(async (err: FastifyError, req, reply) => {
    // The client may still be sending what was refused: let it finish, to read the 413.
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') await discardRest(req.raw);
    const failure = fromFastify(err, bodyLimit);
    noteFailure(req, failure);
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
}

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
