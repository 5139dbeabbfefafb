/**
 * redis-memory: what Redis holds per active key, in bytes, for each of our algorithms, beside
 * rate-limiter-flexible's `RateLimiterRedis` and @nestjs/throttler's Redis storage
 * (`ThrottlerStorageRedisService` of @nest-lab/throttler-storage-redis, as bench/server.ts uses it).
 *
 * Each row starts from an empty Redis (FLUSHALL), its contender warmed up on other keys first so
 * that its scripts are loaded and its connection's buffers grown; it then decides `fill` times on
 * each of its keys, every decision admitted, and reads what Redis holds:
 * - `MEMORY USAGE <key> SAMPLES 0` of every key in Redis (SCAN), over the active keys: the key's
 *   name, its value (every element of a sorted set) and its entry in the key table;
 * - the growth of `INFO memory`'s `used_memory` over the same keys: the above plus what `MEMORY
 *   USAGE` leaves out, a TTL's entry in the table of expiries and both tables' buckets (8 bytes
 *   a bucket, 1 to 2 buckets a key as the table's size falls).
 *
 * A key is named as its limiter names it in an app limiting by IP: ours `rl:default:<tag>:{<16
 * characters of SHA-256>}` (`bucketKey`, the guard's), rate-limiter-flexible's `rlflx:<ip>`, the
 * throttler's `{<SHA-256 in hex>:default}:hits` (its guard's `generateKey`, its storage's key).
 * The rule is 1000 a day: a token bucket's key (GCRA's, a leaky bucket's) lives only until its
 * bucket is full again, one decision's worth of time (86 s here, 60 ms at 1000 a minute), and it
 * must still be there when it is read; a `concurrency` policy has 1000 slots held 5 minutes and a
 * quota 1000 a month, as in redis-ir. The sliding log and `concurrency` keep one sorted-set entry
 * per decision (per slot held), so they are measured at 1, 100 and 1000 entries a key (Redis
 * packs a sorted set of up to 128 entries in one listpack, past that a skiplist); the others keep
 * a state of fixed size, measured after one decision. Sizes are counts, not times: it runs once,
 * whatever `BENCH_ROUNDS` says, and its figures are information.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { ThrottlerStorageRedisService } from '@nest-lab/throttler-storage-redis';
import { Redis } from 'ioredis';
import { type Algorithm, ALGORITHMS, type RateLimitRequest, RedisStore } from 'nestjs-ratelimit';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { bucketKey } from '../lib/keys/bucket-key.js';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { rateLimiterFlexible as decideWith } from './decisions.js';
import { ruleOf } from './redis-ir.js';
import { formatRate, markdownTable, type RatioRow } from './stats.js';

const COMPARISON = 'redis-memory';
/** Keys decided in a row, at most; fewer where the fill is high (see `MAX_ENTRIES`). */
const KEYS = 10_000;
/** Decisions a row makes, at most: keys times fill. */
const MAX_ENTRIES = 100_000;
/** Decisions per key of the algorithms whose state grows with them (one sorted-set entry each). */
const FILLS: Partial<Record<Algorithm, readonly number[]>> = {
  sliding_window_log: [1, 100, 1000],
  concurrency: [1, 100, 1000],
};
/** Decisions in flight at once: a store batches those of one turn (64 a call for ours). */
const IN_FLIGHT = 1000;
/**
 * The limit of every rate: 1000 a day, so that what a decision leaves (one token's time in a
 * bucket, every entry of a log) is still held when it is measured.
 */
const LIMIT = 1000;
const WINDOW_SECONDS = 86_400;
/** How long Redis is left to finish rehashing its key tables before `used_memory` is read, ms. */
const SETTLE_MS = 200;

/** One limiter as measured: its name and one decision on its `i`th key (true when admitted). */
interface Limiter {
  name: string;
  decide(i: number): Promise<boolean>;
  close(): Promise<void>;
}

/** What one row measured. */
interface Row {
  name: string;
  fill: number;
  keys: number;
  /** Keys Redis holds per active key. */
  redisKeys: number;
  /** Type and encoding of the keys, the most common first: `string (int)`, `zset (listpack)`. */
  kinds: string;
  /** Sorted-set entries per active key (`ZCARD`), where the keys are sorted sets. */
  entries?: number;
  memoryUsage: number;
  usedMemory: number;
  refused: number;
}

/** The IP of key `i`: 10.0.0.0 onwards. */
function ipOf(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

/** The rule of our `algorithm` measured here: 1000 a day, but a concurrency's and a quota's as redis-ir has them. */
function memoryRuleOf(algorithm: Algorithm): RateLimitRequest['rule'] {
  if (algorithm === 'concurrency' || algorithm === 'quota') return ruleOf(algorithm);
  return { algorithm, rps: LIMIT / WINDOW_SECONDS, burst: LIMIT };
}

/** Our `RedisStore` deciding `algorithm` on the guard's keys of policy `default`, identity `ip:<ip>`. */
function ours(url: string, algorithm: Algorithm): Limiter {
  const client = new Redis(url);
  const store = new RedisStore({ client });
  const rule = memoryRuleOf(algorithm);
  return {
    name: algorithm,
    decide: async (i) => {
      const key = bucketKey('rl:', 'default', rule, `ip:${ipOf(i)}`);
      const [decision] = await store.consume([{ key, policy: 'default', rule, cost: 1 }]);
      return decision.allowed;
    },
    close: async () => {
      await store.close();
      client.disconnect();
    },
  };
}

/** rate-limiter-flexible's `RateLimiterRedis`, 1000 points a day, keyed by the IP. */
function rateLimiterFlexible(url: string): Limiter {
  const client = new Redis(url);
  const decide = decideWith(new RateLimiterRedis({ storeClient: client, points: LIMIT, duration: WINDOW_SECONDS }));
  return {
    name: 'rate-limiter-flexible (RateLimiterRedis)',
    decide: (i) => decide(ipOf(i)),
    close: async () => client.disconnect(),
  };
}

/**
 * The throttler's Redis storage, 1000 a day, on the key its guard makes of a route and an IP
 * (`ThrottlerGuard.generateKey`: SHA-256 of `<controller>-<handler>-<throttler>-<tracker>`).
 */
function throttlerStorage(url: string): Limiter {
  const client = new Redis(url);
  const storage = new ThrottlerStorageRedisService(client);
  const ttl = WINDOW_SECONDS * 1000;
  return {
    name: 'throttler (@nest-lab/throttler-storage-redis)',
    decide: async (i) => {
      const key = createHash('sha256')
        .update(`BenchController-index-default-${ipOf(i)}`)
        .digest('hex');
      const { isBlocked } = await storage.increment(key, ttl, LIMIT, ttl, 'default');
      return !isBlocked;
    },
    close: async () => client.disconnect(),
  };
}

/** Every row: each algorithm of ours at each of its fills, then the two others at one decision a key. */
function rowsToMeasure(url: string): Array<{ limiter: () => Limiter; fill: number }> {
  return [
    ...ALGORITHMS.flatMap((algorithm) =>
      (FILLS[algorithm] ?? [1]).map((fill) => ({ limiter: () => ours(url, algorithm), fill })),
    ),
    { limiter: () => rateLimiterFlexible(url), fill: 1 },
    { limiter: () => throttlerStorage(url), fill: 1 },
  ];
}

export async function redisMemory(context: BenchContext): Promise<ComparisonReport> {
  const rows: Row[] = [];
  for (const { limiter: make, fill } of rowsToMeasure(context.redis.url)) {
    const limiter = make();
    try {
      const row = await measure(context, limiter, fill);
      rows.push(row);
      context.log(
        `${row.name}, ${fill} a key: ${formatRate(row.memoryUsage)} bytes per key (MEMORY USAGE), ` +
          `${formatRate(row.usedMemory)} (used_memory)`,
      );
    } finally {
      await limiter.close();
    }
  }
  await context.admin.flushall();
  const notes = rows.flatMap((row) => {
    const odd: string[] = [];
    if (row.redisKeys < 1)
      odd.push(
        `${row.name}, ${row.fill} a key: ${row.redisKeys} Redis keys per active key (some expired before they were read)`,
      );
    if (row.refused > 0) odd.push(`${row.name}, ${row.fill} a key: ${formatRate(row.refused)} decisions refused`);
    if (row.entries !== undefined && row.entries !== row.fill)
      odd.push(`${row.name}: ${row.entries} sorted-set entries per key where ${row.fill} decisions were made`);
    return odd;
  });
  return { table: rowTable(rows), ratios: rows.map(ratioOf), notes };
}

/**
 * One row: an empty Redis, `fill` decisions on each of its keys (`IN_FLIGHT` at a time), then
 * what Redis holds per key. Warms the limiter up first on as many keys as it has in flight, then
 * empties Redis: its script is loaded and its connection's buffers are as large as they get.
 */
async function measure(context: BenchContext, limiter: Limiter, fill: number): Promise<Row> {
  const keys = Math.min(KEYS, Math.floor(MAX_ENTRIES / fill));
  const { admin } = context;
  await decideAll(limiter, KEYS, Math.min(IN_FLIGHT, keys));
  await admin.flushall();
  await sleep(SETTLE_MS);
  const before = await usedMemory(admin);
  let refused = 0;
  for (let round = 0; round < fill; round++) refused += await decideAll(limiter, 0, keys);
  await sleep(SETTLE_MS);
  const after = await usedMemory(admin);
  const held = await heldKeys(admin);
  const sizes = await perKey(admin, held, (pipeline, key) => pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
  const types = await perKey(admin, held, (pipeline, key) => pipeline.type(key));
  const encodings = await perKey(admin, held, (pipeline, key) => pipeline.object('ENCODING', key));
  const sets = held.filter((_, i) => types[i] === 'zset');
  const cards = await perKey(admin, sets, (pipeline, key) => pipeline.zcard(key));
  return {
    name: limiter.name,
    fill,
    keys,
    redisKeys: held.length / keys,
    kinds: kindsOf(types.map((type, i) => `${String(type)} (${String(encodings[i])})`)),
    entries: sets.length === 0 ? undefined : sum(cards) / keys,
    memoryUsage: sum(sizes) / keys,
    usedMemory: (after - before) / keys,
    refused,
  };
}

/** One decision on each key `first` .. `first + count - 1`, `IN_FLIGHT` at a time: how many were refused. */
async function decideAll(limiter: Limiter, first: number, count: number): Promise<number> {
  let refused = 0;
  for (let start = 0; start < count; start += IN_FLIGHT) {
    const size = Math.min(IN_FLIGHT, count - start);
    const admitted = await Promise.all(Array.from({ length: size }, (_, i) => limiter.decide(first + start + i)));
    refused += admitted.filter((allowed) => !allowed).length;
  }
  return refused;
}

/** `used_memory` of `INFO memory`, bytes. */
async function usedMemory(admin: Redis): Promise<number> {
  const info = await admin.info('memory');
  const used = /^used_memory:(\d+)/m.exec(info);
  if (!used) throw new Error(`INFO memory has no used_memory: ${info.slice(0, 200)}`);
  return Number(used[1]);
}

/** Every key Redis holds (SCAN). */
async function heldKeys(admin: Redis): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await admin.scan(cursor, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

type Pipeline = ReturnType<Redis['pipeline']>;

/** One command per key in one pipeline: the answers, in the keys' order. */
async function perKey(admin: Redis, keys: readonly string[], command: (p: Pipeline, key: string) => unknown) {
  const pipeline = admin.pipeline();
  for (const key of keys) command(pipeline, key);
  const answers = (await pipeline.exec()) ?? [];
  return answers.map(([error, answer]) => {
    if (error) throw error;
    return answer;
  });
}

function sum(values: readonly unknown[]): number {
  return values.reduce<number>((total, value) => total + Number(value), 0);
}

/** `zset (listpack), string (int)`: each kind of key held, the most common first. */
function kindsOf(kinds: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const kind of kinds) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  return [...counts]
    .sort(([, a], [, b]) => b - a)
    .map(([kind]) => kind)
    .join(', ');
}

function rowTable(rows: readonly Row[]): string {
  return markdownTable(
    [
      'contender',
      'what Redis holds',
      'decisions a key',
      'keys',
      'Redis keys a key',
      'sorted-set entries a key',
      'MEMORY USAGE, bytes a key',
      'used_memory growth, bytes a key',
    ],
    rows.map((row) => [
      row.name,
      row.kinds,
      String(row.fill),
      formatRate(row.keys),
      String(Number(row.redisKeys.toFixed(2))),
      row.entries === undefined ? '–' : formatRate(row.entries),
      formatRate(row.memoryUsage),
      formatRate(row.usedMemory),
    ]),
    2,
  );
}

function ratioOf(row: Row): RatioRow {
  return {
    comparison: COMPARISON,
    label: `${row.name}, ${row.fill} decision${row.fill === 1 ? '' : 's'} a key, MEMORY USAGE bytes per active key`,
    value: row.memoryUsage,
  };
}
