/** Metadata key of the policies `@RateLimit` puts on a class or handler. */
export const RATE_LIMIT_POLICIES = 'RATE_LIMIT:POLICY';
/** Metadata key of `@SkipRateLimit`: `true` (skip all) or the names of the policies skipped. */
export const RATE_LIMIT_SKIP = 'RATE_LIMIT:SKIP';
/** Injection token of the module's options, validated and defaulted (`ResolvedOptions`). */
export const RATE_LIMIT_OPTIONS = Symbol('RATE_LIMIT:OPTIONS');
/** Metadata key of the policy names the `@RateLimitMeter()` parameters of a handler ask for (`undefined`: its only settling one). */
export const RATE_LIMIT_METERS = 'RATE_LIMIT:METERS';
