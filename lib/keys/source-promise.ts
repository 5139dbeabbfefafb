import { Deadlines } from '../utils/deadline-queue.js';

/**
 * The timers that bound key and tier functions' promises, one per timeout (the module's), shared
 * by every guard of the process: idle while no promise is pending, so there is nothing to stop.
 */
const deadlines = new Deadlines();

/**
 * Settles as a key or tier function's promise does within `timeoutMs`, else rejects with
 * `onTimeout()` (and ignores what the promise does later): an app's lookup that hangs must not
 * hold its request.
 */
export function withinTimeout<T>(promise: PromiseLike<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
  return deadlines.race(Promise.resolve(promise), timeoutMs, onTimeout);
}

/** Whether a source function answered with a promise (any thenable) rather than a value. */
export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null | undefined)?.then === 'function';
}

/**
 * A key function that did not answer within the module's `timeout`: the request has no identity
 * to be charged under, so `failMode` answers for it, as for a store that cannot decide.
 */
export class KeyTimeoutError extends Error {
  override readonly name = 'KeyTimeoutError';
}
