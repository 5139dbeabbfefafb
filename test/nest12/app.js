/**
 * A NestJS 12 app as an ES module (NestJS 12 is ESM-only): it `import`s the packed
 * nestjs-ratelimit through its exports map (installed into a copy of this folder, with
 * test/nest11/smoke-routes.cjs, by test/e2e/nest12.e2e-spec.ts) and serves the shared smoke
 * routes over HTTP under a module policy of 5 requests a minute. Beside it, on a port of its own,
 * the same process runs @nestjs/throttler's README example on `nestjs-ratelimit/throttler` (or on
 * `THROTTLER_PACKAGE`, to compare with the real NT).
 *
 * Environment: `STORE` (`memory` or `redis`), `REDIS_URL` (with `redis`), `PREFIX` (of every
 * store key), `THROTTLER_PREFIX` (of the throttler's keys on Redis). Prints one JSON line,
 * `{ port, resolved, nest, cjsLoaded, throttler: { port } | { error } }`, once both listen on
 * free ports.
 */
import 'reflect-metadata';
import * as common from '@nestjs/common';
import * as core from '@nestjs/core';
import * as ratelimit from 'nestjs-ratelimit';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import {
  decorate,
  limitedController,
  moduleLimits,
  startThrottlerApp,
  throttlerEngine,
  throttlerModule,
} from './smoke-routes.cjs';

const require = createRequire(import.meta.url);
const THROTTLER = process.env.THROTTLER_PACKAGE || 'nestjs-ratelimit/throttler';

class AppModule {}
decorate(AppModule, [
  common.Module({
    imports: [ratelimit.RateLimitModule.forRoot(moduleLimits(process.env))],
    controllers: [limitedController(common, ratelimit)],
  }),
]);

/** The file `specifier` resolves to from here (the `import` condition), or the error's message. */
function resolved(specifier) {
  try {
    return fileURLToPath(import.meta.resolve(specifier));
  } catch (error) {
    return String(error?.message ?? error);
  }
}

const app = await core.NestFactory.create(AppModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
await app.listen(0, '127.0.0.1');
const throttler = await startThrottlerApp(
  core.NestFactory,
  () => import(THROTTLER),
  (loaded) => throttlerModule(common, core, loaded, throttlerEngine(process.env)),
);
const ready = {
  port: app.getHttpServer().address().port,
  resolved: { root: resolved('nestjs-ratelimit'), throttler: resolved(THROTTLER) },
  nest: require('@nestjs/core/package.json').version,
  // the package's files that went through require: none, in an ES module app
  cjsLoaded: Object.keys(require.cache).filter((file) => file.includes('/node_modules/nestjs-ratelimit/')),
  throttler,
};
process.stdout.write(`${JSON.stringify(ready)}\n`);
