import { jest } from '@jest/globals';
import { Controller, type ExecutionContext, Get, Logger, type Type } from '@nestjs/common';
import { type DiscoveryService, type HttpAdapterHost, MetadataScanner } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import {
  type Departure,
  type LimitedCall,
  type LimitedRequest,
  MemoryStore,
  RateLimit,
  RateLimitGuard,
  RateLimitInterceptor,
  type RateLimitContext,
  type RateLimitDecision,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  RateLimiterService,
  RateLimitStoreError,
  type RateLimitStore,
  type RateLimitVerdict,
} from '../../lib/index.js';
import { lastValueFrom, type Observable, of, throwError } from 'rxjs';
import { RateLimitContexts } from '../../lib/contexts/rate-limit-contexts.js';
import { headerValue } from '../../lib/keys/identity.js';
import { keyTimedOut } from '../../lib/rate-limit.messages.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { RoutePolicies } from '../../lib/routes/route-policies.js';
import { RateLimitOutcomeInterceptor } from '../../lib/rate-limit-outcome.interceptor.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * The guard's steps without a server: real route policies, limiter and memory store (clock
 * pinned), and a fake context seam that records the headers it is given and answers with
 * errors of its own, so each step's effect on the seam can be read back.
 */

const NOW = 1_767_225_600_000;
const IP = '203.0.113.7';

/** The refusal the fake seam answers with: which policy and what cost the guard named. */
class Refused extends Error {
  constructor(
    readonly decision: RateLimitDecision,
    readonly cost: number,
    /** Every policy's decision, as the guard handed them over. */
    readonly decisions: readonly RateLimitDecision[],
  ) {
    super(`refused by ${decision.policy}`);
  }
}

class Unavailable extends Error {
  constructor(override readonly cause: unknown) {
    super('unavailable');
  }
}

class Gone extends Error {}

/** A seam that records what the guard does with it. */
class FakeContext implements RateLimitContext {
  readonly headers: Array<[string, string]> = [];
  readonly limitedByIpCalls: LimitedRequest[] = [];
  /** What `departure` hands out; `undefined`: it cannot tell. */
  departing: Departure | undefined;
  /** What `ended` answers; `undefined`: the handler's outcome ends a request. */
  ended: RateLimitContext['ended'];

  request(context: ExecutionContext): LimitedRequest {
    return context.getArgByIndex(0);
  }
  setHeader(_context: ExecutionContext, name: string, value: string): void {
    this.headers.push([name, value]);
  }
  refusal(
    decision: RateLimitDecision,
    cost: number,
    _context: ExecutionContext,
    decisions: readonly RateLimitDecision[],
  ): Error {
    return new Refused(decision, cost, decisions);
  }
  unavailable(cause: unknown): Error {
    return new Unavailable(cause);
  }
  departure(): Departure | undefined {
    return this.departing;
  }
  limitedByIp(request: LimitedRequest): void {
    this.limitedByIpCalls.push(request);
  }
}

/** A controller whose one handler, `find`, carries `policies`. */
function routeWith(policies: RateLimitPolicy[]): Type {
  @Controller('things')
  class ThingsController {
    @RateLimit(policies)
    @Get()
    find() {
      return [];
    }
  }
  return ThingsController;
}

@Controller('plain')
class PlainController {
  @Get()
  find() {
    return [];
  }
}

type GuardClass = new (...args: ConstructorParameters<typeof RateLimitGuard>) => RateLimitGuard;

/** The guard as the module wires it, on `store`; `headers` default to two families with no wall clock in them. */
function setup(
  options: RateLimitModuleOptions = {},
  store: RateLimitStore = new MemoryStore({ clock: () => NOW }),
  Guard: GuardClass = RateLimitGuard,
) {
  const resolved = resolveOptions({ headers: ['ietf', 'legacy'], ...options });
  const seam = new FakeContext();
  const routes = new RoutePolicies(
    resolved,
    { getControllers: () => [] } as unknown as DiscoveryService,
    new MetadataScanner(),
  );
  const limiter = new StandaloneLimiter(resolved, store);
  const contexts = new RateLimitContexts(resolved, {} as HttpAdapterHost);
  contexts.use('http', seam);
  const guard = new Guard(resolved, routes, limiter.core, contexts);
  const outcomes = new RateLimitOutcomeInterceptor(contexts, limiter.core);
  return { guard, seam, limiter, store, outcomes };
}

/** An HTTP execution context for `controller.find` with `request`. */
function http(controller: Type, request: Partial<LimitedRequest> = {}): ExecutionContextHost {
  const { find } = controller.prototype as { find: () => unknown };
  return new ExecutionContextHost([{ ip: IP, headers: {}, ...request }, {}], controller, find);
}

/** What `act` rejects with. */
async function rejection(act: unknown): Promise<unknown> {
  return Promise.resolve(act).then(
    () => {
      throw new Error('nothing was thrown');
    },
    (error: unknown) => error,
  );
}

let limiters: StandaloneLimiter[] = [];
afterEach(async () => {
  for (const limiter of limiters) await limiter.onApplicationShutdown();
  limiters = [];
  jest.restoreAllMocks();
});
/** `setup`, shut down after the test. */
function guarded(...args: Parameters<typeof setup>) {
  const built = setup(...args);
  limiters.push(built.limiter);
  return built;
}

describe('RateLimitGuard: which requests it limits', () => {
  it('lets a kind of context not in `contexts` through untouched', async () => {
    const { guard, seam, store } = guarded({ policies: [{ rps: 1 }], contexts: ['http'] });
    const context = http(PlainController);
    context.setType('rpc');
    expect(await guard.canActivate(context)).toBe(true);
    expect(seam.headers).toEqual([]);
    expect((store as MemoryStore).size).toBe(0);
  });

  it('lets a route without policies through with no header', async () => {
    const { guard, seam, store } = guarded();
    expect(await guard.canActivate(http(PlainController))).toBe(true);
    expect(seam.headers).toEqual([]);
    expect((store as MemoryStore).size).toBe(0);
  });
});

describe('RateLimitGuard: decisions', () => {
  const API: RateLimitPolicy = { name: 'api', rps: 1, burst: 2 };

  it('sets the headers of an admitted request and lets it through', async () => {
    const { guard, seam } = guarded();
    expect(await guard.canActivate(http(routeWith([API])))).toBe(true);
    expect(seam.headers).toEqual([
      ['RateLimit-Policy', '"api";q=2;w=2'],
      ['RateLimit', '"api";r=1;t=1'],
      ['RateLimit-Limit', '2'],
      ['RateLimit-Remaining', '1'],
      ['RateLimit-Reset', '1'],
    ]);
  });

  it('ends a refused request with Retry-After, then the refusal naming the policy that frees up last and its cost', async () => {
    const route = routeWith([
      { name: 'second', rps: 1, burst: 2, cost: 'header:x-weight' },
      { name: 'minute', limit: 3, window: '1m', cost: 'header:x-weight' },
    ]);
    const { guard, seam } = guarded();
    const weighing = (weight: string) => http(route, { headers: { 'x-weight': weight } });
    expect(await guard.canActivate(weighing('2'))).toBe(true);
    seam.headers.length = 0;

    const refused = await rejection(guard.canActivate(weighing('2')));
    expect(refused).toBeInstanceOf(Refused);
    expect(refused).toMatchObject({ decision: { policy: 'minute', allowed: false, retryAfter: 20 }, cost: 2 });
    // the legacy trio names the same policy, and Retry-After comes last, just before the refusal
    expect(seam.headers).toContainEqual(['RateLimit-Limit', '3']);
    expect(seam.headers.at(-1)).toEqual(['Retry-After', '20']);
  });

  it("hands the seam every policy's decision, for a refusal that lists the refusing ones", async () => {
    const route = routeWith([
      { name: 'tight', rps: 1, burst: 1 },
      { name: 'loose', rps: 1, burst: 100 },
    ]);
    const { guard } = guarded();
    await guard.canActivate(http(route));
    const refused = (await rejection(guard.canActivate(http(route)))) as Refused;
    expect(refused.decisions.map(({ policy, allowed }) => ({ policy, allowed }))).toEqual([
      { policy: 'tight', allowed: false },
      { policy: 'loose', allowed: true },
    ]);
    expect(refused.decisions).toContain(refused.decision);
  });

  it("with exceptionFactory, throws the factory's error in place of the seam's, after Retry-After", async () => {
    const route = routeWith([
      { name: 'second', rps: 1, burst: 1 },
      { name: 'minute', limit: 1, window: '1m' },
    ]);
    const made: Array<{ policy: string; retryAfter: number; context: ExecutionContext }> = [];
    const exceptionFactory = (decision: RateLimitDecision, context: ExecutionContext) => {
      made.push({ policy: decision.policy, retryAfter: decision.retryAfter, context });
      return new Error(`slow down: ${decision.policy}`);
    };
    const { guard, seam } = guarded({ exceptionFactory });
    const refusal = jest.spyOn(seam, 'refusal');
    await guard.canActivate(http(route));
    seam.headers.length = 0;

    const context = http(route);
    expect(await rejection(guard.canActivate(context))).toEqual(new Error('slow down: minute'));
    expect(made).toEqual([{ policy: 'minute', retryAfter: 60, context }]);
    expect(refusal).not.toHaveBeenCalled();
    // the headers came first, and name the policy the factory was given
    expect(seam.headers).toContainEqual(['RateLimit-Limit', '1']);
    expect(seam.headers.at(-1)).toEqual(['Retry-After', '60']);
  });

  it('sends no Retry-After when the cost exceeds the capacity (no wait would do)', async () => {
    const { guard, seam } = guarded();
    const route = routeWith([{ ...API, cost: 'header:x-weight' }]);
    const refused = await rejection(guard.canActivate(http(route, { headers: { 'x-weight': '5' } })));
    expect(refused).toMatchObject({ decision: { policy: 'api', retryAfter: Infinity }, cost: 5 });
    expect(seam.headers.map(([name]) => name)).not.toContain('Retry-After');
    expect(seam.headers).toContainEqual(['RateLimit-Remaining', '2']);
  });

  it('in shadow mode lets a refused request through, sets its headers and warns once per refusal', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const { guard, seam } = guarded({ mode: 'shadow' });
    const route = routeWith([{ name: 'once', rps: 1, burst: 1 }]);
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await guard.canActivate(http(route)));
    expect(results).toEqual([true, true, true]);
    expect(warn.mock.calls).toEqual([
      ['Shadow mode: policy "once" would refuse a request to ThingsController.find (retry after 1 s)'],
      ['Shadow mode: policy "once" would refuse a request to ThingsController.find (retry after 1 s)'],
    ]);
    expect(seam.headers.filter(([name]) => name === 'RateLimit')).toHaveLength(3);
    expect(seam.headers.map(([name]) => name)).not.toContain('Retry-After');
  });
});

describe('RateLimitGuard: a store that cannot decide', () => {
  const failure = new RateLimitStoreError('connection refused');
  const down = async (): Promise<RateLimitDecision[]> => {
    throw failure;
  };
  /** A remote store (not `inProcess`): its calls go through the timeout and the breaker. */
  const broken = (): RateLimitStore => ({ consume: down, peek: down, reset: async () => undefined });
  const route = routeWith([{ name: 'api', rps: 1 }]);

  it("lets the request through with failMode 'open', with no header", async () => {
    const { guard, seam } = guarded({ failMode: 'open' }, broken());
    expect(await guard.canActivate(http(route))).toBe(true);
    expect(seam.headers).toEqual([]);
  });

  it("ends it with Retry-After: 1 and the seam's unavailable error with failMode 'closed'", async () => {
    const { guard, seam } = guarded({ failMode: 'closed' }, broken());
    const error = await rejection(guard.canActivate(http(route)));
    expect(error).toBeInstanceOf(Unavailable);
    expect((error as Unavailable).cause).toBe(failure);
    expect(seam.headers).toEqual([['Retry-After', '1']]);
  });

  it("lets it through with failMode 'closed' in shadow mode", async () => {
    const { guard } = guarded({ failMode: 'closed', mode: 'shadow' }, broken());
    expect(await guard.canActivate(http(route))).toBe(true);
  });

  it('rethrows an error that is no store failure', async () => {
    const bug = new TypeError('a bug');
    const store: RateLimitStore = {
      consume: async () => Promise.reject(bug),
      peek: down,
      reset: async () => undefined,
      inProcess: true,
    };
    const { guard } = guarded({ failMode: 'open' }, store);
    expect(await rejection(guard.canActivate(http(route)))).toBe(bug);
  });
});

describe('RateLimitGuard: steps a subclass overrides', () => {
  const ONE: RateLimitPolicy = { name: 'per-tenant', rps: 1, burst: 1 };

  class TenantGuard extends RateLimitGuard {
    protected override identify({ request }: LimitedCall): string {
      return `tenant:${headerValue(request, 'x-tenant') ?? 'none'}`;
    }
  }

  it('keys by tenant with identify: one bucket per tenant, whatever the IP', async () => {
    const { guard, limiter } = guarded({}, undefined, TenantGuard);
    const route = routeWith([ONE]);
    const tenant = (name: string) => http(route, { headers: { 'x-tenant': name } });
    expect(await guard.canActivate(tenant('acme'))).toBe(true);
    expect(await rejection(guard.canActivate(tenant('acme')))).toBeInstanceOf(Refused);
    expect(await guard.canActivate(tenant('globex'))).toBe(true);
    expect((await limiter.peek('tenant:globex', ONE))[0].remaining).toBe(0);
    expect((await limiter.peek(`ip:${IP}`, ONE))[0].remaining).toBe(1);
  });

  it('charges what cost says', async () => {
    class Double extends RateLimitGuard {
      protected override cost(): number {
        return 2;
      }
    }
    const { guard, limiter } = guarded({}, undefined, Double);
    const policy: RateLimitPolicy = { name: 'pairs', rps: 1, burst: 3 };
    expect(await guard.canActivate(http(routeWith([policy])))).toBe(true);
    expect((await limiter.peek(`ip:${IP}`, policy))[0].remaining).toBe(1);
  });

  it('ends a refusal the way refuse says', async () => {
    class Teapot extends RateLimitGuard {
      protected override refuse(_call: LimitedCall, { limiting, requests }: RateLimitVerdict): never {
        throw new Error(`teapot: ${limiting.policy} x${requests[0].cost}`);
      }
    }
    const { guard, seam } = guarded({}, undefined, Teapot);
    const route = routeWith([ONE]);
    await guard.canActivate(http(route));
    expect(await rejection(guard.canActivate(http(route)))).toEqual(new Error('teapot: per-tenant x1'));
    expect(seam.headers.map(([name]) => name)).not.toContain('Retry-After');
  });
});

describe('RateLimitGuard.buildRequests', () => {
  it('tells the seam of a request only for the policies that limit it by IP', async () => {
    const route = routeWith([
      { name: 'by-user', rps: 10, key: 'user' },
      { name: 'by-ip', rps: 10, key: 'ip' },
      { name: 'by-key', rps: 10, key: 'api-key' },
    ]);
    const { guard, seam } = guarded();
    const signedIn = { user: { id: 7 }, headers: { 'x-api-key': 'k' } };
    await guard.canActivate(http(route, signedIn));
    expect(seam.limitedByIpCalls).toEqual([expect.objectContaining(signedIn)]);

    // without a user or an API key, every source falls back to the IP
    seam.limitedByIpCalls.length = 0;
    await guard.canActivate(http(route));
    expect(seam.limitedByIpCalls).toHaveLength(3);
  });
});

describe('RateLimitGuard: key and tier functions that answer with a promise', () => {
  /** The module's `timeout` here, ms: only a promise that never settles reaches it. */
  const TIMEOUT = 50;
  const tenantOf = (context: ExecutionContext) =>
    context.getArgByIndex<LimitedRequest>(0).headers['x-tenant'] as string | undefined;
  const TENANT: RateLimitPolicy = {
    name: 'tenant',
    rps: 0.001,
    burst: 1,
    key: [async (context) => tenantOf(context), 'api-key'],
  };
  const asTenant = (route: Type, tenant: string) => http(route, { headers: { 'x-tenant': tenant } });
  const never = () => new Promise<string>(() => undefined);

  it("awaits a key function's promise: one bucket per identity it names; when it names none, the next source's", async () => {
    const { guard, limiter } = guarded();
    const route = routeWith([TENANT]);
    expect(await guard.canActivate(asTenant(route, 'acme'))).toBe(true);
    expect(await rejection(guard.canActivate(asTenant(route, 'acme')))).toBeInstanceOf(Refused);
    expect(await guard.canActivate(asTenant(route, 'globex'))).toBe(true);
    expect((await limiter.peek('custom:globex', TENANT))[0].remaining).toBe(0);
    expect(await guard.canActivate(http(route, { headers: { 'x-api-key': 'k' } }))).toBe(true);
    expect((await limiter.peek('api-key:k', TENANT))[0].remaining).toBe(0);
    expect((await limiter.peek(`ip:${IP}`, TENANT))[0].remaining).toBe(1);
  });

  it('answers without a promise where every key is a value (the memory store decides in the call)', () => {
    const { guard } = guarded();
    expect(
      guard.canActivate(asTenant(routeWith([{ ...TENANT, key: [(context) => tenantOf(context), 'ip'] }]), 'acme')),
    ).toBe(true);
  });

  it('fails the request with the error of a key function whose promise rejects, as with one that throws, charging nothing', async () => {
    const bug = new Error('tenant lookup failed');
    const { guard, store } = guarded();
    expect(await rejection(guard.canActivate(http(routeWith([{ ...TENANT, key: () => Promise.reject(bug) }]))))).toBe(
      bug,
    );
    expect((store as MemoryStore).size).toBe(0);
  });

  it("lets the request through uncharged once `timeout` has passed, with failMode 'open'", async () => {
    const { guard, seam, store } = guarded({ timeout: TIMEOUT, failMode: 'open' });
    const started = performance.now();
    expect(
      await guard.canActivate(
        http(
          routeWith([
            { ...TENANT, key: never },
            { name: 'per-ip', rps: 0.001, burst: 5, key: 'ip' },
          ]),
        ),
      ),
    ).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT);
    expect(seam.headers).toEqual([]);
    expect((store as MemoryStore).size).toBe(0);
  });

  it("ends it with Retry-After: 1 and the seam's unavailable error with failMode 'closed'; lets it through in shadow mode", async () => {
    const { guard, seam } = guarded({ timeout: TIMEOUT, failMode: 'closed' });
    const route = routeWith([{ ...TENANT, key: never }]);
    const error = await rejection(guard.canActivate(http(route)));
    expect(error).toBeInstanceOf(Unavailable);
    expect((error as Unavailable).cause).toBeInstanceOf(RateLimitStoreError);
    expect(((error as Unavailable).cause as Error).message).toBe(keyTimedOut(TIMEOUT));
    expect(seam.headers).toEqual([['Retry-After', '1']]);
    expect(await guarded({ timeout: TIMEOUT, failMode: 'closed', mode: 'shadow' }).guard.canActivate(http(route))).toBe(
      true,
    );
  });

  it("goes on to the next source with failMode 'local': the request is still limited", async () => {
    const { guard, limiter } = guarded({ timeout: TIMEOUT, failMode: 'local' });
    const route = routeWith([{ ...TENANT, key: [never, 'api-key'] }]);
    expect(await guard.canActivate(http(route, { headers: { 'x-api-key': 'k' } }))).toBe(true);
    expect(await rejection(guard.canActivate(http(route, { headers: { 'x-api-key': 'k' } })))).toBeInstanceOf(Refused);
    expect((await limiter.peek('api-key:k', TENANT))[0].remaining).toBe(0);
  });

  it("limits by the policy's defaultTier when a tier function's promise passes `timeout`", async () => {
    const plan: RateLimitPolicy = {
      name: 'plan',
      key: 'ip',
      tiers: { free: { rps: 0.001, burst: 1 }, pro: { rps: 0.001, burst: 5 } },
      tier: never,
      defaultTier: 'free',
    };
    const { guard } = guarded({ timeout: TIMEOUT });
    const route = routeWith([plan]);
    const started = performance.now();
    expect(await guard.canActivate(http(route))).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT);
    expect(await rejection(guard.canActivate(http(route)))).toMatchObject({
      decision: { policy: 'plan', tier: 'free' },
    });
  });
});

describe('RateLimitGuard: a leaky_bucket turn', () => {
  const QUEUE: RateLimitPolicy = { name: 'queue', algorithm: 'leaky_bucket', rps: 1, burst: 3 };
  const remaining = async (limiter: RateLimiterService) => (await limiter.peek(`ip:${IP}`, QUEUE))[0].remaining;

  /** Resolves once a request of the guard's engine is in the queue, its wait begun. */
  function queued({ core }: StandaloneLimiter): Promise<void> {
    const wait = core.wait.bind(core);
    return new Promise((resolve) => {
      jest.spyOn(core, 'wait').mockImplementation((decisions, signal) => {
        const waiting = wait(decisions, signal);
        resolve();
        return waiting;
      });
    });
  }

  /** A departure the test aborts, which records that the guard stopped watching. */
  function departure() {
    const leaving = new AbortController();
    const end = jest.fn();
    return {
      leaving,
      end,
      departure: { signal: leaving.signal, gone: () => new Gone('client gone'), end } satisfies Departure,
    };
  }

  it('lets the first request through at once, without watching for its client', async () => {
    const { guard, seam } = guarded();
    const watch = departure();
    seam.departing = watch.departure;
    expect(await guard.canActivate(http(routeWith([QUEUE])))).toBe(true);
    expect(watch.end).not.toHaveBeenCalled();
  });

  it("ends a waiting request with the seam's gone() error when its client leaves, and gives its charge back", async () => {
    const { guard, seam, limiter } = guarded();
    const route = routeWith([QUEUE]);
    expect(await guard.canActivate(http(route))).toBe(true);
    expect(await remaining(limiter)).toBe(2);

    const watch = departure();
    seam.departing = watch.departure;
    const inQueue = queued(limiter);
    const waiting = guard.canActivate(http(route));
    await inQueue;
    expect(await remaining(limiter)).toBe(1);
    watch.leaving.abort();
    expect(await rejection(waiting)).toBeInstanceOf(Gone);
    expect(watch.end).toHaveBeenCalledTimes(1);
    expect(await remaining(limiter)).toBe(2);
  });

  it("ends a waiting request with Retry-After: 1 and the seam's unavailable error at shutdown, its charge given back", async () => {
    const { guard, seam, limiter } = guarded();
    const route = routeWith([QUEUE]);
    await guard.canActivate(http(route));
    seam.departing = departure().departure;
    const inQueue = queued(limiter);
    const waiting = guard.canActivate(http(route));
    await inQueue;
    await limiter.beforeApplicationShutdown();
    expect(await rejection(waiting)).toBeInstanceOf(Unavailable);
    expect(seam.headers.at(-1)).toEqual(['Retry-After', '1']);
    expect(await remaining(limiter)).toBe(2);
  });
});

describe('RateLimitGuard: once per request, however many times it runs', () => {
  const PAIR: RateLimitPolicy = { name: 'pair', rps: 0.001, burst: 2 };

  /** A controller under a class policy, with two handlers (a GraphQL query's two root fields). */
  @RateLimit(PAIR)
  @Controller('fields')
  class FieldsController {
    @Get('a')
    a() {
      return 'a';
    }
    @RateLimit({ name: 'b-only', rps: 0.001, burst: 5 })
    @Get('b')
    b() {
      return 'b';
    }
  }

  /** A context for `handler` whose target is `request`, as one GraphQL request's fields share theirs. */
  function field(handler: 'a' | 'b', request: LimitedRequest): ExecutionContextHost {
    return new ExecutionContextHost([request, {}], FieldsController, FieldsController.prototype[handler]);
  }

  /** What is left of `policy`'s bucket for the test's IP. */
  async function left(limiter: RateLimiterService, policy: RateLimitPolicy): Promise<number> {
    return (await limiter.peek(`ip:${IP}`, policy))[0].remaining;
  }

  /** A seam whose target is the request, as the HTTP and GraphQL seams' are. */
  function byRequest(seam: FakeContext): FakeContext {
    return Object.assign(seam, { target: (context: ExecutionContext) => context.getArgByIndex<object>(0) });
  }

  it('charges a request once when it runs twice on the same context (a global guard and @UseGuards)', async () => {
    const { guard, limiter } = guarded();
    const route = routeWith([PAIR]);
    const context = http(route);
    expect(await guard.canActivate(context)).toBe(true);
    expect(await guard.canActivate(context)).toBe(true);
    expect(await left(limiter, PAIR)).toBe(1);
  });

  it('answers a second run with the first refusal, charging nothing more', async () => {
    const { guard, limiter } = guarded();
    const route = routeWith([PAIR]);
    await guard.canActivate(http(route));
    await guard.canActivate(http(route));
    const context = http(route);
    const first = await rejection(guard.canActivate(context));
    expect(first).toBeInstanceOf(Refused);
    expect(await rejection(guard.canActivate(context))).toBe(first);
    expect(await left(limiter, PAIR)).toBe(0);
  });

  it('charges the fields of one request once per policy: a field adds only the policies not yet charged', async () => {
    const { guard, seam, limiter } = guarded();
    byRequest(seam);
    const request = { ip: IP, headers: {} };
    // resolved together, as GraphQL runs a query's root fields
    expect(await Promise.all([guard.canActivate(field('a', request)), guard.canActivate(field('b', request))])).toEqual(
      [true, true],
    );
    expect(await left(limiter, PAIR)).toBe(1);
    expect(await left(limiter, { name: 'b-only', rps: 0.001, burst: 5 })).toBe(4);

    const next = { ip: IP, headers: {} };
    expect(await guard.canActivate(field('a', next))).toBe(true);
    expect(await guard.canActivate(field('a', next))).toBe(true);
    expect(await left(limiter, PAIR)).toBe(0);
  });

  it("charges a handler's own policy once per selection and the class's once per target (GraphQL aliases)", async () => {
    const { guard, seam, limiter } = guarded();
    const B_ONLY: RateLimitPolicy = { name: 'b-only', rps: 0.001, burst: 5 };
    /** Each request's selections by alias, as the GraphQL seam keeps them per operation. */
    const selections = new WeakMap<object, Map<string, object>>();
    Object.assign(byRequest(seam), {
      selection: (context: ExecutionContext) => {
        const [request, { alias }] = context.getArgs<[object, { alias: string }]>();
        const byAlias = selections.get(request) ?? selections.set(request, new Map()).get(request)!;
        return byAlias.get(alias) ?? byAlias.set(alias, {}).get(alias)!;
      },
    });
    const aliased = (handler: 'a' | 'b', alias: string, request: LimitedRequest) =>
      new ExecutionContextHost([request, { alias }], FieldsController, FieldsController.prototype[handler]);

    const request = { ip: IP, headers: {} };
    const runs = [
      aliased('b', 'x', request),
      aliased('b', 'y', request),
      aliased('a', 'z', request),
      aliased('b', 'x', request),
    ];
    const allowed = await Promise.all(runs.map((context) => Promise.resolve(guard.canActivate(context))));
    expect(allowed).toEqual([true, true, true, true]);
    // the class's pair once for the request; b-only once for x (run twice, as by two guards) and once for y
    expect(await left(limiter, PAIR)).toBe(1);
    expect(await left(limiter, B_ONLY)).toBe(3);
  });

  it('lets through, uncharged, a request the seam does not limit', async () => {
    const { guard, seam, store } = guarded();
    seam.request = () => undefined as unknown as LimitedRequest;
    expect(await guard.canActivate(http(routeWith([PAIR])))).toBe(true);
    expect((store as MemoryStore).size).toBe(0);
    expect(seam.headers).toEqual([]);
  });
});

describe("RateLimitGuard: a 'user' key before the auth guard", () => {
  const PER_USER: RateLimitPolicy = { name: 'per-user', rps: 1, burst: 10, key: ['user', 'ip'] };
  const warning =
    "A request to ThingsController.find carried Authorization, but its 'user' key found no req.user, so it was limited by " +
    "the next key source (often its IP). Nest runs global guards before a controller's own, so the app's auth guard had " +
    "not run yet: use RateLimitModule.forRoot({ runAs: 'interceptor' }), which runs after every guard, or register the " +
    'auth guard globally before this module. (Logged once.)';

  it('warns once, naming the route, when Authorization comes and no user is set', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const { guard } = guarded();
    const route = routeWith([PER_USER]);
    for (let i = 0; i < 3; i++) await guard.canActivate(http(route, { headers: { authorization: 'Bearer x' } }));
    expect(warn.mock.calls).toEqual([[warning]]);
  });

  it('stays quiet when the user is set, when no Authorization comes, and for keys without user', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const { guard } = guarded();
    const authorized = { headers: { authorization: 'Bearer x' } };
    await guard.canActivate(http(routeWith([PER_USER]), { ...authorized, user: { id: 7 } }));
    await guard.canActivate(http(routeWith([PER_USER])));
    await guard.canActivate(http(routeWith([{ ...PER_USER, key: 'ip' }]), authorized));
    expect(warn).not.toHaveBeenCalled();
  });
});

describe('RateLimitInterceptor', () => {
  const ONE: RateLimitPolicy = { name: 'one', rps: 0.001, burst: 1 };
  const handled = of('handled');

  it("runs the handler of an admitted request, and ends a refused one with the seam's refusal without it", async () => {
    const { guard, outcomes } = guarded();
    const interceptor = new RateLimitInterceptor(guard, outcomes);
    const route = routeWith([ONE]);
    const handle = jest.fn(() => handled);
    expect(await lastValueFrom(interceptor.intercept(http(route), { handle }))).toBe('handled');
    expect(await rejection(lastValueFrom(interceptor.intercept(http(route), { handle })))).toBeInstanceOf(Refused);
    expect(handle).toHaveBeenCalledTimes(1);
  });
});

describe("count: 'failures' (the guard and RateLimitOutcomeInterceptor)", () => {
  const LOGIN: RateLimitPolicy = { name: 'login', limit: 2, window: '15m', key: 'ip', count: 'failures' };
  const PER_IP: RateLimitPolicy = { name: 'per-ip', limit: 100, window: '1h', key: 'ip' };
  const failing = () => throwError(() => new Error('wrong password'));

  /** One request through the guard, then the outcome interceptor around a handler that answers `handled`. */
  async function attempt(
    setup: ReturnType<typeof guarded>,
    route: Type,
    handled: () => Observable<unknown>,
  ): Promise<'refused' | 'ok' | 'failed'> {
    const context = http(route);
    try {
      await setup.guard.canActivate(context);
    } catch (error) {
      if (error instanceof Refused) return 'refused';
      throw error;
    }
    return lastValueFrom(setup.outcomes.intercept(context, { handle: handled })).then(
      () => 'ok',
      () => 'failed',
    );
  }

  it('gives the charge back when the handler succeeds, keeps it when it fails, and refuses once failures reach the limit', async () => {
    const setup = guarded();
    const route = routeWith([LOGIN, PER_IP]);
    for (let i = 0; i < 5; i++) expect(await attempt(setup, route, () => of('welcome'))).toBe('ok');
    expect(await attempt(setup, route, failing)).toBe('failed');
    expect(await attempt(setup, route, () => of('welcome'))).toBe('ok');
    expect(await attempt(setup, route, failing)).toBe('failed');
    expect(await attempt(setup, route, () => of('welcome'))).toBe('refused');
    // only the failures policy got its charges back: per-ip counted all 8 admitted (the refused one took nothing)
    const [login, perIp] = await setup.limiter.peek(`ip:${IP}`, [LOGIN, PER_IP]);
    expect(login.remaining).toBe(0);
    expect(perIp.remaining).toBe(100 - 8);
  });

  it('settles once however many interceptors run, and nothing for a route without such policies', async () => {
    const setup = guarded();
    const route = routeWith([LOGIN]);
    const context = http(route);
    await setup.guard.canActivate(context);
    await lastValueFrom(setup.outcomes.intercept(context, { handle: () => of('ok') }));
    await lastValueFrom(setup.outcomes.intercept(context, { handle: () => of('ok') }));
    const [login] = await setup.limiter.peek(`ip:${IP}`, LOGIN);
    expect(login.remaining).toBe(2);
    const plain = http(routeWith([PER_IP]));
    await setup.guard.canActivate(plain);
    const handled = of('ok');
    expect(setup.outcomes.intercept(plain, { handle: () => handled })).toBe(handled);
  });

  it("reads the seam's own verdict where it has one (HTTP: the final status)", async () => {
    const setup = guarded();
    let answer!: (succeeded: boolean) => void;
    setup.seam.ended = () => new Promise<boolean>((resolve) => (answer = resolve));
    const route = routeWith([LOGIN]);
    const context = http(route);
    await setup.guard.canActivate(context);
    await lastValueFrom(setup.outcomes.intercept(context, { handle: () => of('rendered, status to come') }));
    answer(true);
    await new Promise(setImmediate);
    expect((await setup.limiter.peek(`ip:${IP}`, LOGIN))[0].remaining).toBe(2);
  });
});

describe('skipIf', () => {
  const API: RateLimitPolicy = { name: 'api', rps: 0.001, burst: 1, key: 'ip' };
  const trusted = (context: ExecutionContext) =>
    context.getArgByIndex<LimitedRequest>(0).headers['x-trusted'] === 'yes';

  it("lets a request its policy's skipIf says so pass that policy uncharged, and no other", async () => {
    const { guard, seam, limiter } = guarded();
    const route = routeWith([
      { ...API, skipIf: async (context) => trusted(context) },
      { name: 'other', rps: 0.001, burst: 5, key: 'ip' },
    ]);
    const asTrusted = () => http(route, { headers: { 'x-trusted': 'yes' } });
    for (let i = 0; i < 3; i++) expect(await guard.canActivate(asTrusted())).toBe(true);
    expect(seam.headers).toContainEqual(['RateLimit-Policy', '"other";q=5;w=5000']);
    expect(seam.headers.find(([name]) => name === 'RateLimit-Policy')![1]).not.toContain('"api"');
    expect(await guard.canActivate(http(route))).toBe(true);
    expect(await rejection(guard.canActivate(http(route)))).toMatchObject({ decision: { policy: 'api' } });
    expect((await limiter.peek(`ip:${IP}`, { name: 'other', rps: 0.001, burst: 5, key: 'ip' }))[0].remaining).toBe(
      5 - 4,
    );
  });

  it("hands the module's and each policy's skipIf the request the key sources read, as its second argument", async () => {
    const given: Array<[string, LimitedRequest]> = [];
    const watching = (who: string) => (_context: ExecutionContext, request: LimitedRequest) => (
      given.push([who, request]),
      false
    );
    const { guard } = guarded({ skipIf: watching('module') });
    const context = http(routeWith([{ ...API, skipIf: watching('policy') }]), { headers: { 'x-trusted': 'no' } });
    await guard.canActivate(context);
    expect(given).toEqual([
      ['module', context.getArgByIndex(0)],
      ['policy', context.getArgByIndex(0)],
    ]);
  });

  it('skips exactly the policies whose skipIf says so, however many a route has (33: no bit of one aliases another)', async () => {
    const policies: RateLimitPolicy[] = Array.from({ length: 33 }, (_, i) => ({
      name: `p${i}`,
      rps: 0.001,
      burst: i === 0 ? 1 : 1000,
      key: 'ip',
    }));
    policies[32].skipIf = () => true;
    const { guard, seam, limiter } = guarded();
    const route = routeWith(policies);
    expect(await guard.canActivate(http(route))).toBe(true);
    const named = seam.headers.find(([name]) => name === 'RateLimit-Policy')![1];
    expect(named).toContain('"p0"');
    expect(named).toContain('"p31"');
    expect(named).not.toContain('"p32"');
    expect(await rejection(guard.canActivate(http(route)))).toMatchObject({ decision: { policy: 'p0' } });
    expect((await limiter.peek(`ip:${IP}`, policies[31]))[0].remaining).toBe(999);
    expect((await limiter.peek(`ip:${IP}`, { ...policies[32], skipIf: undefined }))[0].remaining).toBe(1000);
  });

  it("lets every policy go uncharged when the module's skipIf says so", async () => {
    const { guard, seam, store } = guarded({ skipIf: trusted });
    const route = routeWith([API]);
    for (let i = 0; i < 3; i++)
      expect(await guard.canActivate(http(route, { headers: { 'x-trusted': 'yes' } }))).toBe(true);
    expect(seam.headers).toEqual([]);
    expect((store as MemoryStore).size).toBe(0);
    expect(await guard.canActivate(http(route))).toBe(true);
    expect(await rejection(guard.canActivate(http(route)))).toBeInstanceOf(Refused);
  });
});

describe('retryAfterJitter and setScale through the guard', () => {
  const SLOW: RateLimitPolicy = { name: 'slow', rps: 0.1, burst: 1, key: 'ip' };

  it('stretches Retry-After and the refusal alike, the same for one client every time', async () => {
    const { guard, seam } = guarded({ retryAfterJitter: 1 });
    const route = routeWith([SLOW]);
    const waits = new Set<string>();
    for (let client = 0; client < 20; client++) {
      const ip = `198.51.100.${client}`;
      await guard.canActivate(http(route, { ip }));
      for (let again = 0; again < 2; again++) {
        seam.headers.length = 0;
        const refused = (await rejection(guard.canActivate(http(route, { ip })))) as Refused;
        const header = seam.headers.at(-1)!;
        expect(header).toEqual(['Retry-After', String(refused.decision.retryAfter)]);
        expect(refused.decision.retryAfter).toBeGreaterThanOrEqual(10);
        expect(refused.decision.retryAfter).toBeLessThanOrEqual(20);
        waits.add(`${ip} ${header[1]}`);
      }
    }
    // each client got one value both times, and they differ between clients
    expect(waits.size).toBe(20);
    expect(new Set([...waits].map((wait) => wait.split(' ')[1])).size).toBeGreaterThanOrEqual(3);
  });

  it("scales a policy's rps from the next decision on, headers included", async () => {
    const { guard, seam, limiter } = guarded();
    const route = routeWith([{ name: 'api', rps: 2, burst: 4, key: 'ip' }]);
    await guard.canActivate(http(route));
    expect(seam.headers[0]).toEqual(['RateLimit-Policy', '"api";q=4;w=2']);
    limiter.setScale('api', 0.5);
    expect(limiter.getScale('api')).toBe(0.5);
    seam.headers.length = 0;
    await guard.canActivate(http(route));
    expect(seam.headers[0]).toEqual(['RateLimit-Policy', '"api";q=4;w=4']);
    limiter.setScale('*', 1);
    seam.headers.length = 0;
    await guard.canActivate(http(route));
    expect(seam.headers[0]).toEqual(['RateLimit-Policy', '"api";q=4;w=2']);
  });

  it("scales a fixed window's limit and keeps its window, in whole numbers in the headers", async () => {
    const { guard, seam, limiter } = guarded();
    const route = routeWith([
      { name: 'api', algorithm: 'fixed_window', limit: 10, window: '10s', key: 'ip', cost: 'header:x-cost' },
    ]);
    await guard.canActivate(http(route));
    expect(seam.headers.slice(0, 4)).toEqual([
      ['RateLimit-Policy', '"api";q=10;w=10'],
      ['RateLimit', '"api";r=9;t=10'],
      ['RateLimit-Limit', '10'],
      ['RateLimit-Remaining', '9'],
    ]);
    // 0.75: 7.5 per window, shown as 7; 1 taken, then 2
    limiter.setScale('api', 0.75);
    seam.headers.length = 0;
    await guard.canActivate(http(route));
    expect(seam.headers.slice(0, 4)).toEqual([
      ['RateLimit-Policy', '"api";q=7;w=10'],
      ['RateLimit', '"api";r=5;t=10'],
      ['RateLimit-Limit', '7'],
      ['RateLimit-Remaining', '5'],
    ]);
    // a cost the scaled window cannot hold now, but the next one can: a wait, not "never"
    seam.headers.length = 0;
    const refused = (await rejection(guard.canActivate(http(route, { headers: { 'x-cost': '8' } })))) as Refused;
    expect(refused.decision).toMatchObject({ allowed: false, limit: 7, remaining: 5, retryAfter: 10 });
    expect(seam.headers).toContainEqual(['Retry-After', '10']);
  });
});
