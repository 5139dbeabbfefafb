import { randomUUID } from 'node:crypto';
import { ALGORITHMS, type Rule } from '../../lib/algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../../lib/algorithms/registry.js';
import { bucketKey } from '../../lib/keys/bucket-key.js';
import type {
  RateLimitDecision,
  RateLimitRequest,
  RateLimitStore,
} from '../../lib/stores/rate-limit-store.interface.js';
import { ManualClock } from '../../lib/testing/manual-clock.js';
import { CASE_EPOCH, CASES, longestTtlMs, ruleOf } from '../cases/index.js';

/**
 * What a store keeps under its keys, for a store that lets a test look: the shared tests then
 * check what each of their requests left behind, as well as what it was answered.
 */
export interface StoredKeys {
  /** Entries a `sliding_window_log` key holds: one per token taken, none for a refused request. */
  logEntries(key: string): Promise<number>;
  /** When `key` expires, ms on the store's clock (the tests' clock: `CASE_EPOCH` and after). */
  expiresAt(key: string): Promise<number>;
  /**
   * How much later than its time on the store's clock `key` may expire, ms: a store that counts a
   * TTL from its own real time (Redis) is late by up to the longest call that wrote it; 0 for one
   * that counts on the clock it decides on.
   */
  lateByMs(key: string): number;
}

/** A store whose clock the test sets (ms after `CASE_EPOCH`) before each step. */
export interface ClockedStore {
  store: RateLimitStore;
  setNow(at: number): void;
  /** `store.consume`, or a wrapper that notes what the call charged. */
  consume(requests: RateLimitRequest[]): Promise<RateLimitDecision[]>;
  /** Absent when the store keeps its keys to itself. */
  keys?: StoredKeys;
}

/** A store made on a `ManualClock` at `CASE_EPOCH` (any `{ now() }` does), set before each step. */
export function clocked<Store extends RateLimitStore>(
  make: (clock: ManualClock) => Store,
  keys?: (store: Store) => StoredKeys,
): () => ClockedStore {
  return () => {
    const clock = new ManualClock(CASE_EPOCH);
    const store = make(clock);
    return {
      store,
      setNow: (at) => void clock.set(CASE_EPOCH + at),
      consume: (requests) => store.consume(requests),
      keys: keys?.(store),
    };
  };
}

/**
 * The tests' requests under `prefix`: one for the bucket of policy `name` and `identity`, keyed as
 * the module keys it.
 */
export function requestsUnder(prefix: string) {
  return (name: string, rule: Rule, identity: string, cost = 1): RateLimitRequest => ({
    key: bucketKey(prefix, name, rule, identity),
    policy: name,
    rule,
    cost,
  });
}

/**
 * The algorithms a policy may give `blockFor` (validation refuses it with `concurrency` and
 * `quota`, whose refusals a block would only outlast).
 */
const BLOCKABLE = ALGORITHMS.filter((algorithm) => algorithm !== 'concurrency' && algorithm !== 'quota');

/** The algorithms whose policies may settle (a request charged its real cost when it ends). */
const SETTLING = ALGORITHMS.filter((algorithm) => ALGORITHM_DESCRIPTORS[algorithm].refuses?.settle === undefined);

/**
 * Time for a table's longest case, 20 ms a step: a step is a store call, about 1 ms on Redis on a
 * quiet 2-core machine; 5,001 steps ran past jest's 30 s beside busy processes.
 */
function stepsTimeout(cases: readonly { steps: readonly unknown[] }[]): number {
  return Math.max(30_000, 20 * Math.max(...cases.map(({ steps }) => steps.length)));
}

/**
 * The tests every store must pass, one `describe` per store: each algorithm's table of cases
 * (test/cases), all-or-nothing across algorithms, blocks, peek and reset, and what a call may
 * carry (repeated keys, bad costs). A store's name starts with its class's name, the one its
 * messages give (`MemoryStore`, `RedisStore (Redis Cluster)`).
 *
 * @param prefix of every key the tests make, so a spec can find them afterwards
 */
export function describeStoreCases(stores: ReadonlyArray<readonly [string, () => ClockedStore]>, prefix: string): void {
  const request = requestsUnder(prefix);

  describe.each(stores)('%s', (storeName, makeStore) => {
    describe.each(CASES)('%s table', (_algorithm, cases) => {
      it.each(cases)(
        '$name',
        async ({ name, rule, steps }) => {
          const { store, setNow, consume } = makeStore();
          const req = request('case', rule, `${storeName}:${name}`);
          const decisions: RateLimitDecision[] = [];
          for (const [
            step,
            { at, cost = 1, rule: changed = rule, release, settle, expect: expected },
          ] of steps.entries()) {
            setNow(at);
            if (release !== undefined) await store.refund!([decisions[release]]);
            if (settle !== undefined) {
              const [settled] = await store.settle!([{ decision: decisions[settle.step], actual: settle.actual }]);
              expect({ step, settled }).toMatchObject({ step, settled: settle.expect ?? {} });
              // a debt exactly: none where the table gives none
              expect({ step, settled: settled?.debt }).toEqual({ step, settled: settle.expect?.debt });
            }
            const [decision] = await consume([{ ...req, rule: changed, cost }]);
            decisions.push(decision);
            expect({ step, ...decision }).toMatchObject({ step, ...expected });
            expect({ step, debt: decision.debt }).toEqual({ step, debt: expected.debt });
          }
        },
        stepsTimeout(cases),
      );
    });

    describe.each(ALGORITHMS.map((a) => [a]))('all-or-nothing with a tight %s per-key policy', (tightAlgorithm) => {
      it.each(ALGORITHMS.map((a) => [a]))(
        'leaves a loose %s per-IP policy uncharged when it refuses',
        async (looseAlgorithm) => {
          const { store, setNow, consume, keys } = makeStore();
          setNow(1_000);
          const id = randomUUID();
          const tight = request('tight', ruleOf(tightAlgorithm, 1, 2), `api-key:${id}`);
          const loose = request('loose', ruleOf(looseAlgorithm, 100, 1000), `ip:${id}`);
          const both = async () => (await consume([tight, loose])).map((d) => [d.allowed, d.remaining]);
          expect(await both()).toEqual([
            [true, 1],
            [true, 999],
          ]);
          expect(await both()).toEqual([
            [true, 0],
            [true, 998],
          ]);
          // refused by the tight policy: the loose one keeps its 998
          expect(await both()).toEqual([
            [false, 0],
            [true, 998],
          ]);
          expect(await both()).toEqual([
            [false, 0],
            [true, 998],
          ]);
          expect((await store.peek([loose]))[0].remaining).toBe(998);
          if (keys !== undefined) {
            for (const key of [tight.key, loose.key]) {
              if (key.includes(':swl:')) expect(await keys.logEntries(key)).toBe(2); // no entry for a refused request
            }
          }
        },
      );
    });

    it.each(BLOCKABLE.map((a) => [a]))(
      '%s with blockFor: only a refusal of its own starts a block, and a refusal still takes nothing',
      async (algorithm) => {
        const { store, setNow, consume, keys } = makeStore();
        const id = randomUUID();
        // 1 token a second, 2 at most, a block of 60 s; beside it a policy that admits one request in all
        const blocking = request('blocking', { ...ruleOf(algorithm, 1, 2), blockMs: 60_000 }, `ip:${id}`);
        const once = request('once', ruleOf('fixed_window', 1 / 3600, 1), `user:${id}`);
        setNow(1_000);
        expect((await consume([blocking, once])).map((d) => d.allowed)).toEqual([true, true]);
        // refused by `once` alone: `blocking` admits it, so no block starts (and nothing is charged)
        expect((await consume([blocking, once])).map((d) => [d.allowed, d.remaining])).toEqual([
          [true, 1],
          [false, 0],
        ]);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
        // refused by `blocking` itself: the block starts, for 60 s whatever refills
        expect(await consume([blocking])).toMatchObject([{ allowed: false, remaining: 0, retryAfter: 60 }]);
        setNow(31_000);
        expect(await consume([blocking])).toMatchObject([{ allowed: false, remaining: 0, retryAfter: 30 }]);
        // a peek sees the block and starts none
        expect(await store.peek([blocking])).toMatchObject([{ allowed: false, retryAfter: 30 }]);
        setNow(61_000);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 1 }]);
        if (keys !== undefined) {
          // the key lives until the bucket is full again (2 s at most): the block is over
          const lives = (await keys.expiresAt(blocking.key)) - (CASE_EPOCH + 61_000);
          expect(lives).toBeGreaterThan(0);
          expect(lives).toBeLessThanOrEqual(longestTtlMs(ruleOf(algorithm, 1, 2)) + keys.lateByMs(blocking.key));
        }
      },
    );

    it.each(BLOCKABLE.map((a) => [a]))(
      "%s with blockFor then 'reset': the block's end starts the bucket full, and the key lives no longer",
      async (algorithm) => {
        const { setNow, consume, keys } = makeStore();
        setNow(0);
        // 2 per 2 hours, a block of 60 s: kept, the bucket would be empty for hours after the block
        const rule = { ...ruleOf(algorithm, 1 / 3600, 2), blockMs: 60_000, blockResets: true as const };
        const blocking = request('reset-block', rule, randomUUID());
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 1 }]);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
        // every time is the block's: the bucket is full the moment it ends
        expect(await consume([blocking])).toMatchObject([
          { allowed: false, remaining: 0, retryAfter: 60, resetAfter: 60, fullAfter: 60 },
        ]);
        if (keys !== undefined) {
          const late = (await keys.expiresAt(blocking.key)) - (CASE_EPOCH + 60_000);
          expect(late >= 0 && late <= keys.lateByMs(blocking.key)).toBe(true);
        }
        setNow(59_999);
        expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 1 }]);
        setNow(60_000);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 1 }]);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
        expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 60 }]);
      },
    );

    it.each(BLOCKABLE.map((a) => [a]))(
      '%s with blockFor: a block keeps its key alive until it ends',
      async (algorithm) => {
        const { setNow, consume, keys } = makeStore();
        setNow(0);
        const blocking = request('ttl-block', { ...ruleOf(algorithm, 1000, 1), blockMs: 3_600_000 }, randomUUID());
        await consume([blocking]);
        expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 3600, fullAfter: 3600 }]);
        if (keys !== undefined) {
          const late = (await keys.expiresAt(blocking.key)) - (CASE_EPOCH + 3_600_000);
          expect(late >= 0 && late <= keys.lateByMs(blocking.key)).toBe(true);
        }
        setNow(3_599_999);
        expect(await consume([blocking])).toMatchObject([{ allowed: false, retryAfter: 1 }]);
        setNow(3_600_000);
        expect(await consume([blocking])).toMatchObject([{ allowed: true, remaining: 0 }]);
      },
    );

    it.each(ALGORITHMS.map((a) => [a]))('%s: peeks without charging and resets to full', async (algorithm) => {
      const { store, setNow, consume } = makeStore();
      setNow(0);
      const req = request('peek', ruleOf(algorithm, 1, 3), randomUUID(), 2);
      await consume([req]);
      expect((await store.peek([req]))[0]).toMatchObject({ allowed: false, remaining: 1 });
      expect((await store.peek([req]))[0].remaining).toBe(1);
      await store.reset([req.key]);
      expect((await store.peek([req]))[0]).toMatchObject({ allowed: true, remaining: 3 });
    });
  });

  describe.each(stores)('%s: what a call carries', (storeName, makeStore) => {
    const where = (method: string) => `Invalid argument to ${storeName.split(' ')[0]}.${method}:`;
    /** The error `promise` rejects with (`undefined` when it resolves). */
    const rejection = (promise: Promise<unknown>) =>
      promise.then(
        () => undefined,
        (error: unknown) => error as Error,
      );

    it.each(ALGORITHMS.map((a) => [a]))(
      '%s: decides a key given twice in one call once, charging it once',
      async (algorithm) => {
        const { store, setNow, consume } = makeStore();
        setNow(1_000);
        const req = request('twice', ruleOf(algorithm, 1, 5), randomUUID(), 2);
        const decisions = await consume([req, { ...req, policy: 'again' }]);
        expect(decisions.map((d) => [d.policy, d.allowed, d.remaining])).toEqual([
          ['twice', true, 3],
          ['again', true, 3],
        ]);
        expect((await store.peek([req, req])).map((d) => d.remaining)).toEqual([3, 3]);
      },
    );

    it('refuses a key given twice with a different rule or cost, charging nothing', async () => {
      const { store, setNow } = makeStore();
      setNow(1_000);
      const req = request('conflict', ruleOf('token_bucket', 1, 5), randomUUID());
      const other = request('other', ruleOf('token_bucket', 1, 5), randomUUID());
      for (const second of [
        { ...req, rule: ruleOf('token_bucket', 1, 6) },
        { ...req, cost: 2 },
      ]) {
        const error = await rejection(store.consume([req, other, second]));
        expect(error).toBeInstanceOf(TypeError);
        expect(error?.message).toMatch(`${where('consume')} requests[0] and requests[2] are for the same key`);
      }
      expect((await store.peek([req, other])).map((d) => d.remaining)).toEqual([5, 5]);
    });

    it.each(SETTLING.map((a) => [a]))(
      '%s: takes a cost of 0 for a rule that settles (a debt), charging nothing, and refuses it for any other',
      async (algorithm) => {
        const { store, setNow } = makeStore();
        setNow(1_000);
        const settling = request('zero', { ...ruleOf(algorithm, 1, 5), debt: 5 }, randomUUID(), 0);
        expect(await store.consume([settling])).toMatchObject([{ allowed: true, remaining: 5, retryAfter: 0 }]);
        expect(await store.peek([{ ...settling, cost: 5 }])).toMatchObject([{ allowed: true, remaining: 5 }]);
        const plain = request('zero', ruleOf(algorithm, 1, 5), randomUUID(), 0);
        const error = await rejection(store.consume([plain]));
        expect(error).toBeInstanceOf(RangeError);
        expect(error?.message).toMatch(`${where('consume')} "requests[0].cost" must be a finite number > 0`);
        const negative = await rejection(store.peek([{ ...settling, cost: -1 }]));
        expect(negative).toBeInstanceOf(RangeError);
        expect(negative?.message).toMatch(`${where('peek')} "requests[0].cost" must be a finite number >= 0`);
      },
    );

    it('settles nothing for a decision with nothing to settle, and rejects a bad settle before settling anything', async () => {
      const { store, setNow } = makeStore();
      setNow(1_000);
      const req = request('settle', { ...ruleOf('token_bucket', 1, 5), debt: 5 }, randomUUID(), 2);
      const [admitted] = await store.consume([req]);
      const [refused] = await store.consume([{ ...req, cost: 4 }]);
      expect(refused.allowed).toBe(false);
      // a refused decision took nothing; a copy of a decision is not one the store made
      expect(
        await store.settle!([
          { decision: refused, actual: 5 },
          { decision: { ...admitted }, actual: 5 },
        ]),
      ).toEqual([undefined, undefined]);
      for (const [actual, type] of [
        [-1, RangeError],
        [NaN, RangeError],
        [Infinity, RangeError],
        ['3', TypeError],
      ] as const) {
        const bad = [
          { decision: admitted, actual: 4 },
          { decision: admitted, actual: actual as number },
        ];
        const error = await rejection(store.settle!(bad));
        expect(error).toBeInstanceOf(type);
        expect(error?.message).toMatch(`${where('settle')} "settles[1].actual" must be a finite number >= 0`);
      }
      expect(await rejection(store.settle!([null as never]))).toBeInstanceOf(TypeError);
      // nothing was settled: the decision holds its 2 still, which a settle to 4 makes up
      expect(await store.settle!([{ decision: admitted, actual: 4 }])).toMatchObject([
        { allowed: true, remaining: 1, retryAfter: 0 },
      ]);
      // a refund gives back what it holds since (4); settled after that, it has nothing to settle
      await store.refund!([admitted]);
      expect((await store.peek([req]))[0].remaining).toBe(5);
      expect(await store.settle!([{ decision: admitted, actual: 1 }])).toEqual([undefined]);
      expect((await store.peek([req]))[0].remaining).toBe(5);
    });

    it.each<[string, unknown, ErrorConstructor]>([
      ['NaN', NaN, RangeError],
      ['-1', -1, RangeError],
      ["'abc'", 'abc', TypeError],
      ['null', null, TypeError],
      ['{}', {}, TypeError],
    ])('rejects a call with a cost of %s, before it reaches the store, charging nothing', async (_name, cost, type) => {
      const { store, setNow } = makeStore();
      setNow(1_000);
      const good = request('good', ruleOf('sliding_window_log', 1, 5), randomUUID());
      const bad = { ...request('bad', ruleOf('sliding_window_log', 1, 5), randomUUID()), cost: cost as number };
      for (const method of ['consume', 'peek'] as const) {
        const error = await rejection(store[method]([good, bad]));
        expect(error).toBeInstanceOf(type);
        expect(error?.message).toMatch(`${where(method)} "requests[1].cost" must be a finite number > 0`);
      }
      expect((await store.peek([good, { ...bad, cost: 1 }])).map((d) => d.remaining)).toEqual([5, 5]);
    });
  });
}
