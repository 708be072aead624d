// A body over --max-message-bytes is answered 413, and the client must get to read it.
// Fastify answers with `connection: close` and Node then destroys the socket while the
// client is still sending: a client that writes its whole body before reading (a raw
// socket, some HTTP libraries) got EPIPE instead of the 413 (field defects #8). Two doors:
//   Expect: 100-continue, content-length over the limit → 413 instead of 100 Continue
//                                                          (the client never sends it)
//   any other over-limit body → the rest is read and dropped (up to DISCARD_BOUND) before
//                               the 413 goes out, so the socket closes with nothing unread
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** How much of a refused body is read and dropped so its client can read the 413; past
 * it the socket is closed under the sender (it is sending far past the limit). Dropping
 * costs no memory: the bytes are counted, not kept. */
export const DISCARD_BOUND = 64 * 1024 * 1024;

/** Requests whose body was refused before `100 Continue`: nothing of it will come. */
const refusedBeforeContinue = new WeakSet<IncomingMessage>();

/** Node answers `Expect: 100-continue` by itself unless the server listens for it: a body
 * that its content-length says is over the limit is not invited. */
export function refuseOversizedBeforeContinue(server: Server, limit: number): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (Number(req.headers['content-length']) > limit) refusedBeforeContinue.add(req);
    else res.writeContinue();
    server.emit('request', req, res);
  });
}

/** Reads and drops what is left of a refused request body; resolves when it has all come,
 * the socket closed, or DISCARD_BOUND bytes were dropped. */
export function discardRest(req: IncomingMessage): Promise<void> {
  if (refusedBeforeContinue.has(req) || req.complete || req.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let dropped = 0;
    const done = () => {
      req.off('data', onData);
      req.off('end', done);
      req.off('close', done);
      req.off('error', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      dropped += chunk.length;
      if (dropped > DISCARD_BOUND) done();
    };
    req.on('data', onData);
    req.once('end', done);
    req.once('close', done);
    req.once('error', done);
    req.resume();
  });
}
