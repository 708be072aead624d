// The error model's kinds (src/common/errors.ts) → gRPC status codes, by number: the one
// table both transports use (gRPC answers with the code; HTTP/JSON puts it in its
// google.rpc.Status-shaped error body beside its own HTTP status).
import { errorKind, type ErrorKind } from '../common/errors.js';

/** gRPC's status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html). */
export const CODE = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;
export type CodeName = keyof typeof CODE;

const CODE_OF: Record<ErrorKind | 'internal', CodeName> = {
  invalid_argument: 'INVALID_ARGUMENT',
  not_found: 'NOT_FOUND',
  too_large: 'RESOURCE_EXHAUSTED',
  unsupported_media_type: 'INVALID_ARGUMENT',
  overloaded: 'RESOURCE_EXHAUSTED',
  cancelled: 'CANCELLED',
  deadline_exceeded: 'DEADLINE_EXCEEDED',
  unavailable: 'UNAVAILABLE',
  unauthenticated: 'UNAUTHENTICATED',
  checkpoint: 'FAILED_PRECONDITION',
  device: 'FAILED_PRECONDITION',
  config: 'FAILED_PRECONDITION',
  model_output: 'INTERNAL',
  internal: 'INTERNAL',
};

/** The gRPC code an error answers with, by name (as the metrics label it). */
export const codeNameOf = (err: unknown): CodeName => CODE_OF[errorKind(err)];
/** … and by number. */
export const codeOf = (err: unknown): number => CODE[codeNameOf(err)];
