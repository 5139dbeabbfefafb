export { type Algorithm, ALGORITHMS } from './algorithms/index.js';
export type { CostSource, KeySource, RateLimitPolicy } from './policy/index.js';
export { RateLimit, SkipRateLimit } from './rate-limit.decorator.js';
export { RateLimitExceededException } from './rate-limit.exception.js';
export { RateLimitGuard } from './rate-limit.guard.js';
export { RateLimitModule } from './rate-limit.module.js';
export type { RateLimitModuleAsyncOptions } from './rate-limit.module-definition.js';
export type { FailMode, HeaderFamily, RateLimitModuleOptions } from './rate-limit-options.interface.js';
export { RateLimiterService } from './rate-limiter.service.js';
export {
  MemoryStore,
  type MemoryStoreOptions,
  RateLimitStore,
  RateLimitStoreError,
  type RateLimitDecision,
  type RateLimitRequest,
  RedisStore,
  type RedisStoreOptions,
} from './stores/index.js';
