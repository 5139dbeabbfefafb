import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect, jest } from '@jest/globals';
import { Controller, type ExecutionContext, Get, HttpException, Module } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { GraphQLError } from 'graphql';
import { Redis } from 'ioredis';
import {
  MemoryStore,
  RateLimit,
  type RateLimitDecision,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitStore,
  RedisStore,
} from '../../lib/index.js';
import { type RedisServer, startRedisServer, stopRedisServer } from '../support/redis/process.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import { ADAPTERS, read, startApp, type TestApp } from '../support/app.js';
import { DRIVERS, startGraphqlApp } from '../support/graphql-apps.js';
import { QUOTA_EXCEEDED, REDUCED_CAPACITY_DOCUMENT } from '../support/problem-documents.js';
import { startMicroservice, TenantsController } from '../support/microservice-apps.js';
import { RateLimiter } from '../../lib/limiter/rate-limiter.js';

/**
 * `errorFormat: 'problem'` over real HTTP on Express and Fastify, on the memory store and on
 * Redis: the 429 and both 503s (a store that fails for real under `failMode: 'closed'`, and a
 * `leaky_bucket` queue cut short by shutdown) arrive as `application/problem+json` with the
 * draft's problem types; with two policies refusing, the headers and the body name the same one;
 * an `exceptionFactory`'s error keeps the headers; and `'nest'` stays as it was. GraphQL keeps its
 * own form under `'problem'`, and takes an `exceptionFactory`'s error as a field's; so do
 * microservices, as the caller's error.
 */

@Controller('orders')
class OrdersController {
  @RateLimit({ name: 'orders', rps: 0.5, burst: 2, key: 'api-key', cost: 'header:x-weight' })
  @Get()
  list() {
    return { orders: [] };
  }

  // both refuse the third request: 'frees-soon' 2 s from then, 'frees-late' 20 s (full 40 s after);
  // 'roomy' admits it
  @RateLimit([
    { name: 'frees-soon', rps: 0.5, burst: 2, key: 'api-key' },
    { name: 'roomy', rps: 100, burst: 1000, key: 'api-key' },
    { name: 'frees-late', rps: 0.05, burst: 2, key: 'api-key' },
  ])
  @Get('both')
  both() {
    return { ok: true };
  }

  // one passes at once; the next waits an hour
  @RateLimit({ name: 'queue', algorithm: 'leaky_bucket', limit: 2, window: '2h', key: 'api-key' })
  @Get('queue')
  queue() {
    return { ok: true };
  }
}

const redis = useTestRedis();
const stores: Array<[string, () => RateLimitStore]> = [
  ['memory', () => new MemoryStore()],
  ['Redis', () => new RedisStore({ client: redis() })],
];

/** The media type of a response, without parameters (a charset). */
const mediaType = (headers: Record<string, string>) => headers['content-type']?.split(';')[0].trim();

const apiKey = () => ({ 'x-api-key': `key-${randomUUID()}` });

/** An answer as `read` gives it, its body a JSON object: a problem document, Nest's body or a factory's. */
interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** `read`, for the routes here, which answer JSON objects. */
const readAnswer = (response: Response): Promise<Answer> => read(response);

/** A new client's third GET of `path` (burst 2), read whole, the first two checked admitted. */
async function thirdRequest(http: TestApp, path: string): Promise<Answer> {
  const client = apiKey();
  for (let i = 0; i < 2; i++) expect((await http.get(path, client)).status).toBe(200);
  return readAnswer(await http.get(path, client));
}

/** Checks a 503 as the problem document of reduced capacity, with `Retry-After: 1`. */
function expectReducedCapacity({ status, headers, body }: Answer): void {
  expect(status).toBe(503);
  expect(mediaType(headers)).toBe('application/problem+json');
  expect(headers['retry-after']).toBe('1');
  expect(body).toEqual(REDUCED_CAPACITY_DOCUMENT);
}

describe.each(ADAPTERS)('errorFormat on %s', (adapter) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    await Promise.all(apps.splice(0).map((http) => http.close()));
  });

  async function start(options: RateLimitModuleOptions): Promise<TestApp> {
    @Module({
      imports: [RateLimitModule.forRoot({ prefix: `rl-problem-${randomUUID()}:`, ...options })],
      controllers: [OrdersController],
    })
    class AppModule {}
    const http = await startApp(AppModule, adapter);
    apps.push(http);
    return http;
  }

  describe.each(stores)('on the %s store', (_name, makeStore) => {
    it("'problem': a 429 is application/problem+json with the quota-exceeded type, and keeps every header", async () => {
      const http = await start({ store: makeStore(), errorFormat: 'problem' });
      const { status, headers, body } = await thirdRequest(http, '/orders');

      expect(status).toBe(429);
      expect(mediaType(headers)).toBe('application/problem+json');
      expect(body).toEqual({
        type: QUOTA_EXCEEDED,
        title: 'Quota Exceeded',
        status: 429,
        detail: 'Rate limit exceeded for policy "orders". Try again in 2 seconds.',
        'violated-policies': ['orders'],
        retryAfter: 2,
      });
      expect(headers['retry-after']).toBe('2');
      expect(headers.ratelimit).toBe('"orders";r=0;t=2');
      expect(headers['x-ratelimit-remaining']).toBe('0');
    });

    it("'problem': a request that can never fit says so, with retryAfter null and no Retry-After", async () => {
      const http = await start({ store: makeStore(), errorFormat: 'problem' });
      const { status, headers, body } = await readAnswer(await http.get('/orders', { ...apiKey(), 'x-weight': '3' }));
      expect(status).toBe(429);
      expect(mediaType(headers)).toBe('application/problem+json');
      expect(body).toMatchObject({
        detail: 'Request cost 3 exceeds the capacity 2 of policy "orders": it can never be admitted.',
        'violated-policies': ['orders'],
        retryAfter: null,
      });
      expect(headers['retry-after']).toBeUndefined();
    });

    it.each(['nest', 'problem'] as const)(
      'two policies refusing (%s): X-RateLimit-*, legacy, Retry-After and the body all name the one that frees up last',
      async (errorFormat) => {
        const http = await start({ store: makeStore(), errorFormat, headers: ['ietf', 'x-ratelimit', 'legacy'] });
        const client = apiKey();
        for (let i = 0; i < 2; i++) expect((await http.get('/orders/both', client)).status).toBe(200);
        const before = Math.floor(Date.now() / 1000);
        const { status, headers, body } = await readAnswer(await http.get('/orders/both', client));
        const after = Math.ceil(Date.now() / 1000);

        expect(status).toBe(429);
        // 'frees-late': 20 s to admit one more (a little less on Redis, whose clock ran on meanwhile)
        const retryAfter = Number(headers['retry-after']);
        expect(retryAfter).toBeGreaterThanOrEqual(19);
        expect(retryAfter).toBeLessThanOrEqual(20);
        expect(body.retryAfter).toBe(retryAfter);
        if (errorFormat === 'problem') {
          expect(body['violated-policies']).toEqual(['frees-late', 'frees-soon']);
          expect(body.detail).toBe(`Rate limit exceeded for policy "frees-late". Try again in ${retryAfter} seconds.`);
        } else {
          expect(body.policy).toBe('frees-late');
        }
        // both trios describe 'frees-late': 2 of 2 gone, full again 40 s after the second request
        expect(headers['x-ratelimit-limit']).toBe('2');
        expect(headers['x-ratelimit-remaining']).toBe('0');
        expect(Number(headers['x-ratelimit-reset']) - before).toBeGreaterThanOrEqual(38);
        expect(Number(headers['x-ratelimit-reset']) - after).toBeLessThanOrEqual(40);
        expect(headers['ratelimit-limit']).toBe('2');
        expect(headers['ratelimit-reset']).toBe(String(retryAfter));
        // and RateLimit holds all three, in the route's order ('roomy' is full again after 10 ms)
        expect(headers.ratelimit).toMatch(
          /^"frees-soon";r=0;t=[12], "roomy";r=\d+;t=[01], "frees-late";r=0;t=(19|20)$/,
        );
      },
    );

    it('exceptionFactory: its error answers, with every header already set; problem+json is not sent with it', async () => {
      const calls: Array<{ decision: RateLimitDecision; type: string }> = [];
      const exceptionFactory = (decision: RateLimitDecision, context: ExecutionContext) => {
        calls.push({ decision, type: context.getType() });
        return new HttpException({ code: 'SLOW_DOWN', policy: decision.policy, retryIn: decision.retryAfter }, 429);
      };
      const http = await start({
        store: makeStore(),
        errorFormat: 'problem',
        exceptionFactory,
        headers: ['ietf', 'x-ratelimit', 'legacy'],
      });
      const { status, headers, body } = await thirdRequest(http, '/orders/both');

      expect(status).toBe(429);
      expect(mediaType(headers)).toBe('application/json');
      expect(body).toEqual({ code: 'SLOW_DOWN', policy: 'frees-late', retryIn: Number(headers['retry-after']) });
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ type: 'http', decision: { policy: 'frees-late', allowed: false } });
      expect(Number(headers['retry-after'])).toBeGreaterThanOrEqual(19);
      expect(headers['ratelimit-policy']).toBe('"frees-soon";q=2;w=4, "roomy";q=1000;w=10, "frees-late";q=2;w=40');
      expect(headers.ratelimit).toMatch(/"frees-late";r=0;t=(19|20)$/);
      expect(headers['x-ratelimit-limit']).toBe('2');
      expect(headers['x-ratelimit-remaining']).toBe('0');
      expect(headers['x-ratelimit-reset']).toMatch(/^\d+$/);
      expect(headers['ratelimit-remaining']).toBe('0');
    });

    it("'nest' (the default): the body and Content-Type are Nest's, as before", async () => {
      const http = await start({ store: makeStore() });
      const { status, headers, body } = await thirdRequest(http, '/orders');
      expect(status).toBe(429);
      expect(mediaType(headers)).toBe('application/json');
      expect(body).toEqual({
        statusCode: 429,
        error: 'Too Many Requests',
        message: 'Rate limit exceeded for policy "orders". Try again in 2 seconds.',
        policy: 'orders',
        retryAfter: 2,
      });
      expect(headers['retry-after']).toBe('2');
    });

    it("'problem': requests waiting their leaky_bucket turn at shutdown get a temporary-reduced-capacity 503", async () => {
      const http = await start({ store: makeStore(), errorFormat: 'problem' });
      // the engine the guard asks (`RateLimiter`, behind `RateLimiterService`)
      const limiter = http.app.get(RateLimiter);
      const wait = limiter.wait.bind(limiter);
      let waiting = 0;
      // counts the requests that wait, and lets them wait as they would
      jest.spyOn(limiter, 'wait').mockImplementation((...args) => {
        waiting++;
        return wait(...args);
      });
      const client = apiKey();
      expect((await http.get('/orders/queue', client)).status).toBe(200);
      const queued = http.get('/orders/queue', client).then(read);
      while (waiting === 0) await sleep(5);
      await http.close();
      apps.length = 0;

      expectReducedCapacity(await queued);
    });
  });

  describe('on a Redis that stops', () => {
    let server: RedisServer;
    let client: Redis;
    beforeAll(async () => {
      server = await startRedisServer();
      // no reconnecting: once the server is gone, the client ends and every command fails at once
      client = new Redis(server.url, {
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        lazyConnect: true,
      });
      await client.connect();
    });
    afterAll(() => {
      // (disconnecting an ended client would leave ioredis a timer for a socket already closed)
      if (client.status !== 'end') client.disconnect();
      stopRedisServer(server.pid);
    });

    it("'problem' with failMode 'closed': the 503 is a temporary-reduced-capacity problem", async () => {
      // 1 s: the first call (which loads the script on this fresh server) must not time out on a loaded machine
      const http = await start({ redis: client, failMode: 'closed', errorFormat: 'problem', timeout: 1_000 });
      const headers = apiKey();
      expect((await http.get('/orders', headers)).status).toBe(200);
      stopRedisServer(server.pid);
      // until ioredis sees the connection close, a command may still be written to it: the timeout answers then
      expectReducedCapacity(await read(await http.get('/orders', headers)));
    });
  });
});

describe.each(DRIVERS)('GraphQL (%s) under errorFormat problem', (driver) => {
  /** The catalog's policy (burst 2) spent: the third request is refused. */
  async function refusedQuery(gql: Awaited<ReturnType<typeof startGraphqlApp>>) {
    const headers = apiKey();
    for (let i = 0; i < 2; i++) expect((await gql.post('{ books }', { headers })).body.errors).toBeUndefined();
    return gql.post('{ books }', { headers });
  }

  it('keeps its own refusal: a field error with RATE_LIMITED, in an application/json answer', async () => {
    const gql = await startGraphqlApp(driver, { store: new MemoryStore(), errorFormat: 'problem' });
    try {
      const refused = await refusedQuery(gql);
      expect(mediaType(refused.headers)).toBe('application/json');
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ extensions: expect.objectContaining({ code: 'RATE_LIMITED', policy: 'catalog' }) }),
      ]);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    } finally {
      await gql.close();
    }
  });

  it("answers the field with exceptionFactory's error, the headers on the HTTP answer", async () => {
    const exceptionFactory = (decision: RateLimitDecision, context: ExecutionContext) =>
      context.getType<string>() === 'graphql'
        ? new GraphQLError(`slow down: ${decision.policy}`, {
            extensions: { code: 'SLOW_DOWN', retryIn: decision.retryAfter },
          })
        : new HttpException('slow down', 429);
    const gql = await startGraphqlApp(driver, { store: new MemoryStore(), errorFormat: 'problem', exceptionFactory });
    try {
      const refused = await refusedQuery(gql);
      const retryAfter = Number(refused.headers['retry-after']);
      expect(retryAfter).toBeGreaterThan(0);
      expect(refused.body.data).toEqual({ books: null });
      expect(refused.body.errors).toEqual([
        expect.objectContaining({
          message: 'slow down: catalog',
          extensions: expect.objectContaining({ code: 'SLOW_DOWN', retryIn: retryAfter }),
        }),
      ]);
      expect(refused.headers['x-ratelimit-remaining']).toBe('0');
      expect(mediaType(refused.headers)).toBe('application/json');
      // Nest logs an error it does not know (not an HttpException, not an IntrinsicException), as the README says
      expect(gql.logger.errors.map(([error]) => (error as Error).message)).toEqual(['slow down: catalog']);
    } finally {
      await gql.close();
    }
  });
});

describe('a microservice (TCP) under errorFormat problem', () => {
  /** A microservice of `TenantsController` ('shared': burst 2, one message per 100 s), the third message's error. */
  async function thirdMessage(options: RateLimitModuleOptions): Promise<unknown> {
    @Module({
      imports: [RateLimitModule.forRoot({ store: new MemoryStore(), ...options })],
      controllers: [TenantsController],
    })
    class MicroserviceModule {}
    const service = await startMicroservice(MicroserviceModule);
    try {
      for (let i = 0; i < 2; i++) expect(await service.send('shared', {})).toEqual({ ok: true });
      return await service.send('shared', {}).catch((error: unknown) => error);
    } finally {
      await service.close();
    }
  }

  it("keeps its own refusal: the caller's error object, as without it", async () => {
    expect(await thirdMessage({ errorFormat: 'problem' })).toEqual({
      status: 'error',
      statusCode: 429,
      message: 'Rate limit exceeded for policy "shared". Try again in 100 seconds.',
      policy: 'shared',
      retryAfter: 100,
    });
  });

  it("answers the caller with exceptionFactory's RpcException", async () => {
    const exceptionFactory = (decision: RateLimitDecision, context: ExecutionContext) =>
      context.getType() === 'rpc'
        ? new RpcException({ code: 'SLOW_DOWN', policy: decision.policy })
        : new HttpException('slow down', 429);
    expect(await thirdMessage({ errorFormat: 'problem', exceptionFactory })).toEqual({
      code: 'SLOW_DOWN',
      policy: 'shared',
    });
  });
});
