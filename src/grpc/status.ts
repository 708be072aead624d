// The one place gRPC statuses come from: the error model's kinds (src/errors.ts) → codes.
import * as grpc from '@grpc/grpc-js';
import { errorKind, errorMessage, type ErrorKind } from '../common/errors.js';

const GRPC_CODE: Record<ErrorKind | 'internal', grpc.status> = {
  invalid_argument: grpc.status.INVALID_ARGUMENT,
  not_found: grpc.status.NOT_FOUND,
  too_large: grpc.status.RESOURCE_EXHAUSTED,
  unsupported_media_type: grpc.status.INVALID_ARGUMENT,
  overloaded: grpc.status.RESOURCE_EXHAUSTED,
  cancelled: grpc.status.CANCELLED,
  deadline_exceeded: grpc.status.DEADLINE_EXCEEDED,
  unavailable: grpc.status.UNAVAILABLE,
  unauthenticated: grpc.status.UNAUTHENTICATED,
  checkpoint: grpc.status.FAILED_PRECONDITION,
  device: grpc.status.FAILED_PRECONDITION,
  config: grpc.status.FAILED_PRECONDITION,
  internal: grpc.status.INTERNAL,
};

export function toStatus(err: unknown): grpc.StatusObject {
  return { code: GRPC_CODE[errorKind(err)], details: errorMessage(err), metadata: new grpc.Metadata() };
}

/** The code's name, as the metrics label it (`OK`, `INVALID_ARGUMENT`, …). */
export const codeName = (code: grpc.status) => grpc.status[code];
