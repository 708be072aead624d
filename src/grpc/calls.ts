// The API's bodies (src/api/methods.ts) as grpc-js handlers: each call is recorded once
// (metrics, what a drain waits for), its cancellation and deadline become the serving
// layer's CallContext, and no error escapes: it ends the call with its status.
import * as grpc from '@grpc/grpc-js';
import type { CallContext, Service } from '../serving/service.js';
import { checkedText, type ApiMethod, type EachMessage, type ServerStream, type Unary } from '../api/method-kinds.js';
import { codeName, toStatus } from './status.js';

/** The parts of a server call that cancellation needs (unary, streaming, duplex). */
type Cancellable = {
  getDeadline(): grpc.Deadline;
  on(e: 'cancelled', f: () => void): unknown;
  readonly cancelled: boolean;
};

function callContext(call: Cancellable): CallContext {
  const controller = new AbortController();
  if (call.cancelled) controller.abort();
  else call.on('cancelled', () => controller.abort());
  const deadline = call.getDeadline();
  return { signal: controller.signal, deadline: deadline instanceof Date ? deadline.getTime() : Number(deadline) };
}

/** A service's bodies as the handlers grpc-js's `addService` takes. */
export function grpcHandlers(service: Service, methods: Record<string, ApiMethod>): grpc.UntypedServiceImplementation {
  const handlers: grpc.UntypedServiceImplementation = {};
  for (const [name, method] of Object.entries(methods)) {
    handlers[name] =
      method.kind === 'unary'
        ? unary(service, name, method)
        : method.kind === 'server-stream'
          ? serverStream(service, name, method)
          : eachMessage(service, name, method);
  }
  return handlers;
}

function unary<Req, Res>(service: Service, name: string, method: Unary<Req, Res>): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const record = service.begin(name);
    Promise.resolve()
      .then(() => method.run(checkedText(call.request), callContext(call)))
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

/** `write` drops answers once the client has gone; the call ends with OK or the error's status. */
function serverStream<Req, Res>(service: Service, name: string, method: ServerStream<Req, Res>): grpc.handleServerStreamingCall<Req, Res> {
  return (call) => {
    const record = service.begin(name);
    const write = (res: Res) => {
      if (!call.cancelled) call.write(res);
    };
    Promise.resolve()
      .then(() => method.run(checkedText(call.request), callContext(call), write))
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

/** One call for the whole stream: each message is answered as soon as it is ready; the
 * server ends the stream after the client half-closes and the last answer is out. */
function eachMessage<Req, Res>(service: Service, name: string, method: EachMessage<Req, Res>): grpc.handleBidiStreamingCall<Req, Res> {
  return (call) => {
    const record = service.begin(name);
    const ctx = callContext(call);
    let pending = 0;
    let halfClosed = false;
    let count = 0;
    const maybeEnd = () => {
      if (!halfClosed || pending > 0) return;
      record.end(codeName(grpc.status.OK));
      call.end();
    };
    call.on('data', (msg: Req) => {
      pending++;
      void method.answer(msg, count++, ctx).then((response) => {
        if (!call.cancelled && call.writable) call.write(response);
        pending--;
        maybeEnd();
      });
    });
    call.on('end', () => {
      halfClosed = true;
      maybeEnd();
    });
    call.on('error', () => {});
    call.on('cancelled', () => {
      halfClosed = true;
      pending = 0;
      record.end(codeName(grpc.status.CANCELLED));
    });
  };
}
