import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import type { RedisClient } from '../../../lib/stores/redis/redis-clients.js';
import { testClusterNodes, testRedisUrl } from './test-redis.js';

/**
 * The Redis clients `RedisStore` takes besides ioredis, connected to the test server or the test
 * Cluster the global setup started: node-redis v5 and iovalkey. Each comes with the function that
 * closes it.
 */
export const OTHER_CLIENTS = ['node-redis', 'iovalkey'] as const;
export type OtherClient = (typeof OTHER_CLIENTS)[number];

export interface OpenClient {
  client: RedisClient;
  close: () => Promise<void>;
}

/** A client of `kind` connected to a single server (`url`, default the test server). */
export async function connectClient(kind: OtherClient, url = testRedisUrl()): Promise<OpenClient> {
  if (kind === 'node-redis') {
    const client = createClient({ url });
    client.on('error', () => undefined);
    await client.connect();
    return { client, close: () => client.quit().then(() => undefined) };
  }
  const client = new Valkey(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  return { client, close: () => client.quit().then(() => undefined) };
}

/** A client of `kind` connected to a Cluster (`nodes`, default the test Cluster), its slots known. */
export async function connectClusterClient(kind: OtherClient, nodes = testClusterNodes()): Promise<OpenClient> {
  if (kind === 'node-redis') {
    const cluster = createCluster({ rootNodes: nodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })) });
    cluster.on('error', () => undefined);
    await cluster.connect();
    return { client: cluster, close: () => cluster.close() };
  }
  const cluster = new ValkeyCluster(nodes, { lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } });
  await cluster.connect();
  return { client: cluster, close: () => cluster.quit().then(() => undefined) };
}

/**
 * A client of `kind` set up for a limiter as the README shows (no offline queue, no retry or resend,
 * a quick reconnect), of the server at `url`, connected; with the function that closes it.
 */
export async function connectLimiterClient(kind: OtherClient, url: string): Promise<OpenClient> {
  if (kind === 'node-redis') {
    const client = createClient({
      url,
      disableOfflineQueue: true,
      socket: { reconnectStrategy: (retries: number) => Math.min(retries * 50, 250) },
    });
    client.on('error', () => undefined);
    await client.connect();
    return { client, close: () => client.close() };
  }
  const client = new Valkey(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (attempt) => Math.min(attempt * 50, 250),
    reconnectOnError: (error) => /READONLY|LOADING/.test(error.message),
  });
  client.on('error', () => undefined);
  await client.connect();
  return { client, close: async () => client.disconnect() };
}
