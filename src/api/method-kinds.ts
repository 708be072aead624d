// The API's methods as the proto declares them, free of any transport: each RPC is a
// body that takes a decoded request message (the object form @grpc/proto-loader gives:
// lowerCamelCase fields, enums by name, 64-bit integers as numbers, defaults filled,
// the set oneof member named) and answers with response messages in the same form.
//
//   gRPC (src/grpc/calls.ts) ─┐
//                             ├─> ApiMethod.run / answer ─> Service (src/serving)
//   HTTP/JSON (src/http/…)   ─┘
//
// The transports decode, record the call (metrics, drain), turn the client's cancel and
// deadline into a CallContext, and map thrown errors to their own statuses; the bodies
// translate messages to the serving layer's calls and back, and hold no model logic.
// Here: the kinds of body and the helpers they share; the services' bodies (scoring.ts,
// probing.ts, generation.ts) import them, and methods.ts gathers the bodies.
import type * as grpc from '@grpc/grpc-js';
import { InvalidArgumentError } from '../common/errors.js';
import type { CallContext } from '../serving/service.js';
import type { Matrix } from './generated/ctxprobe/v1/Matrix.js';
import { invalidTextField } from './strict-utf8.js';

/** One request, one answer. */
export interface Unary<Req, Res> {
  kind: 'unary';
  run(req: Req, call: CallContext): Promise<Res> | Res;
}
/** One request, answers written as they are made. */
export interface ServerStream<Req, Res> {
  kind: 'server-stream';
  run(req: Req, call: CallContext, write: (res: Res) => void): Promise<void>;
}
/** A stream of requests, each answered on its own (in any order) by one message that
 * carries its error, if any: the call itself only ends. */
export interface EachMessage<Req, Res> {
  kind: 'each-message';
  answer(req: Req, index: number, call: CallContext): Promise<Res>;
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ApiMethod = Unary<any, any> | ServerStream<any, any> | EachMessage<any, any>;

/** A service's bodies, typed by the handlers proto-loader-gen-types wrote for it. */
export type Methods<H> = {
  [K in keyof H as string extends K ? never : K]: H[K] extends grpc.handleUnaryCall<infer Req, infer Res>
    ? Unary<Req, Res>
    : H[K] extends grpc.handleServerStreamingCall<infer Req, infer Res>
      ? ServerStream<Req, Res>
      : H[K] extends grpc.handleBidiStreamingCall<infer Req, infer Res>
        ? EachMessage<Req, Res>
        : never;
};

export const unary = <Req, Res>(run: Unary<Req, Res>['run']): Unary<Req, Res> => ({ kind: 'unary', run });
export const serverStream = <Req, Res>(run: ServerStream<Req, Res>['run']): ServerStream<Req, Res> => ({ kind: 'server-stream', run });
export const eachMessage = <Req, Res>(answer: EachMessage<Req, Res>['answer']): EachMessage<Req, Res> => ({ kind: 'each-message', answer });

/** A decoded message, or INVALID_ARGUMENT naming its first string that was not UTF-8
 * (protobuf's invalid bytes and JSON's lone surrogate escapes alike). */
export function checkedText<T>(message: T, prefix = ''): T {
  const field = invalidTextField(message);
  if (field) throw new InvalidArgumentError(prefix + field, 'is not valid UTF-8');
  return message;
}

/** A row-major Matrix message. */
export function matrix(rows: number[][]): Matrix {
  return { rows: rows.length, cols: rows[0]?.length ?? 0, values: rows.flat() };
}
