/**
 * One app instance's load of decisions on a Redis Cluster, as a Node process of its own, for
 * `cluster-faults.e2e-spec.ts`: a Cluster client of the package under test, set up as the README
 * shows, a `RedisStore` and the module's calls on it (`StoreCalls`: breakers per master, timeout,
 * `failMode: 'closed'`), and workers deciding requests in turn, each as the last one's answer came.
 * The spec compiles this file and `lib/` to plain ESM in a temporary directory (`buildApp`).
 *
 * Environment: `CLUSTER_NODES` (`127.0.0.1:p1,...`), `REDIS_CLIENT` (`ioredis`, `node-redis`,
 * `iovalkey`), `TIMEOUT_MS`, `WORKERS`, `PICKS` (JSON: the requests to decide, each a list of
 * store requests; worker k takes picks k, k + WORKERS, ... round and round).
 *
 * Prints `{"ready":true}` once its client is ready and the load runs; after a line `stop` on
 * stdin, one line `{"seen":[[start, end, pick, answer, why?], ...]}` (times in ms since the Unix
 * epoch, `performance.timeOrigin` based; answer 0 admitted, 1 refused, 2 failMode, and for
 * `failMode` why: `<reason> at <node>: <message>`) and exits.
 */
import { createInterface } from 'node:readline';
import { Cluster } from 'ioredis';
import { Cluster as ValkeyCluster } from 'iovalkey';
import { createCluster } from 'redis';
import { RateLimitStoreError } from '../../../lib/stores/rate-limit-store.error.js';
import type { RateLimitRequest } from '../../../lib/stores/rate-limit-store.interface.js';
import type { RedisClient } from '../../../lib/stores/redis/redis-clients.js';
import { RedisStore } from '../../../lib/stores/redis/redis.store.js';
import { StoreCalls } from '../../../lib/stores/store-calls.js';

/** A wait between a worker's requests, ms: a steady load, not a flood. */
const PACE_MS = 2;

const now = () => performance.timeOrigin + performance.now();

async function connect(
  kind: string,
  nodes: { host: string; port: number }[],
): Promise<{ client: RedisClient; close: () => unknown }> {
  if (kind === 'node-redis') {
    const client = createCluster({
      rootNodes: nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
      defaults: { disableOfflineQueue: true },
    });
    client.on('error', () => undefined);
    await client.connect();
    return { client, close: () => client.destroy() };
  }
  const Client = kind === 'iovalkey' ? ValkeyCluster : Cluster;
  const client = new Client(nodes, {
    enableOfflineQueue: false,
    redisOptions: { maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false },
    retryDelayOnFailover: 10,
  });
  client.on('error', () => undefined);
  await new Promise((resolve) => client.once('ready', resolve));
  return { client, close: () => client.disconnect() };
}

async function main(): Promise<void> {
  const nodes = (process.env.CLUSTER_NODES ?? '').split(',').map((node) => {
    const [host, port] = node.split(':');
    return { host, port: Number(port) };
  });
  const picks = JSON.parse(process.env.PICKS ?? '[]') as RateLimitRequest[][];
  const workers = Number(process.env.WORKERS);
  const { client, close } = await connect(process.env.REDIS_CLIENT ?? 'ioredis', nodes);
  const calls = new StoreCalls(new RedisStore({ client }), {
    timeout: Number(process.env.TIMEOUT_MS),
    failMode: 'closed',
  });
  const seen: [number, number, number, number, string?][] = [];
  let running = true;
  const worker = async (offset: number) => {
    for (let i = offset; running; i += workers) {
      const pick = i % picks.length;
      const start = now();
      let answer: number;
      let why: string | undefined;
      try {
        const decisions = await calls.consume(picks[pick]);
        answer = decisions.every((decision) => decision.allowed) ? 0 : 1;
      } catch (error) {
        if (!(error instanceof RateLimitStoreError)) throw error;
        answer = 2;
        why = `${error.reason} at ${error.node ?? 'the store'}: ${error.message}${error.cause instanceof Error ? ` (${error.cause.message})` : ''}`;
      }
      seen.push(why === undefined ? [start, now(), pick, answer] : [start, now(), pick, answer, why]);
      await new Promise((resolve) => setTimeout(resolve, PACE_MS));
    }
  };
  const loads = Array.from({ length: workers }, (_, k) => worker(k));
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  await new Promise<void>((resolve) =>
    createInterface({ input: process.stdin }).on('line', (line) => line.trim() === 'stop' && resolve()),
  );
  running = false;
  await Promise.all(loads);
  // written whole before the exit: a pipe takes a long line in parts
  await new Promise((resolve) => process.stdout.write(`${JSON.stringify({ seen })}\n`, resolve));
  await calls.close();
  await close();
  process.exit(0);
}

main().catch((error: unknown) => {
  process.stderr.write(
    `cluster-load failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
