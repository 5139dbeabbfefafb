import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { CASE_EPOCH } from '../cases/index.js';
import { describeRefundCases } from '../support/refund-cases.js';
import { connectTestCluster, connectTestRedis } from '../support/redis/test-redis.js';

let redis: Redis;
let cluster: Cluster;
const prefix = `rl-refund-${randomUUID()}:`;

beforeAll(async () => {
  [redis, cluster] = await Promise.all([connectTestRedis(), connectTestCluster()]);
});
afterAll(async () => {
  await Promise.all([redis.quit(), cluster.quit()]);
});

/** A store on a clock the test sets, ms after `CASE_EPOCH`. */
function clocked(make: (clock: () => number) => RateLimitStore) {
  return () => {
    let now = CASE_EPOCH;
    return { store: make(() => now), setNow: (at: number) => (now = CASE_EPOCH + at) };
  };
}

const stores = [
  ['MemoryStore', clocked((clock) => new MemoryStore({ clock }))],
  ['RedisStore (real Redis)', clocked((clock) => new RedisStore({ client: redis, clock, cacheRefusals: false }))],
  // the tests' two policies key different identities: on the Cluster, two hash slots
  ['RedisStore (Redis Cluster)', clocked((clock) => new RedisStore({ client: cluster, clock }))],
] as const;

describeRefundCases(stores, prefix);
