import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Algorithm, Rule } from '../../lib/algorithms/algorithm.types.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { hashSlot } from '../../lib/stores/redis/hash-slot.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ManualClock } from '../../lib/testing/index.js';
import { CASE_EPOCH, CASES, longestTtlMs, ruleOf } from '../cases/index.js';
import { connectClient, connectClusterClient, type OpenClient, OTHER_CLIENTS } from '../support/redis/clients.js';
import { connectTestCluster, connectTestRedis, ttlsUnder } from '../support/redis/test-redis.js';
import { clocked, type ClockedStore, describeStoreCases, requestsUnder } from '../support/store-cases.js';

let redis: Redis;
let cluster: Cluster;
/** node-redis and iovalkey clients, of the test server and of the test Cluster, by name. */
const others = new Map<string, OpenClient>();
const prefix = `rl-test-${randomUUID()}:`;
/** Every Redis key a test charged: its rule and the latest time (test clock, ms) it was charged. */
const written = new Map<string, { rule: Rule; at: number }>();
/**
 * By key, the longest a call that wrote it took (real ms; a refused one too: on a Cluster it gives
 * back what another slot charged). The test clock is pinned ahead of real time, so Redis expires a
 * key at its time on the test clock plus its TTL, later by up to that (its TTL counts from the
 * app's real time as the call is made).
 */
const callTookMs = new Map<string, number>();

beforeAll(async () => {
  [redis, cluster] = await Promise.all([connectTestRedis(), connectTestCluster()]);
  for (const kind of OTHER_CLIENTS) {
    others.set(kind, await connectClient(kind));
    others.set(`${kind} Cluster`, await connectClusterClient(kind));
  }
});
afterAll(async () => {
  await Promise.all([redis.quit(), cluster.quit(), ...[...others.values()].map(({ close }) => close())]);
});

/** The client of `name` (see `others`), once connected. */
const other = (name: string) => others.get(name)!.client;

/**
 * A `RedisStore` on a `ManualClock`, set before each step, whose keys the shared tests look at;
 * every call notes the keys it charged, for the TTL checks at the end.
 */
function onRedis(make: (clock: ManualClock) => RedisStore, admin: () => Redis | Cluster): () => ClockedStore {
  return () => {
    const clock = new ManualClock(CASE_EPOCH);
    const store = make(clock);
    const consume = async (requests: RateLimitRequest[]) => {
      const sent = Date.now();
      const decisions = await store.consume(requests);
      const tookMs = Date.now() - sent;
      const admitted = decisions.every((d) => d.allowed);
      // the latest time a key has seen: the models count its expiry from there, clock gone back or not
      // (a refusal writes a block's key, or leaves the one a block wrote)
      for (const [i, { key, rule }] of requests.entries()) {
        const blocks = rule.blockMs !== undefined && !decisions[i].allowed && decisions[i].retryAfter < Infinity;
        if (admitted || blocks) written.set(key, { rule, at: Math.max(clock.now(), written.get(key)?.at ?? 0) });
        callTookMs.set(key, Math.max(tookMs, callTookMs.get(key) ?? 0));
      }
      return decisions;
    };
    const keys = {
      logEntries: (key: string) => admin().zcard(key),
      expiresAt: (key: string) => admin().pexpiretime(key),
      lateByMs: (key: string) => callTookMs.get(key)!,
    };
    return { store, setNow: (at) => void clock.set(CASE_EPOCH + at), consume, keys };
  };
}

describeStoreCases(
  [
    ['MemoryStore', clocked((clock) => new MemoryStore({ clock }))],
    [
      'RedisStore (real Redis)',
      onRedis(
        (clock) => new RedisStore({ client: redis, clock, cacheRefusals: false }),
        () => redis,
      ),
    ],
    // the tight and loose policies key different identities, so on the Cluster they live in
    // different hash slots: two script calls, and a refund when the tight one refuses
    [
      'RedisStore (Redis Cluster)',
      onRedis(
        (clock) => new RedisStore({ client: cluster, clock, cacheRefusals: false }),
        () => cluster,
      ),
    ],
    // the same server and Cluster through the other clients the store takes: keys looked at with ioredis
    ...OTHER_CLIENTS.flatMap((kind): [string, () => ClockedStore][] => [
      [
        `RedisStore (real Redis, ${kind})`,
        onRedis(
          (clock) => new RedisStore({ client: other(kind), clock, cacheRefusals: false }),
          () => redis,
        ),
      ],
      [
        `RedisStore (Redis Cluster, ${kind})`,
        onRedis(
          (clock) => new RedisStore({ client: other(`${kind} Cluster`), clock, cacheRefusals: false }),
          () => cluster,
        ),
      ],
    ]),
  ],
  prefix,
);

const request = requestsUnder(prefix);

describe('RedisStore keys', () => {
  it.each([
    ['Redis', () => [redis]],
    ['Redis Cluster', () => cluster.nodes('master')],
  ])(
    'every key the tests above left on the %s expires, no later than the time from empty to full',
    async (_name, servers) => {
      const keys: Array<[Redis, string]> = [];
      for (const server of servers())
        for (const key of (await ttlsUnder(server, prefix)).keys()) keys.push([server, key]);
      expect(keys.length).toBeGreaterThan(CASES.length);
      for (const [server, key] of keys) {
        // every key left is one a test charged (a refused or peeked request, or a refund to full, writes nothing)
        const { rule, at } = written.get(key)!;
        const lives = (await server.pexpiretime(key)) - at;
        expect({ key, lives: lives > 0 && lives <= longestTtlMs(rule) + callTookMs.get(key)! }).toEqual({
          key,
          lives: true,
        });
      }
    },
  );

  it('puts the buckets of one identity in one Cluster hash slot, and of two identities (here) in two', async () => {
    const perKey = request('tight', ruleOf('token_bucket', 1, 2), 'api-key:abc');
    const sameIdentity = request('other', ruleOf('gcra', 5, 5), 'api-key:abc');
    const perIp = request('loose', ruleOf('token_bucket', 1, 2), 'ip:1.2.3.4');
    expect(hashSlot(perKey.key)).toBe(hashSlot(sameIdentity.key));
    expect(hashSlot(perKey.key)).not.toBe(hashSlot(perIp.key));
    // the same slots Redis works out, braces or not
    for (const key of [perKey.key, perIp.key, 'plain-key', 'a{}b', '{}{x}', 'é{ü}', 'x{'.repeat(40)]) {
      expect([key, hashSlot(key)]).toEqual([key, await cluster.cluster('KEYSLOT', key)]);
    }
  });

  it.each<[Algorithm, number, number]>([
    ['token_bucket', 1_500, 2_000], // 20 of 50 tokens back at 10/s
    ['gcra', 1_500, 2_000],
    ['leaky_bucket', 1_500, 2_000],
    ['fixed_window', 0, 5_000], // until the 5 s window ends
    ['sliding_window_log', 4_500, 5_000], // until the entries leave the window
    ['sliding_window_counter', 5_000, 10_000], // until this window's count has slid out of the next
  ])('%s: sets the TTL to the time until full, on the real clock', async (algorithm, least, most) => {
    const store = new RedisStore({ client: redis });
    const req = request('ttl', ruleOf(algorithm, 10, 50), randomUUID(), 20);
    await store.consume([req]);
    const ttl = await redis.pttl(req.key);
    expect(ttl).toBeGreaterThan(least);
    expect(ttl).toBeLessThanOrEqual(most);
  });

  it('uses Redis TIME when no test clock is given, and reloads the script after SCRIPT FLUSH', async () => {
    const store = new RedisStore({ client: redis });
    const req = request('flush', ruleOf('token_bucket', 1, 2), randomUUID());
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: true, remaining: 1 });
    await redis.script('FLUSH');
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: true, remaining: 0 });
    expect((await store.consume([req]))[0]).toMatchObject({ allowed: false, remaining: 0, retryAfter: 1 });
  });
});
