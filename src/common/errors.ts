// One error model for the whole server. Code below the transports throws these; each
// transport maps `kind` to its own status in one table (src/api/status.ts for gRPC codes,
// src/http/status.ts) and nothing else maps errors.
export type ErrorKind =
  | 'invalid_argument'
  | 'not_found'
  | 'too_large'
  | 'unsupported_media_type'
  | 'overloaded'
  | 'cancelled'
  | 'deadline_exceeded'
  | 'unavailable'
  | 'unauthenticated'
  | 'checkpoint'
  | 'device'
  | 'config'
  | 'model_output';

export abstract class CtxprobeError extends Error {
  abstract readonly kind: ErrorKind;
}

/** An error about one field of a request; the message starts with its path. */
abstract class FieldError extends CtxprobeError {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`${field}: ${detail}`);
  }
}

/** Something a client sent is wrong; `field` is its path (`items[2].continuations[0]`). */
export class InvalidArgumentError extends FieldError {
  readonly kind = 'invalid_argument';
  override readonly name = 'InvalidArgumentError';
}

/** A named thing (a model, a route) does not exist here. */
export class NotFoundError extends FieldError {
  readonly kind = 'not_found';
  override readonly name = 'NotFoundError';
}

/** A request is larger than a configured limit allows (a body, a message). */
export class TooLargeError extends CtxprobeError {
  readonly kind = 'too_large';
  override readonly name = 'TooLargeError';
}

/** A body in a format the endpoint does not take (HTTP: not JSON). */
export class UnsupportedMediaTypeError extends CtxprobeError {
  readonly kind = 'unsupported_media_type';
  override readonly name = 'UnsupportedMediaTypeError';
}

/** The model's queue is full: try later or elsewhere. */
export class OverloadedError extends CtxprobeError {
  readonly kind = 'overloaded';
  override readonly name = 'OverloadedError';
}

/** The caller went away or cancelled. */
export class CancelledError extends CtxprobeError {
  readonly kind = 'cancelled';
  override readonly name = 'CancelledError';
  constructor(message = 'the call was cancelled') {
    super(message);
  }
}

export class DeadlineExceededError extends CtxprobeError {
  readonly kind = 'deadline_exceeded';
  override readonly name = 'DeadlineExceededError';
  constructor(message = 'deadline exceeded before the work was done') {
    super(message);
  }
}

/** The server cannot take work now (loading, draining): retry, maybe on another replica. */
export class UnavailableError extends CtxprobeError {
  readonly kind = 'unavailable';
  override readonly name = 'UnavailableError';
}

export class UnauthenticatedError extends CtxprobeError {
  readonly kind = 'unauthenticated';
  override readonly name = 'UnauthenticatedError';
}

/** A checkpoint folder is unreadable, incomplete or describes something not supported. */
export class CheckpointError extends CtxprobeError {
  readonly kind = 'checkpoint';
  override readonly name = 'CheckpointError';
}

/** A device or execution provider that cannot be had (e.g. CUDA without its provider). */
export class DeviceError extends CtxprobeError {
  readonly kind = 'device';
  override readonly name = 'DeviceError';
}

/** A server setting (flag, environment, model repository, secret file) is wrong. */
export class ConfigError extends CtxprobeError {
  readonly kind = 'config';
  override readonly name = 'ConfigError';
}

/** The model computed a value that is not a number (NaN, infinity) for a request: its
 * weights overflow float32 on that input. Answered as an error, never as a number. */
export class NonFiniteOutputError extends CtxprobeError {
  readonly kind = 'model_output';
  override readonly name = 'NonFiniteOutputError';
}

/** The kind of any thrown value; anything not ours is an internal error. */
export function errorKind(err: unknown): ErrorKind | 'internal' {
  return err instanceof CtxprobeError ? err.kind : 'internal';
}

export function errorMessage(err: unknown): string {
  if (err instanceof CtxprobeError) return err.message;
  return `internal error: ${(err as Error)?.message ?? String(err)}`;
}

/** Refuse a token id outside [0, vocab), naming it as `field[i]`. */
export function checkTokenIds(ids: readonly number[], vocab: number, field: string): void {
  ids.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id >= vocab) throw new InvalidArgumentError(`${field}[${i}]`, `token id ${id} is outside the vocabulary [0, ${vocab})`);
  });
}

/** A value as an error message shows it: short whatever was sent or stored (a config value
 * may be a megabyte string), numbers as JavaScript writes them (1e999 parses to Infinity). */
export function shownValue(v: unknown): string {
  const text = typeof v === 'number' ? String(v) : (JSON.stringify(v) ?? String(v));
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
