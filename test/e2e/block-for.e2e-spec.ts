import { randomUUID } from 'node:crypto';
import { Controller, Module, Post } from '@nestjs/common';
import { MemoryStore, RateLimit, RateLimitModule, type RateLimitStore, RedisStore } from '../../lib/index.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { CASE_EPOCH } from '../cases/cases.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

/** An hour's block: the bucket itself (10 a second, 2 at most) is full again in 0.2 s. */
const HOUR_MS = 3_600_000;

@Controller('login')
class LoginController {
  @RateLimit({ name: 'login', rps: 10, burst: 2, blockFor: '1h', key: 'api-key' })
  @Post()
  login() {
    return { ok: true };
  }
}

const redis = useTestRedis();

/** The stores under test, each on a clock the test moves (ahead of the real one, see CASE_EPOCH). */
const STORES: Array<[string, (clock: () => number) => RateLimitStore]> = [
  ['MemoryStore', (clock) => new MemoryStore({ clock })],
  ['RedisStore', (clock) => new RedisStore({ client: redis(), clock })],
];

describe.each(ADAPTERS)('blockFor on %s', (adapter) => {
  describe.each(STORES)('%s', (storeName, makeStore) => {
    let http: TestApp;
    let now = CASE_EPOCH;
    const prefix = `rl-block-${randomUUID()}:`;

    beforeAll(async () => {
      @Module({
        imports: [RateLimitModule.forRoot({ store: makeStore(() => now), prefix })],
        controllers: [LoginController],
      })
      class AppModule {}
      http = await startApp(AppModule, adapter);
    });
    afterAll(() => http.close());

    const post = async (apiKey: string) =>
      read(await fetch(`${http.url}/login`, { method: 'POST', headers: { 'x-api-key': apiKey } }));

    it('keeps a client refused for the whole block, however the bucket refills, and Retry-After says when it ends', async () => {
      now = CASE_EPOCH;
      const apiKey = `key-${randomUUID()}`;
      expect((await post(apiKey)).status).toBe(201);
      expect((await post(apiKey)).status).toBe(201);

      const sent = Date.now();
      const refused = await post(apiKey);
      const took = Date.now() - sent;
      expect(refused.status).toBe(429);
      expect(refused.headers['retry-after']).toBe('3600');
      expect(refused.body).toMatchObject({ statusCode: 429, policy: 'login', retryAfter: 3_600 });
      expect(refused.headers.ratelimit).toBe('"login";r=0;t=3600');
      expect(refused.headers['x-ratelimit-remaining']).toBe('0');
      if (storeName === 'RedisStore') {
        // the key lives as long as the block, not the 0.2 s the bucket takes to fill (the clock is
        // pinned ahead of real time: its TTL counts from the real time of the call, within `took`)
        const key = bucketKey(prefix, 'login', { algorithm: 'token_bucket', blockMs: HOUR_MS }, `api-key:${apiKey}`);
        const late = (await redis().pexpiretime(key)) - (CASE_EPOCH + HOUR_MS);
        expect(late >= 0 && late <= took).toBe(true);
      }

      // a second later the bucket is long full again: still refused, a second less to wait
      now = CASE_EPOCH + 1_000;
      const later = await post(apiKey);
      expect([later.status, later.headers['retry-after'], (later.body as { retryAfter: number }).retryAfter]).toEqual([
        429,
        '3599',
        3_599,
      ]);

      // retrying does not lengthen the block
      now = CASE_EPOCH + 10 * 60_000;
      expect((await post(apiKey)).headers['retry-after']).toBe('3000');
      now = CASE_EPOCH + HOUR_MS - 1;
      expect((await post(apiKey)).headers['retry-after']).toBe('1');

      // another client is not blocked
      expect((await post(`key-${randomUUID()}`)).status).toBe(201);

      // when the block ends, the client is admitted with a full bucket: the refusals took nothing
      now = CASE_EPOCH + HOUR_MS;
      const admitted = await post(apiKey);
      expect([admitted.status, admitted.headers['x-ratelimit-remaining']]).toEqual([201, '1']);
    });
  });
});
