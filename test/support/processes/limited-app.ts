/**
 * A real NestJS app (on Fastify, the cheaper adapter per request: the spec sends 48,000 requests
 * on a 2-core machine) for `processes.e2e-spec.ts`, run as its own Node process, several
 * at once against one Redis or one Redis Cluster. The spec compiles this file and `lib/` to
 * plain ESM in a temporary directory and starts it with `node`.
 *
 * Configuration, from the environment:
 * - `REDIS_URL` (`redis://127.0.0.1:port`) or `REDIS_CLUSTER` (`127.0.0.1:p1,127.0.0.1:p2,...`);
 *   with a cluster, the app creates the ioredis `Cluster` itself, passes it as `redis`, and so
 *   closes it itself on shutdown.
 * - `REDIS_CLIENT`: `ioredis` (default), `node-redis` or `iovalkey`: with another than ioredis,
 *   the app creates that client itself (of the server or the cluster), passes it as `redis`, and
 *   closes it on shutdown.
 * - `RATE_LIMIT_PREFIX`: the key prefix (one per test run).
 *
 * Routes: `GET /limited/<algorithm>`, one per algorithm, each `limit: 100` per `'1h'` keyed by
 * the `x-api-key` header, so nothing refills during a trial; policy name `limited-<algorithm>`.
 * A module-wide loose policy `per-ip` (sliding log, 1,000,000 a day, keyed by IP) applies to
 * every request too: its key lies in another hash slot than the API key's, and its sorted set
 * counts every request that was charged.
 *
 * `failMode: 'closed'`: a store error (CROSSSLOT, NOSCRIPT, ...) answers 503, never passes,
 * and this app writes its cause to stderr (`store error: ...`), where the spec looks for it.
 *
 * Prints one JSON line `{"port":<n>}` on stdout once it listens (on 127.0.0.1, a free port);
 * exits 0 after SIGTERM once the app and its client are closed.
 */
import 'reflect-metadata';
import { inspect } from 'node:util';
import { type ArgumentsHost, Catch, Controller, Get, HttpException, Module } from '@nestjs/common';
import { BaseExceptionFilter, NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Cluster } from 'ioredis';
import { RATE_ALGORITHMS } from '../../../lib/algorithms/algorithm.types.js';
import { type Algorithm, RateLimit, type RateLimitPolicy, RateLimitModule } from '../../../lib/index.js';
import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import type { RedisClient } from '../../../lib/stores/redis/redis-clients.js';
import { runAppMain, serveUntilStopped } from './app-main.js';

/**
 * The algorithms limited here: the rates, and a quota (100 a year: no period ends within a run).
 * Slots in flight (`concurrency`) have their own processes' app, `concurrency-app.ts`.
 */
const PROCESS_ALGORITHMS: readonly Algorithm[] = [...RATE_ALGORITHMS, 'quota'];

/** 100 per hour, or for the quota per year. */
function limitOf(algorithm: Algorithm): RateLimitPolicy {
  return algorithm === 'quota' ? { algorithm, limit: 100, period: 'year' } : { algorithm, limit: 100, window: '1h' };
}

/** One controller per algorithm: `GET /limited/<algorithm>`, policy `limited-<algorithm>`. */
const LIMITED_CONTROLLERS = PROCESS_ALGORITHMS.map((algorithm) => {
  @Controller(`limited/${algorithm}`)
  class LimitedController {
    @RateLimit({ name: `limited-${algorithm}`, ...limitOf(algorithm), key: 'api-key' })
    @Get()
    take() {
      return { ok: true };
    }
  }
  return LimitedController;
});

/** Writes the cause chain of every 5xx to stderr (a 503 body does not say why), then answers as Nest does. */
@Catch()
class ReportServerErrors extends BaseExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): void {
    const status = exception instanceof HttpException ? exception.getStatus() : 500;
    if (status >= 500) process.stderr.write(`store error: ${causes(exception)}\n`);
    super.catch(exception, host);
  }
}

function causes(error: unknown): string {
  const messages: string[] = [];
  for (let e: unknown = error; e !== undefined && messages.length < 5; e = (e as { cause?: unknown }).cause) {
    // a thrown value that is no Error, shown as it is (String() would make an object '[object Object]')
    messages.push(e instanceof Error ? `${e.name}: ${e.message}` : inspect(e));
    if (!(e instanceof Error)) break;
  }
  return messages.join(' <- ');
}

/** A node-redis or iovalkey client of the server at `url` or of the cluster of `clusterNodes`, connected; `undefined` for ioredis. */
async function otherClient(
  kind: string,
  url: string | undefined,
  clusterNodes: string | undefined,
): Promise<{ client: RedisClient; close: () => Promise<unknown> } | undefined> {
  if (kind === 'ioredis') return undefined;
  const nodes = clusterNodes?.split(',').map((node) => {
    const [host, port] = node.split(':');
    return { host, port: Number(port) };
  });
  if (kind === 'node-redis') {
    const client = nodes
      ? createCluster({ rootNodes: nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })) })
      : createClient({ url });
    client.on('error', (error: Error) => process.stderr.write(`client error: ${error.message}\n`));
    await client.connect();
    return { client, close: () => client.close() };
  }
  if (kind !== 'iovalkey') throw new Error(`REDIS_CLIENT: ioredis, node-redis or iovalkey, not ${kind}`);
  const client = nodes ? new ValkeyCluster(nodes, { lazyConnect: true }) : new Valkey(url!, { lazyConnect: true });
  await client.connect();
  return { client, close: () => client.quit() };
}

async function main(): Promise<void> {
  const url = process.env.REDIS_URL;
  const clusterNodes = process.env.REDIS_CLUSTER;
  const prefix = process.env.RATE_LIMIT_PREFIX;
  if (!prefix || !url === !clusterNodes) {
    throw new Error('set RATE_LIMIT_PREFIX and exactly one of REDIS_URL, REDIS_CLUSTER');
  }

  const own = await otherClient(process.env.REDIS_CLIENT ?? 'ioredis', url, clusterNodes);

  let cluster: Cluster | undefined;
  if (clusterNodes && own === undefined) {
    cluster = new Cluster(
      clusterNodes.split(',').map((node) => {
        const [host, port] = node.split(':');
        return { host, port: Number(port) };
      }),
    );
    cluster.on('error', (error: Error) => process.stderr.write(`cluster client error: ${error.message}\n`));
    await new Promise<void>((resolve, reject) => {
      cluster!.once('ready', resolve);
      cluster!.once('end', () => reject(new Error('cluster client ended before it was ready')));
    });
  }

  @Module({
    imports: [
      RateLimitModule.forRoot({
        redis: own?.client ?? cluster ?? url,
        prefix,
        failMode: 'closed',
        // Exactness is under test, not latency: a noisy 2-core machine with 400 requests in
        // flight must not turn a slow answer into a 503.
        timeout: 10_000,
        policies: [{ name: 'per-ip', algorithm: 'sliding_window_log', limit: 1_000_000, window: '1d', key: 'ip' }],
      }),
    ],
    controllers: LIMITED_CONTROLLERS,
  })
  class AppModule {}

  // keep-alive longer than any gap between the spec's trials: it never finds its socket closed
  const adapter = new FastifyAdapter({ keepAliveTimeout: 120_000 });
  const app = await NestFactory.create<NestFastifyApplication>(AppModule, adapter, { logger: ['error', 'warn'] });
  app.useGlobalFilters(new ReportServerErrors(app.getHttpAdapter()));
  // connections of requests still waiting their turn in a leaky bucket would hold close(): closed first
  await serveUntilStopped(app, {
    afterClose: async () => {
      if (cluster) await cluster.quit().catch(() => cluster.disconnect());
      await own?.close();
    },
  });
}

runAppMain('limited-app', main);
