/**
 * A third store, written as a user would write one: from `nestjs-ratelimit/store` alone. It keeps
 * each bucket's state serialised under its key in a key-value server reached asynchronously (here
 * a plain `Map` behind promises, as a remote server would be), decides on its own clock, gives
 * charges back through the charge record and forgets buckets on reset. test/unit/store/kit-store.spec.ts
 * holds it to the case tables every store passes.
 */
import {
  type Charge,
  chargedCost,
  checkSettles,
  clockReader,
  decideAll,
  distinctRequests,
  expiresAt,
  expiryAfter,
  type Held,
  modelOf,
  type RateLimitDecision,
  type RateLimitRequest,
  type RateLimitSettle,
  type RateLimitStore,
  RateLimitStoreError,
  restoreCharge,
  settledCharge,
  settleState,
  spreadDecisions,
  type StoreClock,
  storeClock,
  takeCharge,
  toDecision,
  type Verdict,
} from 'nestjs-ratelimit/store';

/** What a call to a `KeyValueServer` that is down fails with. */
export class UnreachableError extends Error {
  override readonly name = 'UnreachableError';
}

/** A value the server holds, and when it drops it (ms on the server's clock). */
interface Stored {
  value: string;
  expiresAt: number;
}

/**
 * A key-value server as a remote store sees one: strings under keys, each dropped at an absolute
 * time (as Redis's `SET ... PXAT`), every call asynchronous and able to fail. An expired value is
 * dropped when it is next read, so no timer runs per key.
 */
export class KeyValueServer {
  private readonly values = new Map<string, Stored>();
  /** While true, every call fails as one to a server out of reach does. */
  down = false;

  /** @param now the server's clock, integer ms */
  constructor(private readonly now: () => number) {}

  /** The values under `keys`, `undefined` where there is none or it expired. */
  async get(keys: readonly string[]): Promise<(string | undefined)[]> {
    this.reachable();
    const now = this.now();
    return keys.map((key) => {
      const stored = this.values.get(key);
      if (stored === undefined || stored.expiresAt > now) return stored?.value;
      this.values.delete(key);
      return undefined;
    });
  }

  /** Writes every entry, each to be dropped at its `expiresAt` (ms on the server's clock). */
  async set(entries: ReadonlyArray<{ key: string } & Stored>): Promise<void> {
    this.reachable();
    for (const { key, value, expiresAt } of entries) this.values.set(key, { value, expiresAt });
  }

  async delete(keys: readonly string[]): Promise<void> {
    this.reachable();
    for (const key of keys) this.values.delete(key);
  }

  async deleteUnder(prefix: string): Promise<void> {
    this.reachable();
    for (const key of this.values.keys()) if (key.startsWith(prefix)) this.values.delete(key);
  }

  /** What a test may look at: the value under `key` and when it is dropped, as stored (expired or not). */
  peekStored(key: string): Stored | undefined {
    return this.values.get(key);
  }

  private reachable(): void {
    if (this.down) throw new UnreachableError('connect ECONNREFUSED');
  }
}

/** Options of `KitStore`. */
export interface KitStoreOptions {
  /** The clock the store decides on, integer ms: any `{ now() }` (a `ManualClock`). Default `Date.now`. */
  clock?: StoreClock;
  /** The server to keep buckets in; default one of the store's own, on the store's clock. */
  server?: KeyValueServer;
}

/**
 * A store that keeps its buckets in a `KeyValueServer`, one JSON state per key. Each call reads
 * every key it needs, decides with `decideAll` and writes back what the verdict says, one call
 * after another: a server shared by several processes would run the three steps as one atomic
 * script or transaction instead, as `RedisStore` does.
 *
 * @example RateLimitModule.forRoot({ store: new KitStore({ clock: new ManualClock() }) })
 */
export class KitStore implements RateLimitStore {
  readonly clock: StoreClock | undefined;
  readonly server: KeyValueServer;
  private readonly now: () => number;
  /** The call in progress: the next one starts when it ends, whether it failed or not. */
  private turn: Promise<unknown> = Promise.resolve();

  constructor(options: KitStoreOptions = {}) {
    this.now = clockReader(options.clock) ?? Date.now;
    this.clock = storeClock(options.clock);
    this.server = options.server ?? new KeyValueServer(this.now);
  }

  consume(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decide(requests, true, 'KitStore.consume');
  }

  peek(requests: readonly RateLimitRequest[]): Promise<RateLimitDecision[]> {
    return this.decide(requests, false, 'KitStore.peek');
  }

  reset(keys: readonly string[]): Promise<void> {
    return this.serially(() => this.server.delete(keys));
  }

  resetAll(prefix: string): Promise<void> {
    return this.serially(() => this.server.deleteUnder(prefix));
  }

  /**
   * Gives back, once, what `consume` took for each decision, as far as its charge still counts. A
   * refund the server failed wrote nothing: it puts every charge back on its decision, so that the
   * next refund of them tries again.
   */
  refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing from any bucket (all-or-nothing)
    if (!decisions.every((decision) => decision.allowed)) return Promise.resolve();
    const taken: { decision: RateLimitDecision; charge: Charge }[] = [];
    for (const decision of decisions) {
      const charge = takeCharge(decision);
      if (charge !== undefined) taken.push({ decision, charge });
    }
    if (taken.length === 0) return Promise.resolve();
    const givenBack = this.serially(async () => {
      const now = this.now();
      const states = await this.server.get(taken.map(({ charge }) => charge.request.key));
      const writes = [];
      for (const [i, { charge }] of taken.entries()) {
        const { request, at } = charge;
        // a bucket that has expired since is full already; a charge of nothing gives nothing back
        if (states[i] === undefined || chargedCost(charge) === 0) continue;
        const { key, rule } = request;
        const model = modelOf(rule);
        const current = model.current(JSON.parse(states[i]) as Held, now, rule);
        const refunded = model.refund(current, rule, chargedCost(charge), at);
        writes.push({ key, value: JSON.stringify(refunded), expiresAt: expiresAt(model, refunded, rule) });
      }
      await this.server.set(writes);
    });
    return givenBack.catch((error: unknown) => {
      for (const { decision, charge } of taken) restoreCharge(decision, charge);
      throw error;
    });
  }

  /**
   * Charges admitted requests their real cost: each decision's charge made up to its `actual` with
   * `settleState`, its state written when it moved (dropped when full again), its charge put back
   * updated. A settle the server failed puts every charge back as it was, to be settled again.
   */
  async settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    checkSettles(settles, 'KitStore.settle');
    const taken = settles.map(({ decision, actual }) => ({ decision, actual, charge: takeCharge(decision) }));
    const settled = this.serially(async () => {
      const now = this.now();
      const answers: (RateLimitDecision | undefined)[] = [];
      const charges: (Charge | undefined)[] = [];
      // one settle after another: a key settled twice sees the first one's state
      for (const { actual, charge } of taken) {
        if (charge === undefined) {
          answers.push(undefined);
          charges.push(undefined);
          continue;
        }
        const { key, rule } = charge.request;
        const [stored] = await this.server.get([key]);
        const { next, changed, outcome } = settleState(
          parsed(stored),
          now,
          rule,
          chargedCost(charge),
          actual,
          charge.at,
        );
        if (changed && outcome.fullMs === 0) await this.server.delete([key]);
        else if (changed)
          await this.server.set([
            { key, value: JSON.stringify(next), expiresAt: expiryAfter(next.at, outcome.fullMs) },
          ]);
        const after = settledCharge(charge, actual, outcome);
        answers.push(after.decision);
        charges.push(after.charge);
      }
      return { answers, charges };
    });
    try {
      const { answers, charges } = await settled;
      for (const [i, { decision }] of taken.entries())
        if (charges[i] !== undefined) restoreCharge(decision, charges[i]);
      return answers;
    } catch (error) {
      for (const { decision, charge } of taken) if (charge !== undefined) restoreCharge(decision, charge);
      throw error;
    }
  }

  /** Checks the call (a bad request rejects before the server is asked), then decides each key once. */
  private async decide(
    given: readonly RateLimitRequest[],
    charge: boolean,
    where: string,
  ): Promise<RateLimitDecision[]> {
    const { requests, positions } = distinctRequests(given, where);
    const decisions = await this.serially(() => this.decideDistinct(requests, charge));
    return positions === undefined ? decisions : spreadDecisions(decisions, given, positions);
  }

  private async decideDistinct(requests: readonly RateLimitRequest[], charge: boolean): Promise<RateLimitDecision[]> {
    const now = this.now();
    const states = await this.server.get(requests.map(({ key }) => key));
    const entries = requests.map(({ rule, cost }, i) => ({ state: parsed(states[i]), rule, cost }));
    const verdict = decideAll(entries, now, charge);
    if (verdict.allowed && charge) await this.write(requests, verdict);
    // a refusal writes only the blocks it starts
    else if (verdict.blocks !== undefined) await this.write(requests, verdict, verdict.blocks);
    return requests.map((request, i) => toDecision(request, verdict.outcomes[i]));
  }

  /**
   * Stores the verdict's states (all, or those `only` marks), each until its bucket is full again;
   * drops the key of one full already (a reservation of 0 that found nothing taken).
   */
  private async write(
    requests: readonly RateLimitRequest[],
    verdict: Verdict,
    only?: readonly boolean[],
  ): Promise<void> {
    const writes = [];
    const full = [];
    for (const [i, { key }] of requests.entries()) {
      if (only !== undefined && !only[i]) continue;
      const state = verdict.next[i];
      const { fullMs } = verdict.outcomes[i];
      if (fullMs === 0) full.push(key);
      else writes.push({ key, value: JSON.stringify(state), expiresAt: expiryAfter(state.at, fullMs) });
    }
    if (full.length > 0) await this.server.delete(full);
    await this.server.set(writes);
  }

  /**
   * Runs `call` once the call before it has ended, so no two read the same bucket before either
   * writes it; any failure becomes the `RateLimitStoreError` the module answers with `failMode`.
   */
  private serially<T>(call: () => Promise<T>): Promise<T> {
    const result = this.turn.then(call).catch((error: unknown) => {
      const reason = error instanceof UnreachableError ? 'unavailable' : 'error';
      throw new RateLimitStoreError(`KitStore could not decide: ${(error as Error).message}`, { reason, cause: error });
    });
    this.turn = result.catch(() => undefined);
    return result;
  }
}

/** A stored state read back, `undefined` for none. */
function parsed(value: string | undefined): Held | undefined {
  return value === undefined ? undefined : (JSON.parse(value) as Held);
}
