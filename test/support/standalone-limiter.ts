import { RateLimiter } from '../../lib/limiter/rate-limiter.js';
import type { RateLimitMetrics } from '../../lib/observability/rate-limit-metrics.js';
import type { ResolvedOptions } from '../../lib/rate-limit-options.js';
import { RateLimiterService } from '../../lib/rate-limiter.service.js';
import type { RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';

/**
 * `RateLimiterService` on an engine of its own, as the module makes them, for tests that run the
 * limiter without Nest: its `engine` is there to hand to a guard, and to shut down as Nest would.
 */
export class StandaloneLimiter extends RateLimiterService {
  readonly core: RateLimiter;

  constructor(options: ResolvedOptions, store: RateLimitStore, metrics: RateLimitMetrics | null = null) {
    const engine = new RateLimiter(options, store, metrics);
    super(engine);
    this.core = engine;
  }

  beforeApplicationShutdown(): Promise<void> {
    return this.core.beforeApplicationShutdown();
  }

  onApplicationShutdown(): Promise<void> {
    return this.core.onApplicationShutdown();
  }
}
