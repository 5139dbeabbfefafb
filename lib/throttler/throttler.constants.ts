/**
 * The metadata keys and the options token, with @nestjs/throttler's strings exactly: `@Throttle`
 * and `@SkipThrottle` of either package are read by either guard (a key is the constant followed
 * by the throttler's name, `THROTTLER:LIMITdefault`), so an app can switch file by file.
 */

/** `@Throttle`'s `limit` for a throttler: `THROTTLER_LIMIT + name`. */
export const THROTTLER_LIMIT = 'THROTTLER:LIMIT';
/** `@Throttle`'s `ttl` (milliseconds) for a throttler: `THROTTLER_TTL + name`. */
export const THROTTLER_TTL = 'THROTTLER:TTL';
/** `@Throttle`'s `getTracker` for a throttler: `THROTTLER_TRACKER + name`. */
export const THROTTLER_TRACKER = 'THROTTLER:TRACKER';
/** `@Throttle`'s `blockDuration` (milliseconds) for a throttler: `THROTTLER_BLOCK_DURATION + name`. */
export const THROTTLER_BLOCK_DURATION = 'THROTTLER:BLOCK_DURATION';
/** `@Throttle`'s `generateKey` for a throttler: `THROTTLER_KEY_GENERATOR + name`. */
export const THROTTLER_KEY_GENERATOR = 'THROTTLER:KEY_GENERATOR';
/** Injection token of the module's options (`getOptionsToken()`). */
export const THROTTLER_OPTIONS = 'THROTTLER:MODULE_OPTIONS';
/** `@SkipThrottle`'s flag for a throttler: `THROTTLER_SKIP + name`. */
export const THROTTLER_SKIP = 'THROTTLER:SKIP';
