'use strict';
/**
 * A NestJS 11 app in plain CommonJS, as most NestJS apps in production are: it `require`s the
 * packed nestjs-ratelimit (installed into a copy of this folder by test/e2e/nest11.e2e-spec.ts)
 * and serves the routes that spec checks over HTTP (those shared with the NestJS 12 app are in
 * smoke-routes.cjs). Decorators are applied by hand (`decorate`), as TypeScript's CommonJS output
 * applies them. Beside it, on a port of its own, the same process runs @nestjs/throttler's README
 * example on `nestjs-ratelimit/throttler` (or on `THROTTLER_PACKAGE`, to compare with the real NT).
 *
 * Environment: `STORE` (`memory` or `redis`), `REDIS_URL` (with `redis`), `PREFIX` (of every
 * store key), `THROTTLER_PREFIX` (of the throttler's keys on Redis). Prints one JSON line,
 * `{ port, resolved, nest, peersRequiredByModule, throttler: { port } | { error } }`, once both
 * listen on free ports.
 */
const Module = require('node:module');

/** The optional peers the module's own files `require`d, with the file that asked: they must be asked for lazily. */
const peersRequiredByModule = [];
const OPTIONAL_PEERS = /^(@nestjs\/(websockets|microservices)|ioredis)(\/|$)/;
const requireFrom = Module.prototype.require;
Module.prototype.require = function require(id) {
  if (OPTIONAL_PEERS.test(id) && this.filename.includes('/node_modules/nestjs-ratelimit/')) {
    peersRequiredByModule.push({ id, by: this.filename.slice(this.filename.indexOf('nestjs-ratelimit/')) });
  }
  return requireFrom.call(this, id);
};

require('reflect-metadata');
const common = require('@nestjs/common');
const { Controller, Get, Inject, Module: NestModule, Req } = common;
const core = require('@nestjs/core');
const { NestFactory } = core;
const { ExecutionContextHost } = require('@nestjs/core/helpers/execution-context-host');
const { EventPattern, MessagePattern, RpcException } = require('@nestjs/microservices');
const { WsException } = require('@nestjs/websockets');
const ratelimit = require('nestjs-ratelimit');
const { RateLimitContexts, RateLimitModule, RateLimiterService, SkipRateLimit } = ratelimit;
const {
  decorate,
  limitedController,
  moduleLimits,
  startThrottlerApp,
  throttlerEngine,
  throttlerModule,
} = require('./smoke-routes.cjs');

/** `RateLimiterService` from a controller, and what the process has loaded of the module. */
class ServiceController {
  constructor(limiter, contexts) {
    this.limiter = limiter;
    this.seams = contexts;
  }

  /** Charges `user:<id>` once under the `service` policy (1 token, 0.1 token/s). */
  async consume(req) {
    return this.limiter.consume(`user:${req.params.id}`, { name: 'service', rps: 0.1, burst: 1 });
  }

  /** The module's files this process has loaded, and the optional peers they asked for. */
  loaded() {
    const files = Object.keys(require.cache).filter((file) => file.includes('/node_modules/nestjs-ratelimit/'));
    return { files, peersRequiredByModule };
  }

  /**
   * Makes the WebSocket and microservice seams (which `require` their peers now) and has them
   * build a refusal: for a gateway, a `WsException`; for a `@MessagePattern` handler, an
   * `RpcException`; for an `@EventPattern` handler, the event dropped.
   */
  async contexts() {
    const [ws, rpc] = await Promise.all([this.seams.load('ws'), this.seams.load('rpc')]);
    const [decision] = await this.limiter.peek('user:contexts', { name: 'contexts', rps: 1, burst: 1 }, 2);
    const onHandler = (handler) => new ExecutionContextHost([{}, {}], PatternHandlers, handler);
    const refusal = (error) => ({
      name: error.name,
      ws: error instanceof WsException,
      rpc: error instanceof RpcException,
      error: error.getError?.() ?? error.error,
    });
    return {
      ws: refusal(ws.refusal(decision, 2)),
      message: refusal(rpc.refusal(decision, 2, onHandler(PatternHandlers.prototype.message))),
      event: refusal(rpc.refusal(decision, 2, onHandler(PatternHandlers.prototype.event))),
      peersRequiredByModule,
    };
  }
}
decorate(ServiceController, [Get('consume/:id')], 'consume');
decorate(ServiceController, [Get('loaded')], 'loaded');
decorate(ServiceController, [Get('contexts')], 'contexts');
Req()(ServiceController.prototype, 'consume', 0);
Inject(RateLimiterService)(ServiceController, undefined, 0);
Inject(RateLimitContexts)(ServiceController, undefined, 1);
decorate(ServiceController, [Controller('service'), SkipRateLimit()]);

/** Handlers of a message and of an event, as a microservice declares them. */
class PatternHandlers {
  message() {}
  event() {}
}
decorate(PatternHandlers, [MessagePattern('message')], 'message');
decorate(PatternHandlers, [EventPattern('event')], 'event');

class AppModule {}
decorate(AppModule, [
  NestModule({
    imports: [RateLimitModule.forRoot(moduleLimits(process.env))],
    controllers: [limitedController(common, ratelimit), ServiceController],
  }),
]);

async function main() {
  const app = await NestFactory.create(AppModule, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  const ready = {
    port: app.getHttpServer().address().port,
    resolved: require.resolve('nestjs-ratelimit'),
    nest: require('@nestjs/core/package.json').version,
    // before the throttler app starts, which may open a Redis client of its own
    peersRequiredByModule: [...peersRequiredByModule],
  };
  ready.throttler = await startThrottlerApp(
    NestFactory,
    () => require(process.env.THROTTLER_PACKAGE || 'nestjs-ratelimit/throttler'),
    (throttler) => throttlerModule(common, core, throttler, throttlerEngine(process.env)),
  );
  process.stdout.write(`${JSON.stringify(ready)}\n`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
