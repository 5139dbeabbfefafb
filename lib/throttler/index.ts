/**
 * `nestjs-ratelimit/throttler`: @nestjs/throttler 6.x's public surface under its names and
 * shapes, on our engine. Swap `@nestjs/throttler` for `nestjs-ratelimit/throttler` in the imports
 * and the app behaves as before (see docs/13-migrating-from-throttler.md), and
 * better: GraphQL, gateways and microservices without a subclass, bounded memory, Redis through
 * our stores (`ThrottlerModule.forRoot(options, { redis })`). An entry of its own: the package
 * root never loads it.
 */
export { DEFAULT_IPV6_SUBNET_PREFIX, normalizeIp } from './ip.js';
export { RateLimitThrottlerStorage } from './rate-limit-throttler.storage.js';
export type { RateLimitThrottlerStorageOptions, ThrottlerCounting } from './rate-limit-throttler.storage.js';
export type {
  Resolvable,
  ThrottlerAsyncOptions,
  ThrottlerGenerateKeyFunction,
  ThrottlerGetTrackerFunction,
  ThrottlerModuleOptions,
  ThrottlerOptions,
  ThrottlerOptionsFactory,
} from './throttler-module-options.interface.js';
export { ThrottlerStorageOptions } from './throttler-storage-options.interface.js';
export { ThrottlerStorageRecord } from './throttler-storage-record.interface.js';
export { ThrottlerStorage } from './throttler-storage.interface.js';
export { DEFAULT_SWEEP_INTERVAL, ThrottlerStorageService } from './throttler-storage.service.js';
export {
  THROTTLER_BLOCK_DURATION,
  THROTTLER_KEY_GENERATOR,
  THROTTLER_LIMIT,
  THROTTLER_OPTIONS,
  THROTTLER_SKIP,
  THROTTLER_TRACKER,
  THROTTLER_TTL,
} from './throttler.constants.js';
export { InjectThrottlerOptions, InjectThrottlerStorage, SkipThrottle, Throttle } from './throttler.decorator.js';
export { ThrottlerException, throttlerMessage } from './throttler.exception.js';
export { ThrottlerGuard } from './throttler.guard.js';
export type { ThrottlerLimitDetail, ThrottlerRequest } from './throttler.guard.interface.js';
export { ThrottlerModule } from './throttler.module.js';
export { getOptionsToken, getStorageToken } from './throttler.providers.js';
export { days, hours, minutes, seconds, weeks } from './utilities.js';
