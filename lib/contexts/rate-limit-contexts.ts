import { Injectable } from '@nestjs/common';
import { HttpRateLimitContext } from './http.context.js';
import type { RateLimitContext } from './rate-limit-context.js';

/**
 * The seam for each kind of Nest context the module limits, by `context.getType()`. A kind with
 * no seam is not limited: the guard lets its requests through.
 */
@Injectable()
export class RateLimitContexts {
  private readonly byType: ReadonlyMap<string, RateLimitContext>;

  constructor(http: HttpRateLimitContext) {
    this.byType = new Map([['http', http]]);
  }

  /** The seam of a kind of context, or `undefined` when the module does not limit it. */
  for(type: string): RateLimitContext | undefined {
    return this.byType.get(type);
  }
}
