'use strict';
/**
 * The routes both smoke apps serve, the NestJS 11 CommonJS app (app.js beside this file) and the
 * NestJS 12 ESM app (test/nest12/app.js, whose installed copy gets this file too). It requires
 * nothing: each app passes in what it loaded its own way (`require` or `import`), so the classes
 * are built on that app's NestJS and that app's build of the package.
 *
 * Decorators are applied by hand (`decorate`), as TypeScript's output applies them.
 */

/** Applies decorators to a method of `target`, or to `target` itself when no method is named. */
function decorate(target, decorators, method) {
  if (method === undefined) return Reflect.decorate(decorators, target);
  const descriptor = Reflect.decorate(
    decorators,
    target.prototype,
    method,
    Object.getOwnPropertyDescriptor(target.prototype, method),
  );
  Object.defineProperty(target.prototype, method, descriptor);
}

/** Routes limited by `@RateLimit` (2 at once, 0.1 token/s), by the module's policy alone, and not at all. */
function limitedController({ Controller, Get }, { RateLimit, SkipRateLimit }) {
  class LimitedController {
    burst() {
      return { ok: true };
    }

    open() {
      return { ok: true };
    }

    health() {
      return { ok: true };
    }
  }
  decorate(LimitedController, [Get('burst'), RateLimit({ name: 'burst', rps: 0.1, burst: 2 })], 'burst');
  decorate(LimitedController, [Get('open')], 'open');
  decorate(LimitedController, [Get('health'), SkipRateLimit()], 'health');
  decorate(LimitedController, [Controller()]);
  return LimitedController;
}

/**
 * @nestjs/throttler's README example on `throttler` (`nestjs-ratelimit/throttler`, or the real
 * @nestjs/throttler to compare): 3 requests a minute per route per IP, a route allowed 1 a minute
 * by `@Throttle`, one skipped by `@SkipThrottle`. `engine` is forRoot's second argument (our store
 * for it: `{ redis, prefix }`), left out on the memory store as NT's users write it.
 */
function throttlerModule({ Controller, Get, Module }, { APP_GUARD }, throttler, engine) {
  const { SkipThrottle, Throttle, ThrottlerGuard, ThrottlerModule } = throttler;
  class ThrottledController {
    limited() {
      return { ok: true };
    }

    once() {
      return { ok: true };
    }

    free() {
      return { ok: true };
    }
  }
  decorate(ThrottledController, [Get('limited')], 'limited');
  decorate(ThrottledController, [Get('once'), Throttle({ default: { limit: 1, ttl: 60000 } })], 'once');
  decorate(ThrottledController, [Get('free'), SkipThrottle()], 'free');
  decorate(ThrottledController, [Controller()]);

  const throttlers = [{ ttl: 60000, limit: 3 }];
  class ThrottlerAppModule {}
  decorate(ThrottlerAppModule, [
    Module({
      imports: [
        engine === undefined ? ThrottlerModule.forRoot(throttlers) : ThrottlerModule.forRoot(throttlers, engine),
      ],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      controllers: [ThrottledController],
    }),
  ]);
  return ThrottlerAppModule;
}

/**
 * Starts the throttler app beside the main one, on a free port of its own: `{ port }`, or
 * `{ error }` when loading or starting it failed (the main app's checks go on regardless).
 */
async function startThrottlerApp(NestFactory, load, build) {
  try {
    const app = await NestFactory.create(build(await load()), { logger: ['error', 'warn'] });
    app.enableShutdownHooks();
    await app.listen(0, '127.0.0.1');
    return { port: app.getHttpServer().address().port };
  } catch (error) {
    return { error: String(error?.stack ?? error) };
  }
}

/**
 * RateLimitModule's options for the store `STORE` names (`REDIS_URL` with `redis`), every key
 * under `PREFIX`: every route not skipped is allowed 5 requests a minute per client.
 */
function moduleLimits(env) {
  return {
    prefix: env.PREFIX,
    policies: [{ name: 'app', limit: 5, window: '1m' }],
    ...(env.STORE === 'redis' ? { redis: env.REDIS_URL } : {}),
  };
}

/** forRoot's second argument for the store `STORE` names: nothing on memory, the test Redis and a prefix on Redis. */
function throttlerEngine(env) {
  return env.STORE === 'redis' ? { redis: env.REDIS_URL, prefix: env.THROTTLER_PREFIX } : undefined;
}

module.exports = { decorate, limitedController, moduleLimits, startThrottlerApp, throttlerEngine, throttlerModule };
