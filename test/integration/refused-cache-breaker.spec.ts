import { Redis } from 'ioredis';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RateLimitStoreError } from '../../lib/stores/rate-limit-store.error.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

const TIMEOUT_MS = 50;
const FLOODER = { name: 'flood', rps: 0.01, burst: 1 };

/**
 * Redis frozen (SIGSTOP) while one refused client floods: its refusals come from the refused-key
 * cache, which is no answer from Redis, so they must neither reset the breaker's count of
 * failures nor close it. Every other client then gets the failMode answer at once once the
 * breaker has opened, instead of waiting out the timeout each time.
 */
describe('the circuit breaker while Redis is frozen and a refused client floods (own redis-server)', () => {
  let server: RedisServer;
  let client: Redis;
  let store: RedisStore;
  let limiter: StandaloneLimiter;

  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis(server.url);
    store = new RedisStore({ client });
    limiter = new StandaloneLimiter(resolveOptions({ failMode: 'closed', timeout: TIMEOUT_MS }), store);
  });
  afterAll(async () => {
    process.kill(server.pid, 'SIGCONT');
    await limiter?.onApplicationShutdown();
    client?.disconnect();
    stopRedisServer(server.pid);
  });

  it('opens after 3 failures and stays open; the flood is still refused from the cache', async () => {
    // refused once while Redis answers, through the same store (its refused-key cache) with a
    // timeout a loaded machine meets: the first call also loads the script
    const patient = new StandaloneLimiter(resolveOptions({ failMode: 'closed', timeout: 5_000 }), store);
    await patient.consume('ip:flooder', FLOODER);
    const [refused] = await patient.consume('ip:flooder', FLOODER);
    expect(refused.allowed).toBe(false);
    await patient.onApplicationShutdown();

    process.kill(server.pid, 'SIGSTOP');
    let waited = 0;
    let flooderRefused = 0;
    const started = performance.now();
    for (let i = 0; i < 120; i++) {
      const at = performance.now();
      await expect(limiter.consume(`ip:other-${i}`, { name: 'other', rps: 10, burst: 10 })).rejects.toThrow(
        RateLimitStoreError,
      );
      // a call that went to the frozen Redis waits out the timeout; one the open breaker stopped does not
      if (performance.now() - at >= TIMEOUT_MS * 0.8) waited++;
      const flood = await limiter.consume('ip:flooder', FLOODER).catch(() => undefined);
      if (flood?.[0].allowed === false) flooderRefused++;
    }
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `Redis frozen: ${waited} of 120 other clients waited out the ${TIMEOUT_MS} ms timeout in ${seconds.toFixed(2)} s; flooder refused ${flooderRefused} of 120`,
    );
    expect(flooderRefused).toBe(120);
    // 3 to open it, then one probe per 250 ms (and a loaded machine's slack)
    expect(waited).toBeLessThanOrEqual(3 + Math.ceil((seconds * 1000) / 250) + 2);
    expect(waited).toBeLessThan(60);
  });
});
