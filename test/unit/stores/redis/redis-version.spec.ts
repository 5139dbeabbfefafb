import { DECIDE_LUA, REFUND_LUA } from '../../../../lib/stores/redis/decide.lua.js';
import { FLAT_LUA } from '../../../../lib/stores/redis/flat.lua.js';

/**
 * The Redis version that brought each command the scripts call, and each literal argument they
 * pass (options, score bounds), from the command reference at redis.io. A command or option
 * not listed fails the test below until it is added here with its version; a few newer than
 * 6.0 are listed so the failure names what it needs.
 */
const SINCE: Readonly<Record<string, string>> = {
  DEL: '1.0.0',
  GET: '1.0.0',
  MGET: '1.0.0',
  SET: '1.0.0',
  PX: '2.6.12', // SET's option
  PEXPIRE: '2.6.0',
  PEXPIREAT: '2.6.0',
  TIME: '2.6.0',
  ZADD: '1.2.0',
  ZCARD: '1.2.0',
  ZCOUNT: '2.0.0',
  ZRANGE: '1.2.0',
  ZRANGEBYSCORE: '1.0.5',
  ZREM: '1.2.0',
  ZREMRANGEBYRANK: '2.0.0',
  ZREMRANGEBYSCORE: '1.2.0',
  ZSCORE: '1.2.0',
  WITHSCORES: '1.2.0',
  '-inf': '1.0.5',
  '+inf': '1.0.5',
  // newer than 6.0
  PXAT: '6.2.0',
  EXAT: '6.2.0',
  GETEX: '6.2.0',
  GETDEL: '6.2.0',
  BYSCORE: '6.2.0',
  BYLEX: '6.2.0',
  REV: '6.2.0',
  ZRANGESTORE: '6.2.0',
  PEXPIRETIME: '7.0.0',
  EXPIRETIME: '7.0.0',
};

/** The oldest Redis the scripts must run on, as docs/08-redis-in-production.md says. */
const OLDEST = '6.0.0';

/** Whether version `a` is no later than `b` ('6.0.0' style). */
function noLaterThan(a: string, b: string): boolean {
  const [x, y] = [a.split('.').map(Number), b.split('.').map(Number)];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i];
  return true;
}

/** Every `redis.call(...)` of a script: its command and the string literals among its arguments. */
function callsOf(lua: string): Array<{ call: string; literals: string[] }> {
  return [...lua.matchAll(/redis\.call\(([^\n]*)/g)].map(([, args]) => ({
    call: args,
    literals: [...args.matchAll(/'([^']*)'/g)].map(([, literal]) => literal),
  }));
}

describe('the Redis scripts', () => {
  it.each([
    ['decide', DECIDE_LUA, 10],
    ['flat', FLAT_LUA, 3],
    ['refund', REFUND_LUA, 10],
  ])(`%s calls only commands and options Redis ${OLDEST} has`, (_name, lua, least) => {
    const calls = callsOf(lua);
    expect(calls.length).toBeGreaterThan(least);
    const problems: string[] = [];
    for (const { call, literals } of calls) {
      for (const literal of literals) {
        const since = SINCE[literal];
        if (since === undefined)
          problems.push(`${call}: '${literal}' is not in SINCE (add it with the version that brought it)`);
        else if (!noLaterThan(since, OLDEST)) problems.push(`${call}: '${literal}' needs Redis ${since}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
