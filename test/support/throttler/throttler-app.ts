/**
 * An app on @nestjs/throttler's API, run as a Node process of its own by
 * `test/e2e/throttler-processes.e2e-spec.ts`, two at once on one Redis. The spec compiles this
 * file and `lib/` to ESM in a temporary directory (`test/support/processes/build-app.ts`) and
 * starts it with `node`.
 *
 * Configuration, from the environment:
 * - `THROTTLER`: `nt` (the real `@nestjs/throttler` with `storage: new RateLimitThrottlerStorage`)
 *   or `ours` (`nestjs-ratelimit/throttler` with `forRoot(options, { redis, prefix })`);
 * - `REDIS_URL`, `RATE_LIMIT_PREFIX`.
 *
 * One route, `GET /limited`: 100 requests an hour per client, the client named by `x-client`
 * (so each trial has a count of its own), the guard bound globally. `failMode: 'closed'`, so a
 * store error shows as a 5xx, never as an admission. Prints `{"port":<n>}` once it listens;
 * exits on SIGTERM or when its stdin ends.
 */
import 'reflect-metadata';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import * as nt from '@nestjs/throttler';
import * as ours from '../../../lib/throttler/index.js';
import { runAppMain, serveUntilStopped } from '../processes/app-main.js';

const LIMIT = 100;
const HOUR_MS = 3_600_000;

async function main(): Promise<void> {
  const mode = process.env.THROTTLER;
  const redis = process.env.REDIS_URL;
  const prefix = process.env.RATE_LIMIT_PREFIX;
  if ((mode !== 'nt' && mode !== 'ours') || !redis || !prefix) {
    throw new Error('set THROTTLER (nt or ours), REDIS_URL and RATE_LIMIT_PREFIX');
  }
  const api = (mode === 'nt' ? nt : ours) as typeof nt;
  const getTracker = (req: Record<string, any>) =>
    String((req.headers as Record<string, string | undefined>)['x-client'] ?? req.ip);
  const options: nt.ThrottlerModuleOptions = { throttlers: [{ ttl: HOUR_MS, limit: LIMIT }], getTracker };
  const engine = { redis, prefix, failMode: 'closed' as const, timeout: 10_000 };
  const throttlerModule =
    mode === 'nt'
      ? nt.ThrottlerModule.forRoot({ ...options, storage: new ours.RateLimitThrottlerStorage(engine) })
      : (ours.ThrottlerModule.forRoot as (o: unknown, e: unknown) => ReturnType<typeof nt.ThrottlerModule.forRoot>)(
          options,
          engine,
        );

  @Controller('limited')
  class LimitedController {
    @Get()
    take() {
      return { ok: true };
    }
  }

  @Module({
    imports: [throttlerModule],
    controllers: [LimitedController],
    providers: [{ provide: APP_GUARD, useClass: api.ThrottlerGuard }],
  })
  class AppModule {}

  const app = await NestFactory.create(AppModule, new FastifyAdapter({ keepAliveTimeout: 120_000 }), {
    logger: ['error', 'warn'],
  });
  await serveUntilStopped(app);
}

runAppMain('throttler-app', main);
