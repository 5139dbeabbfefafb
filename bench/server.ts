/**
 * The app the HTTP benchmarks load: one `GET /` route returning a small JSON object, on Express
 * or Fastify, logger off, guarded by one of the variants below. bench/http.ts forks it once per
 * timed run, so the app never shares a CPU queue, a heap or a garbage collector with the load
 * generator, and every run starts from a fresh process.
 *
 *   node server.js <express|fastify> <variant>      (BENCH_REDIS_URL: the bench's Redis)
 *
 * Variants:
 * - none: no guard at all;
 * - headers-only: a guard that sets the 5 headers ours sets on this route, with values of the
 *   same shape, and decides nothing: the floor a limiter that sends headers cannot go under;
 * - minimal-limiter: the least work an exact limiter keyed like ours does: the identity (the
 *   x-api-key header, else `request.ip`), one `Map` lookup (an insert for a new client), a token
 *   bucket's arithmetic, and headers-only's 5 headers. No digest, no bound on its keys, no fail
 *   mode: a floor under any limiter of one process's memory, printed beside ours (bench/pipeline.ts);
 * - ours-memory, ours-redis: `RateLimitModule` with one module policy that admits everything
 *   (rps and burst 1e6, keyed by the x-api-key header, the client's IP without one), on the
 *   memory store or on Redis;
 * - throttler-memory, throttler-redis: `@nestjs/throttler` with a limit nobody reaches, keyed by
 *   the x-api-key header (the IP without one), on its memory storage or on
 *   @nest-lab/throttler-storage-redis;
 * - ours-memory-refuse, ours-redis-refuse: ours with a policy that refuses nearly everything
 *   (1 token, refilled every 1000 s).
 *
 * It tells its parent `ready <port>` over IPC once it listens on a free loopback port, and exits
 * when asked (`stop`), on SIGTERM, or when its parent goes away.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import 'reflect-metadata';
import {
  type CanActivate,
  Controller,
  type DynamicModule,
  type ExecutionContext,
  Get,
  type INestApplication,
  Injectable,
  Module,
} from '@nestjs/common';
import { APP_GUARD, HttpAdapterHost, NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { ThrottlerStorageRedisService } from '@nest-lab/throttler-storage-redis';
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler';
import { RateLimitModule, type RateLimitPolicy } from 'nestjs-ratelimit';

export const ADAPTERS = ['express', 'fastify'] as const;
export type Adapter = (typeof ADAPTERS)[number];

export const VARIANTS = [
  'none',
  'headers-only',
  'ours-memory',
  'ours-redis',
  'throttler-memory',
  'throttler-redis',
  'ours-memory-refuse',
  'ours-redis-refuse',
  'minimal-limiter',
] as const;
export type Variant = (typeof VARIANTS)[number];

/** Whether a variant's admitted responses carry the `RateLimit` header: ours, headers-only and the minimal limiter. */
export function sendsRateLimitHeader(variant: Variant): boolean {
  return variant.startsWith('ours-') || variant === 'headers-only' || variant === 'minimal-limiter';
}

/** Admits everything: no client of the bench comes near a million requests a second. */
const ADMIT: RateLimitPolicy & { rps: number; burst: number } = { name: 'bench', rps: 1e6, burst: 1e6, key: 'api-key' };
/** Refuses all but the first request of each key for 1000 s. */
const REFUSE: RateLimitPolicy = { name: 'flood', rps: 0.001, burst: 1, key: 'api-key' };
/** @nestjs/throttler's equivalent of ADMIT: a billion requests a minute. */
const THROTTLE = { ttl: 60_000, limit: 1e9 };

@Controller()
class BenchController {
  @Get()
  hello() {
    return { hello: 'world' };
  }
}

/** `ThrottlerGuard` keyed by the x-api-key header, as ours is; the IP when there is none. */
@Injectable()
class ApiKeyThrottlerGuard extends ThrottlerGuard {
  protected override async getTracker(request: { headers: Record<string, unknown>; ip: string }): Promise<string> {
    const apiKey = request.headers['x-api-key'];
    return typeof apiKey === 'string' && apiKey !== '' ? apiKey : request.ip;
  }
}

const ADMIT_POLICY = `"${ADMIT.name}";q=${ADMIT.burst};w=1`;
const ADMIT_LIMIT = String(ADMIT.burst);

/** Sets ours' 5 headers of an admitted request of ADMIT on the context's response, through `HttpAdapter.setHeader`. */
function setAdmitHeaders(adapterHost: HttpAdapterHost, context: ExecutionContext, remaining: number, now: number) {
  const response = context.getArgByIndex<object>(1);
  const { httpAdapter } = adapterHost;
  const left = String(remaining);
  httpAdapter.setHeader(response, 'RateLimit-Policy', ADMIT_POLICY);
  httpAdapter.setHeader(response, 'RateLimit', `"${ADMIT.name}";r=${left};t=1`);
  httpAdapter.setHeader(response, 'X-RateLimit-Limit', ADMIT_LIMIT);
  httpAdapter.setHeader(response, 'X-RateLimit-Remaining', left);
  httpAdapter.setHeader(response, 'X-RateLimit-Reset', String(Math.ceil(now / 1000) + 1));
}

/**
 * Sets what ours sets on an admitted request of this route (`RateLimit-Policy`, `RateLimit`,
 * `X-RateLimit-Limit`, `-Remaining`, `-Reset`), through the same `HttpAdapter.setHeader`, with
 * a counter for the remaining: the headers' cost and nothing else.
 */
@Injectable()
export class HeadersOnlyGuard implements CanActivate {
  private served = 0;

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  canActivate(context: ExecutionContext): boolean {
    const remaining = ADMIT.burst - 1 - (this.served++ % ADMIT.burst);
    setAdmitHeaders(this.adapterHost, context, remaining, Date.now());
    return true;
  }
}

/** A token bucket of `MinimalLimiterGuard`: tokens left, at a time (Unix ms). */
interface MinimalBucket {
  tokens: number;
  at: number;
}

/**
 * Limits by ADMIT's token bucket with the least work an exact limiter keyed like ours does (see
 * `minimal-limiter` at the top of this file). Its headers are headers-only's (`setAdmitHeaders`).
 */
@Injectable()
export class MinimalLimiterGuard implements CanActivate {
  private readonly buckets = new Map<string, MinimalBucket>();

  constructor(private readonly adapterHost: HttpAdapterHost) {}

  canActivate(context: ExecutionContext): boolean {
    const request = context.getArgByIndex<{ headers: Record<string, unknown>; ip: string }>(0);
    const apiKey = request.headers['x-api-key'];
    const key = typeof apiKey === 'string' && apiKey !== '' ? `api-key:${apiKey}` : `ip:${request.ip}`;
    const now = Date.now();
    let bucket = this.buckets.get(key);
    if (bucket === undefined) this.buckets.set(key, (bucket = { tokens: ADMIT.burst, at: now }));
    const tokens = Math.min(ADMIT.burst, bucket.tokens + ((now - bucket.at) * ADMIT.rps) / 1000);
    bucket.at = now;
    if (tokens < 1) return false;
    bucket.tokens = tokens - 1;
    setAdmitHeaders(this.adapterHost, context, Math.floor(bucket.tokens), now);
    return true;
  }
}

/** The modules and providers a variant adds to the app. */
function guardOf(variant: Variant, redisUrl: string): Pick<DynamicModule, 'imports' | 'providers'> {
  switch (variant) {
    case 'none':
      return {};
    case 'headers-only':
      return { providers: [{ provide: APP_GUARD, useClass: HeadersOnlyGuard }] };
    case 'minimal-limiter':
      return { providers: [{ provide: APP_GUARD, useClass: MinimalLimiterGuard }] };
    case 'ours-memory':
      return { imports: [RateLimitModule.forRoot({ policies: [ADMIT] })] };
    case 'ours-redis':
      return { imports: [RateLimitModule.forRoot({ redis: redisUrl, policies: [ADMIT] })] };
    case 'ours-memory-refuse':
      return { imports: [RateLimitModule.forRoot({ policies: [REFUSE] })] };
    case 'ours-redis-refuse':
      return { imports: [RateLimitModule.forRoot({ redis: redisUrl, policies: [REFUSE] })] };
    case 'throttler-memory':
      return {
        imports: [ThrottlerModule.forRoot([THROTTLE])],
        providers: [{ provide: APP_GUARD, useClass: ApiKeyThrottlerGuard }],
      };
    case 'throttler-redis':
      return {
        imports: [
          ThrottlerModule.forRoot({
            throttlers: [THROTTLE],
            // given the URL, the storage opens its client and closes it with the app
            storage: new ThrottlerStorageRedisService(redisUrl),
          }),
        ],
        providers: [{ provide: APP_GUARD, useClass: ApiKeyThrottlerGuard }],
      };
  }
}

/**
 * The app of a variant on an adapter, made but not started: `serve` listens with it, and
 * bench/pipeline.ts initialises it and injects requests into it without a socket.
 */
export async function benchApp(adapter: Adapter, variant: Variant, redisUrl: string): Promise<INestApplication> {
  @Module({ controllers: [BenchController], ...guardOf(variant, redisUrl) })
  class BenchModule {}

  return NestFactory.create(BenchModule, adapter === 'express' ? new ExpressAdapter() : new FastifyAdapter(), {
    logger: false,
  });
}

async function serve(adapter: Adapter, variant: Variant, redisUrl: string): Promise<void> {
  const app = await benchApp(adapter, variant, redisUrl);
  await app.listen(0, '127.0.0.1');
  const { port } = (app.getHttpServer() as Server).address() as AddressInfo;

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await app.close();
    process.exit(0);
  };
  process.on('message', (message) => message === 'stop' && void stop());
  process.once('SIGTERM', () => void stop());
  // the bench died without saying so: nobody will load this app again
  process.once('disconnect', () => process.exit(0));
  process.send?.(`ready ${port}`);
}

/** Run as a script (as bench/http.ts forks it), not imported (as bench/in-process.ts and bench/pipeline.ts import it). */
const isScript = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;

if (isScript) {
  const [adapter, variant] = process.argv.slice(2) as [Adapter, Variant];
  if (!ADAPTERS.includes(adapter) || !VARIANTS.includes(variant)) {
    console.error(`usage: node server.js <${ADAPTERS.join('|')}> <${VARIANTS.join('|')}>`);
    process.exit(2);
  }
  serve(adapter, variant, process.env.BENCH_REDIS_URL ?? '').catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
