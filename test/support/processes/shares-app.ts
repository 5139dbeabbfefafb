/**
 * An app with hot-key shares (issue 41), run as a Node process of its own by
 * `test/e2e/shares-processes.e2e-spec.ts`, two at once (Express, Fastify) on one Redis. The spec
 * compiles this file and `lib/` to ESM in a temporary directory (`build-app.ts`) and starts it
 * with `node`.
 *
 * Configuration, from the environment: `REDIS_URL`, `RATE_LIMIT_PREFIX`, `ADAPTER` (`express` or
 * `fastify`), `SHARES` (the module's `shares` option, JSON), `BUCKET` (`{ "rps": n, "burst": n }`,
 * JSON). The module makes its own client from the URL, `failMode: 'closed'`.
 *
 * Routes:
 * - `GET /limited`: policy `per-key`, a token bucket of `BUCKET` keyed by `x-api-key`; the handler
 *   counts what it admits, per API key;
 * - `GET /stats?key=k` (not limited): `{ admitted, storeCalls, share }` of API key `k`: requests
 *   the handler admitted; the store's `consume` calls for its bucket (the module's own store,
 *   watched); the size of the last share of it the store granted (a take: a `consume` of more
 *   than the route's cost of 1), 0 before any;
 * - `GET /next-share?key=k` (not limited): answers `{ size }` once the store has granted a share
 *   of `k`'s bucket whose take was sent after this request came in (`{ size: 0 }` after 10 s).
 *
 * Prints `{"port":<n>}` once it listens; exits on SIGTERM or when its stdin ends.
 */
import 'reflect-metadata';
import { Controller, Get, Headers, Module, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { bucketKey } from '../../../lib/keys/bucket-key.js';
import {
  RateLimit,
  RateLimitModule,
  type RateLimitModuleOptions,
  type RateLimitPolicy,
  RateLimitStore,
  SkipRateLimit,
} from '../../../lib/index.js';
import { runAppMain, serveUntilStopped } from './app-main.js';

/** Longest `GET /next-share` waits, ms. */
const NEXT_SHARE_WAIT_MS = 10_000;

/** What the store was asked for one bucket. */
interface BucketCalls {
  calls: number;
  /** Size of the last share granted. */
  share: number;
  /** Who waits for the next share, each resolved with its size. */
  waiting: Set<(size: number) => void>;
}

async function main(): Promise<void> {
  const { REDIS_URL: url, RATE_LIMIT_PREFIX: prefix, ADAPTER: adapter, SHARES: shares, BUCKET: bucket } = process.env;
  if (!url || !prefix || !shares || !bucket || (adapter !== 'express' && adapter !== 'fastify'))
    throw new Error('set REDIS_URL, RATE_LIMIT_PREFIX, SHARES, BUCKET and ADAPTER (express or fastify)');
  const { rps, burst } = JSON.parse(bucket) as { rps: number; burst: number };
  const policy = { name: 'per-key', algorithm: 'token_bucket', rps, burst, key: 'api-key' } satisfies RateLimitPolicy;
  const bucketOf = (apiKey: string) => bucketKey(prefix, policy.name, policy.algorithm, `api-key:${apiKey}`);

  const admitted = new Map<string, number>();
  const buckets = new Map<string, BucketCalls>();
  const callsOf = (key: string): BucketCalls => {
    let calls = buckets.get(key);
    if (calls === undefined) buckets.set(key, (calls = { calls: 0, share: 0, waiting: new Set() }));
    return calls;
  };

  @Controller()
  class LimitedController {
    @RateLimit(policy)
    @Get('limited')
    limited(@Headers('x-api-key') apiKey: string) {
      admitted.set(apiKey, (admitted.get(apiKey) ?? 0) + 1);
      return { ok: true };
    }

    @SkipRateLimit()
    @Get('stats')
    stats(@Query('key') apiKey: string) {
      const { calls, share } = callsOf(bucketOf(apiKey));
      return { admitted: admitted.get(apiKey) ?? 0, storeCalls: calls, share };
    }

    @SkipRateLimit()
    @Get('next-share')
    async nextShare(@Query('key') apiKey: string) {
      const { waiting } = callsOf(bucketOf(apiKey));
      const size = await new Promise<number>((resolve) => {
        const timer = setTimeout(() => done(0), NEXT_SHARE_WAIT_MS);
        const done = (size: number) => {
          clearTimeout(timer);
          waiting.delete(done);
          resolve(size);
        };
        waiting.add(done);
      });
      return { size };
    }
  }

  const options = {
    redis: url,
    prefix,
    shares: JSON.parse(shares) as RateLimitModuleOptions['shares'],
    failMode: 'closed',
    // exactness is under test, not latency: a loaded machine must not turn a slow answer into a 503
    timeout: 5_000,
  } satisfies RateLimitModuleOptions;

  @Module({ imports: [RateLimitModule.forRoot(options)], controllers: [LimitedController] })
  class AppModule {}

  const app = await NestFactory.create(
    AppModule,
    adapter === 'fastify' ? new FastifyAdapter({ keepAliveTimeout: 120_000 }) : new ExpressAdapter(),
    { logger: ['error', 'warn'] },
  );

  // The module's store, watched: its calls per bucket, and the shares it grants (a take is sent
  // in the same tick as the share's hold starts, so one sent after a waiter came in starts after it).
  const store = app.get<RateLimitStore>(RateLimitStore);
  const consume = store.consume.bind(store);
  store.consume = (requests, callOptions) => {
    const decided = consume(requests, callOptions);
    requests.forEach(({ key, cost }, i) => {
      const calls = callsOf(key);
      calls.calls++;
      if (cost <= 1) return;
      const waiting = [...calls.waiting];
      decided.then(
        (decisions) => {
          if (!decisions[i].allowed) return;
          calls.share = cost;
          for (const done of waiting) done(cost);
        },
        () => undefined,
      );
    });
    return decided;
  };

  const server = await serveUntilStopped(app);
  // keep-alive longer than the spec's pauses: it never finds its socket closed
  server.keepAliveTimeout = 120_000;
}

runAppMain('shares-app', main);
