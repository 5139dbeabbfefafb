import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';
import { type RoutePolicy, watchesOutcome } from './route-policy.js';

/**
 * Where an admitted request keeps what its outcome settles, until `RateLimitOutcomeInterceptor`
 * takes it: on its target (see `RateLimitContext.target`), as its charges are (see `charges.ts`),
 * so whichever guard or interceptor instance runs on it finds it, and it is taken once. A GraphQL
 * field keeps it on its selection: each alias is settled by its own outcome.
 */
const WATCHED = Symbol('nestjs-ratelimit watched');

/** What one decision of the guard admitted a request under, that the request's outcome settles. */
export interface Watched {
  /** The decisions of its `count: 'failures'` policies: given back when the request succeeds. */
  readonly refunds: RateLimitDecision[];
  /** Its adaptive policies: the request's latency steers their rate. */
  readonly adaptive: RoutePolicy[];
}

interface Marked {
  [WATCHED]?: Watched[];
}

/** What an admitted request owes its policies that watch its outcome; `undefined` when none does. */
export function watchedOf(policies: readonly RoutePolicy[], decisions: readonly RateLimitDecision[]): Watched | undefined {
  let watched: Watched | undefined;
  for (let i = 0; i < policies.length; i++) {
    if (!watchesOutcome(policies[i])) continue;
    watched ??= { refunds: [], adaptive: [] };
    if (policies[i].refundsSuccess) watched.refunds.push(decisions[i]);
    if (policies[i].adaptive !== undefined) watched.adaptive.push(policies[i]);
  }
  return watched;
}

/** Keeps `watched` on a request's target for its outcome. */
export function watch(target: object, watched: Watched): void {
  ((target as Marked)[WATCHED] ??= []).push(watched);
}

/** What the request's outcome settles, taken off its target (a second call gets `undefined`). */
export function takeWatched(target: object): Watched[] | undefined {
  const watched = (target as Marked)[WATCHED];
  if (watched !== undefined) (target as Marked)[WATCHED] = undefined;
  return watched;
}
