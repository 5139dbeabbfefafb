import { randomUUID } from 'node:crypto';
import { Controller, Get, Injectable, Module } from '@nestjs/common';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
} from '../../lib/index.js';
import { controllerWith } from '../support/bad-controller.js';
import { waitUntil } from '../support/wait.js';
import { connectTestRedis, testRedisUrl } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';

const T0 = 1_767_225_600_000;

@Controller('items')
class ItemsController {
  @RateLimit({ rps: 2, burst: 3 })
  @Get()
  list() {
    return [];
  }
}

describe.each(ADAPTERS)('RateLimitModule on %s', (adapter) => {
  describe('a bad policy fails application start, naming controller, handler and field', () => {
    const cases: Array<[string, RateLimitPolicy | RateLimitPolicy[], 'handler' | 'class', string]> = [
      [
        'non-positive rps',
        { rps: 0, burst: 5 },
        'handler',
        'Invalid @RateLimit policy on BadController.find: "rps" must be a positive number (tokens per second), got 0',
      ],
      [
        'negative rps',
        { rps: -1 },
        'handler',
        'Invalid @RateLimit policy on BadController.find: "rps" must be a positive number (tokens per second), got -1',
      ],
      [
        'burst < 1',
        { rps: 5, burst: 0 },
        'handler',
        'Invalid @RateLimit policy on BadController.find: "burst" must be a whole number >= 1, got 0',
      ],
      [
        'unknown algorithm',
        { algorithm: 'magic' as never, rps: 1 },
        'handler',
        `Invalid @RateLimit policy on BadController.find: "algorithm" must be one of 'token_bucket', 'leaky_bucket', 'fixed_window', 'sliding_window_log', 'sliding_window_counter', 'gcra', 'concurrency', 'quota', got "magic"`,
      ],
      [
        'unparsable window',
        { limit: 10, window: '5 fortnights' },
        'handler',
        `Invalid @RateLimit policy on BadController.find: "window" must be a positive number of seconds or a duration such as '10s', '1m', '1h', '1d', got "5 fortnights"`,
      ],
      [
        'rps and limit both',
        { rps: 1, limit: 10, window: '1m' },
        'handler',
        'Invalid @RateLimit policy on BadController.find: both "rps" and "limit" given; say it as rps + burst or as limit + window',
      ],
      [
        'a misspelt field',
        { rps: 1, brust: 5 } as RateLimitPolicy,
        'handler',
        'Invalid @RateLimit policy on BadController.find: "brust" is not a policy field (the fields are algorithm, rps, tokensPerSecond, burst, limit, window, anchor, lease, period, timeZone, cost, defaultCost, key, scope, name, tiers, tier, defaultTier, blockFor, count, skipIf, adaptive, settle, maxDebt, settleEvery, unit, shares), got 5',
      ],
      [
        'on the class',
        { rps: 1, burst: 0.5 },
        'class',
        'Invalid @RateLimit policy on BadController (class): "burst" must be a whole number >= 1, got 0.5',
      ],
      [
        'in a list',
        [{ rps: 1 }, { limit: 0, window: 60 }],
        'handler',
        'Invalid @RateLimit policy on BadController.find [1]: "limit" must be a whole number >= 1, got 0',
      ],
      [
        'two unnamed in a list',
        [{ rps: 1 }, { limit: 5, window: 60 }],
        'handler',
        'Invalid @RateLimit policy on BadController.find: two policies are named "BadController.find"; give each policy its own "name"',
      ],
    ];

    it.each(cases)('%s', async (_name, policy, on, message) => {
      @Module({ imports: [RateLimitModule.forRoot()], controllers: [controllerWith(policy, on)] })
      class AppModule {}
      await expect(startApp(AppModule, adapter)).rejects.toThrow(message);
    });

    it('a bad module policy or option fails too', async () => {
      @Module({ imports: [RateLimitModule.forRoot({ policies: [{ rps: 1, window: '1m' }] })] })
      class PolicyModule {}
      await expect(startApp(PolicyModule, adapter)).rejects.toThrow(
        'Invalid @RateLimit policy on RateLimitModule policies[0]: both "rps" and "window" given; say it as rps + burst or as limit + window',
      );
      @Module({ imports: [RateLimitModule.forRoot({ failMode: 'maybe' as never })] })
      class OptionModule {}
      await expect(startApp(OptionModule, adapter)).rejects.toThrow(
        `Invalid RateLimitModule option "failMode": must be 'open', 'closed' or 'local', got "maybe"`,
      );
    });

    it('a bad policy closes the Redis client the module made, so nothing is left open', async () => {
      const connectionName = `rl-start-fails-${randomUUID().slice(0, 8)}`;
      const { port } = new URL(testRedisUrl());
      @Module({
        imports: [RateLimitModule.forRoot({ redis: { port: Number(port), connectionName } })],
        controllers: [controllerWith({ rps: 0 }, 'handler')],
      })
      class AppModule {}
      await expect(startApp(AppModule, adapter)).rejects.toThrow('"rps" must be a positive number');
      const redis = await connectTestRedis();
      try {
        const named = async () =>
          ((await redis.client('LIST')) as string).split('\n').filter((line) => line.includes(connectionName));
        await waitUntil('the client to close', 2_000, async () =>
          (await named()).length > 0 ? 'still connected' : '',
        );
      } finally {
        await redis.quit();
      }
    });
  });

  describe('forRootAsync equals forRoot', () => {
    const options = (): RateLimitModuleOptions => ({
      store: new MemoryStore({ clock: () => T0 }),
      policies: [{ name: 'global', rps: 1, burst: 4 }],
      headers: ['ietf', 'legacy'],
    });

    @Injectable()
    class RateLimitConfig {
      createRateLimitOptions() {
        return options();
      }
    }
    @Module({ providers: [RateLimitConfig], exports: [RateLimitConfig] })
    class ConfigModule {}

    const variants: Array<[string, () => any]> = [
      ['forRoot', () => RateLimitModule.forRoot(options())],
      ['forRootAsync useFactory', () => RateLimitModule.forRootAsync({ useFactory: async () => options() })],
      ['forRootAsync useClass', () => RateLimitModule.forRootAsync({ useClass: RateLimitConfig })],
      [
        'forRootAsync useExisting',
        () => RateLimitModule.forRootAsync({ imports: [ConfigModule], useExisting: RateLimitConfig }),
      ],
    ];

    /** One response as `trace` keeps it. */
    interface Seen {
      status: number;
      body: unknown;
      headers: Array<[string, string]>;
    }

    /** Status and rate-limit headers of five requests from one client. */
    async function trace(module: () => any): Promise<Seen[]> {
      @Module({ imports: [module()], controllers: [ItemsController] })
      class AppModule {}
      const http: TestApp = await startApp(AppModule, adapter);
      try {
        const apiKey = `key-${randomUUID()}`;
        const seen: Seen[] = [];
        for (let i = 0; i < 5; i++) {
          const response = await read(await http.get('/items', { 'x-api-key': apiKey }));
          seen.push({
            status: response.status,
            body: response.body,
            headers: Object.entries(response.headers).filter(([h]) => /ratelimit|retry-after/.test(h)),
          });
        }
        return seen;
      } finally {
        await http.close();
      }
    }

    it('gives the same responses whichever way the options come', async () => {
      const expected = await trace(variants[0][1]);
      expect(expected.map((r) => r.status)).toEqual([200, 200, 200, 429, 429]);
      for (const [name, module] of variants.slice(1)) {
        expect({ name, trace: await trace(module) }).toEqual({ name, trace: expected });
      }
    });
  });
});
