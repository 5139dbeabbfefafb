import { randomUUID } from 'node:crypto';
import { type CanActivate, Controller, type ExecutionContext, Get, Injectable, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { RateLimit, RateLimitModule, RedisStore } from '../../lib/index.js';
import { connectTestRedis, ttlsUnder } from '../support/redis/test-redis.js';
import { ADAPTERS, startApp, type TestApp } from '../support/app.js';
import { rawGet, type RawOutcome } from '../support/raw-http.js';

/**
 * Fuzzed requests per adapter: about 5 ms each on a quiet 2-core machine, where 10,000 ran past
 * the test's 2 minutes beside busy processes. 4,000 still make a few thousand buckets.
 */
const RUNS = 4_000;
/** Largest fuzzed header value, bytes. */
const MAX_VALUE = 16 * 1024;
/**
 * Room for five such values and the query: at Node's default (16 KiB) the server would answer 431
 * before the limiter runs, and the fuzz would test Node's parser instead.
 */
const MAX_HEADER_SIZE = 128 * 1024;
/** A store key must stay this short whatever the client sends, bytes. */
const MAX_KEY_BYTES = 100;
/**
 * Slow to refill, so keys outlast the run and can be measured: a key lives as long as its bucket
 * takes to fill up again, 100 s after a request of cost 1 (10^7 s from empty, within the 365-day cap).
 */
const LASTING = { rps: 0.01, burst: 100_000 } as const;

/**
 * Sets `req.user` from `x-user-id`, as an app's auth layer would from a token it has not verified.
 * A global guard registered before `RateLimitModule`'s, so it runs first, on Express and Fastify alike.
 */
@Injectable()
class HeaderUserGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, unknown>; user?: { id: string } }>();
    const id = request.headers['x-user-id'];
    if (typeof id === 'string') request.user = { id };
    return true;
  }
}

@Module({ providers: [{ provide: APP_GUARD, useClass: HeaderUserGuard }] })
class HeaderUserModule {}

@Controller('hostile')
class HostileController {
  @RateLimit([
    { name: 'by-key', ...LASTING, key: ['api-key', 'header:x-tenant'], cost: 'header:x-weight' },
    { name: 'by-user', ...LASTING, key: 'user', cost: 'query:w' },
    { name: 'by-ip', ...LASTING, key: 'ip' },
  ])
  @Get()
  get() {
    return { ok: true };
  }
}

/** Bytes as a Latin-1 string, one char per byte: how Node hands a header value to the app. */
const latin1 = (bytes: Uint8Array) => Buffer.from(bytes).toString('latin1');
/** A byte Node's parser takes in a header value (HTAB, SP to `~`, 0x80 to 0xFF); the others (CTLs, DEL) xor 0x40 into that range. */
const fieldByte = (byte: number) => (byte === 0x09 || (byte >= 0x20 && byte !== 0x7f) ? byte : byte ^ 0x40);
/** Whether Node's parser takes `value` as a header value. */
const isFieldValue = (value: string) => /^[\t\x20-\x7e\x80-\xff]*$/.test(value);

/** `length` bytes of xorshift32 from `seed`. */
function xorshiftBytes(seed: number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let state = seed || 1;
  for (let i = 0; i < length; i++) {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    bytes[i] = state & 0xff;
  }
  return bytes;
}

/** Up to 64 bytes, fast-check's own (its bias favours 0x00, 0xFF and their neighbours), any length in the range. */
const shortBytes = fc.uint8Array({ maxLength: 64, size: 'max' });
/**
 * Up to 16 KiB, any length in the range, drawn from a seed: fast-check's own arrays take about a
 * millisecond per 8 KiB, which would be most of the run. Shrinks towards shorter values.
 */
const longBytes = fc
  .record({ seed: fc.integer(), length: fc.nat({ max: MAX_VALUE }) })
  .map(({ seed, length }) => xorshiftBytes(seed, length));
const anyBytes = (bytes: fc.Arbitrary<Uint8Array>) => bytes.map(latin1);
const fieldBytes = (bytes: fc.Arbitrary<Uint8Array>) => bytes.map((value) => latin1(value.map(fieldByte)));

const NASTY = [
  '',
  '{x}',
  'a:b{c}',
  '::ffff:1.2.3.4',
  '1.1.1.1, 2.2.2.2',
  '__proto__',
  'constructor',
  '-1',
  '0',
  '1e400',
  'NaN',
  'Infinity',
  '%00',
  ' padded ',
  '\t',
];

/**
 * One header value, or `undefined` for a header not sent. Any bytes (CR, LF and NUL break the
 * request: Node answers 400 or hangs up) and bytes Node accepts, which reach the limiter; short and
 * up to 16 KiB; numbers, for the cost; hand-picked trouble.
 */
const headerValue = fc.oneof(
  { arbitrary: fc.constant(undefined), weight: 2 },
  { arbitrary: fc.constantFrom(...NASTY), weight: 2 },
  { arbitrary: fc.stringMatching(/^\d{1,20}(\.\d{1,20})?$/), weight: 1 },
  { arbitrary: anyBytes(shortBytes), weight: 1 },
  { arbitrary: fieldBytes(shortBytes), weight: 2 },
  { arbitrary: anyBytes(longBytes), weight: 1 },
  { arbitrary: fieldBytes(longBytes), weight: 2 },
);

/** The app trusts its loopback peer as a proxy, so `req.ip` is the last entry: addresses of every kind, and garbage. */
const forwardedFor = fc.oneof(
  headerValue,
  fc
    .array(fc.oneof(fc.ipV4(), fc.ipV4Extended(), fc.ipV6()), { minLength: 1, maxLength: 3 })
    .map((ips) => ips.join(', ')),
);

/** `w=` with any bytes percent-encoded, or a hand-written query. */
const query = fc.oneof(
  anyBytes(shortBytes).map((w) => `w=${Buffer.from(w, 'latin1').toString('hex').replace(/../g, '%$&')}`),
  fc.stringMatching(/^\d{1,20}(\.\d{1,20})?$/).map((w) => `w=${w}`),
  fc.constantFrom(
    '',
    'w',
    'w=',
    'w=1&w=2',
    'w[]=3',
    'w[__proto__]=1',
    'w[a]=1',
    'w=%',
    'w=%zz',
    'w=-1',
    'w=1e400',
    'w=NaN',
  ),
);

const request = fc.record({
  'x-api-key': headerValue,
  'x-tenant': headerValue,
  'x-weight': headerValue,
  'x-user-id': headerValue,
  'x-forwarded-for': forwardedFor,
  query,
});

let redis: Redis;
beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

describe.each(ADAPTERS)('hostile input on %s', (adapter) => {
  let http: TestApp;
  const prefix = `rl-hostile-${adapter}-${randomUUID().slice(0, 8)}:`;
  beforeAll(async () => {
    @Module({
      imports: [HeaderUserModule, RateLimitModule.forRoot({ store: new RedisStore({ client: redis }), prefix })],
      controllers: [HostileController],
    })
    class AppModule {}
    http = await startApp(AppModule, adapter, { maxHeaderSize: MAX_HEADER_SIZE, trustProxy: '127.0.0.1' });
  });
  afterAll(() => http.close());

  /** Whole tokens left in a policy's bucket, from the `RateLimit` header. */
  const remaining = (response: Response, policy: string) =>
    Number(new RegExp(`"${policy}";r=(\\d+)`).exec(response.headers.get('ratelimit') ?? '')?.[1]);

  it('a request head of 80 KiB reaches the limiter, not a 431 from Node', async () => {
    const big = (c: string) => c.repeat(MAX_VALUE);
    const response = await http.get('/hostile', {
      'x-api-key': big('k'),
      'x-tenant': big('t'),
      'x-weight': big('1'),
      'x-user-id': big('u'),
      'x-forwarded-for': big('f'),
    });
    await response.arrayBuffer();
    expect(response.status).toBe(200);
    expect(remaining(response, 'by-key')).toBe(LASTING.burst - 1);
  });

  it('keys by the user the app set and by the address its proxy forwarded: one bucket each', async () => {
    const left = async (headers: Record<string, string>, policy: string) =>
      remaining(await http.get('/hostile', headers), policy);
    const [alice, bob] = [`alice-${randomUUID()}`, `bob-${randomUUID()}`];
    expect(await left({ 'x-user-id': alice }, 'by-user')).toBe(LASTING.burst - 1);
    expect(await left({ 'x-user-id': alice }, 'by-user')).toBe(LASTING.burst - 2);
    expect(await left({ 'x-user-id': bob }, 'by-user')).toBe(LASTING.burst - 1);
    expect(await left({ 'x-forwarded-for': '203.0.113.7' }, 'by-ip')).toBe(LASTING.burst - 1);
    expect(await left({ 'x-forwarded-for': '198.51.100.1, 203.0.113.7' }, 'by-ip')).toBe(LASTING.burst - 2);
    expect(await left({ 'x-forwarded-for': '203.0.113.8' }, 'by-ip')).toBe(LASTING.burst - 1);
  });

  it(`${RUNS} requests of any bytes in the API key, tenant, cost, user id and X-Forwarded-For: never a 500, keys of at most ${MAX_KEY_BYTES} bytes`, async () => {
    const outcomes = new Map<RawOutcome, number>();
    const started = performance.now();
    await fc.assert(
      fc.asyncProperty(request, async ({ query: search, ...fields }) => {
        const headers = Object.entries(fields).filter((field): field is [string, string] => field[1] !== undefined);
        const outcome = await rawGet(http.url, `/hostile?${search}`, headers);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        // a request Node can parse reaches the limiter; one it cannot is refused by Node, never a 5xx
        if (headers.every(([, value]) => isFieldValue(value))) expect([200, 429]).toContain(outcome);
        else expect([200, 429, 400, 431, 'closed']).toContain(outcome);
      }),
      // a hung request fails on its own; the test has 2 minutes, 30 ms a request
      { numRuns: RUNS, timeout: 10_000 },
    );
    const seconds = (performance.now() - started) / 1000;

    // still up: a fresh client passes
    const response = await http.get('/hostile', {
      'x-api-key': randomUUID(),
      'x-user-id': randomUUID(),
      'x-forwarded-for': '10.9.8.7',
    });
    expect(response.status).toBe(200);

    const ttls = await ttlsUnder(redis, prefix);
    const longest = Math.max(...[...ttls.keys()].map((key) => Buffer.byteLength(key)));
    const counts = [...outcomes]
      .sort(([a], [b]) => String(a).localeCompare(String(b)))
      .map(([outcome, n]) => `${outcome}: ${n}`);
    console.log(
      `${adapter}: ${RUNS} fuzzed requests in ${seconds.toFixed(1)} s (${counts.join(', ')}); ${ttls.size} keys, the longest ${longest} bytes`,
    );
    expect(longest).toBeLessThanOrEqual(MAX_KEY_BYTES);
    // every key has a TTL (-1: none). Some are gone since the scan (-2): a bucket charged a tiny
    // cost (`x-weight: 0.001`) is full again, and expires, within milliseconds.
    expect([...ttls].filter(([, ttl]) => ttl === -1)).toEqual([]);
    // Each parsable request with a new API key, tenant or user id makes buckets of its own, a few
    // thousand in all: a few hundred keys would mean client values stopped reaching the keys.
    expect(ttls.size).toBeGreaterThan(1_000);
  }, 120_000);
});
