import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import type { Algorithm, Held, Rule } from '../../lib/algorithms/algorithm.types.js';
import { durationMs, windowEnd, windowMs } from '../../lib/algorithms/conversions.js';
import { modelOf } from '../../lib/algorithms/decide.js';
import { SCALED_BY_LIMIT, WINDOW_ALGORITHMS } from '../../lib/algorithms/registry.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import type { RateLimitPolicy } from '../../lib/policy/policy.types.js';
import { resolveOptions } from '../../lib/rate-limit-options.js';
import { type Charge, toDecision } from '../../lib/stores/decision.js';
import { MemoryStore } from '../../lib/stores/memory/memory.store.js';
import type {
  RateLimitDecision,
  RateLimitRequest,
  RateLimitSettle,
  RateLimitStore,
} from '../../lib/stores/rate-limit-store.interface.js';
import { RedisStore } from '../../lib/stores/redis/redis.store.js';
import { ManualClock } from '../../lib/testing/manual-clock.js';
import { CASE_EPOCH } from '../cases/index.js';
import { BucketModel } from '../support/bucket-model.js';
import { ObservedStore, Serial, type StoreObserver } from '../support/observed-store.js';
import { connectTestRedis } from '../support/redis/test-redis.js';
import { StandaloneLimiter } from '../support/standalone-limiter.js';

/**
 * Differential test of hot-key shares (module option `shares`, issue 41): 2 to 4 instances
 * (`StandaloneLimiter`s with shares on) over one store (a `MemoryStore`, or a `RedisStore` on the
 * test Redis), on one `ManualClock`, take turns at random: requests of random costs (several at one
 * instant, from one instance or several, so some wait for a take on its way), refunds of admitted
 * ones, a factor on one instance's policy (`setScale`: its rule, and so its share, changes), the
 * clock moved between steps. Each instance sees the store through an `ObservedStore`, which tells
 * the `Ledger` every consume, settle and refund as the store runs it. A take is a consume whose
 * answer no caller got (the engine hands a request decided by the store its decisions as they
 * are), so the ledger knows each take: which instance sent it, its size, its answer, and what its
 * charge holds after the settles that give back what the share did not use.
 *
 * Properties, at every step:
 *
 * 1. The store is the model. Every call the store ran is run on the pure model (`BucketModel`,
 *    `decideAll`) at the same instant and in the same order, and the store's answer must be the
 *    model's, field for field: takes, requests decided there, settles and refunds alike. After each
 *    step a peek of every bucket must be the model's too. (For Redis the model keeps every state
 *    past its expiry, as Redis keeps every key on the pinned clock: see `BucketModel`.)
 * 2. No instance admits more than it took. Per instance and key: what it admitted from shares (cost
 *    of each request it admitted without a store call, less those given back) <= what its takes
 *    hold in the store (each granted take's size, or what its last settle made it). At the end,
 *    once every instance has shut down (its shares given back; in half the runs the shutdown begins
 *    while the last step's requests are on their way), the two are equal: what a share did not use
 *    went back to the store, to the token.
 * 3. No window admits more than its limit. Every admission (from a share or the store) is charged,
 *    at the instant it was admitted, to a second model of the bucket (refunds given back at theirs)
 *    that never refuses (its rule takes any debt, and has no factor): for `fixed_window`,
 *    `sliding_window_counter` and `quota` it must never owe anything, i.e. never count past its
 *    limit. A token bucket or a GCRA may (a share's tokens are taken for its whole hold, so a
 *    bucket that refilled meanwhile can admit them again beside it: "a burst can come later", in
 *    docs/17-hot-key-shares.md): never more than the tokens shares held at their most so far.
 * 4. Every refusal is explained. A refusal an instance answers is one of:
 *    - the store's (its decisions are the store's objects): property 1 says the model refused too;
 *    - a local refusal (no store call answered it) the store would have given as well: the model,
 *      asked at that instant with everything charged so far, refuses it (the tokens it lacks are
 *      held in shares outstanding, taken and not used or given back yet, or spent);
 *    - a local refusal while the instance waits after a refused take: a take of that instance on
 *      that key, run before the refusal, was refused at `t` with the model saying a request of its
 *      size would wait `w` ms, `t <= now < t + w`, and no take of that instance on that key was
 *      granted between it and the request's arrival. That is the under-admission shares allow
 *      (the bucket held less than the share asked for, so smaller requests wait too).
 *    Anything else is a refusal no share explains, and fails.
 *
 * Runs per algorithm and store: 20, or `RATE_LIMIT_PROPERTY_RUNS`. A failure prints the shrunk run
 * and its seed; `RATE_LIMIT_PROPERTY_SEED` replays that seed. `RATE_LIMIT_SHARES_STATS=1` prints
 * how many takes, refusals of each kind and admissions the runs saw.
 */

const RUNS = Number(process.env.RATE_LIMIT_PROPERTY_RUNS ?? 20);
const SEED =
  process.env.RATE_LIMIT_PROPERTY_SEED === undefined ? undefined : Number(process.env.RATE_LIMIT_PROPERTY_SEED);

/** The algorithms a share may be taken of (`AlgorithmDescriptor.shareUntil`; a fixed window aligned to the clock). */
const SHARED: readonly Algorithm[] = ['token_bucket', 'gcra', 'fixed_window', 'sliding_window_counter', 'quota'];
const IDENTITIES = ['user:1', 'user:2'] as const;
const POLICY_NAME = 'p';
/** A debt no admission reaches: the admissions model (property 3) counts past any limit. */
const UNBOUNDED_DEBT = 1e9;

/** A run: one policy, its instances with shares on, and what happens to them. */
interface Run {
  policy: RateLimitPolicy & { algorithm: Algorithm };
  /** `shares.after`: decisions a second past which a key is hot. */
  after: number;
  /** `shares.hold`, ms. */
  holdMs: number;
  instances: number;
  steps: Step[];
  /**
   * Whether the instances begin to shut down while the last step's requests are on their way (a
   * take may land after `beforeApplicationShutdown` has begun); else once everything has settled.
   */
  closeEarly: boolean;
}

/**
 * Before a step, the clock moves `dt` ms; then some requests arrive at once, or one earlier request
 * is given back, or an instance scales the policy (`setScale`), or the instances' sweeps run.
 */
type Step =
  | { dt: number; requests: { instance: number; identity: number; cost: number }[] }
  | {
      dt: number;
      /** The admitted request this many admissions back (not given back yet) is refunded. */
      refund: number;
    }
  | {
      dt: number;
      /** From now on this instance decides the policy under this factor (its windows' limit, or its rate). */
      scale: { instance: number; factor: number };
    }
  | { dt: number; pause: true };

/** Real time a pause lasts, ms: past the sweep's period (100 ms). */
const PAUSE_MS = 110;

// ---------------------------------------------------------------------------------------------
// What a run is made of

/** Costs: whole and quarter tokens (sums of them are exact, so a window's count is too). */
const costSeed = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(1, 1, 1, 2, 3, 0.5, 0.25, 1.5, 2.5).map((cost) => ({ cost })) },
  // a share of the limit: a share's size is at least the cost, so these take big shares (or, past the limit, none)
  { weight: 1, arbitrary: fc.constantFrom(0.5, 1, 1.5).map((times) => ({ times })) },
);

/**
 * Time between steps: none (requests of one instant) most often, a few ms, or about a time the run
 * names: a token's refill, the bucket's or window's length, a share's hold, a second (hot keys are
 * counted per second), the current window's end.
 */
const dtSeed = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ ms: 0 }) },
  { weight: 3, arbitrary: fc.integer({ min: 1, max: 30 }).map((ms) => ({ ms })) },
  {
    weight: 3,
    arbitrary: fc.record({
      span: fc.constantFrom('token', 'full', 'hold', 'second'),
      times: fc.constantFrom(0.5, 1, 1, 2),
      offset: fc.integer({ min: -2, max: 2 }),
    }),
  },
  // to about the end of the current window (for a bucket, of the time it takes to fill, from the clock's 0)
  { weight: 2, arbitrary: fc.integer({ min: -3, max: 3 }).map((offset) => ({ edge: offset })) },
);

/**
 * Requests at one instant (most steps), a refund, a factor on an instance's policy (a share admits
 * only requests of the rule it was taken under), or now and then a pause of real time long enough
 * for each instance's sweep (`Shares`, every 100 ms) to run once: it retires shares whose hold has
 * ended and forgets keys idle for 2 s on the clock (giving their shares back). Rare, as it is slow.
 */
const stepSeed = fc.oneof(
  {
    weight: 360,
    arbitrary: fc.record({
      dt: dtSeed,
      requests: fc.array(fc.record({ instance: fc.nat(3), identity: fc.nat(IDENTITIES.length - 1), cost: costSeed }), {
        minLength: 1,
        maxLength: 5,
      }),
    }),
  },
  { weight: 60, arbitrary: fc.record({ dt: dtSeed, refund: fc.integer({ min: 1, max: 6 }) }) },
  {
    weight: 15,
    arbitrary: fc.record({ dt: dtSeed, instance: fc.nat(3), factor: fc.constantFrom(1, 0.75, 0.5, 0.25) }),
  },
  { weight: 1, arbitrary: fc.record({ dt: dtSeed, pause: fc.constant(true) }) },
);

/** A policy of `algorithm` with a small limit, so that shares are a good part of it and refusals come. */
function policyArbitrary(algorithm: Algorithm): fc.Arbitrary<Run['policy']> {
  const limit = fc.integer({ min: 1, max: 20 });
  if (algorithm === 'quota')
    return limit.map((n) => ({ name: POLICY_NAME, algorithm, limit: n, period: 'day' as const }));
  if (WINDOW_ALGORITHMS.has(algorithm))
    return fc
      .record({ limit, window: fc.constantFrom(1, 2, 10, 60) })
      .map(({ limit: n, window }) => ({ name: POLICY_NAME, algorithm, limit: n, window }));
  return fc
    .record({ burst: limit, rps: fc.constantFrom(0.5, 1, 2, 5, 20) })
    .map(({ burst, rps }) => ({ name: POLICY_NAME, algorithm, rps, burst }));
}

/** The policy's rate and capacity, as its rule has them. */
function rateOf(policy: Run['policy']): { rps: number; burst: number } {
  if (policy.algorithm === 'quota') return { rps: (policy.limit! * 1000) / 86_400_000, burst: policy.limit! };
  if (policy.limit !== undefined) return { rps: policy.limit / Number(policy.window), burst: policy.limit };
  return { rps: policy.rps!, burst: policy.burst! };
}

function runArbitrary(algorithm: Algorithm): fc.Arbitrary<Run> {
  return fc
    .record({
      policy: policyArbitrary(algorithm),
      after: fc.integer({ min: 1, max: 5 }),
      holdMs: fc.constantFrom(50, 250, 1_000, 5_000),
      instances: fc.integer({ min: 2, max: 4 }),
      steps: fc.array(stepSeed, { minLength: 1, maxLength: 40 }),
      closeEarly: fc.boolean(),
    })
    .map(({ policy, after, holdMs, instances, steps, closeEarly }) => {
      const { rps, burst } = rateOf(policy);
      const windows = WINDOW_ALGORITHMS.has(algorithm);
      const fullMs = windows ? windowMs(rps, burst) : durationMs(burst, rps);
      const spans = { token: fullMs / burst, full: fullMs, hold: holdMs, second: 1_000 };
      let now = CASE_EPOCH;
      // plain numbers, so a counterexample reads as what happened
      const plain = steps.map((seed): Step => {
        const { dt: d } = seed;
        let dt: number;
        if ('ms' in d) dt = d.ms;
        else if ('edge' in d) dt = Math.max(0, windowEnd(now, fullMs) - now + d.edge);
        else dt = Math.max(0, Math.round(spans[d.span] * d.times) + d.offset);
        now += dt;
        if ('refund' in seed) return { dt, refund: seed.refund };
        if ('pause' in seed) return { dt, pause: true };
        if ('factor' in seed) return { dt, scale: { instance: seed.instance % instances, factor: seed.factor } };
        return {
          dt,
          requests: seed.requests.map(({ instance, identity, cost }) => ({
            instance: instance % instances,
            identity,
            cost: 'cost' in cost ? cost.cost : burst * cost.times,
          })),
        };
      });
      return { policy, after, holdMs, instances, steps: plain, closeEarly };
    });
}

// ---------------------------------------------------------------------------------------------
// The ledger: every store call, run on the model too

/** A consume an instance sent the store: a take of a share, or a request decided there (`direct`). */
interface StoreConsume {
  /** Its place among the run's store calls. */
  index: number;
  instance: number;
  request: RateLimitRequest;
  /** Clock ms it was decided at. */
  at: number;
  /** The model's decision. */
  expected: RateLimitDecision;
  /** Ms the model says a request of its cost waits from then; 0 when admitted. */
  retryMs: number;
  /** What its charge holds: its cost, or what the last settle made it; 0 once refunded, or refused. */
  charged: number;
  /** The model's charge, for the model's refunds and settles; `undefined` once given back, or refused. */
  charge: Charge | undefined;
  /** Whether an instance handed the store's decisions to its caller: a request decided there, not a take. */
  direct: boolean;
}

/**
 * Every call the store ran, on the model too (property 1): each consume kept (`consumes`), each
 * answer compared with the model's, what differs kept in `problems` (a store call does not throw for
 * it, so the engine never sees it).
 */
class Ledger implements StoreObserver {
  readonly model: BucketModel;
  readonly consumes: StoreConsume[] = [];
  readonly problems: string[] = [];
  /** The rule of each key, as its last request gave it. */
  readonly rules = new Map<string, Rule>();
  /** The same per instance (`ruleKey`), until its factor changes. */
  private readonly instanceRules = new Map<string, Rule>();
  /** Store calls so far: consumes, settles, refunds. */
  calls = 0;
  private readonly byDecision = new WeakMap<RateLimitDecision, StoreConsume>();

  /** @param drops see `BucketModel`: false for Redis, which keeps every key on the tests' pinned clock */
  constructor(
    private readonly clock: ManualClock,
    drops: boolean,
  ) {
    this.model = new BucketModel(drops);
  }

  consume(instance: number, requests: readonly RateLimitRequest[], send: () => Promise<RateLimitDecision[]>): void {
    const now = this.clock.now();
    if (requests.length !== 1) this.problems.push(`a consume of ${requests.length} requests: one policy was given`);
    const [request] = requests;
    this.rules.set(request.key, request.rule);
    this.instanceRules.set(ruleKey(instance, request.key), request.rule);
    const { retryMs } = this.model.peek(request, now);
    const [expected] = this.model.consume(requests, now);
    const record: StoreConsume = {
      index: this.calls++,
      instance,
      request,
      at: now,
      expected,
      retryMs,
      charged: expected.allowed ? request.cost : 0,
      charge: expected.allowed ? this.model.charges(requests)[0] : undefined,
      direct: false,
    };
    this.consumes.push(record);
    void send().then((answer) => {
      for (const decision of answer) this.byDecision.set(decision, record);
      if (!sameDecisions(answer, [expected])) this.differs('consume', record.index, answer, [expected]);
    }, this.failed);
  }

  settle(
    _instance: number,
    settles: readonly RateLimitSettle[],
    send: () => Promise<(RateLimitDecision | undefined)[]>,
  ): void {
    const now = this.clock.now();
    const index = this.calls++;
    const expected = settles.map(({ decision, actual }) => {
      const record = this.byDecision.get(decision);
      if (record === undefined) {
        this.problems.push(`settle #${index}: of a decision the store never gave`);
        return undefined;
      }
      if (record.charge === undefined) return undefined;
      const settled = this.model.settle(record.charge, actual, now);
      record.charge = settled.charge;
      record.charged = actual;
      return settled.decision;
    });
    void send().then((answer) => {
      if (!sameDecisions(answer, expected)) this.differs('settle', index, answer, expected);
    }, this.failed);
  }

  refund(_instance: number, decisions: readonly RateLimitDecision[], send: () => Promise<void>): void {
    const now = this.clock.now();
    this.calls++;
    for (const decision of decisions) {
      const record = this.byDecision.get(decision);
      if (record?.charge === undefined) continue;
      this.model.refund([record.charge], now);
      record.charge = undefined;
      record.charged = 0;
    }
    void send().catch(this.failed);
  }

  /** The consume whose decisions these are, marked as a request the store decided; `undefined` for decisions no store call made. */
  answered(decisions: readonly RateLimitDecision[]): StoreConsume | undefined {
    const record = this.byDecision.get(decisions[0]);
    if (record !== undefined) record.direct = true;
    return record;
  }

  /**
   * Whether the model refuses a request of `cost` on `key` at `now` under the rule `instance` decides
   * it by; no when that is not known (the instance sent none of that key since its factor changed).
   */
  refuses(instance: number, key: string, cost: number, now: number): boolean {
    const rule = this.instanceRules.get(ruleKey(instance, key));
    return rule !== undefined && !this.model.peek({ key, policy: POLICY_NAME, rule, cost }, now).allowed;
  }

  /** Forgets the rules `instance` decided by: its factor has changed. */
  rescaled(instance: number): void {
    for (const key of [...this.instanceRules.keys()])
      if (key.startsWith(ruleKey(instance, ''))) this.instanceRules.delete(key);
  }

  /** The takes an instance sent for a key: its consumes that no caller got. Sound once every request sent so far has been answered. */
  takes(instance: number, key: string): StoreConsume[] {
    return this.consumes.filter((c) => c.instance === instance && c.request.key === key && !c.direct);
  }

  private differs(call: string, index: number, answer: unknown, expected: unknown): void {
    this.problems.push(`${call} #${index}: the store answered ${json(answer)}, the model ${json(expected)}`);
  }

  private readonly failed = (error: unknown): void => {
    this.problems.push(`a store call failed: ${String(error)}`);
  };
}

function ruleKey(instance: number, key: string): string {
  return `${instance} ${key}`;
}

/** Whether two lists of decisions are the same in every field (`undefined`: nothing settled). */
function sameDecisions(
  a: readonly (RateLimitDecision | undefined)[],
  b: readonly (RateLimitDecision | undefined)[],
): boolean {
  return (
    a.length === b.length &&
    a.every((decision, i) => {
      const other = b[i];
      if (decision === undefined || other === undefined) return decision === other;
      const fields = Object.keys(decision) as (keyof RateLimitDecision)[];
      return (
        fields.length === Object.keys(other).length && fields.every((field) => Object.is(decision[field], other[field]))
      );
    })
  );
}

function json(value: unknown): string {
  return JSON.stringify(value, (_, v: unknown) => (v === Infinity ? 'Infinity' : v));
}

// ---------------------------------------------------------------------------------------------
// Admissions, charged when they happen (property 3)

/**
 * A bucket charged with every admission at its instant, never refusing: how far past its limit the
 * instances took it. Its rule is the policy's own, under no factor: a factor below 1 on some
 * instance never lets the bucket admit more than that.
 */
class Admissions {
  private state: Held | undefined;
  private rule: Rule | undefined;

  /** @param rps the policy's own rate, tokens per second */
  constructor(private readonly rps: number) {}

  /** Charges an admission of `cost` at `now` (`rule`: a request's, maybe scaled); returns when it counts (for its refund). */
  admit(rule: Rule, cost: number, now: number): number {
    const { limit: _scaled, ...unscaled } = rule;
    this.rule ??= { ...unscaled, rps: SCALED_BY_LIMIT.has(rule.algorithm) ? rule.rps : this.rps, debt: UNBOUNDED_DEBT };
    const model = modelOf(this.rule);
    const current = model.current(this.state, now, this.rule);
    this.state = model.debit!(current, this.rule, cost);
    return current.at;
  }

  refund(cost: number, chargedAt: number, now: number): void {
    if (this.rule === undefined) return;
    const model = modelOf(this.rule);
    this.state = model.refund(model.current(this.state, now, this.rule), this.rule, cost, chargedAt);
  }

  /** Whole tokens past its limit at `now`, rounded up. */
  excess(now: number): number {
    if (this.rule === undefined) return 0;
    const model = modelOf(this.rule);
    return model.debt!(model.current(this.state, now, this.rule), this.rule);
  }
}

// ---------------------------------------------------------------------------------------------
// A run

/** One request's life: where it came from, when it arrived and when it was answered (in store calls). */
interface Asked {
  instance: number;
  key: string;
  cost: number;
  /** Store calls run before it arrived. */
  arrived: number;
  decisions: RateLimitDecision[];
  /** Store calls run before it was answered. */
  answered: number;
  /**
   * Whether the model refused it both when it arrived and when it was answered (see property 4):
   * between the two the store ran only calls of the same instant, so it refused it at the moment
   * the instance decided too, unless calls that gave back and calls that took both ran in between.
   */
  short: boolean;
}

/** An admitted request, for its refund. */
interface Admitted {
  instance: number;
  key: string;
  cost: number;
  decisions: RateLimitDecision[];
  fromShare: boolean;
  /** When the admissions model counts it. */
  countedAt: number;
  refunded: boolean;
}

/** What the runs saw, for `RATE_LIMIT_SHARES_STATS`. */
const seen = {
  runs: 0,
  pauses: 0,
  takes: 0,
  refusedTakes: 0,
  fromShares: 0,
  byStore: 0,
  storeRefusals: 0,
  localShort: 0,
  localWaiting: 0,
  bucketExcess: 0,
};

let redis: Redis;
const prefix = `rl-shares-diff-${randomUUID()}:`;
let runs = 0;

beforeAll(async () => {
  redis = await connectTestRedis();
});
afterAll(async () => {
  await redis.quit();
  if (process.env.RATE_LIMIT_SHARES_STATS !== undefined) console.log(seen);
});

type Kind = 'memory' | 'redis';

async function replay(run: Run, kind: Kind): Promise<void> {
  const { policy, instances } = run;
  const runPrefix = `${prefix}${runs++}:`;
  const clock = new ManualClock(CASE_EPOCH);
  const store: RateLimitStore =
    kind === 'memory' ? new MemoryStore({ clock }) : new RedisStore({ client: redis, clock, cacheRefusals: false });
  const ledger = new Ledger(clock, kind === 'memory');
  const serial = new Serial(!store.inProcess);
  const limiters = Array.from(
    { length: instances },
    (_, i) =>
      new StandaloneLimiter(
        resolveOptions({
          prefix: runPrefix,
          shares: { after: run.after, hold: `${run.holdMs}ms` },
          // a store call that fails fails the run; none is slow enough on a quiet Redis to time out
          failMode: 'closed',
          timeout: 10_000,
        }),
        new ObservedStore(store, ledger, serial, i),
      ),
  );
  const keys = IDENTITIES.map((identity) => bucketKey(runPrefix, POLICY_NAME, policy.algorithm, identity));
  const admitted: Admitted[] = [];
  /** Per instance and key: tokens admitted from shares, less those given back (property 2). */
  const fromShares = limiters.map(() => new Map<string, number>(keys.map((key) => [key, 0])));
  const admissions = new Map<string, Admissions>(keys.map((key) => [key, new Admissions(rateOf(policy).rps)]));
  /** Per key, the most tokens shares held at once so far (property 3, buckets). */
  const mostHeld = new Map<string, number>(keys.map((key) => [key, 0]));
  /** The instances' `beforeApplicationShutdown`, once begun; then `shutdown` ends them (`onApplicationShutdown`). */
  let closing: Promise<unknown> | undefined;
  const beginShutdown = (): Promise<unknown> =>
    (closing ??= Promise.all(limiters.map((limiter) => limiter.beforeApplicationShutdown())));
  let shutDown = false;
  const shutdown = async (): Promise<void> => {
    if (shutDown) return;
    shutDown = true;
    await beginShutdown();
    for (const limiter of limiters) await limiter.onApplicationShutdown();
    await serial.idle();
  };

  /** What each instance's takes of a key hold in the store, tokens. */
  const taken = (instance: number, key: string): number =>
    ledger.takes(instance, key).reduce((sum, take) => sum + take.charged, 0);

  const check = (step: number, what: string, ok: boolean, detail: () => unknown): void => {
    if (!ok) expect({ step, [what]: detail() }).toEqual({ step, [what]: 'holds' });
  };

  try {
    for (const [index, step] of run.steps.entries()) {
      clock.advance(step.dt);
      const now = clock.now();
      if ('scale' in step) {
        limiters[step.scale.instance].setScale(POLICY_NAME, step.scale.factor);
        ledger.rescaled(step.scale.instance);
      } else if ('pause' in step) {
        await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
        seen.pauses++;
      } else if ('refund' in step) {
        const open = admitted.filter((a) => !a.refunded);
        const given = open[open.length - step.refund];
        if (given !== undefined) {
          given.refunded = true;
          await limiters[given.instance].refund(given.decisions);
          if (given.fromShare)
            fromShares[given.instance].set(given.key, fromShares[given.instance].get(given.key)! - given.cost);
          admissions.get(given.key)!.refund(given.cost, given.countedAt, now);
        }
      } else {
        const answers = Promise.all(
          step.requests.map(({ instance, identity, cost }) => {
            const arrived = ledger.calls;
            const key = keys[identity];
            const shortThen = ledger.refuses(instance, key, cost, now);
            return limiters[instance].consume(IDENTITIES[identity], policy, cost).then((decisions): Asked => ({
              instance,
              key,
              cost,
              arrived,
              decisions,
              answered: ledger.calls,
              short: shortThen && ledger.refuses(instance, key, cost, now),
            }));
          }),
        );
        if (run.closeEarly && index === run.steps.length - 1) {
          // the requests' store calls sent (a remote store's on their way), not answered yet
          await new Promise((resolve) => setImmediate(resolve));
          void beginShutdown();
        }
        const asked = await answers;
        // every request of the step answered: each consume is known as a take or a request decided there
        const byStore = asked.map((a) => ledger.answered(a.decisions));
        asked.forEach((a, i) => {
          const [decision] = a.decisions;
          if (decision.allowed) {
            const fromShare = byStore[i] === undefined;
            if (fromShare) fromShares[a.instance].set(a.key, fromShares[a.instance].get(a.key)! + a.cost);
            const countedAt = admissions.get(a.key)!.admit(ledger.rules.get(a.key)!, a.cost, now);
            admitted.push({ ...a, fromShare, countedAt, refunded: false });
            seen[fromShare ? 'fromShares' : 'byStore']++;
            return;
          }
          if (byStore[i] !== undefined) return void seen.storeRefusals++;
          if (a.short) return void seen.localShort++;
          check(index, 'refusal explained', waiting(ledger, a, now), () => ({
            request: { instance: a.instance, key: a.key, cost: a.cost, now },
            decision,
            takes: ledger.takes(a.instance, a.key).map(({ index: call, at, request, expected, retryMs }) => ({
              call,
              at,
              size: request.cost,
              allowed: expected.allowed,
              retryMs,
            })),
            arrived: a.arrived,
            answered: a.answered,
          }));
          seen.localWaiting++;
        });
      }
      await serial.idle();
      check(index, 'store is the model', ledger.problems.length === 0, () => ledger.problems);
      for (const key of keys) {
        let held = 0;
        limiters.forEach((_, i) => {
          const share = fromShares[i].get(key)!;
          const take = taken(i, key);
          check(index, 'no instance admits more than it took', share <= take + 1e-9, () => ({
            instance: i,
            key,
            fromShares: share,
            taken: take,
          }));
          held += take - share;
        });
        mostHeld.set(key, Math.max(mostHeld.get(key)!, held));
        const excess = admissions.get(key)!.excess(now);
        const windows = WINDOW_ALGORITHMS.has(policy.algorithm);
        if (!windows) seen.bucketExcess = Math.max(seen.bucketExcess, excess);
        check(
          index,
          windows ? 'no window admits past its limit' : 'a bucket admits past empty only what shares held',
          excess <= (windows ? 0 : Math.ceil(mostHeld.get(key)!)),
          () => ({ key, excess, mostHeld: mostHeld.get(key) }),
        );
        const rule = ledger.rules.get(key);
        if (rule === undefined) continue;
        const request = { key, policy: POLICY_NAME, rule, cost: 1 };
        const [peeked] = await store.peek([request]);
        const expected = toDecision(request, ledger.model.peek(request, now));
        check(index, 'a peek is the model', sameDecisions([peeked], [expected]), () => ({ key, peeked, expected }));
      }
    }
    await shutdown();
    check(run.steps.length, 'store is the model', ledger.problems.length === 0, () => ledger.problems);
    for (const key of keys)
      limiters.forEach((_, i) => {
        const share = fromShares[i].get(key)!;
        const take = taken(i, key);
        check(run.steps.length, 'shares give back what they did not use', Math.abs(share - take) < 1e-9, () => ({
          instance: i,
          key,
          fromShares: share,
          taken: take,
        }));
      });
    check(
      run.steps.length,
      'every bucket is one of the run',
      [...ledger.rules.keys()].every((key) => keys.includes(key)),
      () => [...ledger.rules.keys()],
    );
    seen.runs++;
    seen.takes += ledger.consumes.filter((c) => !c.direct).length;
    seen.refusedTakes += ledger.consumes.filter((c) => !c.direct && !c.expected.allowed).length;
  } finally {
    await shutdown();
    await store.close?.();
    if (kind === 'redis') await redis.del(...keys);
  }
}

/**
 * Whether the instance that refused `a` waits after a refused take (property 4): a take of its on
 * the key, run before the refusal, refused at `t` with the model's wait `w` for its size,
 * `t <= now < t + w`, and no take of its on the key granted after it before `a` arrived.
 */
function waiting(ledger: Ledger, a: Asked, now: number): boolean {
  const takes = ledger.takes(a.instance, a.key).filter((take) => take.index < a.answered);
  return takes.some(
    (take, i) =>
      !take.expected.allowed &&
      take.at <= now &&
      now < take.at + take.retryMs &&
      !takes.slice(i + 1).some((later) => later.expected.allowed && later.index < a.arrived),
  );
}

describe.each<[Kind]>([['memory'], ['redis']])(
  'hot-key shares on a %s store: the instances and the model agree',
  (kind) => {
    it.each(SHARED.map((algorithm) => [algorithm]))(
      'with a %s policy',
      async (algorithm) => {
        await fc.assert(
          fc.asyncProperty(runArbitrary(algorithm), (run) => replay(run, kind)),
          { numRuns: RUNS, seed: SEED, timeout: 30_000 },
        );
      },
      Math.max(30_000, RUNS * 300),
    );
  },
);
