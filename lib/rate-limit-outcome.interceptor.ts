import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  type NestInterceptor,
  Optional,
} from '@nestjs/common';
import { defer, finalize, from, mergeMap, type Observable, tap } from 'rxjs';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import type { AfterGuards } from './limiter/limited-call.js';
import { lendMeters } from './limiter/meter-loans.js';
import { RateLimiter } from './limiter/rate-limiter.js';
import type { RequestEnd } from './limiter/request-end.js';

/**
 * Tells the engine a request's handler outcome, where that is the request's end (see
 * `RateLimiter.began`): a GraphQL field's, a gateway message's, a microservice call's, whether it
 * completed or failed, or was dropped (its client gone). What the request owes then settles:
 * slots given back, `count: 'failures'` charges given back on success, latencies for `adaptive`
 * policies. It also decides the requests the guard left to be decided after every guard (see
 * `RateLimiter.defers`): a refusal ends them here. Only the routes that have such policies run
 * it: `@RateLimit` adds it to them, and the module registers it globally when one of its own
 * `policies` has them (`RateLimitInterceptor` does its work itself). In an app without
 * `RateLimitModule` (a controller's own test) it has nothing to do, and passes.
 */
@Injectable()
export class RateLimitOutcomeInterceptor implements NestInterceptor {
  constructor(
    @Optional() @Inject(RateLimitContexts) private readonly contexts: RateLimitContexts | undefined,
    @Optional() @Inject(RateLimiter) private readonly limiter: RateLimiter | undefined,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const seam = this.contexts?.for(context.getType());
    if (seam === undefined || this.limiter === undefined) return next.handle();
    const deferred = this.limiter.deferred(seam, context);
    return deferred === undefined ? this.watch(context, next) : this.decideThenWatch(deferred, context, next);
  }

  /**
   * Has `guard` limit the request from here, after every guard, then watches its handler. Dropped
   * before the verdict came (its client gone, which tears a gateway message's pipeline down), what
   * the verdict admitted ends with it, as a failure, as soon as it lands.
   */
  decideThenWatch(guard: AfterGuards, context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const decided = Promise.resolve(guard.limitAfterGuards(context));
    let watching = false;
    return from(decided).pipe(
      mergeMap(() => ((watching = true), this.watch(context, next))),
      finalize(() => {
        if (!watching)
          void decided.then(
            () => this.outcome(context)?.(false),
            () => undefined,
          );
      }),
    );
  }

  /**
   * The handler's observable, its outcome told to the engine when it completes, fails or is
   * dropped; for a request that settles its real cost, its values too (the last is its result),
   * and its meters lent to its parameters while it runs (`@RateLimitMeter()`).
   */
  private watch(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const ended = this.outcome(context);
    const settling = this.settling(context);
    if (ended === undefined && settling === undefined) return next.handle();
    let completed = false;
    const handled = settling === undefined ? next.handle() : this.lending(settling, context, next);
    const heard = settling === undefined ? undefined : (value: unknown) => settling.forEach((end) => end.heard(value));
    return handled.pipe(
      tap({ next: heard, complete: () => (completed = true) }),
      finalize(() => ended?.(completed)),
    );
  }

  /** The handler called with the meters of `settling` lent to its parameters, taken back when it is done. */
  private lending(settling: readonly RequestEnd[], context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return defer(() => {
      const meters = new Map(settling.flatMap((end) => [...end.meters()]));
      return next.handle().pipe(finalize(lendMeters(context, meters)));
    });
  }

  /** The ends of the request of `context` that settle its real cost (see `RateLimiter.settling`). */
  private settling(context: ExecutionContext): RequestEnd[] | undefined {
    const seam = this.contexts?.for(context.getType());
    return seam === undefined ? undefined : this.limiter?.settling(seam, context);
  }

  /** What the handler's outcome settles for the request of `context` (see `RateLimiter.outcome`); its seam is loaded by now. */
  private outcome(context: ExecutionContext): ((completed: boolean) => void) | undefined {
    const seam = this.contexts?.for(context.getType());
    return seam === undefined ? undefined : this.limiter?.outcome(seam, context);
  }
}
