import type { ExecutionContext } from '@nestjs/common';
import type {
  ThrottlerGenerateKeyFunction,
  ThrottlerGetTrackerFunction,
  ThrottlerOptions,
} from './throttler-module-options.interface.js';

export type { ThrottlerLimitDetail } from './throttler-module-options.interface.js';

/**
 * One throttler's part of a request, as `canActivate` hands it to `handleRequest`: its limit and
 * times resolved for this request (milliseconds), and the tracker and key functions that apply.
 */
export interface ThrottlerRequest {
  context: ExecutionContext;
  limit: number;
  ttl: number;
  throttler: ThrottlerOptions;
  blockDuration: number;
  getTracker: ThrottlerGetTrackerFunction;
  generateKey: ThrottlerGenerateKeyFunction;
}
