import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { type Algorithm, type Held, RATE_ALGORITHMS } from '../../lib/algorithms/algorithm.types.js';
import { decideAll } from '../../lib/algorithms/decide.js';
import type { RateLimitPolicy } from '../../lib/policy/policy.types.js';
import { resolvePolicy } from '../../lib/policy/resolve-policy.js';
import { StoreRequests } from '../../lib/limiter/store-requests.js';
import { type RoutePolicy, routePolicy } from '../../lib/routes/route-policy.js';
import { toDecision } from '../../lib/stores/decision.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type { RateLimitDecision, RateLimitRequest } from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { CASE_EPOCH } from '../cases/index.js';
import { connectTestRedis } from '../support/redis/test-redis.js';

/**
 * Tiers route a request to one of a policy's rules by the tier it names: for every algorithm as a
 * tier's algorithm, the pure model, the memory store and the Redis store decide alike, and each
 * tier of one identity is a bucket of its own. The policies are compiled as the guard compiles
 * them (`resolvePolicy`, `routePolicy`) and the requests built as it builds them (`StoreRequests`).
 *
 * The differential runs 100 traces per algorithm, or `RATE_LIMIT_PROPERTY_RUNS`.
 */

const RUNS = Number(process.env.RATE_LIMIT_PROPERTY_RUNS ?? 100);
const SEED =
  process.env.RATE_LIMIT_PROPERTY_SEED === undefined ? undefined : Number(process.env.RATE_LIMIT_PROPERTY_SEED);

/** The engine's request builder (no quota here: its clock is never read). */
const built = new StoreRequests({ now: () => Date.now() });

/** Another algorithm than `algorithm`, for a tier beside it. */
const otherThan = (algorithm: Algorithm): Algorithm =>
  RATE_ALGORITHMS[(RATE_ALGORITHMS.indexOf(algorithm) + 1) % RATE_ALGORITHMS.length];

/** A policy whose tiers free and pro follow `algorithm`, and whose tier other follows another one. */
function tieredPolicy(algorithm: Algorithm, prefix: string): RoutePolicy {
  const policy: RateLimitPolicy = {
    name: 'api',
    tier: 'user:plan',
    tiers: {
      free: { algorithm, limit: 2, window: '10s' },
      pro: { algorithm, limit: 5, window: '10s' },
      other: { algorithm: otherThan(algorithm), rps: 0.5, burst: 3 },
    },
    defaultTier: 'free',
  };
  return routePolicy(resolvePolicy(policy, 'tiers.spec', 'api'), { prefix, key: ['user'] });
}

/** The pure model with its states in a map by key, charged only when every policy admits. */
class Model {
  private readonly states = new Map<string, Held>();

  get keys(): string[] {
    return [...this.states.keys()];
  }

  consume(requests: readonly RateLimitRequest[], now: number): RateLimitDecision[] {
    const verdict = decideAll(
      requests.map(({ key, rule, cost }) => ({ state: this.states.get(key), rule, cost })),
      now,
      true,
    );
    if (verdict.allowed) requests.forEach(({ key }, i) => this.states.set(key, verdict.next[i]));
    return verdict.outcomes.map((outcome, i) => toDecision(requests[i], outcome));
  }
}

let redis: Redis;
const prefix = `rl-tiers-${randomUUID()}:`;
let runs = 0;

beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
});

/** The model and both stores on one pinned clock; `decide` fails when any two disagree. */
function deciders() {
  let now = CASE_EPOCH;
  const clock = () => now;
  const model = new Model();
  const memory = new MemoryStore({ clock });
  const onRedis = new RedisStore({ client: redis, clock, cacheRefusals: false });
  return {
    model,
    advance: (ms: number) => void (now += ms),
    async decide(requests: RateLimitRequest[]): Promise<RateLimitDecision[]> {
      const expected = model.consume(requests, now);
      const decided = { memory: await memory.consume(requests), redis: await onRedis.consume(requests) };
      expect(decided).toEqual({ memory: expected, redis: expected });
      return expected;
    },
  };
}

describe.each(RATE_ALGORITHMS.map((a) => [a]))('a tiered policy with %s tiers', (algorithm) => {
  it('gives each tier of an identity its own bucket under its own rule; an unknown tier or none is the default tier', async () => {
    const policy = tieredPolicy(algorithm, `${prefix}${runs++}:`);
    const { model, decide } = deciders();
    const admitted = async (identity: string, tier: string | undefined, times: number) => {
      const decisions: RateLimitDecision[] = [];
      for (let i = 0; i < times; i++) decisions.push(...(await decide([built.request(policy, identity, 1, tier)])));
      return decisions;
    };
    try {
      const free = await admitted('user:1', 'free', 4);
      expect(free.map((d) => d.allowed)).toEqual([true, true, false, false]);
      expect(free.every((d) => d.tier === 'free' && d.limit === 2 && d.policy === 'api')).toBe(true);

      const pro = await admitted('user:1', 'pro', 7);
      expect(pro.filter((d) => d.allowed)).toHaveLength(5);
      expect(pro.every((d) => d.tier === 'pro' && d.limit === 5)).toBe(true);

      // the default tier's bucket, already spent by user:1 as free
      for (const unknown of ['gold', undefined]) {
        expect(await admitted('user:1', unknown, 1)).toEqual([
          expect.objectContaining({ allowed: false, tier: 'free', limit: 2 }),
        ]);
      }
      const other = await admitted('user:1', 'other', 4);
      expect(other.map((d) => [d.allowed, d.tier, d.limit])).toEqual([
        ...Array<unknown[]>(3).fill([true, 'other', 3]),
        [false, 'other', 3],
      ]);

      // another identity's buckets are its own
      expect((await admitted('user:2', 'pro', 6)).filter((d) => d.allowed)).toHaveLength(5);
    } finally {
      if (model.keys.length > 0) await redis.del(...model.keys);
    }
  });

  it(
    'decides alike on the model and both stores for random traces of identities, tiers and costs',
    async () => {
      const step = fc.record({
        dt: fc.oneof(
          fc.constant(0),
          fc.integer({ min: 1, max: 10 }),
          fc.constantFrom(400, 1000, 2000, 5000, 10_000, 20_000),
        ),
        identity: fc.constantFrom('user:1', 'user:2'),
        tier: fc.constantFrom('free', 'pro', 'other', 'gold', undefined),
        cost: fc.constantFrom(1, 1, 0.5, 2, 3),
      });
      // with or without a second, untiered policy in the same all-or-nothing call
      const run = fc.record({ withGlobal: fc.boolean(), steps: fc.array(step, { minLength: 1, maxLength: 30 }) });
      await fc.assert(
        fc.asyncProperty(run, async ({ withGlobal, steps }) => {
          const runPrefix = `${prefix}${runs++}:`;
          const policy = tieredPolicy(algorithm, runPrefix);
          const global = routePolicy(resolvePolicy({ name: 'global', rps: 2, burst: 6 }, 'tiers.spec', 'global'), {
            prefix: runPrefix,
            key: ['user'],
          });
          const { model, advance, decide } = deciders();
          try {
            for (const { dt, identity, tier, cost } of steps) {
              advance(dt);
              const requests = [built.request(policy, identity, cost, tier)];
              if (withGlobal) requests.push(built.request(global, identity, cost));
              const [decision] = await decide(requests);
              expect(decision.tier).toBe(tier === 'pro' || tier === 'other' ? tier : 'free');
            }
          } finally {
            if (model.keys.length > 0) await redis.del(...model.keys);
          }
        }),
        { numRuns: RUNS, seed: SEED },
      );
    },
    Math.max(30_000, RUNS * 100),
  );
});
