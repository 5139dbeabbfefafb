import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  type NestInterceptor,
  Optional,
} from '@nestjs/common';
import { finalize, type Observable, tap } from 'rxjs';
import { outcomeTarget } from './contexts/rate-limit-context.js';
import { RateLimitContexts } from './contexts/rate-limit-contexts.js';
import { takeWatched } from './limiter/limited-call.js';
import { RateLimiter } from './limiter/rate-limiter.js';

/**
 * Settles what a request's outcome decides, for the policies that watch it: gives back the
 * charges of `count: 'failures'` policies when the request succeeded (HTTP: a final status < 400;
 * elsewhere: its handler ended without an error), and tells `adaptive` policies how long it took.
 * Only the routes that have such policies run it: `@RateLimit` adds it to them, and the module
 * registers it globally when one of its own `policies` has them (`RateLimitInterceptor` does its
 * work itself). It acts only on what the guard admitted and charged, once per request. In an app
 * without `RateLimitModule` (a controller's own test) it has nothing to settle, and passes.
 */
@Injectable()
export class RateLimitOutcomeInterceptor implements NestInterceptor {
  constructor(
    @Optional() @Inject(RateLimitContexts) private readonly contexts: RateLimitContexts | undefined,
    @Optional() @Inject(RateLimiter) private readonly limiter: RateLimiter,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const seam = this.contexts?.for(context.getType());
    const watched = seam === undefined ? undefined : takeWatched(outcomeTarget(seam, context));
    if (seam === undefined || watched === undefined) return next.handle();
    const startedAt = performance.now();
    const settle = (succeeded: boolean): void => this.limiter.settle(watched, succeeded, performance.now() - startedAt);
    const answered = seam.succeeded?.(context);
    if (answered !== undefined) {
      void answered.then(settle);
      return next.handle();
    }
    let completed = false;
    return next.handle().pipe(
      tap({ complete: () => (completed = true) }),
      finalize(() => settle(completed)),
    );
  }
}
