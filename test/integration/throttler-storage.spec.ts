/**
 * `RateLimitThrottlerStorage` hit by hit at fixed instants, against the real @nestjs/throttler's
 * memory storage: each table runs on NT's `ThrottlerStorageService` (its `Date.now()` pinned to
 * the test's clock) and on ours over a `MemoryStore` and a `RedisStore` on the same clock, with
 * the same expectations, so each row proves what NT answers and that ours answers it too. Where
 * ours differs on purpose (see lib/throttler/README.md), the last tests show both answers.
 *
 * A row checks `totalHits` and `isBlocked`, and `timeToBlockExpire` of a refusal (NT's on an
 * admitted hit is a meaningless negative number); `timeToExpire` differs knowingly and is left out.
 */
import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import type { ThrottlerStorageRecord } from '../../lib/throttler/index.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ManualClock } from '../../lib/testing/manual-clock.js';
import { RateLimitThrottlerStorage } from '../../lib/throttler/rate-limit-throttler.storage.js';
import { useTestRedis } from '../support/redis/test-redis.js';
import { loadNt } from '../support/throttler/implementations.js';

const redis = useTestRedis();

/**
 * Ahead of real time: Redis counts a key's TTL from real time up to the key's end on the test's
 * clock, so no key of a pinned clock expires while the test runs (a 1 ms window's would, at once).
 */
const START = Date.parse('2100-01-01T00:00:00Z');
const YEAR = 365 * 24 * 3600 * 1000;

/** A hit at `at` ms after the start, and what it must answer. */
interface Hit {
  at: number;
  totalHits: number;
  isBlocked: boolean;
  /** Checked on a refusal. */
  timeToBlockExpire?: number;
}

interface Case {
  name: string;
  ttl: number;
  limit: number;
  blockDuration: number;
  hits: Hit[];
}

const admitted = (at: number, totalHits: number): Hit => ({ at, totalHits, isBlocked: false });
const refused = (at: number, totalHits: number, timeToBlockExpire: number): Hit => ({
  at,
  totalHits,
  isBlocked: true,
  timeToBlockExpire,
});

const CASES: Case[] = [
  {
    // the hits of the last ttl, both at 0: 2 until they are 2 s old, then 0 while the block lasts
    name: 'a block longer than ttl: totalHits counts the hits of the last ttl, 0 once they have all left',
    ttl: 2_000,
    limit: 1,
    blockDuration: 10_000,
    hits: [
      admitted(0, 1),
      refused(0, 2, 10),
      refused(1_990, 2, 9),
      refused(2_000, 0, 8),
      refused(5_000, 0, 5),
      admitted(10_000, 1),
    ],
  },
  {
    name: 'the 2026-11-28 report: ttl 2 s, limit 1, block 10 s, hits at 0, 0.1, 2.5 and 5 s',
    ttl: 2_000,
    limit: 1,
    blockDuration: 10_000,
    hits: [admitted(0, 1), refused(100, 2, 10), refused(2_500, 0, 8), refused(5_000, 0, 6)],
  },
  {
    name: 'limit 3 a second, a block of 3 s: 4 while the hits are in the last second, then 0',
    ttl: 1_000,
    limit: 3,
    blockDuration: 3_000,
    hits: [
      admitted(0, 1),
      admitted(0, 2),
      admitted(0, 3),
      refused(0, 4, 3),
      refused(990, 4, 3),
      refused(1_000, 0, 2),
      refused(2_990, 0, 1),
      admitted(3_000, 1),
    ],
  },
  {
    name: 'a block as long as ttl (the default): limit + 1 throughout, and its end counts from 1',
    ttl: 1_000,
    limit: 2,
    blockDuration: 1_000,
    hits: [
      admitted(0, 1),
      admitted(0, 2),
      refused(0, 3, 1),
      refused(990, 3, 1),
      admitted(1_000, 1),
      admitted(1_000, 2),
    ],
  },
  {
    name: 'a ttl between 0 and 1 ms counts the hits of one millisecond (a block of 0.5 ms lasts it too)',
    ttl: 0.5,
    limit: 1,
    blockDuration: 0.5,
    hits: [admitted(0, 1), refused(0, 2, 1), admitted(1, 1), refused(1, 2, 1), admitted(2, 1)],
  },
  {
    name: 'a ttl between 0 and 1 ms without a block',
    ttl: 0.5,
    limit: 1,
    blockDuration: 0,
    hits: [admitted(0, 1), refused(0, 2, 1), admitted(1, 1)],
  },
  {
    name: 'a ttl of 0 or less admits every hit',
    ttl: 0,
    limit: 1,
    blockDuration: 0,
    hits: [admitted(0, 1), admitted(0, 1), admitted(0, 1)],
  },
  {
    name: 'a negative ttl admits every hit',
    ttl: -1_000,
    limit: 1,
    blockDuration: 5_000,
    hits: [admitted(0, 1), admitted(0, 1)],
  },
  {
    // the times differ past ten years (see the last tests); what is counted does not
    name: 'a ttl and a block of twenty years: refused years later, the hits still counted',
    ttl: 20 * YEAR,
    limit: 1,
    blockDuration: 20 * YEAR,
    hits: [admitted(0, 1), { at: 0, totalHits: 2, isBlocked: true }, { at: 9 * YEAR, totalHits: 2, isBlocked: true }],
  },
];

/** A storage under test, on `clock`, and how to close it. */
interface Target {
  storage: { increment(...args: Parameters<RateLimitThrottlerStorage['increment']>): Promise<ThrottlerStorageRecord> };
  close(): Promise<void>;
}

type TargetName = '@nestjs/throttler' | 'ours on memory' | 'ours on Redis';
const TARGETS: TargetName[] = ['@nestjs/throttler', 'ours on memory', 'ours on Redis'];

async function make(name: TargetName, clock: ManualClock): Promise<Target> {
  if (name === '@nestjs/throttler') {
    const nt = await loadNt();
    const now = jest.spyOn(Date, 'now').mockImplementation(() => clock.now());
    const storage = new nt.ThrottlerStorageService();
    return {
      storage,
      close: async () => {
        storage.onApplicationShutdown();
        now.mockRestore();
      },
    };
  }
  const store = name === 'ours on memory' ? new MemoryStore({ clock }) : new RedisStore({ client: redis(), clock });
  // a slow machine must not turn a Redis call into failMode's answer
  const storage = new RateLimitThrottlerStorage({
    store,
    prefix: `throttler-storage-${randomUUID()}:`,
    timeout: 10_000,
  });
  return {
    storage,
    close: async () => {
      await storage.onApplicationShutdown();
      await store.close?.();
    },
  };
}

/** What a row expects: its hit without the instant. */
type Answer = Omit<Hit, 'at'>;
const answersOf = (hits: Hit[]): Answer[] => hits.map(({ at: _at, ...answer }) => answer);

/** What `hit` checks of a record. */
function checked(record: ThrottlerStorageRecord, hit: Hit): Answer {
  const { totalHits, isBlocked, timeToBlockExpire } = record;
  return hit.timeToBlockExpire === undefined ? { totalHits, isBlocked } : { totalHits, isBlocked, timeToBlockExpire };
}

/** Runs `hits` on a fresh storage of `target`, and answers each record as `checked` reads it. */
async function run(target: TargetName, { ttl, limit, blockDuration }: Omit<Case, 'name' | 'hits'>, hits: Hit[]) {
  const clock = new ManualClock(START);
  const { storage, close } = await make(target, clock);
  try {
    const answers: Answer[] = [];
    for (const hit of hits) {
      clock.set(START + hit.at);
      answers.push(checked(await storage.increment('key', ttl, limit, blockDuration, 'default'), hit));
    }
    return answers;
  } finally {
    await close();
  }
}

describe.each(TARGETS)('%s, hit by hit', (target) => {
  it.each(CASES)('$name', async ({ hits, ...throttler }) => {
    expect(await run(target, throttler, hits)).toEqual(answersOf(hits));
  });
});

describe('where ours differs from @nestjs/throttler, knowingly', () => {
  /** NT's answers and ours on memory and Redis, for the same hits. */
  async function both(throttler: Omit<Case, 'name' | 'hits'>, hits: Hit[]) {
    return {
      nt: await run('@nestjs/throttler', throttler, hits),
      memory: await run('ours on memory', throttler, hits),
      redis: await run('ours on Redis', throttler, hits),
    };
  }

  it("during a block, before the hit that went over is ttl old, NT's count falls as each earlier hit leaves; ours stays limit + 1", async () => {
    const throttler = { ttl: 1_000, limit: 2, blockDuration: 3_000 };
    // admitted at 0 and 500, over at 600; at 1,200 the hit of 0 has left, at 1,600 all have
    const hits = [admitted(0, 1), admitted(500, 2), refused(600, 3, 3), refused(1_200, 3, 3), refused(1_600, 0, 2)];
    const { nt, memory, redis: onRedis } = await both(throttler, hits);
    expect(nt[3]).toEqual({ totalHits: 2, isBlocked: true, timeToBlockExpire: 3 });
    expect([memory, onRedis]).toEqual([answersOf(hits), answersOf(hits)]);
    expect(nt[4]).toEqual(memory[4]);
  });

  it("when blockDuration - ttl is not whole seconds, ours answers 0 up to a second after NT's", async () => {
    const throttler = { ttl: 1_500, limit: 1, blockDuration: 5_000 };
    const hits = [admitted(0, 1), refused(0, 2, 5), refused(1_490, 2, 4), refused(1_500, 2, 4), refused(2_000, 0, 3)];
    const { nt, memory, redis: onRedis } = await both(throttler, hits);
    expect(nt[3]).toEqual({ totalHits: 0, isBlocked: true, timeToBlockExpire: 4 });
    const expected = answersOf(hits);
    expect([memory, onRedis]).toEqual([expected, expected]);
    expect([nt[2], nt[4]]).toEqual([expected[2], expected[4]]);
  });

  it('a ttl or blockDuration over ten years counts as ten years, and its times say so', async () => {
    const clock = new ManualClock(START);
    const storage = new RateLimitThrottlerStorage({ store: new MemoryStore({ clock }) });
    const hit = () => storage.increment('key', 20 * YEAR, 1, Infinity, 'default');
    const tenYears = (10 * YEAR) / 1000;
    expect(await hit()).toEqual({ totalHits: 1, timeToExpire: tenYears, isBlocked: false, timeToBlockExpire: 0 });
    expect(await hit()).toEqual({ totalHits: 2, timeToExpire: tenYears, isBlocked: true, timeToBlockExpire: tenYears });
    clock.set(START + 10 * YEAR);
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false });
    await storage.onApplicationShutdown();
    // NT's block of Infinity never ends
    const throttler = { ttl: 20 * YEAR, limit: 1, blockDuration: Infinity };
    const hits = [
      admitted(0, 1),
      { at: 0, totalHits: 2, isBlocked: true },
      { at: 10 * YEAR, totalHits: 2, isBlocked: true },
    ];
    expect(await run('@nestjs/throttler', throttler, hits)).toEqual(answersOf(hits));
  });
});
