/**
 * Redis `TIME` read inside a script, as the decide script reads it (its `clock`): ms. Some
 * Redis-compatible servers answer 0 there (Dragonfly) or refuse the command (ElastiCache
 * Serverless), which would decide every request at the Unix epoch, or fail it.
 */
export const TIME_PROBE_LUA = `
local time = redis.call('TIME')
return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
`;

/**
 * The name the probe is defined under on the ioredis client. Defined once per client: a client
 * that has a command of this name keeps its own (a test's probe that fakes `TIME`).
 */
export const TIME_PROBE = 'nestjsRateLimitTimeProbe';

/**
 * What the probe's outcome says of `TIME` inside scripts: `undefined` when it works, else why
 * not, for the warning. A reply error starting `ERR` is the script's own failure; any other
 * failure (Redis unreachable, loading, busy) says nothing of `TIME` and is thrown again.
 */
export async function timeUnusable(probe: Promise<unknown>): Promise<string | undefined> {
  let ms: unknown;
  try {
    ms = await probe;
  } catch (error) {
    if (error instanceof Error && error.name === 'ReplyError' && error.message.startsWith('ERR'))
      return `a script calling it failed: ${error.message}`;
    throw error;
  }
  return typeof ms === 'number' && ms > 0 ? undefined : `it answered ${String(ms)}`;
}

/**
 * Logged once by a `RedisStore` on a server whose scripts cannot read `TIME` (`why`: what its
 * probe found). Beside the probe rather than in rate-limit.messages.ts, which is at the 250-line
 * limit of a lib file.
 */
export function redisTimeUnusable(why: string): string {
  return `Redis TIME does not work inside scripts on this server (${why}): deciding on this app's clock instead. Set RedisStore({ clock: 'app' }) to say so, and keep the clocks of the app's instances in sync (NTP)`;
}
