/**
 * An app under a `concurrency` policy (Fastify), run as a Node process of its own by
 * `test/e2e/concurrency.e2e-spec.ts`, two at once on one Redis. The spec compiles this file and
 * `lib/` to ESM in a temporary directory (`build-app.ts`) and starts it with `node`.
 *
 * Configuration, from the environment: `REDIS_URL`, `RATE_LIMIT_PREFIX`, `LEASE_SECONDS` (the
 * lease of `/leased`).
 *
 * Routes, each 2 in flight per client (`x-client`):
 * - `GET /exports?id=&hold=gate|work`: policy `exports`, a lease of a minute;
 * - `GET /leased?id=&hold=gate|work`: policy `exports-leased`, a lease of `LEASE_SECONDS`.
 * A handler counts itself in flight across both processes (INCR of a Redis key per client, DECR
 * when it ends) and answers `{ id, inFlight }`, `inFlight` the count it found on entry. `hold=gate`
 * holds it until the test calls `POST /release` on its process, and prints
 * `{"entered":id,"inFlight":n}` on stdout when it starts; `hold=work` holds it for three Redis
 * round trips.
 * `POST /release` (not limited) ends every handler of this process held by `hold=gate`.
 *
 * Prints `{"port":<n>}` once it listens; exits on SIGTERM or when its stdin ends.
 */
import 'reflect-metadata';
import { Controller, Get, Headers, Module, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Redis } from 'ioredis';
import { RateLimit, RateLimitModule } from '../../../lib/index.js';
import { runAppMain, serveUntilStopped } from './app-main.js';

async function main(): Promise<void> {
  const url = process.env.REDIS_URL;
  const prefix = process.env.RATE_LIMIT_PREFIX;
  const lease = Number(process.env.LEASE_SECONDS);
  if (!url || !prefix || !(lease > 0)) throw new Error('set REDIS_URL, RATE_LIMIT_PREFIX and LEASE_SECONDS');
  const counter = new Redis(url);
  /** What ends each handler held by the gate. */
  const gates = new Set<() => void>();

  async function handle(id: string, hold: string, client: string): Promise<{ id: string; inFlight: number }> {
    const key = `${prefix}in-flight:${client}`;
    const inFlight = await counter.incr(key);
    try {
      if (hold === 'gate') {
        process.stdout.write(`${JSON.stringify({ entered: id, inFlight })}\n`);
        await new Promise<void>((resolve) => gates.add(resolve));
      } else {
        for (let i = 0; i < 3; i++) await counter.ping();
      }
    } finally {
      await counter.decr(key);
    }
    return { id, inFlight };
  }

  @Controller()
  class ExportsController {
    @RateLimit({ name: 'exports', algorithm: 'concurrency', limit: 2, key: 'header:x-client', lease: '1m' })
    @Get('exports')
    exports(@Query('id') id: string, @Query('hold') hold: string, @Headers('x-client') client: string) {
      return handle(id, hold, client);
    }

    @RateLimit({ name: 'exports-leased', algorithm: 'concurrency', limit: 2, key: 'header:x-client', lease })
    @Get('leased')
    leased(@Query('id') id: string, @Query('hold') hold: string, @Headers('x-client') client: string) {
      return handle(id, hold, client);
    }

    @Post('release')
    release() {
      const released = gates.size;
      for (const end of gates) end();
      gates.clear();
      return { released };
    }
  }

  @Module({
    imports: [RateLimitModule.forRoot({ redis: url, prefix, failMode: 'closed', timeout: 10_000 })],
    controllers: [ExportsController],
  })
  class AppModule {}

  const app = await NestFactory.create(AppModule, new FastifyAdapter({ keepAliveTimeout: 120_000 }), {
    logger: ['error', 'warn'],
  });
  await serveUntilStopped(app, {
    beforeClose: () => {
      for (const end of gates) end();
    },
    afterClose: () => counter.quit(),
  });
}

runAppMain('concurrency-app', main);
