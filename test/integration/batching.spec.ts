import { createHash, randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { TIME_PROBE_LUA } from '../../lib/stores/redis/time-probe.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * `RedisStore` sends the requests that arrive in one event-loop turn in one decide call (at most
 * 64 keys each). These check that a batch saves calls and changes no decision: each request is
 * still decided alone, in turn, all-or-nothing.
 */
let redis: Redis;
/** Calls the store sent (FCALL, EVALSHA, or EVAL after NOSCRIPT), but the `TIME` probe it runs once. */
let scriptCalls = 0;
/** What names the probe in an EVALSHA or an EVAL: its SHA1 or its text. */
const PROBE = new Set([createHash('sha1').update(TIME_PROBE_LUA).digest('hex'), TIME_PROBE_LUA]);

beforeAll(async () => {
  redis = await connectTestRedis();
  const send = redis.sendCommand.bind(redis);
  redis.sendCommand = (command: { name: string; args: unknown[] }, ...rest: unknown[]) => {
    if (/^(eval(sha)?|fcall)$/i.test(command.name) && !PROBE.has(String(command.args[0]))) scriptCalls++;
    return (send as (...args: unknown[]) => unknown)(command, ...rest);
  };
});
afterAll(async () => {
  await redis.quit();
});
beforeEach(() => {
  scriptCalls = 0;
});

const TIGHT: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 1 };
const LOOSE: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 1_000 };

function request(key: string, rule: Rule, cost = 1): RateLimitRequest {
  return { key, policy: key, rule, cost };
}

describe('RedisStore batching', () => {
  it('decides 1,000 requests made at once on one bucket in at most 16 calls, admitting exactly its burst', async () => {
    const store = new RedisStore({ client: redis, cacheRefusals: false });
    const key = `rl:batch:${randomUUID()}`;
    const rule: Rule = { algorithm: 'fixed_window', rps: 0.01, burst: 100 };
    const decisions = await Promise.all(Array.from({ length: 1_000 }, () => store.consume([request(key, rule)])));
    expect(decisions.filter(([decision]) => decision.allowed)).toHaveLength(100);
    // one call per 64 keys at most, and never one per request
    expect(scriptCalls).toBeGreaterThanOrEqual(Math.ceil(1_000 / 64));
    expect(scriptCalls).toBeLessThanOrEqual(16);
    // the admitted ones are the first 100 sent, each seeing what the ones before it took
    expect(decisions.slice(0, 100).map(([decision]) => decision.remaining)).toEqual(
      Array.from({ length: 100 }, (_, i) => 99 - i),
    );
  });

  it('keeps each request of a batch all-or-nothing: a refused one charges none of its buckets', async () => {
    const store = new RedisStore({ client: redis, cacheRefusals: false });
    const [tight, loose] = [`rl:batch:${randomUUID()}`, `rl:batch:${randomUUID()}`];
    const both = [request(tight, TIGHT), request(loose, LOOSE)];
    const decisions = await Promise.all([
      store.consume(both),
      store.consume(both),
      store.consume(both),
      store.consume([request(loose, LOOSE)]),
    ]);
    expect(scriptCalls).toBe(1);
    expect(decisions.map((pair) => pair.every((decision) => decision.allowed))).toEqual([true, false, false, true]);
    // the loose bucket lost 1 to the first request and 1 to the last: nothing to the two refused
    expect(decisions[3][0].remaining).toBe(998);
    expect(decisions[1][1].remaining).toBe(999);
  });

  it('answers peeks and consumes of one batch each as if alone', async () => {
    const store = new RedisStore({ client: redis });
    const key = `rl:batch:${randomUUID()}`;
    const one = [request(key, { algorithm: 'gcra', rps: 0.001, burst: 2 })];
    const [before, taken, after, refused] = await Promise.all([
      store.peek(one),
      store.consume(one),
      store.peek(one),
      store.consume(one, { timeoutMs: 100 }),
    ]);
    expect(scriptCalls).toBe(1);
    expect([before[0].remaining, taken[0].remaining, after[0].remaining, refused[0].remaining]).toEqual([2, 1, 1, 0]);
    expect(refused[0].allowed).toBe(true);
    expect((await store.consume(one))[0].allowed).toBe(false);
  });

  it('sends a request alone when nothing else is waiting', async () => {
    const store = new RedisStore({ client: redis });
    const key = `rl:batch:${randomUUID()}`;
    for (let i = 0; i < 3; i++) await store.consume([request(key, LOOSE)]);
    expect(scriptCalls).toBe(3);
  });

  /** Bad costs as callers pass them by mistake, each with the error it must give. */
  const BAD_COSTS: Array<[unknown, ErrorConstructor]> = [
    [null, TypeError],
    ['', TypeError],
    ['abc', TypeError],
    [{}, TypeError],
    [NaN, RangeError],
    [-1, RangeError],
  ];

  it('rejects only the request with a bad cost: the others of its batch get their decisions', async () => {
    const store = new RedisStore({ client: redis, cacheRefusals: false });
    const key = `rl:batch:${randomUUID()}`;
    const calls: Promise<unknown>[] = [];
    for (const [cost] of BAD_COSTS) {
      calls.push(store.consume([request(key, LOOSE)]));
      calls.push(store.consume([request(`rl:batch:${randomUUID()}`, LOOSE), request(key, LOOSE, cost as number)]));
    }
    const settled = await Promise.allSettled(calls);
    expect(scriptCalls).toBe(1);
    BAD_COSTS.forEach(([, type], i) => {
      const [good, bad] = [settled[2 * i], settled[2 * i + 1]];
      expect(good.status === 'fulfilled' && good.value).toEqual([
        expect.objectContaining({ allowed: true, remaining: 999 - i }),
      ]);
      expect(bad.status === 'rejected' && bad.reason).toBeInstanceOf(type);
      expect(bad.status === 'rejected' && bad.reason).not.toBeInstanceOf(RateLimitStoreError);
    });
  });

  it('through RateLimiterService: a bad cost rejects that call alone, and is no store failure', async () => {
    // failMode 'closed': a call the store failed, or that the breaker kept from it, rejects with RateLimitStoreError
    const limiter = new StandaloneLimiter(
      resolveOptions({ failMode: 'closed', timeout: 5_000 }),
      new RedisStore({ client: redis }),
    );
    try {
      const policy = { name: 'batched', rps: 0.001, burst: 1_000 };
      const identity = `user:${randomUUID()}`;
      const calls: Promise<unknown>[] = [];
      for (const [cost] of BAD_COSTS)
        calls.push(limiter.consume(identity, policy), limiter.consume(identity, policy, cost as number));
      const settled = await Promise.allSettled(calls);
      BAD_COSTS.forEach(([, type], i) => {
        const [good, bad] = [settled[2 * i], settled[2 * i + 1]];
        expect(good.status === 'fulfilled' && good.value).toEqual([
          expect.objectContaining({ allowed: true, remaining: 999 - i }),
        ]);
        expect(bad.status === 'rejected' && bad.reason).toBeInstanceOf(type);
      });
      // six bad costs opened no breaker: the next call is decided by Redis
      expect((await limiter.consume(identity, policy))[0]).toMatchObject({
        allowed: true,
        remaining: 1_000 - BAD_COSTS.length - 1,
      });
    } finally {
      await limiter.onApplicationShutdown();
    }
  });
});
