/**
 * NestJS 11 and CommonJS, as most NestJS apps in production are: the package is built, packed and
 * installed into a copy of test/nest11 (a plain CommonJS app pinned to NestJS 11 by its own
 * package-lock.json), which runs as a Node process of its own, once on the memory store and once
 * on the test Redis. The checks go over real HTTP: `@RateLimit`, `@SkipRateLimit`, a module
 * policy, `RateLimiterService` from a controller, the Redis keys, the optional peers loaded
 * lazily, that the process loaded the CommonJS build only, and @nestjs/throttler's README example
 * on `nestjs-ratelimit/throttler`. All of them under the Node running Jest; under Node 22 and 24
 * (the npm registry's builds, test/support/processes/node-builds.ts) the same copy runs the smoke
 * checks: the build it loads, `@RateLimit`, `@SkipRateLimit` and the throttler example.
 *
 * The first run on a machine downloads NestJS 11 into npm's cache, and the Node builds; later
 * runs install from them.
 */
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { costExceedsBurst, limitExceeded } from '../../lib/rate-limit.messages.js';
import { expectAbout, getJson, type Reply } from '../support/processes/app-process.js';
import {
  OTHER_NODES,
  quietChecks,
  rateLimitSmokeChecks,
  STORES,
  type Store,
  throttlerSmokeChecks,
  type ThrottlerReady,
  useInstalledApp,
  useSmokeApps,
} from '../support/processes/smoke-apps.js';
import { ttlsUnder, useTestRedis } from '../support/redis/test-redis.js';

/** The line the app prints once it listens. */
interface Ready extends ThrottlerReady {
  port: number;
  resolved: string;
  nest: string;
  peersRequiredByModule: { id: string; by: string }[];
}

const run = randomUUID();

const redis = useTestRedis();
const appDir = useInstalledApp('test/nest11');
const current = useSmokeApps<Ready>({ name: 'nest11', appDir, entry: 'app.js' });

async function get(store: Store, path: string, apiKey?: string): Promise<Reply> {
  return getJson(current.app(store).ready.port, path, apiKey === undefined ? {} : { 'x-api-key': apiKey });
}

async function statuses(store: Store, path: string, apiKey: string, count: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await get(store, path, apiKey)).status);
  return seen;
}

const INSTALLED = (): string => join(appDir(), 'node_modules', 'nestjs-ratelimit');
const TSC = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));

test('the package installed is CommonJS under dist/cjs, with no import() or import.meta left', async () => {
  const cjs = join(INSTALLED(), 'dist', 'cjs');
  expect(JSON.parse(await readFile(join(cjs, 'package.json'), 'utf8'))).toEqual({ type: 'commonjs' });
  const files = (await readdir(cjs, { recursive: true })).filter((file) => file.endsWith('.js'));
  expect(files).toContain('index.js');
  for (const file of files) {
    const text = await readFile(join(cjs, file), 'utf8');
    expect({ file, esm: /\bimport\s*\(|import\.meta|^\s*(import|export)\s/m.test(text) }).toEqual({ file, esm: false });
  }
});

test('a NestJS 11 TypeScript project (CommonJS, declarations checked) compiles against the CommonJS types', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [TSC, '-p', 'tsconfig.json', '--listFiles'], {
    cwd: appDir(),
    maxBuffer: 16 * 1024 * 1024,
  });
  const declarations = stdout.split('\n').filter((file) => file.startsWith(INSTALLED()));
  expect(declarations).toContain(join(INSTALLED(), 'dist', 'cjs', 'index.d.ts'));
  expect(declarations.filter((file) => !file.startsWith(join(INSTALLED(), 'dist', 'cjs') + '/'))).toEqual([]);
}, 60_000);

describe.each(STORES)('NestJS 11, CommonJS, %s store', (store) => {
  const key = (name: string): string => `${name}-${run}`;

  test('the app runs NestJS 11 and requires the CommonJS build, and only it', async () => {
    const { ready } = current.app(store);
    expect(ready.nest).toMatch(/^11\./);
    expect(ready.resolved).toBe(join(INSTALLED(), 'dist', 'cjs', 'index.js'));
    const { files } = (await get(store, '/service/loaded')).body as { files: string[] };
    expect(files).toContain(ready.resolved);
    // an ES module the process required (require(esm)) would be listed here too
    expect(files.filter((file) => !file.startsWith(join(INSTALLED(), 'dist', 'cjs') + '/'))).toEqual([]);
  });

  test('@RateLimit with a burst of 2 admits 2, then 429 with the body and headers', async () => {
    const apiKey = key('burst');
    const admitted = [await get(store, '/burst', apiKey), await get(store, '/burst', apiKey)];
    const refused = await get(store, '/burst', apiKey);
    expect([...admitted, refused].map((reply) => reply.status)).toEqual([200, 200, 429]);

    const retryAfter = Number(refused.headers.get('retry-after'));
    expectAbout(retryAfter, 10);
    expect(refused.body).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      message: limitExceeded('burst', retryAfter),
      policy: 'burst',
      retryAfter,
    });
    // the module's policy and the route's, each a member; the X-RateLimit trio is the route's, closest to refusing
    expect(refused.headers.get('ratelimit-policy')).toBe('"app";q=5;w=60, "burst";q=2;w=20');
    expect(refused.headers.get('ratelimit')).toMatch(/^"app";r=3;t=1[12], "burst";r=0;t=(9|10)$/);
    expect(refused.headers.get('x-ratelimit-limit')).toBe('2');
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
    expectAbout(Number(refused.headers.get('x-ratelimit-reset')), Math.ceil(Date.now() / 1000) + 20, 2);
    expect(admitted[1].headers.get('x-ratelimit-remaining')).toBe('0');
    expect(admitted[0].headers.get('retry-after')).toBeNull();
  });

  test('@SkipRateLimit: never limited, no headers', async () => {
    const replies = [];
    for (let i = 0; i < 8; i++) replies.push(await get(store, '/health', key('health')));
    expect(replies.map((reply) => reply.status)).toEqual(Array(8).fill(200));
    expect(replies.map((reply) => reply.headers.get('ratelimit'))).toEqual(Array(8).fill(null));
  });

  test('the module policy limits a route without @RateLimit: 5 a minute', async () => {
    const apiKey = key('open');
    expect(await statuses(store, '/open', apiKey, 6)).toEqual([200, 200, 200, 200, 200, 429]);
    const refused = await get(store, '/open', apiKey);
    expect(refused.body).toMatchObject({ statusCode: 429, policy: 'app' });
    expectAbout(Number(refused.headers.get('retry-after')), 12);
    expect(refused.headers.get('ratelimit-policy')).toBe('"app";q=5;w=60');
  });

  test('RateLimiterService.consume from a controller', async () => {
    const id = key('user');
    const [first] = (await get(store, `/service/consume/${id}`)).body as Record<string, unknown>[];
    const [second] = (await get(store, `/service/consume/${id}`)).body as Record<string, unknown>[];
    expect(first).toMatchObject({ allowed: true, policy: 'service', limit: 1, remaining: 0 });
    expect(second).toMatchObject({ allowed: false, policy: 'service', limit: 1, remaining: 0 });
    expectAbout(second.retryAfter as number, 10);
  });

  test('the optional peers are required lazily, and the WebSocket and microservice seams work on NestJS 11', async () => {
    const { ready } = current.app(store);
    // at start: only ioredis, for the Redis store the module opened itself
    expect(ready.peersRequiredByModule).toEqual(
      store === 'redis' ? [{ id: 'ioredis', by: 'nestjs-ratelimit/dist/cjs/stores/store-owner.js' }] : [],
    );
    const seams = (await get(store, '/service/contexts')).body as Record<string, Record<string, unknown>>;
    const refusal = {
      status: 'error',
      statusCode: 429,
      message: costExceedsBurst('contexts', 2, 1),
      policy: 'contexts',
      retryAfter: null,
    };
    expect(seams.ws).toMatchObject({ ws: true, error: refusal });
    expect(seams.message).toMatchObject({ rpc: true, error: refusal });
    expect(seams.event).toMatchObject({ name: 'RateLimitDroppedEvent', rpc: false, error: refusal });
    expect(seams.peersRequiredByModule).toEqual(
      expect.arrayContaining([
        { id: '@nestjs/websockets', by: 'nestjs-ratelimit/dist/cjs/contexts/ws.context.js' },
        { id: '@nestjs/microservices', by: 'nestjs-ratelimit/dist/cjs/contexts/rpc.context.js' },
      ]),
    );
  });
});

// after the Redis app's tests above (Jest runs a file's tests in the order they are declared)
test('Redis: the keys are exactly the buckets charged, each with a TTL no longer than its refill', async () => {
  const prefix = current.prefix('redis');
  const key = (name: string): string => `${name}-${run}`;
  const ttls = await ttlsUnder(redis(), prefix);
  const expected = new Map([
    [bucketKey(prefix, 'burst', 'token_bucket', `api-key:${key('burst')}`), 20_000],
    [bucketKey(prefix, 'app', 'token_bucket', `api-key:${key('burst')}`), 60_000],
    [bucketKey(prefix, 'app', 'token_bucket', `api-key:${key('open')}`), 60_000],
    [bucketKey(prefix, 'service', 'token_bucket', `user:${key('user')}`), 10_000],
  ]);
  expect([...ttls.keys()].sort()).toEqual([...expected.keys()].sort());
  for (const [name, longest] of expected) {
    expect(ttls.get(name)).toBeGreaterThan(0);
    expect(ttls.get(name)).toBeLessThanOrEqual(longest);
  }
});

describe("@nestjs/throttler's README example on nestjs-ratelimit/throttler", () => {
  throttlerSmokeChecks(current, redis);
});

quietChecks(current);

describe.each(OTHER_NODES)('NestJS 11, CommonJS, on Node %i', (major) => {
  const apps = useSmokeApps<Ready>({ name: 'nest11', appDir, entry: 'app.js', major });

  test.each(STORES)('%s store: the app runs NestJS 11 on this Node and requires the CommonJS build', (store) => {
    const { ready } = apps.app(store);
    expect(apps.node().version).toMatch(new RegExp(`^v${major}\\.`));
    expect(ready.nest).toMatch(/^11\./);
    expect(ready.resolved).toBe(join(INSTALLED(), 'dist', 'cjs', 'index.js'));
  });

  rateLimitSmokeChecks(apps);
  throttlerSmokeChecks(apps, redis);
  quietChecks(apps);
});
