// A call in the serving layer: the caller going away, or its deadline passing, takes its
// work out of the model's queue and stops work still being prepared for it.
import type { Submitted } from '../core/batcher.js';
import type { UnitScore } from '../core/units.js';
import { CancelledError, DeadlineExceededError } from '../common/errors.js';

const DEADLINE_SLACK_MS = 20;
/** The longest delay setTimeout keeps (a longer one fires after 1 ms). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What one call brings to the serving layer: how to learn the caller went away, and
 * when its answer stops being useful. */
export interface CallContext {
  signal?: AbortSignal;
  /** Milliseconds since the epoch; absent or Infinity: no deadline. */
  deadline?: number;
}

/** Wait for queued work; the caller going away or its deadline takes it out of the queue. */
export async function queued(submitted: Submitted, call: CallContext): Promise<UnitScore[]> {
  const cancel = () => submitted.cancel();
  let expired = false;
  const deadline = call.deadline ?? Infinity;
  // A delay over 2³¹−1 ms becomes 1 ms in setTimeout: a deadline 25 days out (or
  // grpc-timeout 597H) expired at once. That far, it is no deadline.
  const timer =
    Number.isFinite(deadline) && deadline - Date.now() <= MAX_TIMER_MS
      ? setTimeout(
          () => {
            expired = true;
            cancel();
          },
          Math.max(0, deadline - Date.now()),
        )
      : undefined;
  if (call.signal?.aborted) cancel();
  call.signal?.addEventListener('abort', cancel);
  try {
    return await submitted.result;
  } catch (err) {
    // grpc-js cancels a call at its deadline, sometimes a little before our own timer:
    // a cancellation that close to the deadline is the deadline.
    if (err instanceof CancelledError && (expired || Date.now() >= deadline - DEADLINE_SLACK_MS)) throw new DeadlineExceededError();
    throw err;
  } finally {
    clearTimeout(timer);
    call.signal?.removeEventListener('abort', cancel);
  }
}

/** Throw if the call has gone away or run out of time: work being prepared stops there. */
export function checkCall(call: CallContext): void {
  if (call.signal?.aborted) throw new CancelledError();
  if (call.deadline !== undefined && Date.now() >= call.deadline) throw new DeadlineExceededError();
}
