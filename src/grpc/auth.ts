// Bearer-token authentication for gRPC: an interceptor that answers UNAUTHENTICATED
// (from the status table) unless the call carries a valid token. Health checks stay
// open so orchestrators can probe.
import * as grpc from '@grpc/grpc-js';
import { UnauthenticatedError } from '../common/errors.js';
import { tokenChecker } from '../serving/security.js';
import { toStatus } from './status.js';

/** Methods reachable without a token: the health service, for load balancers and probes. */
const OPEN_PREFIXES = ['/grpc.health.v1.Health/'];

/** A server interceptor that answers UNAUTHENTICATED unless `authorization: Bearer <token>`
 * carries one of `tokens` (compared in constant time). A refused call never reaches its
 * handler, so `refused` hears of it (the path, the error), to be counted as handlers count. */
export function bearerAuth(tokens: string[], refused?: (path: string, err: Error) => void): grpc.ServerInterceptor {
  const valid = tokenChecker(tokens);
  return (method, call) => {
    const open = OPEN_PREFIXES.some((p) => method.path.startsWith(p));
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        const header = metadata.get('authorization')[0];
        if (open || (typeof header === 'string' && valid(header))) return next(metadata);
        const err = new UnauthenticatedError('authorization: a valid "Bearer <token>" is required');
        refused?.(method.path, err);
        call.sendStatus(toStatus(err));
      })
      .build();
    return new grpc.ServerInterceptingCall(call, new grpc.ResponderBuilder().withStart((next) => next(listener)).build());
  };
}
