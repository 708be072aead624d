// What every gRPC handler shares: a call's cancellation and deadline as the serving
// layer's CallContext, and the wrapper that answers a unary call, records it once and
// never lets an error escape.
import * as grpc from '@grpc/grpc-js';
import type { CallContext, Service } from '../serving/service.js';
import { codeName, toStatus } from './status.js';
import { invalidTextField } from './strict-utf8.js';
import { InvalidArgumentError } from '../common/errors.js';
import type { Matrix } from './generated/ctxprobe/v1/Matrix.js';

/** The parts of a server call that cancellation needs (unary, streaming, duplex). */
type Cancellable = {
  getDeadline(): grpc.Deadline;
  on(e: 'cancelled', f: () => void): unknown;
  readonly cancelled: boolean;
};

export function callContext(call: Cancellable): CallContext {
  const controller = new AbortController();
  if (call.cancelled) controller.abort();
  else call.on('cancelled', () => controller.abort());
  const deadline = call.getDeadline();
  return { signal: controller.signal, deadline: deadline instanceof Date ? deadline.getTime() : Number(deadline) };
}

/** A decoded message, or INVALID_ARGUMENT naming its first string that was not UTF-8. */
export function checkedText<T>(message: T, prefix = ''): T {
  const field = invalidTextField(message);
  if (field) throw new InvalidArgumentError(prefix + field, 'is not valid UTF-8');
  return message;
}

export function unary<Req, Res>(
  service: Service,
  method: string,
  body: (req: Req, call: CallContext) => Promise<Res> | Res,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const record = service.begin(method);
    Promise.resolve()
      .then(() => body(checkedText(call.request), callContext(call)))
      .then(
        (response) => {
          record.end(codeName(grpc.status.OK));
          callback(null, response);
        },
        (err: unknown) => {
          const status = toStatus(err);
          record.end(codeName(status.code), err);
          callback(status);
        },
      );
  };
}

/** A server-streaming handler: `body` writes the answers (`write` drops them once the
 * client has gone); the call is recorded once and ends with OK or the error's status. */
export function serverStream<Req, Res>(
  service: Service,
  method: string,
  body: (req: Req, call: CallContext, write: (res: Res) => void) => Promise<void>,
): grpc.handleServerStreamingCall<Req, Res> {
  return (call) => {
    const record = service.begin(method);
    const write = (res: Res) => {
      if (!call.cancelled) call.write(res);
    };
    Promise.resolve()
      .then(() => body(checkedText(call.request), callContext(call), write))
      .then(
        () => {
          record.end(codeName(grpc.status.OK));
          call.end();
        },
        (err: unknown) => {
          const status = toStatus(err);
          record.end(codeName(status.code), err);
          call.emit('error', status); // grpc-js ends the stream with this status
        },
      );
  };
}

/** A row-major Matrix message. */
export function matrix(rows: number[][]): Matrix {
  return { rows: rows.length, cols: rows[0]?.length ?? 0, values: rows.flat() };
}
