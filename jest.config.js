/**
 * Jest runs the TypeScript sources as native ES modules (NestJS 12 is ESM-only), transpiled
 * file by file by ts-jest with decorator metadata; `npm test` type-checks the whole project
 * with tsc first. `npm test` sets NODE_OPTIONS=--experimental-vm-modules.
 * The global setup starts the redis-server processes the integration and e2e suites use.
 * @type {import('jest').Config}
 */
export default {
  testEnvironment: 'node',
  rootDir: '.',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts'],
  extensionsToTreatAsEsm: ['.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true, isolatedModules: true }] },
  moduleNameMapper: {
    '^nestjs-ratelimit$': '<rootDir>/lib/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  globalSetup: '<rootDir>/test/support/redis/global-setup.js',
  globalTeardown: '<rootDir>/test/support/redis/global-teardown.js',
  testTimeout: 30_000,
};
