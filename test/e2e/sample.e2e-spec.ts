import { randomUUID } from 'node:crypto';
import { expect } from '@jest/globals';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { MemoryStore, RateLimitStore, RedisStore } from 'nestjs-ratelimit';
import { io, type Socket } from 'socket.io-client';
import { AppModule } from '../../sample/app.module.js';
import { testRedisUrl } from '../support/redis/test-redis.js';

/**
 * The sample app over real HTTP (Express, GraphQL on Apollo) and socket.io, once per store. Every
 * request and connection carries an API key unique to this run: the sample's policies fall back to
 * the API key before the IP, so buckets left in Redis by other runs or suites never meet these
 * ones, and nothing needs flushing.
 *
 * Where a test reads a remaining count after an earlier request, it allows one token of refill:
 * the buckets keep filling (5 tokens/s on the API routes) while requests travel.
 */

const run = randomUUID();
const apiKey = (name: string): string => `${name}-${run}`;

/** A response, its body read (so no connection is left holding one) and parsed. */
interface Reply {
  status: number;
  headers: Headers;
  body: unknown;
}

/** `r` of one policy in the IETF `RateLimit` header, e.g. `"api";r=19;t=1`. */
function remaining(reply: Reply, policy: string): number {
  const header = reply.headers.get('ratelimit') ?? '';
  const match = new RegExp(`"${policy}";r=(\\d+)`).exec(header);
  if (!match) throw new Error(`no "${policy}" member in RateLimit: ${header}`);
  return Number(match[1]);
}

/** Within one token of refill above `expected`. */
function expectAbout(actual: number, expected: number): void {
  expect(actual).toBeGreaterThanOrEqual(expected);
  expect(actual).toBeLessThanOrEqual(expected + 1);
}

/** What the gateway answers a message with: its echo, or the 'exception' event of a refusal. */
interface Answer {
  event: 'echo' | 'exception';
  data: unknown;
}

/**
 * Sends one 'echo' message and waits for its answer. One at a time: of messages sent together, a
 * refusal may be answered before the echoes of earlier ones.
 */
function echo(socket: Socket, text: string): Promise<Answer> {
  return new Promise((resolve) => {
    const answer = (event: Answer['event']) => (data: unknown) => {
      socket.off('echo').off('exception');
      resolve({ event, data });
    };
    socket.on('echo', answer('echo')).on('exception', answer('exception'));
    socket.emit('echo', text);
  });
}

const stores: Array<[string, (() => string) | undefined, typeof MemoryStore | typeof RedisStore]> = [
  ['memory store', undefined, MemoryStore],
  ['Redis store (REDIS_URL)', testRedisUrl, RedisStore],
];

describe.each(stores)('sample app, %s', (_name, redisUrl, storeType) => {
  let app: INestApplication;
  let base: string;

  async function call(
    path: string,
    init: { method?: string; headers?: Record<string, string>; body?: string } = {},
  ): Promise<Reply> {
    const response = await fetch(`${base}${path}`, {
      method: init.method ?? 'GET',
      headers: init.headers,
      body: init.body,
    });
    const text = await response.text();
    const json = response.headers.get('content-type')?.includes('json') === true;
    return {
      status: response.status,
      headers: response.headers,
      body: text ? (json ? JSON.parse(text) : text) : undefined,
    };
  }

  /** A GraphQL query, sent as Apollo takes it (a JSON POST). */
  function query(document: string, headers: Record<string, string>): Promise<Reply> {
    return call('/graphql', {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ query: document }),
    });
  }

  /** A socket.io client of the sample's gateway, once connected; `headers` go in its handshake. */
  const sockets: Socket[] = [];
  function connect(headers: Record<string, string>): Promise<Socket> {
    const socket = io(base, { transports: ['websocket'], extraHeaders: headers, reconnection: false });
    sockets.push(socket);
    return new Promise((resolve, reject) => {
      socket.once('connect', () => resolve(socket));
      socket.once('connect_error', reject);
    });
  }

  beforeAll(async () => {
    // The sample reads REDIS_URL when the module initialises, so set it just for the boot.
    const saved = process.env.REDIS_URL;
    if (redisUrl) process.env.REDIS_URL = redisUrl();
    else delete process.env.REDIS_URL;
    try {
      const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
      app = moduleRef.createNestApplication({ logger: false });
      await app.listen(0, '127.0.0.1');
    } finally {
      if (saved === undefined) delete process.env.REDIS_URL;
      else process.env.REDIS_URL = saved;
    }
    base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });

  afterAll(async () => {
    for (const socket of sockets) socket.disconnect();
    await app?.close();
  });

  it('uses the store REDIS_URL selects', () => {
    expect(app.get(RateLimitStore)).toBeInstanceOf(storeType);
  });

  it('never limits /health and sends it no rate-limit headers', async () => {
    // More calls than the module-wide 'global' burst (200), from one client.
    for (let batch = 0; batch < 10; batch++) {
      const responses = await Promise.all(Array.from({ length: 25 }, () => call('/health')));
      for (const response of responses) {
        expect(response.status).toBe(200);
        for (const name of [
          'ratelimit',
          'ratelimit-policy',
          'x-ratelimit-limit',
          'x-ratelimit-remaining',
          'retry-after',
        ]) {
          expect(response.headers.get(name)).toBeNull();
        }
      }
    }
  });

  it('sends the headers of every policy on a limited route and refuses once its burst is spent', async () => {
    const headers = { 'x-api-key': apiKey('catalog') };
    const first = await call('/catalog', { headers });
    expect(first.status).toBe(200);
    expect(first.headers.get('ratelimit-policy')).toBe('"global";q=200;w=2, "CatalogController.list";q=50;w=5');
    expect(remaining(first, 'global')).toBe(199);
    expect(remaining(first, 'CatalogController.list')).toBe(49);
    // The X-RateLimit-* trio describes the policy closest to refusing: the route's.
    expect(first.headers.get('x-ratelimit-limit')).toBe('50');
    expect(first.headers.get('x-ratelimit-remaining')).toBe('49');
    expect(Number(first.headers.get('x-ratelimit-reset'))).toBeGreaterThanOrEqual(Math.floor(Date.now() / 1000));

    // 10 tokens/s refill while the loop runs, so the 429 comes a few requests after the 50th.
    let admitted = 1;
    let refused: Reply | undefined;
    while (admitted < 100 && !refused) {
      const response = await call('/catalog', { headers });
      if (response.status === 200) admitted++;
      else refused = response;
    }
    expect(admitted).toBeGreaterThanOrEqual(50);
    expect(refused?.status).toBe(429);
    expect(Number(refused!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(refused!.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(refused!.body).toMatchObject({
      statusCode: 429,
      error: 'Too Many Requests',
      policy: 'CatalogController.list',
      retryAfter: expect.any(Number),
    });

    // A route without a policy of its own is under the module-wide one only.
    const other = await call('/catalog/1', { headers });
    expect(other.status).toBe(200);
    expect(other.headers.get('ratelimit-policy')).toBe('"global";q=200;w=2');
  });

  it('gives each API key its own bucket, shared by the API controller routes', async () => {
    const alice = { 'x-api-key': apiKey('alice') };
    const bob = { 'x-api-key': apiKey('bob') };

    const orders = await call('/api/orders', { headers: alice });
    expect(orders.status).toBe(200);
    expect(orders.headers.get('ratelimit-policy')).toContain('"api";q=20;w=4');
    expect(remaining(orders, 'api')).toBe(19);
    // Another route of the controller draws on the same class-level bucket.
    const report = await call('/api/reports', { method: 'POST', headers: { ...alice, 'x-request-weight': '1' } });
    expect(report.status).toBe(201);
    expectAbout(remaining(report, 'api'), 18);

    let spent = 2;
    let status = 200;
    while (spent < 60 && status !== 429) {
      status = (await call('/api/orders', { headers: alice })).status;
      spent++;
    }
    expect(status).toBe(429);

    const other = await call('/api/orders', { headers: bob });
    expect(other.status).toBe(200);
    expect(remaining(other, 'api')).toBe(19);
    expect(other.body).toEqual({ apiKey: apiKey('bob'), orders: [] });
  });

  it('streams downloads with at most 2 per API key in flight, each slot given back when its stream ends', async () => {
    const key = { 'x-api-key': apiKey('downloads') };
    const first = await call('/api/downloads', { headers: key });
    expect(first.status).toBe(200);
    expect(String(first.body).split('\n')).toHaveLength(1_002);
    expect(first.headers.get('ratelimit-policy')).toContain('"downloads";q=2;qu="concurrent-requests"');
    // one slot was held while it streamed; the others were free
    expect(remaining(first, 'downloads')).toBe(1);
    // one after another, each ended: never two held, so never refused (on Redis the last one's
    // release may still be on its way when the next starts: one slot left or none, never a 429)
    for (let i = 0; i < 5; i++) {
      const next = await call('/api/downloads', { headers: key });
      expect(next.status).toBe(200);
      expect([0, 1]).toContain(remaining(next, 'downloads'));
    }
  });

  it("sizes a partner's API bucket by its plan: free, pro and enterprise, each with its numbers", async () => {
    const pro = await call('/api/orders', { headers: { 'x-api-key': apiKey('pro') } });
    expect(pro.headers.get('ratelimit-policy')).toBe('"global";q=200;w=2, "api";q=200;w=4');
    expect(remaining(pro, 'api')).toBe(199);
    const enterprise = await call('/api/orders', { headers: { 'x-api-key': apiKey('enterprise') } });
    expect(enterprise.headers.get('ratelimit-policy')).toBe('"global";q=200;w=2, "api";q=100000;w=3600');
    expect(remaining(enterprise, 'api')).toBe(99_999);

    // 40 at once: a pro partner's burst holds them all, a free one's (20, refilling 5 a second) does not
    const burst = async (key: string) => {
      const replies = await Promise.all(
        Array.from({ length: 40 }, () => call('/api/orders', { headers: { 'x-api-key': key } })),
      );
      return replies.filter(({ status }) => status === 200).length;
    };
    expect(await burst(apiKey('pro-burst'))).toBe(40);
    const free = await burst(apiKey('free-burst'));
    expect(free).toBeGreaterThanOrEqual(20);
    expect(free).toBeLessThan(40);
  });

  it('charges the reports route the tokens named by x-request-weight', async () => {
    const key = { 'x-api-key': apiKey('reports') };
    const post = (weight?: string): Promise<Reply> =>
      call('/api/reports', {
        method: 'POST',
        headers: weight === undefined ? key : { ...key, 'x-request-weight': weight },
      });

    const weighted = await post('40');
    expect(weighted.status).toBe(201);
    expect(remaining(weighted, 'reports')).toBe(60);
    // The class-level 'api' policy takes its own cost (1), whatever the weight.
    expect(remaining(weighted, 'api')).toBe(19);

    // No weight, or one that is not a positive number: defaultCost (10).
    expectAbout(remaining(await post(), 'reports'), 50);
    expectAbout(remaining(await post('abc'), 'reports'), 40);

    // More than is left: refused, uncharged, with the time until it fits.
    const tooHeavyNow = await post('100');
    expect(tooHeavyNow.status).toBe(429);
    expect(Number(tooHeavyNow.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expectAbout(remaining(tooHeavyNow, 'reports'), 40);

    // More than the bucket holds: it can never pass, so no Retry-After.
    const tooHeavyEver = await post('101');
    expect(tooHeavyEver.status).toBe(429);
    expect(tooHeavyEver.headers.get('retry-after')).toBeNull();
    expect(tooHeavyEver.body).toMatchObject({ policy: 'reports', retryAfter: null });
  });

  it('queues a burst of exports and lets them through 2 a second (leaky bucket)', async () => {
    const headers = { 'x-api-key': apiKey('exports') };
    const sent = performance.now();
    const done = await Promise.all(
      Array.from({ length: 3 }, () =>
        call('/api/exports', { method: 'POST', headers }).then((reply) => ({ reply, after: performance.now() - sent })),
      ),
    );
    expect(done.map(({ reply }) => reply.status)).toEqual([201, 201, 201]);
    // the third leaves two places (2 x 500 ms) after the first; allow for a noisy machine
    const after = done.map(({ after }) => after).sort((a, b) => a - b);
    expect(after[2] - after[0]).toBeGreaterThan(800);
    expect(after[2] - after[0]).toBeLessThan(1_500);
  });

  it('counts only failed sign-ins, 5 per IP in 15 minutes, then blocks the IP for an hour', async () => {
    const signIn = (password: string) =>
      call('/account/login', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ password }),
      });
    // successes give their attempt back: never counted
    for (let i = 0; i < 6; i++) expect((await signIn('demo')).status).toBe(200);
    const failures: Reply[] = [];
    for (let i = 0; i < 6; i++) failures.push(await signIn('guess'));
    expect(failures.map((reply) => reply.status)).toEqual([401, 401, 401, 401, 401, 429]);
    expect(failures[5].body).toMatchObject({ policy: 'login' });
    // the refusal started the block: an hour, whatever the window says
    const retryAfter = Number(failures[5].headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(3590);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    const blocked = await signIn('demo');
    expect(blocked.status).toBe(429);
  });

  it('answers the catalog over GraphQL with the headers of every policy, charging the class policy once for both root fields', async () => {
    const reply = await query('{ products(first: 2) { id name } product(id: "1") { name } }', {
      'x-api-key': apiKey('graphql'),
    });
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({
      data: {
        products: [
          { id: '1', name: 'Teapot' },
          { id: '2', name: 'Kettle' },
        ],
        product: { name: 'Teapot' },
      },
    });
    expect(reply.headers.get('ratelimit-policy')).toBe(
      '"global";q=200;w=2, "CatalogResolver";q=50;w=5, "CatalogResolver.products";q=100;w=5',
    );
    // two root fields under the class's policy, one charge; 'products' costs what it asks for
    expect(remaining(reply, 'global')).toBe(199);
    expect(remaining(reply, 'CatalogResolver')).toBe(49);
    expect(remaining(reply, 'CatalogResolver.products')).toBe(98);
  });

  it("charges each alias of products its own page, and the class's policy once for the operation (the README's curl)", async () => {
    const reply = await query('{ a: products(first: 2) { id } b: products(first: 3) { id } }', {
      'x-api-key': apiKey('graphql-aliases'),
    });
    // the catalog holds 2 products: b gets both, and pays for the 3 it asked for
    expect(reply.body).toEqual({ data: { a: [{ id: '1' }, { id: '2' }], b: [{ id: '1' }, { id: '2' }] } });
    expect(remaining(reply, 'global')).toBe(199);
    expect(remaining(reply, 'CatalogResolver')).toBe(49);
    expect(remaining(reply, 'CatalogResolver.products')).toBe(95);
  });

  it('refuses a GraphQL query over its budget with a RATE_LIMITED error, and one over the bucket for good', async () => {
    const headers = { 'x-api-key': apiKey('graphql-cost') };
    const page = '{ products(first: 100) { id } }';

    const spending = await query(page, headers);
    expect(spending.body).toEqual({ data: { products: [{ id: '1' }, { id: '2' }] } });
    expect(remaining(spending, 'CatalogResolver.products')).toBe(0);

    // 100 more tokens at 20 a second: seconds away
    const refused = await query(page, headers);
    expect(refused.status).toBe(200);
    expect(refused.body).toMatchObject({
      data: null,
      errors: [
        {
          message: expect.any(String),
          path: ['products'],
          extensions: { code: 'RATE_LIMITED', policy: 'CatalogResolver.products', retryAfter: expect.any(Number) },
        },
      ],
    });
    // the headers are on the HTTP response, and agree with the error
    const { retryAfter } = (refused.body as { errors: Array<{ extensions: { retryAfter: number } }> }).errors[0]
      .extensions;
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(5);
    expect(Number(refused.headers.get('retry-after'))).toBe(retryAfter);
    expectAbout(Number(refused.headers.get('x-ratelimit-remaining')), 0);

    // more than the bucket holds: never admitted, so no Retry-After
    const never = await query('{ products(first: 101) { id } }', headers);
    expect(never.body).toMatchObject({
      errors: [{ extensions: { code: 'RATE_LIMITED', policy: 'CatalogResolver.products', retryAfter: null } }],
    });
    expect(never.headers.get('retry-after')).toBeNull();
  });

  it('limits the echo gateway per API key of the socket.io handshake; a refusal is the exception event', async () => {
    const alice = await connect({ 'x-api-key': apiKey('echo-alice') });
    const bob = await connect({ 'x-api-key': apiKey('echo-bob') });

    // burst 5 at 1 message/s: the sixth or so in a row is refused
    const answers: Answer[] = [];
    while (answers.length < 20 && answers.at(-1)?.event !== 'exception')
      answers.push(await echo(alice, `hello ${answers.length}`));
    const echoed = answers.slice(0, -1);
    expect(echoed.length).toBeGreaterThanOrEqual(5);
    expect(echoed.length).toBeLessThanOrEqual(6);
    expect(echoed).toEqual(echoed.map((_, i) => ({ event: 'echo', data: `hello ${i}` })));
    expect(answers.at(-1)).toEqual({
      event: 'exception',
      data: {
        status: 'error',
        statusCode: 429,
        message: expect.any(String),
        policy: 'EchoGateway.echo',
        retryAfter: 1,
      },
    });

    // the refused client stays connected, and another API key has a bucket of its own
    expect(alice.connected).toBe(true);
    expect(await echo(bob, 'hi')).toEqual({ event: 'echo', data: 'hi' });
  });
});
