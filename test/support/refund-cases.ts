import { randomUUID } from 'node:crypto';
import { ALGORITHMS } from '../../lib/algorithms/algorithm.types.js';
import type { RateLimitStore } from '../../lib/stores/rate-limit-store.interface.js';
import { ruleOf } from '../cases/index.js';
import { requestsUnder } from './store-cases.js';

/** A store with a `refund`, whose clock the test sets (ms after `CASE_EPOCH`) before each step. */
export interface RefundingStore {
  store: RateLimitStore;
  setNow(at: number): void;
}

/**
 * The refund tests every store with a `refund` must pass, one `describe` per store: a charge given
 * back leaves the buckets as if it never came, nothing comes back for a refused request or an
 * ended window, a log loses the entries of its own ms only, and a decision is given back once.
 *
 * @param prefix of every key the tests make
 */
export function describeRefundCases(
  stores: ReadonlyArray<readonly [string, () => RefundingStore]>,
  prefix: string,
): void {
  const request = requestsUnder(prefix);

  describe.each(stores)('%s refund', (_storeName, makeStore) => {
    // times are whole multiples of 500 ms and rps is 2: every refill is a whole token, so the
    // buckets compared below are equal to the bit, not up to rounding
    it.each(ALGORITHMS.map((a) => [a]))(
      "gives a %s charge (and the other policy's) back: the buckets are as if it never came",
      async (algorithm) => {
        const { store, setNow } = makeStore();
        const id = randomUUID();
        const rule = ruleOf(algorithm, 2, 6);
        const pair = (who: string, cost: number) => [
          request('a', rule, `user:${who}`, cost),
          request('b', ruleOf('token_bucket', 2, 6), `ip:${who}`, cost),
        ];
        // the same history on two identities, then one more charge on the first, given back (all
        // within one window: 3 s, aligned to the clock like CASE_EPOCH)
        for (const [at, cost] of [
          [0, 1],
          [500, 1],
          [1_000, 2],
        ]) {
          setNow(at);
          for (const who of [`${id}-refunded`, `${id}-never`])
            expect((await store.consume(pair(who, cost))).every((d) => d.allowed)).toBe(true);
        }
        setNow(1_500);
        const charged = await store.consume(pair(`${id}-refunded`, 2));
        expect(charged.every((d) => d.allowed)).toBe(true);
        setNow(2_000);
        await store.refund!(charged);
        for (const cost of [1, 3, 6]) {
          const [refunded, never] = await Promise.all([
            store.peek(pair(`${id}-refunded`, cost)),
            store.peek(pair(`${id}-never`, cost)),
          ]);
          expect(refunded).toEqual(never);
        }
      },
    );

    it('gives nothing back for a request one of its policies refused (it took nothing), whatever the others said', async () => {
      const { store, setNow } = makeStore();
      const id = randomUUID();
      // two identities: on the Cluster two hash slots, where the admitting slot charges and is given back at once
      const tight = request('tight', ruleOf('fixed_window', 1, 1), `user:${id}`);
      const loose = request('loose', ruleOf('token_bucket', 1, 10), `ip:${id}`);
      setNow(0);
      await store.consume([tight, loose]);
      const refused = await store.consume([tight, loose]);
      expect(refused.map((d) => d.allowed)).toEqual([false, true]);
      await store.refund!(refused);
      expect((await store.peek([tight, loose])).map((d) => d.remaining)).toEqual([0, 9]);
    });

    it('gives nothing back for a charge whose fixed window has ended, nor for a refused request', async () => {
      const { store, setNow } = makeStore();
      const id = randomUUID();
      const window = request('w', ruleOf('fixed_window', 2, 4), `user:${id}`); // a 2 s window
      setNow(0);
      const first = await store.consume([{ ...window, cost: 3 }]);
      const refused = await store.consume([{ ...window, cost: 2 }]);
      expect(refused[0].allowed).toBe(false);
      await store.refund!(refused);
      expect((await store.peek([window]))[0].remaining).toBe(1);
      setNow(2_000);
      await store.consume([window]);
      await store.refund!(first);
      expect((await store.peek([window]))[0].remaining).toBe(3);
    });

    it('gives an anchored fixed window charge back only to the window it was taken from', async () => {
      const { store, setNow } = makeStore();
      const rule = { ...ruleOf('fixed_window', 2, 4), anchor: 'first-request' as const }; // 2 s windows
      const window = request('wa', rule, `user:${randomUUID()}`);
      // [500 ms, 2500 ms)
      setNow(500);
      await store.consume([{ ...window, cost: 2 }]);
      setNow(2_000);
      const late = await store.consume([window]);
      await store.refund!(late);
      expect((await store.peek([window]))[0].remaining).toBe(2);
      const kept = await store.consume([window]);
      // the next window, [3000 ms, 5000 ms), starts at its first request: the charge at 2000 ms is not in it
      setNow(3_000);
      await store.consume([window]);
      await store.refund!(kept);
      expect((await store.peek([window]))[0]).toMatchObject({ remaining: 3, resetAfter: 2 });
    });

    it('gives a sliding_window_log charge back from the ms it was taken, leaving the entries of other times', async () => {
      const { store, setNow } = makeStore();
      const log = request('log', ruleOf('sliding_window_log', 1, 4), `user:${randomUUID()}`); // a 4 s window
      setNow(0);
      await store.consume([log]);
      setNow(1_000);
      const charged = await store.consume([{ ...log, cost: 2 }]);
      setNow(2_000);
      await store.consume([log]);
      await store.refund!(charged);
      // left: the entries of 0 and 2 s; the first leaves the window at 4 s, the second at 6 s
      expect((await store.peek([log]))[0]).toMatchObject({ remaining: 2 });
      setNow(4_000);
      expect((await store.peek([log]))[0]).toMatchObject({ remaining: 3 });
      setNow(5_500);
      expect((await store.peek([log]))[0]).toMatchObject({ remaining: 3 });
    });
  });

  describe.each(stores)('%s refund, repeated', (_storeName, makeStore) => {
    it.each(ALGORITHMS.map((a) => [a]))(
      'gives a %s decision back once, however often it is refunded, one after another or at once',
      async (algorithm) => {
        const { store, setNow } = makeStore();
        const id = randomUUID();
        const pair = [
          request('a', ruleOf(algorithm, 0.001, 5), `user:${id}`),
          request('b', ruleOf('token_bucket', 0.001, 5), `ip:${id}`),
        ];
        setNow(0);
        const first = await store.consume(pair);
        for (let i = 0; i < 4; i++) await store.consume(pair);
        // one request's charge, given back five times: twice in turn, then three refunds racing
        await store.refund!(first);
        await store.refund!(first);
        await Promise.all([store.refund!(first), store.refund!([first[1]]), store.refund!([first[0]])]);
        const admitted = [];
        for (let i = 0; i < 3; i++) admitted.push((await store.consume(pair)).every((d) => d.allowed));
        expect(admitted).toEqual([true, false, false]);
      },
    );
  });
}
