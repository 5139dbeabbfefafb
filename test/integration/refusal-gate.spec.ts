import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import type { Redis } from 'ioredis';
import type { Rule } from '../../lib/algorithms/algorithm.types.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { RefusalGate } from '../../lib/stores/refusal-gate/refusal-gate.js';
import { RefusedCache } from '../../lib/stores/refusal-gate/refused-cache.js';
import { type StoreCallOutcome, StoreCalls, type StoreCallWatcher } from '../../lib/stores/store-calls.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

/** Two requests, then a refusal for 1,000 s. */
const TIGHT: Rule = { algorithm: 'token_bucket', rps: 0.001, burst: 2 };

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

/** A watcher that times every call and counts how each ended. */
function countingWatcher(): StoreCallWatcher & { outcomes: Map<StoreCallOutcome, number> } {
  const outcomes = new Map<StoreCallOutcome, number>();
  return {
    outcomes,
    timed: true,
    called: (outcome) => void outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1),
    failed: () => undefined,
    breaker: () => undefined,
  };
}

/**
 * The refusal gate in front of Redis is asked once per charged decision: by the module (through
 * `RedisStore.cached`, before its circuit breaker), and not again by the store when the decision
 * goes on to Redis. The gate and the cache are the real ones (their methods only counted, not
 * replaced), and so is Redis.
 */
describe('the refusal gate of RedisStore (real Redis)', () => {
  const requestOf = (identity: string): RateLimitRequest[] => [
    { key: `rl-gate-${identity}:tb`, policy: 'gate', rule: TIGHT, cost: 1 },
  ];
  let answers: jest.Spied<RefusalGate['answer']>;
  let lookups: jest.Spied<RefusedCache['lookup']>;
  beforeEach(() => {
    answers = jest.spyOn(RefusalGate.prototype, 'answer');
    lookups = jest.spyOn(RefusedCache.prototype, 'lookup');
  });
  afterEach(() => jest.restoreAllMocks());

  it('is asked once per decision the module makes, whether it answers or Redis does', async () => {
    const store = new RedisStore({ client: redis });
    const watcher = countingWatcher();
    const calls = new StoreCalls(store, { timeout: 5_000, failMode: 'closed' }, watcher);
    const requests = requestOf(randomUUID());
    const allowed: boolean[] = [];
    for (let i = 0; i < 6; i++) allowed.push((await calls.consume(requests)).every((decision) => decision.allowed));
    await calls.close();
    await store.close();

    expect(allowed).toEqual([true, true, false, false, false, false]);
    // the two admitted went to Redis; the second told the gate that a third cannot pass for a while
    expect(Object.fromEntries(watcher.outcomes)).toEqual({ ok: 2, cached: 4 });
    expect({ answers: answers.mock.calls.length, lookups: lookups.mock.calls.length }).toEqual({
      answers: 6,
      lookups: 6,
    });
  });

  it('looks up each charge made on the store directly once, and not a look', async () => {
    const store = new RedisStore({ client: redis });
    const requests = requestOf(randomUUID());
    for (let i = 0; i < 4; i++) await store.consume(requests);
    await store.peek(requests);
    await store.close();
    // no `cached` before them: `consume` looks each up itself
    expect({ answers: answers.mock.calls.length, lookups: lookups.mock.calls.length }).toEqual({
      answers: 0,
      lookups: 4,
    });
  });

  it('is asked once per decision in a flood, however many wait for the calls in flight and look again', async () => {
    // one request per ms: each admission leaves nothing, and marks the key as contended for a second
    const brief: Rule = { algorithm: 'token_bucket', rps: 1_000, burst: 1 };
    const requests: RateLimitRequest[] = [{ key: `rl-gate-${randomUUID()}:tb`, policy: 'gate', rule: brief, cost: 1 }];
    const together = jest.spyOn(RefusedCache.prototype, 'lookupTogether');
    const store = new RedisStore({ client: redis });
    const watcher = countingWatcher();
    const calls = new StoreCalls(store, { timeout: 5_000, failMode: 'closed' }, watcher);
    await calls.consume(requests);
    answers.mockClear();
    const flood = await Promise.all(Array.from({ length: 20 }, () => Promise.resolve(calls.consume(requests))));
    await calls.close();
    await store.close();
    expect(flood.flat().some((decision) => decision.allowed)).toBe(true);
    expect(answers.mock.calls.length).toBe(20);
    // those that waited looked again, once each, as part of their one decision
    expect(together.mock.calls.length).toBeGreaterThan(0);
    expect(together.mock.calls.length).toBeLessThan(20);
  });
});
