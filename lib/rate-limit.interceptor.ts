import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { RateLimitGuard } from './rate-limit.guard.js';
import { RateLimitOutcomeInterceptor } from './rate-limit-outcome.interceptor.js';

/**
 * `RateLimitGuard`'s engine as an interceptor: the same policies, store, headers and refusals,
 * but run after every guard, so an auth guard has set `req.user` when a `'user'` key reads it.
 * Registered globally by `RateLimitModule` with `runAs: 'interceptor'`; or put it where wanted
 * with `@UseInterceptors(RateLimitInterceptor)` (and `guard: false`). It tells the engine the
 * handler's outcome itself, as `RateLimitOutcomeInterceptor` does.
 */
@Injectable()
export class RateLimitInterceptor implements NestInterceptor {
  constructor(
    private readonly guard: RateLimitGuard,
    private readonly outcomes: RateLimitOutcomeInterceptor,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return this.outcomes.decideThenWatch(this.guard, context, next);
  }
}
