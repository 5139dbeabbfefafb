import type { ExecutionContext } from '@nestjs/common';
import type { LimitedRequest } from '../keys/identity.js';
import type { RateLimitDecision } from '../stores/rate-limit-store.interface.js';

/**
 * What the guard needs of one kind of Nest context (`context.getType()`: `'http'`, `'graphql'`,
 * `'ws'`, `'rpc'`): the request its key and cost sources read, where its headers go, and the
 * errors that answer in the transport's own form. The decision path (policies, store,
 * all-or-nothing, fail modes, shadow, `leaky_bucket` waits) is one and the same for every kind;
 * only this seam differs. An app replaces one with `RateLimitContexts.use(type, seam)`.
 */
export interface RateLimitContext {
  /** The request as key and cost sources read it; `undefined`: this one is not limited (a GraphQL subscription). */
  request(context: ExecutionContext): LimitedRequest | undefined;
  /**
   * What the guard charges once, however many times it runs on it (a global guard and
   * `@UseGuards` together, the fields of one GraphQL operation): an object that lives as long as
   * the request or message, and that the guard can mark (not frozen). Default: the handler's
   * arguments (`context.getArgs()`).
   */
  target?(context: ExecutionContext): object;
  /**
   * What a policy the handler declares itself is charged once on, and where the outcome of a
   * decision made for it is kept (GraphQL: one selection of a field in one operation, however
   * many items of a list it resolves). An object that lives as long as `target`. Without it:
   * `target`.
   */
  selection?(context: ExecutionContext): object;
  /** Sets a rate-limit header on the answer (a transport without headers ignores it). */
  setHeader(context: ExecutionContext, name: string, value: string): void;
  /**
   * The answer several decisions share, when they do (GraphQL: the HTTP response of every field
   * of every operation a request carries): its headers are then written from all of them, as
   * one request's would be. Names it by an object that lives as long as the answer; `undefined`,
   * or a seam without it: each decision's answer is its own.
   */
  sharedAnswer?(context: ExecutionContext): object | undefined;
  /** Removes a header set before: a shared answer's `Retry-After` that a later refusal, never admittable, no longer warrants. */
  removeHeader?(context: ExecutionContext, name: string): void;
  /**
   * The error a refused request ends with; `decision` is the policy that frees up last, `cost`
   * what the request asked of it, `decisions` every policy's decision on the request.
   */
  refusal(
    decision: RateLimitDecision,
    cost: number,
    context: ExecutionContext,
    decisions: readonly RateLimitDecision[],
  ): Error;
  /** The error a request ends with when the limiter cannot decide and `failMode` is `'closed'`. */
  unavailable(cause: unknown, context: ExecutionContext): Error;
  /** Watches for the client going away while its request waits its turn; `undefined`: it cannot tell. */
  departure?(context: ExecutionContext): Departure | undefined;
  /** Told of each request limited by its IP address, so the seam can check how the address was found. */
  limitedByIp?(request: LimitedRequest): void;
  /**
   * The request's end as its transport tells it, with whether it succeeded: HTTP, its response
   * finished (succeeded: a final status < 400, whatever an exception filter made of it) or closed
   * first (a client gone, even before the limiter answered; no success). `undefined`, or a seam
   * without it: the transport tells no end (a gateway message, a microservice call), and the
   * handler's outcome is the request's end. Asked once per request, only of one whose policies
   * owe something at its end.
   */
  ended?(context: ExecutionContext): Promise<boolean> | undefined;
}

/** A request's client, watched while the request waits. */
export interface Departure {
  /** Aborts when the client goes away. */
  readonly signal: AbortSignal;
  /** The error the request ends with once its client has gone. */
  gone(): Error;
  /** Stops watching. */
  end(): void;
}
