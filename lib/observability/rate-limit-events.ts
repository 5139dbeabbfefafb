import { channel } from 'node:diagnostics_channel';
import type { ExecutionContext } from '@nestjs/common';
import { routeName } from '../keys/identity-warnings.js';
import type { ContextType, FailMode } from '../rate-limit-options.interface.js';
import type { RateLimitStoreError } from '../stores/rate-limit-store.error.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/**
 * What became of a request under a policy (`ratelimit.result`), or of the whole request (the
 * decision event's `result`): `allowed`, `refused`; `shadow_refused` (refused, let through by
 * `mode: 'shadow'`); `failed_open`, `failed_closed` (the store could not decide: `failMode`
 * answered); `local` (decided by the in-process limiter of `failMode: 'local'`); `skipped` (a
 * `skipIf` let it pass uncharged).
 */
export type RateLimitResult =
  'allowed' | 'refused' | 'shadow_refused' | 'failed_open' | 'failed_closed' | 'local' | 'skipped';

/**
 * The message of the `nestjs-ratelimit:decision` diagnostics channel: one per request or message
 * the module decides. It carries what the store answered, never the identity it was asked about.
 *
 * @example
 * diagnostics_channel.subscribe('nestjs-ratelimit:decision', (message) => {
 *   const { route, result } = message as RateLimitDecisionEvent;
 *   if (result === 'refused') refusals.inc({ route });
 * });
 */
export interface RateLimitDecisionEvent {
  /** The kind of context: `'http'`, `'graphql'`, `'ws'`, `'rpc'`. */
  context: ContextType;
  /** The handler, as `Controller.handler`. */
  route: string;
  /** Each policy's decision; empty when none was made (every policy skipped, or the store failed). */
  decisions: readonly RateLimitDecision[];
  result: RateLimitResult;
}

/**
 * The message of the `nestjs-ratelimit:store-error` diagnostics channel: a store call that failed
 * or timed out, after which `failMode` decides. Calls the circuit breaker holds back make none.
 */
export interface RateLimitStoreErrorEvent {
  error: RateLimitStoreError;
  failMode: FailMode;
}

const decisionChannel = channel('nestjs-ratelimit:decision');
const storeErrorChannel = channel('nestjs-ratelimit:store-error');

/** Publishes a decision, built only when someone listens. */
export function publishDecision(
  context: ExecutionContext,
  decisions: readonly RateLimitDecision[],
  result: RateLimitResult,
): void {
  if (!decisionChannel.hasSubscribers) return;
  const event: RateLimitDecisionEvent = { context: context.getType(), route: routeName(context), decisions, result };
  decisionChannel.publish(event);
}

/** Publishes a store failure, built only when someone listens. */
export function publishStoreError(error: RateLimitStoreError, failMode: FailMode): void {
  if (!storeErrorChannel.hasSubscribers) return;
  const event: RateLimitStoreErrorEvent = { error, failMode };
  storeErrorChannel.publish(event);
}

/** Whether anyone listens to decisions: else nothing need be worked out for them. */
export function decisionsWatched(): boolean {
  return decisionChannel.hasSubscribers;
}
