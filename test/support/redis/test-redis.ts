import { Cluster, Redis } from 'ioredis';

/** Why a spec finds no Redis: it runs in the unit project, or outside Jest's global setup. */
const NO_TEST_REDIS =
  'only the integration and e2e projects start Redis (npm test, npm run test:integration, npm run test:e2e): ' +
  'a spec that needs it belongs under test/integration or test/e2e';

/** The URL of the redis-server the global setup started. */
export function testRedisUrl(): string {
  const url = process.env.TEST_REDIS_URL;
  if (!url) throw new Error(`TEST_REDIS_URL is not set: ${NO_TEST_REDIS}`);
  return url;
}

/** A connected client to the test server; the caller quits it. */
export async function connectTestRedis(): Promise<Redis> {
  const client = new Redis(testRedisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  return client;
}

/**
 * The test server for the spec that calls this (at its top level): a client connected before its
 * tests and quit after them. The function returned gives the client once the tests run.
 */
export function useTestRedis(): () => Redis {
  let client: Redis | undefined;
  beforeAll(async () => {
    client = await connectTestRedis();
  });
  afterAll(async () => {
    await client?.quit();
  });
  return () => {
    if (client === undefined) throw new Error('the test Redis is connected in beforeAll: use it in a test or a hook');
    return client;
  };
}

/**
 * Every key under `prefix` with its remaining TTL in ms (-1: no TTL). A key that expires between
 * the scan and its `PTTL` (-2: gone, as keys with TTLs of a few seconds do on a loaded machine)
 * is left out: it is no longer under `prefix`.
 */
export async function ttlsUnder(client: Redis, prefix: string): Promise<Map<string, number>> {
  const ttls = new Map<string, number>();
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const ttl = await client.pttl(key);
      if (ttl !== -2) ttls.set(key, ttl);
    }
  } while (cursor !== '0');
  return ttls;
}

/** The nodes of the Redis Cluster the global setup started (3 masters, no replicas). */
export function testClusterNodes(): { host: string; port: number }[] {
  const list = process.env.TEST_REDIS_CLUSTER;
  if (!list) {
    throw new Error(`TEST_REDIS_CLUSTER is not set: ${NO_TEST_REDIS}`);
  }
  return list.split(',').map((node) => {
    const colon = node.lastIndexOf(':');
    const port = Number(node.slice(colon + 1));
    if (colon < 1 || !Number.isInteger(port)) throw new Error(`TEST_REDIS_CLUSTER: bad node "${node}" in "${list}"`);
    return { host: node.slice(0, colon), port };
  });
}

/**
 * A client of the test cluster, ready (slots known, cluster_state ok) within 10 s; the caller quits
 * it. Commands issued while it reconnects are queued, as usual.
 */
export async function connectTestCluster(): Promise<Cluster> {
  const cluster = new Cluster(testClusterNodes(), {
    lazyConnect: true,
    slotsRefreshTimeout: 2_000,
    redisOptions: { maxRetriesPerRequest: 1, connectTimeout: 2_000 },
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      cluster.connect(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('the test Redis Cluster was not ready within 10 s')), 10_000);
      }),
    ]);
  } catch (error) {
    cluster.disconnect();
    throw error;
  } finally {
    clearTimeout(timer);
  }
  return cluster;
}

/** Empties every master of the cluster. */
export async function flushCluster(cluster: Cluster): Promise<void> {
  await Promise.all(cluster.nodes('master').map((node) => node.flushall()));
}
