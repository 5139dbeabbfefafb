import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { type RateLimitPolicy, RedisStore } from '../../lib/index.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { clientThrough, type GateProxy, startGateProxy } from '../support/gate-proxy.js';
import { nextFailedRelease } from '../support/release-events.js';
import { testRedisUrl } from '../support/redis/test-redis.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * A settle of a request's real cost that meets Redis cut off (a gate between the engine and
 * Redis, `test/support/gate-proxy.ts`): it is tried again as a slot's release is, and lands once
 * Redis is back; under `failMode: 'local'` what it was to take more also goes to the local
 * limiter, which decides while Redis is away.
 */

/** 10,000 tokens an hour from a key's first request: nothing comes back during a test. */
const TOKENS: RateLimitPolicy = {
  name: 'tokens',
  algorithm: 'fixed_window',
  anchor: 'first-request',
  limit: 10_000,
  window: '1h',
  maxDebt: 5_000,
};

describe('a settle that meets Redis cut off', () => {
  let gate: GateProxy;
  let client: Redis;
  let limiter: StandaloneLimiter;

  beforeAll(async () => {
    gate = await startGateProxy(Number(new URL(testRedisUrl()).port));
    client = await clientThrough(gate);
    limiter = new StandaloneLimiter(
      resolveOptions({ failMode: 'local', timeout: 1_000, prefix: `rl-settle-outage-${randomUUID()}:` }),
      new RedisStore({ client }),
    );
  });
  afterAll(async () => {
    await limiter.onApplicationShutdown();
    client.disconnect();
    await gate.close();
  });

  /** Whether `client` is connected again, polled: the settle's next try lands after it. */
  async function reconnected(): Promise<void> {
    while (client.status !== 'ready') await new Promise((resolve) => setTimeout(resolve, 20));
  }

  it('is tried again until Redis is back, and charges the real cost there', async () => {
    const identity = `user:${randomUUID()}`;
    const job = await limiter.reserve(identity, TOKENS, 100);
    expect(job.allowed).toBe(true);
    gate.cut();
    const failed = nextFailedRelease();
    const settled = job.settle(700);
    expect(await failed).toMatchObject({ policies: ['tokens'], outcome: 'failed' });
    gate.open();
    await reconnected();
    await settled;
    const usage = await limiter.usage(identity, TOKENS);
    expect([usage.used, usage.source]).toEqual([700, 'store']);
  });

  it("under failMode 'local', also charges the local limiter what it took more, which refuses while it owes", async () => {
    const identity = `user:${randomUUID()}`;
    const job = await limiter.reserve(identity, TOKENS, 100);
    gate.cut();
    const failed = nextFailedRelease();
    const settled = job.settle(16_000);
    await failed;
    // Redis away: the local limiter decides, and holds what was taken more (5,000 past its limit at most)
    const [local] = await limiter.peek(identity, TOKENS, 1);
    expect(local).toMatchObject({ allowed: false, remaining: 0 });
    expect(await limiter.usage(identity, TOKENS)).toMatchObject({ used: 15_000, source: 'local' });
    gate.open();
    await reconnected();
    await settled;
    // the store's own count, settled once it was back: 16,000 taken in all, no further than 5,000 past 10,000
    expect(await limiter.usage(identity, TOKENS)).toMatchObject({ used: 15_000, source: 'store' });
  });
});
