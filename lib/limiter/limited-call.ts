import type { ExecutionContext } from '@nestjs/common';
import type { RateLimitContext } from '../contexts/rate-limit-context.js';
import type { LimitedRequest } from '../keys/identity.js';
import type { QuotaAnchor, TierSource } from '../policy/policy.types.js';
import type { RoutePolicy } from '../routes/route-policy.js';
import type { RequestEnd } from './request-end.js';

/**
 * One run of the guard on a request or message: what it is, where it is answered, and the route's
 * policies. Made once per run; every step of the guard, and every hook a subclass overrides,
 * takes it. What outlives the run (what the request was charged, the tiers its functions named,
 * what its outcome settles) is on its `record`, shared by every run on the same request.
 */
export interface LimitedCall {
  readonly context: ExecutionContext;
  /** The seam of the context's kind: reads the request, writes headers, builds refusals. */
  readonly seam: RateLimitContext;
  /** The request as key, cost and tier sources read it. */
  readonly request: LimitedRequest;
  /** The route's policies (the handler's, its class's and the module's). */
  readonly route: readonly RoutePolicy[];
  /** Those charged once per request, on its target: all of them, but on a GraphQL field those of `perSelection`. */
  readonly perRequest: readonly RoutePolicy[];
  /**
   * Those charged once per selection (a GraphQL field's own, see `RoutePolicy.onHandler`), after
   * `perRequest` admitted it: a field its own policy refuses leaves the operation's charge in place,
   * and a refused operation charges no field. None outside GraphQL.
   */
  readonly perSelection: readonly RoutePolicy[];
  /** What is charged once, however many times the guard runs on it (see `RateLimitContext.target`). */
  readonly target: object;
  /** What a policy the handler declares itself is charged once on (see `RateLimitContext.selection`). */
  readonly selection: object;
  /** The request's record, kept on its target. */
  readonly record: CallRecord;
}

/** A route's verdict under some of its policies, for the next run of the guard on the same target. */
export interface Charge {
  readonly policies: readonly RoutePolicy[];
  /** `true` when it was admitted at once; a refusal is always a (rejected) promise. */
  readonly verdict: boolean | Promise<boolean>;
}

/**
 * What the guard keeps on a request's target, or on a GraphQL selection: one object under one
 * symbol, so whichever guard or interceptor instance runs on the request finds it. A symbol
 * property costs next to nothing; a `WeakMap` entry per request cost about 1 µs of the guard's 2.
 */
export interface CallRecord {
  /** What it was charged, policy by policy. */
  charges?: Charge[];
  /** The tiers its tier functions named (or promised), by function: each runs once per request. */
  tiers?: Map<TierSource, string | undefined | Promise<string | undefined>>;
  /** The period starts its quotas' anchor functions named (or promised), by function, Unix ms: each runs once per request. */
  anchors?: Map<QuotaAnchor, number | undefined | Promise<number | undefined>>;
  /** The ends of what it was admitted under that its handler's outcome settles, until `RateLimitOutcomeInterceptor` takes them. */
  ends?: RequestEnd[];
  /** Its end as its transport tells it, asked once (`null`: the transport does not tell; see `RateLimitContext.ended`). */
  ended?: Promise<boolean> | null;
  /** An end kept here is settled when its transport's ends, and succeeds only if none of its fields failed (a GraphQL operation's). */
  judged?: boolean;
  /** A field of it failed (a GraphQL operation's): see `judged`. */
  failed?: boolean;
  /** The guard that left it to be decided after every guard (see `RateLimiter.defers`), until an interceptor takes it. */
  deferred?: AfterGuards;
  /** Its ends whose policies settle the real cost: its handler's values and meters go there, until an interceptor takes them. */
  settling?: RequestEnd[];
}

/** A guard that can limit a request from after every guard (`RateLimitGuard.limitAfterGuards`). */
export interface AfterGuards {
  limitAfterGuards(context: ExecutionContext): boolean | Promise<boolean>;
}

const RECORD = Symbol('nestjs-ratelimit');

interface Recorded {
  [RECORD]?: CallRecord;
}

/** The record kept on `holder` (a target or a selection), made on first use. */
export function recordOn(holder: object): CallRecord {
  return ((holder as Recorded)[RECORD] ??= {});
}

/**
 * The guard's run on a request in `context`, or `undefined` when nothing limits it: its route has
 * no policies, or the seam limits nothing there (a GraphQL subscription, say).
 */
export function limitedCall(
  context: ExecutionContext,
  seam: RateLimitContext,
  route: readonly RoutePolicy[],
): LimitedCall | undefined {
  if (route.length === 0) return undefined;
  const request = seam.request(context);
  if (request === undefined) return undefined;
  const target = seam.target?.(context) ?? context.getArgs();
  const selection = seam.selection?.(context) ?? target;
  const record = recordOn(target);
  if (selection === target)
    return { context, seam, request, route, perRequest: route, perSelection: NONE, target, selection, record };
  const { perRequest, perSelection } = splitOf(route);
  return { context, seam, request, route, perRequest, perSelection, target, selection, record };
}

const NONE: readonly RoutePolicy[] = Object.freeze([]);

/** Each route's policies split by where a GraphQL field charges them, worked out once per route. */
const SPLITS = new WeakMap<readonly RoutePolicy[], Pick<LimitedCall, 'perRequest' | 'perSelection'>>();

function splitOf(route: readonly RoutePolicy[]): Pick<LimitedCall, 'perRequest' | 'perSelection'> {
  let split = SPLITS.get(route);
  if (split === undefined) {
    const perSelection = route.filter((policy) => policy.onHandler === true);
    split = { perRequest: route.filter((policy) => policy.onHandler !== true), perSelection };
    SPLITS.set(route, split);
  }
  return split;
}

/** The ends kept on `holder` (a selection, else a target) for its handler's outcome, taken off it: a second call gets `undefined`. */
export function takeEnds(holder: object): RequestEnd[] | undefined {
  const record = (holder as Recorded)[RECORD];
  const ends = record?.ends;
  if (ends !== undefined) record!.ends = undefined;
  return ends;
}

/** The ends of `holder` (a selection, else a target) that settle its real cost, taken off it: one interceptor hears its handler. */
export function takeSettling(holder: object): RequestEnd[] | undefined {
  const record = (holder as Recorded)[RECORD];
  const settling = record?.settling;
  if (settling !== undefined) record!.settling = undefined;
  return settling;
}

/** The guard that deferred the request of `target`, taken off it: one interceptor decides it. */
export function takeDeferred(target: object): AfterGuards | undefined {
  const record = (target as Recorded)[RECORD];
  const deferred = record?.deferred;
  if (deferred !== undefined) record!.deferred = undefined;
  return deferred;
}
