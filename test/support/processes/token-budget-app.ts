/**
 * An app whose requests settle their real cost (issue 40, token budgets), run as a Node process of
 * its own by `test/e2e/token-budgets-processes.e2e-spec.ts`, two at once on one Redis. The spec
 * compiles this file and `lib/` to ESM in a temporary directory (`build-app.ts`) and starts it
 * with `node`.
 *
 * Configuration, from the environment: `REDIS_URL`, `RATE_LIMIT_PREFIX`, `ADAPTER` (`express` or
 * `fastify`).
 *
 * Routes:
 * - `POST /spend` `{ "tokens": n }`: policy `spend` (10,000,000 tokens per hour in a fixed window
 *   from each key's first request, so nothing comes back during a run), keyed by `x-api-key`, 50
 *   reserved up front, settled from the answer `{ usage: { total_tokens: n } }`;
 * - `GET /settled?count=n` (not limited): answers `{ settled }` once this process's store has
 *   answered `n` settles (or after 20 s, with what it has);
 * - `GET /usage?key=k` (not limited): `RateLimiterService.usage` of key `k` under `spend`.
 *
 * Prints `{"port":<n>}` once it listens; exits on SIGTERM or when its stdin ends.
 */
import 'reflect-metadata';
import { Body, Controller, Get, Module, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Redis } from 'ioredis';
import {
  RateLimit,
  RateLimiterService,
  RateLimitModule,
  type RateLimitPolicy,
  RedisStore,
} from '../../../lib/index.js';
import { runAppMain, serveUntilStopped } from './app-main.js';

const SPEND = {
  name: 'spend',
  algorithm: 'fixed_window',
  limit: 10_000_000,
  window: '1h',
  anchor: 'first-request',
  key: 'api-key',
  unit: 'tokens',
  cost: 50,
  settle: (result: { usage: { total_tokens: number } }) => result.usage.total_tokens,
} satisfies RateLimitPolicy;

/** Longest `GET /settled` waits, ms. */
const SETTLED_WAIT_MS = 20_000;

async function main(): Promise<void> {
  const url = process.env.REDIS_URL;
  const prefix = process.env.RATE_LIMIT_PREFIX;
  const adapter = process.env.ADAPTER;
  if (!url || !prefix || (adapter !== 'express' && adapter !== 'fastify'))
    throw new Error('set REDIS_URL, RATE_LIMIT_PREFIX and ADAPTER (express or fastify)');
  const client = new Redis(url);
  const store = new RedisStore({ client });

  // settles this process's store has answered, and who waits for a count of them
  let settled = 0;
  const waiting = new Set<{ count: number; resolve: () => void }>();
  const settle = store.settle.bind(store);
  store.settle = async (settles) => {
    try {
      return await settle(settles);
    } finally {
      settled += settles.length;
      for (const waiter of waiting) {
        if (settled < waiter.count) continue;
        waiting.delete(waiter);
        waiter.resolve();
      }
    }
  };

  @Controller()
  class SpendController {
    constructor(private readonly limiter: RateLimiterService) {}

    @RateLimit(SPEND)
    @Post('spend')
    spend(@Body() body: { tokens: number }) {
      return { usage: { total_tokens: body.tokens } };
    }

    @Get('settled')
    async settled(@Query('count') count: string) {
      if (settled < Number(count)) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, SETTLED_WAIT_MS);
          waiting.add({ count: Number(count), resolve: () => (clearTimeout(timer), resolve()) });
        });
      }
      return { settled };
    }

    @Get('usage')
    usage(@Query('key') key: string) {
      return this.limiter.usage(`api-key:${key}`, SPEND);
    }
  }

  @Module({
    imports: [RateLimitModule.forRoot({ store, prefix, failMode: 'closed', timeout: 10_000 })],
    controllers: [SpendController],
  })
  class AppModule {}

  const app = await NestFactory.create(
    AppModule,
    adapter === 'fastify' ? new FastifyAdapter({ keepAliveTimeout: 120_000 }) : new ExpressAdapter(),
    { logger: ['error', 'warn'] },
  );
  await serveUntilStopped(app, {
    afterClose: async () => {
      await store.close();
      await client.quit();
    },
  });
}

runAppMain('token-budget-app', main);
