/**
 * NestJS 12 as an ES module app, under every Node the package supports: the package is built,
 * packed and installed into a copy of test/nest12 (`"type": "module"`, pinned to NestJS 12 by its
 * own package-lock.json, with test/nest11/smoke-routes.cjs), which runs as a Node process of its
 * own on the memory store and on the test Redis, under the Node running Jest (20 in CI) and under
 * Node 22 and 24 (the npm registry's builds, test/support/processes/node-builds.ts). Each checks
 * over real HTTP that the app imports the ESM build through the exports map, `@RateLimit`,
 * `@SkipRateLimit`, a module policy, the Redis keys, and @nestjs/throttler's README example on
 * `nestjs-ratelimit/throttler`.
 *
 * On Node 20, npm warns EBADENGINE while installing NestJS 12: its dependency file-type asks for
 * Node 22. The app runs on 20 all the same, and these checks say so.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import { getJson } from '../support/processes/app-process.js';
import {
  OTHER_NODES,
  quietChecks,
  rateLimitSmokeChecks,
  STORES,
  THROTTLER_PACKAGE,
  throttlerSmokeChecks,
  type ThrottlerReady,
  useInstalledApp,
  useSmokeApps,
} from '../support/processes/smoke-apps.js';
import { ttlsUnder, useTestRedis } from '../support/redis/test-redis.js';

/** The line the app prints once it listens. */
interface Ready extends ThrottlerReady {
  port: number;
  resolved: { root: string; throttler: string };
  nest: string;
  cjsLoaded: string[];
}

const redis = useTestRedis();
const appDir = useInstalledApp('test/nest12', ['test/nest11/smoke-routes.cjs']);

const INSTALLED = (): string => join(appDir(), 'node_modules', 'nestjs-ratelimit');

const NODES: [string, number | undefined][] = [
  ['the Node running Jest', undefined],
  ...OTHER_NODES.map((major): [string, number] => [`Node ${major}`, major]),
];

describe.each(NODES)('NestJS 12, ESM, on %s', (_label, major) => {
  const apps = useSmokeApps<Ready>({ name: 'nest12', appDir, entry: 'app.js', major });

  test.each(STORES)('%s store: the app runs NestJS 12 and imports the ESM build, and only it', (store) => {
    const { ready } = apps.app(store);
    if (major !== undefined) expect(apps.node().version).toMatch(new RegExp(`^v${major}\\.`));
    expect(ready.nest).toMatch(/^12\./);
    expect(ready.resolved.root).toBe(join(INSTALLED(), 'dist', 'index.js'));
    expect(ready.cjsLoaded).toEqual([]);
  });

  test('the throttler entry resolves to its ESM build', () => {
    const { throttler } = apps.app('memory').ready.resolved;
    if (THROTTLER_PACKAGE === '@nestjs/throttler') expect(throttler).toContain('/node_modules/@nestjs/throttler/');
    else {
      // wherever in dist/ the entry lives, not under dist/cjs/
      const [dist, cjs] = [join(INSTALLED(), 'dist') + '/', join(INSTALLED(), 'dist', 'cjs') + '/'];
      const esm = throttler.startsWith(dist) && !throttler.startsWith(cjs) && throttler.endsWith('.js');
      expect({ throttler, esm }).toEqual({ throttler, esm: true });
    }
  });

  rateLimitSmokeChecks(apps);

  test.each(STORES)('%s store: the module policy limits a route without @RateLimit: 5 a minute', async (store) => {
    const { port } = apps.app(store).ready;
    const headers = { 'x-api-key': `open-${randomUUID()}` };
    const seen: number[] = [];
    for (let i = 0; i < 6; i++) seen.push((await getJson(port, '/open', headers)).status);
    expect(seen).toEqual([200, 200, 200, 200, 200, 429]);
    if (store === 'redis') {
      const prefix = apps.prefix(store);
      const ttls = await ttlsUnder(redis(), prefix);
      expect(ttls.get(bucketKey(prefix, 'app', 'token_bucket', `api-key:${headers['x-api-key']}`))).toBeGreaterThan(0);
    }
  });

  throttlerSmokeChecks(apps, redis);
  quietChecks(apps);
});
