/**
 * Durations in milliseconds, the unit of a throttler's `ttl` and `blockDuration`.
 *
 * @example ThrottlerModule.forRoot([{ ttl: minutes(1), limit: 100 }])
 */
export const seconds = (howMany: number): number => howMany * 1000;
/** `howMany` minutes in milliseconds. @example minutes(1) // 60000 */
export const minutes = (howMany: number): number => howMany * 60 * 1000;
/** `howMany` hours in milliseconds. @example hours(1) // 3600000 */
export const hours = (howMany: number): number => howMany * 60 * 60 * 1000;
/** `howMany` days in milliseconds. @example days(1) // 86400000 */
export const days = (howMany: number): number => howMany * 24 * 60 * 60 * 1000;
/** `howMany` weeks in milliseconds. @example weeks(1) // 604800000 */
export const weeks = (howMany: number): number => howMany * 7 * 24 * 60 * 60 * 1000;
