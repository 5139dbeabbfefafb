import { Controller, Get, type Type } from '@nestjs/common';
import type { TestingModule } from '@nestjs/testing';
import { Test } from '@nestjs/testing';
import {
  MemoryStore,
  RateLimit,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RoutePolicy,
  SkipRateLimit,
} from '../../../lib/index.js';
import { bucketKey } from '../../../lib/keys/bucket-key.js';
import { resolveOptions } from '../../../lib/rate-limit-options.js';
import { StoreRequests } from '../../../lib/limiter/store-requests.js';
import { routePolicy } from '../../../lib/routes/route-policy.js';
import { RoutePolicies } from '../../../lib/routes/route-policies.js';

/**
 * The route-policy compiler: which policies apply to a route and in what form. Built as Nest
 * builds it (module start reads every controller), without an HTTP server. The validation
 * messages it produces are in validation.spec.ts.
 */

const MODULE_POLICIES: RateLimitModuleOptions['policies'] = [
  { name: 'global', rps: 100, burst: 200 },
  { name: 'shared', limit: 1000, window: '1h', key: 'ip' },
];

@RateLimit({ name: 'per-class', rps: 10 })
@Controller('cats')
class CatsController {
  @Get()
  find() {
    return [];
  }

  @RateLimit({ name: 'per-handler', algorithm: 'gcra', rps: 1, burst: 5 })
  @Get('one')
  findOne() {
    return {};
  }

  @RateLimit([{ name: 'shared', rps: 2, burst: 4, key: 'api-key' }, { rps: 3 }])
  @Get('replaced')
  replaced() {
    return {};
  }

  @RateLimit({ name: 'per-class', rps: 1, burst: 1 })
  @Get('tighter')
  tighter() {
    return {};
  }

  @SkipRateLimit()
  @Get('health')
  health() {
    return 'ok';
  }

  @SkipRateLimit('global', 'per-class')
  @Get('some')
  some() {
    return [];
  }
}

@SkipRateLimit('shared')
@Controller('dogs')
class DogsController {
  @Get()
  find() {
    return [];
  }

  @SkipRateLimit('global')
  @Get('both')
  both() {
    return [];
  }
}

@SkipRateLimit()
@Controller('internal')
class InternalController {
  @RateLimit({ name: 'per-handler', rps: 1 })
  @Get()
  find() {
    return [];
  }
}

@Controller('plain')
class PlainController {
  @Get()
  find() {
    return [];
  }
}

/** The module started with `options` and the controllers above; the compiler it holds. */
async function compiler(
  options: RateLimitModuleOptions = {},
): Promise<{ moduleRef: TestingModule; routes: RoutePolicies }> {
  const moduleRef = await Test.createTestingModule({
    imports: [RateLimitModule.forRoot({ store: new MemoryStore({ clock: () => 0 }), ...options })],
    controllers: [CatsController, DogsController, InternalController, PlainController],
  }).compile();
  await moduleRef.init();
  return { moduleRef, routes: moduleRef.get(RoutePolicies) };
}

/** A handler as the compiler keys routes by it. */
type Handler = Parameters<RoutePolicies['forRoute']>[1];

/** The route policies of `controller.method`. */
const of = (routes: RoutePolicies, controller: Type, method: string) =>
  routes.forRoute(controller, (controller.prototype as Record<string, Handler>)[method]);
const names = (policies: readonly RoutePolicy[]) => policies.map((policy) => policy.name);

describe('RoutePolicies', () => {
  let moduleRef: TestingModule;
  let routes: RoutePolicies;

  beforeAll(async () => {
    ({ moduleRef, routes } = await compiler({ prefix: 'app:', key: ['user', 'ip'], policies: MODULE_POLICIES }));
  });
  afterAll(() => moduleRef.close());

  it('applies module, class and handler policies in that order', () => {
    expect(names(of(routes, CatsController, 'find'))).toEqual(['global', 'shared', 'per-class']);
    expect(names(of(routes, CatsController, 'findOne'))).toEqual(['global', 'shared', 'per-class', 'per-handler']);
  });

  it('names an unnamed handler policy Controller.handler', () => {
    expect(names(of(routes, CatsController, 'replaced'))).toContain('CatsController.replaced');
  });

  it('lets a handler policy replace a module policy of the same name, in the place of the one it replaces', () => {
    const policies = of(routes, CatsController, 'replaced');
    expect(names(policies)).toEqual(['global', 'shared', 'per-class', 'CatsController.replaced']);
    expect(policies[1]).toMatchObject({ rule: { algorithm: 'token_bucket', rps: 2, burst: 4 }, keys: ['api-key'] });
  });

  it('lets a handler policy replace a class policy of the same name', () => {
    const policies = of(routes, CatsController, 'tighter');
    expect(names(policies)).toEqual(['global', 'shared', 'per-class']);
    expect(policies[2].rule).toEqual({ algorithm: 'token_bucket', rps: 1, burst: 1 });
    expect(of(routes, CatsController, 'find')[2].rule).toEqual({ algorithm: 'token_bucket', rps: 10, burst: 10 });
  });

  it('exempts a route from every policy with @SkipRateLimit() on the handler', () => {
    expect(of(routes, CatsController, 'health')).toEqual([]);
  });

  it('exempts every route of a class with @SkipRateLimit() on the class, its handler policies too', () => {
    expect(of(routes, InternalController, 'find')).toEqual([]);
  });

  it('drops only the named policies with @SkipRateLimit(name)', () => {
    expect(names(of(routes, CatsController, 'some'))).toEqual(['shared']);
  });

  it('drops the names skipped on the class and on the handler together', () => {
    expect(names(of(routes, DogsController, 'find'))).toEqual(['global']);
    expect(of(routes, DogsController, 'both')).toEqual([]);
  });

  it("settles key sources: the policy's own, else the module's key", () => {
    const [global, shared, perClass, perHandler] = of(routes, CatsController, 'findOne');
    expect(global.keys).toEqual(['user', 'ip']);
    expect(shared.keys).toEqual(['ip']);
    expect(perClass.keys).toEqual(['user', 'ip']);
    expect(perHandler.keys).toEqual(['user', 'ip']);
  });

  it("starts each policy's keys with the prefix, its name and its algorithm's tag", () => {
    expect(of(routes, CatsController, 'findOne').map((policy) => policy.keyPrefix)).toEqual([
      'app:global:tb:{',
      'app:shared:tb:{',
      'app:per-class:tb:{',
      'app:per-handler:gcra:{',
    ]);
  });

  it('gives a route the same list object every time', () => {
    const first = of(routes, CatsController, 'findOne');
    expect(of(routes, CatsController, 'findOne')).toBe(first);
  });

  it('compiles and caches a route of a controller start did not see', () => {
    @RateLimit({ name: 'late', rps: 1 })
    @Controller('late')
    class LateController {
      @Get()
      find() {
        return [];
      }
    }
    const first = of(routes, LateController, 'find');
    expect(names(first)).toEqual(['global', 'shared', 'late']);
    expect(of(routes, LateController, 'find')).toBe(first);
  });
});

describe('RoutePolicies without module policies', () => {
  it('gives a route without policies an empty list', async () => {
    const { moduleRef, routes } = await compiler();
    expect(of(routes, PlainController, 'find')).toEqual([]);
    // the module's default key sources, the default prefix
    expect(of(routes, CatsController, 'find')).toEqual([
      expect.objectContaining({ name: 'per-class', keys: ['user', 'api-key', 'ip'], keyPrefix: 'rl:per-class:tb:{' }),
    ]);
    await moduleRef.close();
  });
});

describe('routePolicy and the store requests built from it', () => {
  const requests = new StoreRequests({ now: () => Date.now() });
  const options = resolveOptions({ prefix: 'x:', key: 'api-key' });
  const resolved = resolveOptions({
    policies: [
      {
        name: 'exports',
        algorithm: 'leaky_bucket',
        rps: 2,
        burst: 6,
        cost: 'header:x-weight',
        defaultCost: 3,
        key: ['user'],
      },
    ],
  }).policies[0];

  it('keeps what the policy says and settles the rest from the module', () => {
    expect(routePolicy(resolved, options)).toEqual({
      name: 'exports',
      rule: { algorithm: 'leaky_bucket', rps: 2, burst: 6 },
      cost: 'header:x-weight',
      defaultCost: 3,
      keys: ['user'],
      keyPrefix: 'x:exports:lb:{',
      tiers: undefined,
      owes: {
        refundOnSuccess: false,
        latency: false,
        release: false,
        period: false,
        anchor: undefined,
        settle: false,
        atEnd: false,
      },
      skipIf: undefined,
      adaptive: undefined,
      settles: undefined,
      unit: 'requests',
    });
    expect(routePolicy({ ...resolved, key: undefined }, options).keys).toEqual(['api-key']);
  });

  it("builds the store request: the identity's bucket under the policy, its rule and the cost", () => {
    const policy = routePolicy(resolved, options);
    expect(requests.request(policy, 'user:42', 2.5)).toEqual({
      key: bucketKey('x:', 'exports', 'leaky_bucket', 'user:42'),
      policy: 'exports',
      rule: { algorithm: 'leaky_bucket', rps: 2, burst: 6 },
      cost: 2.5,
    });
    expect(requests.request(policy, 'user:43', 1).key).not.toBe(requests.request(policy, 'user:42', 1).key);
  });

  it("gives a tiered policy a rule and a key prefix per tier, the default tier's as its own", () => {
    const tiered = resolveOptions({
      policies: [
        {
          name: 'api',
          tier: 'user:plan',
          tiers: { free: { rps: 1, burst: 2 }, pro: { algorithm: 'gcra', rps: 5, burst: 5 } },
          defaultTier: 'free',
        },
      ],
    }).policies[0];
    const policy = routePolicy(tiered, options);
    expect(policy).toMatchObject({
      name: 'api',
      rule: { algorithm: 'token_bucket', rps: 1, burst: 2 },
      keyPrefix: 'x:api:tb:free:{',
    });
    expect(policy.tiers?.source).toBe('user:plan');
    expect([...policy.tiers!.byName.values()]).toEqual([
      { name: 'free', rule: { algorithm: 'token_bucket', rps: 1, burst: 2 }, keyPrefix: 'x:api:tb:free:{' },
      { name: 'pro', rule: { algorithm: 'gcra', rps: 5, burst: 5 }, keyPrefix: 'x:api:gcra:pro:{' },
    ]);
    expect(policy.tiers?.byDefault).toBe(policy.tiers?.byName.get('free'));
    expect(routePolicy(resolved, options).tiers).toBeUndefined();
  });

  it("builds a tiered policy's store request in the tier's bucket, under its rule; an unknown tier or none is the default", () => {
    const tiered = resolveOptions({
      policies: [
        {
          name: 'api',
          tier: 'user:plan',
          tiers: { free: { rps: 1, burst: 2 }, pro: { algorithm: 'gcra', rps: 5, burst: 5 } },
          defaultTier: 'free',
        },
      ],
    }).policies[0];
    const policy = routePolicy(tiered, options);
    const digest = requests.request(routePolicy(resolved, options), 'user:42', 1).key.slice('x:exports:lb:'.length);
    expect(requests.request(policy, 'user:42', 1, 'pro')).toEqual({
      key: `x:api:gcra:pro:${digest}`,
      policy: 'api',
      rule: { algorithm: 'gcra', rps: 5, burst: 5 },
      cost: 1,
      tier: 'pro',
    });
    const free = {
      key: `x:api:tb:free:${digest}`,
      policy: 'api',
      rule: { algorithm: 'token_bucket', rps: 1, burst: 2 },
      cost: 1,
      tier: 'free',
    };
    for (const unknown of [undefined, 'gold', 'constructor', '__proto__'])
      expect(requests.request(policy, 'user:42', 1, unknown)).toEqual(free);
    // a policy without tiers ignores a tier
    expect(requests.request(routePolicy(resolved, options), 'user:42', 1, 'pro')).toEqual(
      requests.request(routePolicy(resolved, options), 'user:42', 1),
    );
  });
});

describe("scope: 'route'", () => {
  @RateLimit([
    { name: 'class-shared', rps: 5 },
    { name: 'class-per-route', rps: 5, scope: 'route' },
  ])
  @Controller('birds')
  class BirdsController {
    @Get()
    find() {
      return [];
    }

    @RateLimit({ name: 'writes', rps: 1, scope: 'route' })
    @Get('one')
    findOne() {
      return {};
    }

    @RateLimit({ name: 'writes', rps: 1, scope: 'route' })
    @Get('two')
    findTwo() {
      return {};
    }
  }

  let moduleRef: TestingModule;
  let routes: RoutePolicies;
  const prefixes = (method: string) =>
    routes
      .forRoute(BirdsController, (BirdsController.prototype as unknown as Record<string, Handler>)[method])
      .map((policy) => policy.keyPrefix);

  beforeAll(async () => {
    moduleRef = await Test.createTestingModule({
      imports: [
        RateLimitModule.forRoot({
          store: new MemoryStore({ clock: () => 0 }),
          policies: [
            { name: 'module-shared', rps: 100 },
            { name: 'module-per-route', rps: 100, scope: 'route' },
            {
              name: 'tiered',
              tiers: { free: { rps: 1 }, pro: { rps: 10 } },
              tier: 'user:plan',
              defaultTier: 'free',
              scope: 'route',
            },
          ],
        }),
      ],
      controllers: [BirdsController],
    }).compile();
    await moduleRef.init();
    routes = moduleRef.get(RoutePolicies);
  });
  afterAll(() => moduleRef.close());

  it("gives a module or class policy scoped to the route buckets of each route's own, and one scoped to the client one bucket across routes", () => {
    expect(prefixes('find')).toEqual([
      'rl:module-shared:tb:{',
      'rl:module-per-route@BirdsController.find:tb:{',
      'rl:tiered@BirdsController.find:tb:free:{',
      'rl:class-shared:tb:{',
      'rl:class-per-route@BirdsController.find:tb:{',
    ]);
    expect(prefixes('findOne').slice(0, 5)).toEqual([
      'rl:module-shared:tb:{',
      'rl:module-per-route@BirdsController.findOne:tb:{',
      'rl:tiered@BirdsController.findOne:tb:free:{',
      'rl:class-shared:tb:{',
      'rl:class-per-route@BirdsController.findOne:tb:{',
    ]);
  });

  it("gives each tier of a tiered policy scoped to the route the route's own buckets", () => {
    const tiered = routes.forRoute(BirdsController, BirdsController.prototype.findTwo)[2];
    expect([...tiered.tiers!.byName.values()].map((tier) => tier.keyPrefix)).toEqual([
      'rl:tiered@BirdsController.findTwo:tb:free:{',
      'rl:tiered@BirdsController.findTwo:tb:pro:{',
    ]);
  });

  it('separates the buckets of a named handler policy several handlers share', () => {
    expect(prefixes('findOne')[5]).toBe('rl:writes@BirdsController.findOne:tb:{');
    expect(prefixes('findTwo')[5]).toBe('rl:writes@BirdsController.findTwo:tb:{');
  });
});
