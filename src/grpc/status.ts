// gRPC statuses come from the one code table (src/api/status.ts).
import * as grpc from '@grpc/grpc-js';
import { errorMessage } from '../common/errors.js';
import { codeOf } from '../api/status.js';

export function toStatus(err: unknown): grpc.StatusObject {
  return { code: codeOf(err), details: errorMessage(err), metadata: new grpc.Metadata() };
}

/** The code's name, as the metrics label it (`OK`, `INVALID_ARGUMENT`, …). */
export const codeName = (code: grpc.status) => grpc.status[code];
