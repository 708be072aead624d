// The one place HTTP statuses come from: the error model's kinds (src/errors.ts) → status
// and OpenAI-style error type.
import { errorKind, errorMessage, type ErrorKind } from '../common/errors.js';

const HTTP_STATUS: Record<ErrorKind | 'internal', { status: number; type: string }> = {
  invalid_argument: { status: 400, type: 'invalid_request_error' },
  not_found: { status: 404, type: 'not_found_error' },
  too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  overloaded: { status: 429, type: 'rate_limit_error' },
  // nginx's "client closed request": nobody reads it, but the metrics and logs do.
  cancelled: { status: 499, type: 'cancelled' },
  deadline_exceeded: { status: 504, type: 'timeout_error' },
  unavailable: { status: 503, type: 'server_error' },
  unauthenticated: { status: 401, type: 'authentication_error' },
  checkpoint: { status: 500, type: 'server_error' },
  device: { status: 500, type: 'server_error' },
  config: { status: 500, type: 'server_error' },
  model_output: { status: 500, type: 'server_error' },
  internal: { status: 500, type: 'server_error' },
};

export interface HttpFailure {
  status: number;
  body: { error: { message: string; type: string; code: number } };
}

export function toHttpError(err: unknown): HttpFailure {
  const { status, type } = HTTP_STATUS[errorKind(err)];
  return { status, body: { error: { message: errorMessage(err), type, code: status } } };
}
