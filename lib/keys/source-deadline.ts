import { DeadlineQueue } from '../utils/deadline-queue.js';

/**
 * Bounds the promises of key and tier functions by the module's `timeout`: an app's lookup that
 * hangs must not hold its request. One `DeadlineQueue` (one timer) serves every promise, made when
 * the first is pending; it is idle while none is, so there is nothing to stop at shutdown.
 */
export class SourceDeadlines {
  private queue: DeadlineQueue | undefined;

  /**
   * Settles as `promise` does within `timeoutMs` (milliseconds; the same for every call: the
   * module's `timeout`); otherwise rejects with `onTimeout()`, and ignores what `promise` does later.
   */
  race<T>(promise: Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
    return (this.queue ??= new DeadlineQueue(timeoutMs)).race(promise, onTimeout);
  }
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
