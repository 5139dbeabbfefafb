export { type Algorithm, ALGORITHMS, type Rule } from './algorithms/algorithm.types.js';
export type { Departure, RateLimitContext } from './contexts/rate-limit-context.js';
export { RateLimitContexts } from './contexts/rate-limit-contexts.js';
export type { HeaderFamily } from './headers/rate-limit-headers.js';
export type { LimitedRequest } from './keys/identity.js';
export type { LimitedCall } from './limiter/limited-call.js';
export type { RateLimitReservation, RateLimitUsage, RateLimitVerdict } from './limiter/rate-limiter.js';
export { RateLimitBudgetSpent } from './limiter/rate-limit-meter.js';
export type {
  CostSource,
  KeySource,
  RateLimitPolicy,
  SettleSource,
  TierLimits,
  TierSource,
} from './policy/policy.types.js';
export type { AdaptiveRate, BlockFor, QuotaAnchor, SkipIf } from './policy/policy.types.js';
export type {
  RateLimitDecisionEvent,
  RateLimitReleaseEvent,
  RateLimitResult,
  RateLimitStoreErrorEvent,
  ReleaseOutcome,
} from './observability/rate-limit-events.js';
export { InvalidPolicyError } from './policy/resolve-policy.js';
export { RateLimit, SkipRateLimit } from './rate-limit.decorator.js';
export { RateLimitMeter } from './rate-limit-meter.decorator.js';
export { RateLimitExceededException, RateLimitUnavailableException } from './rate-limit.exception.js';
export { RateLimitGuard } from './rate-limit.guard.js';
export { RateLimitInterceptor } from './rate-limit.interceptor.js';
export { RateLimitModule } from './rate-limit.module.js';
export type { RateLimitModuleAsyncOptions } from './rate-limit.module-definition.js';
export type { ContextType, FailMode, RateLimitModuleOptions } from './rate-limit-options.interface.js';
export type { ErrorFormat, ExceptionFactory, SharesOptions } from './rate-limit-options.interface.js';
export type { RateLimitProblem } from './rate-limit.exception.js';
export { RateLimiterService } from './rate-limiter.service.js';
export type { RoutePolicy, RouteTier, RouteTiers } from './routes/route-policy.js';
export { MemoryStore, type MemoryStoreOptions } from './stores/memory/memory.store.js';
export { RateLimitStoreError, type RateLimitStoreErrorReason } from './stores/rate-limit-store.error.js';
export {
  type RateLimitCallOptions,
  type RateLimitDecision,
  type RateLimitRequest,
  type RateLimitSettle,
  RateLimitStore,
} from './stores/rate-limit-store.interface.js';
export { RedisStore, type RedisStoreClock, type RedisStoreOptions } from './stores/redis/redis.store.js';
