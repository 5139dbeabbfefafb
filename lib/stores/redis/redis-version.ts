import { redisTooOld } from '../../rate-limit.errors.js';

/**
 * The oldest Redis the store's scripts run on. They call nothing newer (`SET` then `PEXPIREAT`,
 * not `SET ... PXAT`, which is 6.2), and `test/unit/redis-version.spec.ts` checks every command
 * and option in them against the version that brought it.
 */
export const MIN_REDIS_VERSION = '6.0.0';

/**
 * What stops the scripts running on the server an `INFO server` reply describes: a message
 * naming its version when its `redis_version` is older than `MIN_REDIS_VERSION`, `undefined`
 * when it is recent enough. A reply with no readable `redis_version` (a Redis-compatible server
 * may report none) is given the benefit of the doubt: `undefined` too.
 *
 * @example redisVersionProblem(await client.info('server')) // undefined on Redis 7.0.15
 */
export function redisVersionProblem(info: string): string | undefined {
  // '7.0.15', or with a suffix ('6.2.0-rc1'): its three numbers decide
  const match = /^redis_version:((\d+)\.(\d+)\.(\d+)\S*)/m.exec(info);
  if (match === null) return undefined;
  const version = match.slice(2, 5).map(Number);
  const minimum = MIN_REDIS_VERSION.split('.').map(Number);
  const older = version.findIndex((part, i) => part !== minimum[i]);
  return older >= 0 && version[older] < minimum[older] ? redisTooOld(match[1], MIN_REDIS_VERSION) : undefined;
}
