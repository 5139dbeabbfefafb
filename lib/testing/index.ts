/**
 * `nestjs-ratelimit/testing`: what an app's tests need to test around the limiter. An entry of
 * its own, so the package root never loads it.
 */
export { ManualClock } from './manual-clock.js';
export { RateLimitTestingModule, type RateLimitTestingOptions } from './rate-limit-testing.module.js';
