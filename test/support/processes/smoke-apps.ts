/**
 * The smoke apps (test/nest11, test/nest12) as specs run them: installed with the packed package,
 * started on the memory store and on the test Redis under a given Node build, and the checks
 * every such run makes over HTTP: `@RateLimit` and `@SkipRateLimit` on the routes of
 * test/nest11/smoke-routes.cjs, and @nestjs/throttler's README example on
 * `nestjs-ratelimit/throttler`, NT's behaviour exactly (headers, 429 body, `Retry-After`).
 */
import { randomUUID } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { limitExceeded } from '../../../lib/rate-limit.messages.js';
import { testRedisUrl, ttlsUnder } from '../redis/test-redis.js';
import type { Redis } from 'ioredis';
import { type AppProcess, expectAbout, getJson, type Reply, startAppProcess, stopAppProcess } from './app-process.js';
import { type NodeBuild, nodeBuild } from './node-builds.js';
import { installPackedApp } from './packed-app.js';

export const STORES = ['memory', 'redis'] as const;
export type Store = (typeof STORES)[number];

/**
 * The package the throttler app imports: `nestjs-ratelimit/throttler`, or what the environment's
 * `THROTTLER_PACKAGE` names (the apps read it too): `THROTTLER_PACKAGE=@nestjs/throttler` runs the
 * throttler checks against the real NT, the version this repository tests against installed
 * into each app's copy, to show that they describe NT's behaviour.
 */
export const THROTTLER_PACKAGE = process.env.THROTTLER_PACKAGE || 'nestjs-ratelimit/throttler';

/** What `installPackedApp` installs beside the package: the real NT when the checks run against it. */
export function throttlerPackages(): string[] {
  if (THROTTLER_PACKAGE !== '@nestjs/throttler') return [];
  const { version } = createRequire(import.meta.url)('@nestjs/throttler/package.json') as { version: string };
  return [`@nestjs/throttler@${version}`];
}

/** The Node majors the smoke apps also run under, beside the one running Jest (the lowest supported, 20). */
export const OTHER_NODES = [22, 24] as const;

/** What every smoke app's ready line says of the throttler app beside it. */
export interface ThrottlerReady {
  throttler: { port: number } | { error: string };
}

/**
 * Installs the app folder `app` (with the files `shared`) and the packed package into a copy in
 * the global setup's TEST_PACK_DIR (the global teardown removes it, after every app has stopped)
 * before the tests of the block that calls this. Gives the copy's path once installed.
 */
export function useInstalledApp(app: string, shared: string[] = []): () => string {
  let appDir: string | undefined;
  beforeAll(async () => {
    const dir = await mkdtemp(join(process.env.TEST_PACK_DIR ?? tmpdir(), `${basename(app)}-`));
    const installed = await installPackedApp(dir, app, shared, throttlerPackages());
    appDir = installed.appDir;
    const { build, pack, install } = installed.times;
    console.log(`${app}: build ${build.toFixed(1)} s, pack ${pack.toFixed(1)} s, npm install ${install.toFixed(1)} s`);
  }, 240_000);
  return () => {
    if (appDir === undefined) throw new Error(`${app} is installed in beforeAll`);
    return appDir;
  };
}

/** The smoke apps of one Node build, one per store, and the key prefixes each uses. */
export interface SmokeApps<Ready extends ThrottlerReady> {
  /** The Node build they run on. */
  node: () => NodeBuild;
  app: (store: Store) => AppProcess<Ready>;
  prefix: (store: Store) => string;
  throttlerPrefix: (store: Store) => string;
}

/** The Node running Jest, as a build. */
export const currentNode = (): NodeBuild => ({ path: process.execPath, version: process.version });

/**
 * Starts the app `entry` of the installed copy `appDir()` on both stores under `node` (the one
 * running Jest when left out, else a major from the npm registry) before the tests of the block
 * that calls this, and stops them after. `name` goes into every key prefix, with a run's UUID.
 */
export function useSmokeApps<Ready extends ThrottlerReady>(options: {
  name: string;
  appDir: () => string;
  entry: string;
  major?: number;
}): SmokeApps<Ready> {
  const { name, appDir, entry, major } = options;
  const run = randomUUID();
  const label = major === undefined ? 'current' : `node${major}`;
  const prefix = (store: Store): string => `${name}:${run}:${label}:${store}:`;
  // apart from the app's prefix, so the checks of the app's keys see none of the throttler's
  const throttlerPrefix = (store: Store): string => `${name}-throttler:${run}:${label}:${store}:`;
  const apps = new Map<Store, AppProcess<Ready>>();
  let node: NodeBuild | undefined;

  beforeAll(async () => {
    node = major === undefined ? currentNode() : await nodeBuild(major);
    console.log(`${name} on Node ${node.version} (${node.path})`);
    const started = await Promise.allSettled(
      STORES.map((store) =>
        startAppProcess<Ready>({
          node: node!.path,
          cwd: appDir(),
          entry,
          env: {
            STORE: store,
            PREFIX: prefix(store),
            THROTTLER_PREFIX: throttlerPrefix(store),
            REDIS_URL: store === 'redis' ? testRedisUrl() : '',
          },
        }),
      ),
    );
    // the one that started is stopped in afterAll even when the other did not
    STORES.forEach((store, i) => {
      const outcome = started[i];
      if (outcome.status === 'fulfilled') apps.set(store, outcome.value);
    });
    for (const outcome of started) if (outcome.status === 'rejected') throw outcome.reason;
  }, 240_000);

  afterAll(async () => {
    await Promise.all([...apps.values()].map(stopAppProcess));
  });

  return {
    node: () => node ?? currentNode(),
    app: (store) => {
      const app = apps.get(store);
      if (app === undefined) throw new Error(`the ${name} app on ${store} is started in beforeAll`);
      return app;
    },
    prefix,
    throttlerPrefix,
  };
}

/** `count` GETs of `path` with `headers`, one after the other. */
async function replies(port: number, path: string, count: number, headers: Record<string, string> = {}) {
  const seen: Reply[] = [];
  for (let i = 0; i < count; i++) seen.push(await getJson(port, path, headers));
  return seen;
}

/**
 * The checks of the package's own API on a smoke app's routes (smoke-routes.cjs): `@RateLimit`
 * admits its burst of 2, then 429 with our body and `Retry-After`; `@SkipRateLimit` is never
 * limited. Registers one test per store.
 */
export function rateLimitSmokeChecks(apps: SmokeApps<ThrottlerReady & { port: number }>): void {
  test.each(STORES)(
    '%s store: @RateLimit admits its burst of 2, then 429; @SkipRateLimit is never limited',
    async (store) => {
      const { port } = apps.app(store).ready;
      const apiKey = { 'x-api-key': `smoke-${randomUUID()}` };
      const started = performance.now();
      const burst = await replies(port, '/burst', 3, apiKey);
      expect(burst.map((reply) => reply.status)).toEqual([200, 200, 429]);
      const retryAfter = Number(burst[2].headers.get('retry-after'));
      // the token the first request took comes back 10 s after it, less the seconds since, rounded up
      expectAbout(retryAfter, 10, Math.ceil((performance.now() - started) / 1000) + 1);
      expect(burst[2].body).toEqual({
        statusCode: 429,
        error: 'Too Many Requests',
        message: limitExceeded('burst', retryAfter),
        policy: 'burst',
        retryAfter,
      });
      const health = await replies(port, '/health', 7, apiKey);
      expect(health.map((reply) => [reply.status, reply.headers.get('ratelimit')])).toEqual(Array(7).fill([200, null]));
    },
  );
}

/**
 * @nestjs/throttler's behaviour on its README example (3 a minute per route per IP; `/once`
 * allowed 1 a minute by `@Throttle`; `/free` skipped), as NT 6.x answers it: on every admitted
 * response `X-RateLimit-Limit`, `-Remaining` (`limit - hits`) and `-Reset` (seconds to the window's
 * end); the hit over the limit is a 429 with `{ statusCode, message }` and `Retry-After` (seconds
 * to the block's end; the block lasts the `ttl`) and no X-RateLimit headers. On Redis, the keys are
 * under the throttler's prefix, each with a TTL. Registers one test per store.
 */
export function throttlerSmokeChecks(apps: SmokeApps<ThrottlerReady>, redis: () => Redis): void {
  const portOf = (store: Store): number => {
    const { throttler } = apps.app(store).ready;
    if ('error' in throttler) throw new Error(`the throttler app did not start:\n${throttler.error}`);
    return throttler.port;
  };
  const limitHeaders = (reply: Reply) =>
    ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after'].map((name) =>
      reply.headers.get(name),
    );
  const refused = { statusCode: 429, message: 'ThrottlerException: Too Many Requests' };

  test.each(STORES)('%s store: nestjs-ratelimit/throttler answers as @nestjs/throttler does', async (store) => {
    const port = portOf(store);
    // a window and a block count down from the first hit: by at most the seconds since, rounded up
    const started = performance.now();
    const slack = (): number => Math.ceil((performance.now() - started) / 1000) + 1;
    const limited = await replies(port, '/limited', 4);
    expect(limited.map((reply) => reply.status)).toEqual([200, 200, 200, 429]);
    expect(limited.slice(0, 3).map((reply) => limitHeaders(reply).slice(0, 2))).toEqual([
      ['3', '2'],
      ['3', '1'],
      ['3', '0'],
    ]);
    for (const reply of limited.slice(0, 3)) {
      expectAbout(Number(reply.headers.get('x-ratelimit-reset')), 60, slack());
      expect(reply.headers.get('retry-after')).toBeNull();
    }
    expect(limited[3].body).toEqual(refused);
    expect(limitHeaders(limited[3]).slice(0, 3)).toEqual([null, null, null]);
    expectAbout(Number(limited[3].headers.get('retry-after')), 60, slack());

    // @Throttle overrides the default throttler's limit for its route only, with a count of its own
    const once = await replies(port, '/once', 2);
    expect(once.map((reply) => [reply.status, ...limitHeaders(reply).slice(0, 2)])).toEqual([
      [200, '1', '0'],
      [429, null, null],
    ]);
    expect(once[1].body).toEqual(refused);
    expectAbout(Number(once[1].headers.get('retry-after')), 60, slack());

    const free = await replies(port, '/free', 5);
    expect(free.map((reply) => [reply.status, ...limitHeaders(reply)])).toEqual(
      Array(5).fill([200, null, null, null, null]),
    );

    // on our store (the real NT ignores forRoot's second argument and counts in memory)
    if (store === 'redis' && THROTTLER_PACKAGE === 'nestjs-ratelimit/throttler') {
      const ttls = await ttlsUnder(redis(), apps.throttlerPrefix(store));
      expect(ttls.size).toBeGreaterThan(0);
      for (const [key, ttl] of ttls) expect({ key, expires: ttl > 0 }).toEqual({ key, expires: true });
    }
  });
}

/** Every app of `apps` wrote nothing to stderr: no error, no warning (a deprecation under a newer Node would show here). */
export function quietChecks(apps: SmokeApps<ThrottlerReady>): void {
  test('no app wrote an error or a warning', () => {
    expect(STORES.map((store) => apps.app(store).stderr())).toEqual(['', '']);
  });
}
