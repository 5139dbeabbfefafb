import { Redis } from 'ioredis';

/** The URL of the redis-server the global setup started. */
export function testRedisUrl(): string {
  const url = process.env.TEST_REDIS_URL;
  if (!url) throw new Error('TEST_REDIS_URL is not set: run the tests with `npm test` (its global setup starts Redis)');
  return url;
}

/** A connected client to the test server; the caller quits it. */
export async function connectTestRedis(): Promise<Redis> {
  const client = new Redis(testRedisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  return client;
}

/** Every key under `prefix` with its remaining TTL in ms (-1: no TTL). */
export async function ttlsUnder(client: Redis, prefix: string): Promise<Map<string, number>> {
  const ttls = new Map<string, number>();
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) ttls.set(key, await client.pttl(key));
  } while (cursor !== '0');
  return ttls;
}
