import { channel } from 'node:diagnostics_channel';
import type { ExecutionContext } from '@nestjs/common';
import { routeName } from '../rate-limit.messages.js';
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

/**
 * How a release of a request's slots that the store failed went on: `failed`, an attempt failed
 * and it is tried again after a wait; `landed`, given back after all; `lapsed`, given up because
 * the slots' lease has ended (the store let them go itself).
 */
export type ReleaseOutcome = 'failed' | 'landed' | 'lapsed';

/**
 * The message of the `nestjs-ratelimit:release` diagnostics channel: a release of the slots of a
 * request (`concurrency` policies) that the store failed, at each step of its retries. A release
 * that lands at once makes none.
 */
export interface RateLimitReleaseEvent {
  /** The policies whose slots are given back. */
  policies: readonly string[];
  outcome: ReleaseOutcome;
  /** What the store failed with (`failed`, `lapsed`). */
  error?: unknown;
}

const decisionChannel = channel('nestjs-ratelimit:decision');
const storeErrorChannel = channel('nestjs-ratelimit:store-error');
const releaseChannel = channel('nestjs-ratelimit:release');

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

/** Publishes a step of a failed release's retries, built only when someone listens. */
export function publishRelease(policies: readonly string[], outcome: ReleaseOutcome, error?: unknown): void {
  if (!releaseChannel.hasSubscribers) return;
  const event: RateLimitReleaseEvent = error === undefined ? { policies, outcome } : { policies, outcome, error };
  releaseChannel.publish(event);
}

/** Whether anyone listens to decisions: else nothing need be worked out for them. */
export function decisionsWatched(): boolean {
  return decisionChannel.hasSubscribers;
}
