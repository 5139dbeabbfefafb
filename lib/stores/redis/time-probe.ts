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
 * A command of this name on the ioredis client (`defineCommand`) runs instead of the store's own
 * probe, the script loaded with the calls: how a test fakes a server whose `TIME` fails.
 */
export const TIME_PROBE = 'nestjsRateLimitTimeProbe';

/**
 * How a server that runs no scripts for this client answers a script command: its ACL leaves out
 * `@scripting` (`NOPERM`), or the command is renamed away (`ERR unknown command`).
 */
const SCRIPTS_REFUSED = /^(NOPERM|ERR unknown command)/;

/** Whether `error` is a server's refusal to run a script command for this client (see `SCRIPTS_REFUSED`). */
function refusesScripts(error: unknown): error is Error {
  return error instanceof Error && error.name === 'ReplyError' && SCRIPTS_REFUSED.test(error.message);
}

/**
 * What the probe found of `TIME` inside scripts: it works (`undefined`), it does not (`unusable`,
 * why, for the warning), or the server ran no script at all (`refused`, its reply).
 */
export type TimeProbeResult = undefined | { unusable: string } | { refused: string };

/**
 * What the probe's outcome says of `TIME` inside scripts (see `TimeProbeResult`). A reply error
 * starting `ERR` is the script's own failure, `NOPERM` or an unknown command the server's
 * refusal to run it; any other failure (Redis unreachable, loading, busy) says nothing of `TIME`
 * and is thrown again.
 */
export async function timeUnusable(probe: Promise<unknown>): Promise<TimeProbeResult> {
  let ms: unknown;
  try {
    ms = await probe;
  } catch (error) {
    if (refusesScripts(error)) return { refused: error.message };
    if (error instanceof Error && error.name === 'ReplyError' && error.message.startsWith('ERR'))
      return { unusable: `a script calling it failed: ${error.message}` };
    throw error;
  }
  return typeof ms === 'number' && ms > 0 ? undefined : { unusable: `it answered ${String(ms)}` };
}

/**
 * Logged once by a `RedisStore` on a server whose scripts cannot read `TIME` (`why`: what its
 * probe found). Beside the probe rather than in rate-limit.messages.ts, which is at the 250-line
 * limit of a lib file.
 */
export function redisTimeUnusable(why: string): string {
  return `Redis TIME does not work inside scripts on this server (${why}): deciding on this app's clock instead. Set RedisStore({ clock: 'app' }) to say so, and keep the clocks of the app's instances in sync (NTP)`;
}
