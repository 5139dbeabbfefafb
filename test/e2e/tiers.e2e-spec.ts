/**
 * Tiers over HTTP: a policy's tier picked per request by an async function or by a claim the
 * app's auth put on `req.user`, on both adapters and both stores. A pro client gets its tier's
 * burst, a free or unknown one the default tier's, each in a bucket of its own, with the tier's
 * numbers in `RateLimit-Policy`; a module policy can be tiered too; and a tier function runs once
 * per request however many policies read it.
 */
import { randomUUID } from 'node:crypto';
import { type CanActivate, Controller, type ExecutionContext, Get, Injectable, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitPolicy,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

/** Bursts 2 (free) and 5 (pro), refilled too slowly to matter here: windows of 200 s and 500 s. */
const TIERS: RateLimitPolicy['tiers'] = { free: { rps: 0.01, burst: 2 }, pro: { rps: 0.01, burst: 5 } };

/** Calls of `planOf`, to count how often a request's tier is worked out. */
let planCalls = 0;

/** A request's plan from `x-plan`, found asynchronously, as a lookup in a database would. */
async function planOf(context: ExecutionContext): Promise<string | undefined> {
  planCalls++;
  await new Promise((resolve) => setImmediate(resolve));
  const plan = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-plan'];
  return plan;
}

/** Sets `req.user` from `Authorization: Bearer <id>.<plan>`, as an app's JWT guard sets a token's claims. */
@Injectable()
class JwtGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context
      .switchToHttp()
      .getRequest<{ headers: Record<string, string>; user?: { sub: string; plan: string } }>();
    const token = /^Bearer (\w+)\.(\w+)$/.exec(request.headers.authorization ?? '');
    if (token !== null) request.user = { sub: token[1], plan: token[2] };
    return true;
  }
}

/** The app's auth, imported before `RateLimitModule` so that its global guard runs first. */
@Module({ providers: [{ provide: APP_GUARD, useClass: JwtGuard }] })
class AuthModule {}

@Controller('tiers')
class TiersController {
  @RateLimit({ name: 'api', key: 'header:x-client', tier: planOf, tiers: TIERS, defaultTier: 'free' })
  @Get('by-lookup')
  byLookup() {
    return { ok: true };
  }

  @RateLimit({ name: 'by-claim', key: 'user', tier: 'user:plan', tiers: TIERS, defaultTier: 'free' })
  @Get('by-claim')
  byClaim() {
    return { ok: true };
  }

  @RateLimit([
    { name: 'short', key: 'header:x-client', tier: planOf, tiers: TIERS, defaultTier: 'free' },
    {
      name: 'long',
      key: 'header:x-client',
      tier: planOf,
      tiers: { free: { limit: 100, window: '1h' }, pro: { limit: 1000, window: '1h' } },
      defaultTier: 'free',
    },
  ])
  @Get('two-policies')
  twoPolicies() {
    return { ok: true };
  }
}

/** A module policy over every route, tiered by the same claim. */
const GLOBAL: RateLimitPolicy = {
  name: 'global',
  key: 'header:x-client',
  tier: 'user:plan',
  tiers: { free: { limit: 100, window: 60 }, pro: { limit: 1000, window: 60 } },
  defaultTier: 'free',
};

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

const STORES: Array<[string, () => RateLimitStore]> = [
  ['memory store', () => new MemoryStore()],
  ['Redis store', () => new RedisStore({ client: redis })],
];

describe.each(ADAPTERS)('tiers on %s', (adapter) => {
  describe.each(STORES)('with the %s', (_store, makeStore) => {
    let http: TestApp;
    beforeAll(async () => {
      @Module({
        imports: [
          AuthModule,
          RateLimitModule.forRoot({ store: makeStore(), prefix: `rl-e2e-tiers-${randomUUID()}:`, policies: [GLOBAL] }),
        ],
        controllers: [TiersController],
      })
      class AppModule {}
      http = await startApp(AppModule, adapter);
    });
    afterAll(() => http.close());

    /** Statuses and `RateLimit-Policy` of `n` requests in turn. */
    async function send(path: string, headers: Record<string, string>, n: number) {
      const seen = [];
      for (let i = 0; i < n; i++) {
        const { status, headers: got } = await read(await http.get(path, headers));
        seen.push({ status, policy: got['ratelimit-policy'] });
      }
      return seen;
    }
    const statuses = (seen: Array<{ status: number }>) => seen.map(({ status }) => status);

    it('admits 5 for a pro client, 2 for a free one and 2 for an unknown or missing tier, each with its tier in RateLimit-Policy', async () => {
      const client = () => ({ 'x-client': randomUUID() });
      const pro = await send('/tiers/by-lookup', { ...client(), 'x-plan': 'pro' }, 6);
      expect(statuses(pro)).toEqual([200, 200, 200, 200, 200, 429]);
      // the module policy reads the claim, which this request has none of: its default tier
      expect(new Set(pro.map(({ policy }) => policy))).toEqual(new Set(['"global";q=100;w=60, "api";q=5;w=500']));

      for (const plan of [{ 'x-plan': 'free' }, { 'x-plan': 'gold' }, {}] as Array<Record<string, string>>) {
        const free = await send('/tiers/by-lookup', { ...client(), ...plan }, 3);
        expect({ plan, statuses: statuses(free) }).toEqual({ plan, statuses: [200, 200, 429] });
        expect(new Set(free.map(({ policy }) => policy))).toEqual(new Set(['"global";q=100;w=60, "api";q=2;w=200']));
      }
    });

    it('gives one client a bucket per tier: spent as free, it still has its pro burst', async () => {
      const client = { 'x-client': randomUUID() };
      expect(statuses(await send('/tiers/by-lookup', { ...client, 'x-plan': 'free' }, 3))).toEqual([200, 200, 429]);
      expect(statuses(await send('/tiers/by-lookup', { ...client, 'x-plan': 'pro' }, 6))).toEqual([
        200, 200, 200, 200, 200, 429,
      ]);
      const refused = await http.get('/tiers/by-lookup', { ...client, 'x-plan': 'pro' });
      expect(await refused.json()).toMatchObject({ statusCode: 429, policy: 'api' });
      expect(refused.headers.get('ratelimit')).toMatch(/^"global";r=\d+;t=\d+, "api";r=0;t=\d+$/);
    });

    it("reads the tier from a JWT claim ('user:plan'), for a route's policy and a module policy alike", async () => {
      const user = randomUUID().replaceAll('-', '');
      const pro = await send('/tiers/by-claim', { 'x-client': user, authorization: `Bearer ${user}.pro` }, 6);
      expect(statuses(pro)).toEqual([200, 200, 200, 200, 200, 429]);
      expect(pro[0].policy).toBe('"global";q=1000;w=60, "by-claim";q=5;w=500');

      const other = randomUUID().replaceAll('-', '');
      const free = await send('/tiers/by-claim', { 'x-client': other, authorization: `Bearer ${other}.free` }, 3);
      expect(statuses(free)).toEqual([200, 200, 429]);
      expect(free[0].policy).toBe('"global";q=100;w=60, "by-claim";q=2;w=200');
      const unknown = randomUUID().replaceAll('-', '');
      expect(
        statuses(
          await send('/tiers/by-claim', { 'x-client': unknown, authorization: `Bearer ${unknown}.platinum` }, 3),
        ),
      ).toEqual([200, 200, 429]);
    });

    it('works a tier function out once per request, however many policies read it', async () => {
      const client = { 'x-client': randomUUID(), 'x-plan': 'pro' };
      const before = planCalls;
      const seen = await send('/tiers/two-policies', client, 4);
      expect(planCalls - before).toBe(4);
      expect(statuses(seen)).toEqual([200, 200, 200, 200]);
      expect(seen[0].policy).toBe('"global";q=100;w=60, "short";q=5;w=500, "long";q=1000;w=3600');
    });
  });
});
