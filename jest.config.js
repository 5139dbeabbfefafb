/**
 * Jest runs the TypeScript sources as native ES modules (NestJS 12 is ESM-only), transpiled
 * file by file by ts-jest with decorator metadata; `npm test` type-checks the whole project
 * with tsc first. The npm scripts set NODE_OPTIONS=--experimental-vm-modules.
 *
 * Three projects, one per folder of specs (`npm run test:unit`, `test:integration`, `test:e2e`;
 * `npm test` runs all three):
 * - unit: pure code, fixed instants; no Redis anywhere, so no global setup;
 * - integration: the stores on real Redis, a Redis Cluster and Sentinel;
 * - e2e: real apps over HTTP, app processes, faults.
 * The last two share one global setup that starts the redis-servers. Jest runs a global setup
 * once per distinct file and only when a test of a project naming it is selected: once for
 * `npm test`, never for the unit project alone.
 */

/** @type {import('jest').Config} */
const shared = {
  testEnvironment: 'node',
  rootDir: '.',
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true }],
    // an ES module that a CommonJS package requires (Mercurius's @fastify/static): Jest's require
    // takes ES modules only from Node 24.9 on, so it is made CommonJS here
    '/node_modules/@fastify/static/node_modules/content-disposition/.+\\.js$': [
      'ts-jest',
      { tsconfig: { allowJs: true, module: 'commonjs' } },
    ],
    // the real @nestjs/throttler (CommonJS) on the app's ESM @nestjs/common and core: see the transform
    '/node_modules/@nestjs/throttler/dist/.+\\.js$': '<rootDir>/test/support/throttler/nt-cjs-transform.cjs',
  },
  transformIgnorePatterns: [
    '^(?!.*/@fastify/static/node_modules/content-disposition/)(?!.*/node_modules/@nestjs/throttler/dist/).*/node_modules/',
  ],
  moduleNameMapper: {
    '^nestjs-ratelimit$': '<rootDir>/lib/index.ts',
    '^nestjs-ratelimit/store$': '<rootDir>/lib/store/index.ts',
    '^nestjs-ratelimit/throttler$': '<rootDir>/lib/throttler/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
};

/** @type {import('jest').Config} */
const withRedis = {
  globalSetup: '<rootDir>/test/support/redis/global-setup.js',
  globalTeardown: '<rootDir>/test/support/redis/global-teardown.js',
};

/** @type {import('jest').Config} */
export default {
  // a global option: Jest reads it here, not from a project
  testTimeout: 30_000,
  // One spec file at a time (the specs time real servers on 2 cores), in a worker that Jest
  // replaces once a file has left it holding more than this: a process running every file kept
  // each file's ES module graph (vm modules are not collected) and reached 3.9 GB, and its
  // collections then stalled apps and Redis proxies for seconds mid-test
  maxWorkers: 1,
  workerIdleMemoryLimit: '1GB',
  projects: [
    { ...shared, displayName: 'unit', roots: ['<rootDir>/test/unit'], testMatch: ['**/*.spec.ts'] },
    {
      ...shared,
      ...withRedis,
      displayName: 'integration',
      roots: ['<rootDir>/test/integration'],
      testMatch: ['**/*.spec.ts'],
    },
    { ...shared, ...withRedis, displayName: 'e2e', roots: ['<rootDir>/test/e2e'], testMatch: ['**/*.e2e-spec.ts'] },
  ],
};
