import { Logger } from '@nestjs/common';
import type { Outcome } from '../../algorithms/algorithm.types.js';
import { clientCommandTimeout } from '../../rate-limit.messages.js';
import { Deadlines } from '../../utils/deadline-queue.js';
import { type Charge, chargedCost, restoreCharge, settledCharge, takeCharge, toDecision } from '../decision.js';
import { checkSettles, distinctRequests, spreadDecisions } from '../distinct-requests.js';
import { failedAt, storeTimeout } from '../rate-limit-store.error.js';
import type {
  RateLimitCallOptions,
  RateLimitDecision,
  RateLimitRequest,
  RateLimitSettle,
  RateLimitStore,
} from '../rate-limit-store.interface.js';
import { RefusalGate } from '../refusal-gate/refusal-gate.js';
import { type StoreClock, storeClock } from '../store-clock.js';
import { groupBySlot, HASH_SLOTS } from './hash-slot.js';
import { RedisClock } from './redis-clock.js';
import { type RedisClient, redisPortOf } from './redis-clients.js';
import { type RedisPort, SlotMoving } from './redis-port.js';
import { RedisScripts } from './redis-scripts.js';
import { checkRedisStoreOptions, givenClock, type RedisStoreOptions } from './redis-store-options.js';
import { type Reply, SlotBatches } from './slot-batches.js';
import type { Answer } from './script-protocol.js';
import { unlinkUnder } from './unlink-under.js';

export type { RedisStoreClock, RedisStoreOptions } from './redis-store-options.js';

/** A decision's charge on its way back to Redis: `amount` tokens given back (below 0: taken more, a settle). */
interface Taken {
  decision: RateLimitDecision;
  charge: Charge;
  amount: number;
}

/**
 * Buckets in Redis, shared by every instance of the app, with Redis `TIME` as the clock and
 * one atomic Lua call per request covering all of its policies (an FCALL of a function library
 * loaded when the store starts, or the EVALSHA of a script where the server has no functions; see
 * `RedisScripts`). Under load the requests that arrive
 * in one event-loop turn share a call, which decides them in turn (see `SlotBatches`). Every key
 * expires when its bucket is full again (or its window has passed), no later.
 *
 * On a Redis Cluster, the buckets of one identity share a hash slot. A request whose policies
 * key different identities spans slots: one call per slot runs in parallel, and when any slot
 * refuses, what the others charged is given back, so a refused request leaves no charge. Calls go
 * straight to the slot's master, so that a slot being moved to another master is seen at once:
 * while its keys are on both, a request's keys there are decided one by one, the same way.
 *
 * Each call is bounded by the caller's `timeoutMs` from when it is sent (see `timesCalls`): a
 * stall of the app's own event loop before it leaves, or while its reply waits to be read, is not
 * taken for a slow Redis. A call that Redis only runs after its caller stopped waiting (queued in
 * a frozen server, say) charges nothing.
 *
 * On a Redis-compatible server whose scripts cannot read `TIME`, the store warns once and
 * decides on the app's clock (see `RedisStoreOptions.clock`; `clock: 'app'` says so up front).
 *
 * @example new RedisStore({ client: new Redis(process.env.REDIS_URL) })
 * @example new RedisStore({ client: new Cluster([{ host: 'redis-1', port: 6379 }]) })
 * @example new RedisStore({ client: new Redis(process.env.DRAGONFLY_URL), clock: 'app' })
 * @example new RedisStore({ client: await createClient({ url: process.env.REDIS_URL }).connect() }) // node-redis
 */
export class RedisStore<C extends RedisClient = RedisClient> implements RateLimitStore {
  /** Every call is bounded by its `timeoutMs` from when it leaves the process (see `SlotBatches`). */
  readonly timesCalls = true;
  readonly kind = 'redis';
  /** The client it was given, of the type it was given. */
  readonly client: C;
  private readonly port: RedisPort;
  /** The clock given in the options (`{ now() }` or a function), if any (see `RateLimitStore.clock`). */
  readonly clock: StoreClock | undefined;
  private readonly cluster: boolean;
  private readonly clocks: RedisClock;
  private readonly scripts: RedisScripts;
  private readonly batches: SlotBatches;
  /** The timers of calls on their way, one per timeout. */
  private readonly deadlines = new Deadlines();
  /** What stands in front of Redis for charges, unless `cacheRefusals` is false. */
  private readonly gate: RefusalGate | undefined;
  /**
   * On a Cluster, the masters that decide a call, by address (see `RateLimitStore.nodesOf`): the
   * module keeps a breaker per master. Absent on a single Redis or Sentinel.
   */
  readonly nodesOf: ((requests: readonly RateLimitRequest[]) => readonly string[]) | undefined;
  /** The hash slots of the requests `nodesOf` was last asked about, which `send` takes rather than working them out again. */
  private lastSlots: { requests: readonly RateLimitRequest[]; groups: Map<number, number[]> } | undefined;
  /** One array per master address, so that `nodesOf` makes none per call. */
  private readonly nodeLists = new Map<string, readonly string[]>();

  constructor(options: RedisStoreOptions<C>) {
    checkRedisStoreOptions(options);
    this.client = options.client;
    this.port = redisPortOf(this.client)!;
    this.cluster = this.port.cluster;
    const given = givenClock(options.clock);
    this.clock = storeClock(options.clock);
    this.clocks = new RedisClock(given, options.clock === 'app' ? undefined : given, this.cluster ? HASH_SLOTS : 1);
    this.scripts = new RedisScripts(this.client, this.clocks);
    this.batches = new SlotBatches(
      this.scripts,
      this.clocks,
      this.deadlines,
      this.cluster ? (slot) => this.masterOf(slot) : undefined,
    );
    this.nodesOf = this.cluster ? (requests) => this.mastersOf(requests) : undefined;
    this.gate = options.cacheRefusals === false ? undefined : new RefusalGate(() => this.clocks.localNow());
    const commandTimeout = this.port.commandTimeout;
    if (commandTimeout !== undefined) new Logger('RedisStore').warn(clientCommandTimeout(commandTimeout));
  }

  consume(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    return this.call(requests, true, options?.timeoutMs);
  }

  peek(requests: readonly RateLimitRequest[], options?: RateLimitCallOptions): Promise<RateLimitDecision[]> {
    return this.call(requests, false, options?.timeoutMs);
  }

  /** Forgets these buckets, and every refusal remembered of them. */
  reset(keys: readonly string[]): Promise<void> {
    return this.forgetting(keys, async () => {
      const groups = groupBySlot(keys, this.cluster);
      await Promise.all(
        [...groups.values()].map((group) => this.port.onKey(keys[group[0]], ['DEL', ...group.map((i) => keys[i])])),
      );
    });
  }

  /**
   * Forgets every bucket under `prefix` (see `RateLimitStore.resetAll`): SCAN and UNLINK in
   * batches, on every master of a Cluster (see `unlinkUnder`), and every remembered refusal.
   */
  resetAll(prefix: string): Promise<void> {
    return this.forgetting(undefined, async () => {
      await unlinkUnder(this.port, prefix);
    });
  }

  /**
   * Resolves once the store's first talk with Redis is over: its calls loaded on every master, and
   * the server checked (scripts run, `TIME` works inside them); within 2 s at the most, so a Redis
   * that is down does not stop the app from starting (see `RateLimitStore.ready`).
   *
   * @throws Error when the server refuses to run scripts for this client
   */
  ready(): Promise<void> {
    return this.scripts.ready();
  }

  async close(): Promise<void> {
    this.gate?.clear();
    this.deadlines.close();
    this.scripts.close();
  }

  /**
   * The decisions for a charge that Redis would certainly refuse, from what it answered before
   * (see `RefusalGate`), without a call; `undefined` when a call is needed, and `consume` of these
   * very requests right after does not look again. The module asks this before `consume`: such an
   * answer takes no time and says nothing of Redis's health.
   */
  cached(requests: readonly RateLimitRequest[]): RateLimitDecision[] | undefined {
    return this.gate?.answer(requests);
  }

  /**
   * Gives back what `consume` took for these decisions (see `RateLimitStore.refund`): one refund
   * script call per hash slot, in parallel. Refusals remembered for those keys are forgotten at
   * once and again afterwards: the buckets now admit sooner than they said. Settles once every
   * call has; when one failed, it rejects with its error, and the charges of the slots whose calls
   * failed are back on their decisions, to be given back by the next refund of them.
   */
  async refund(decisions: readonly RateLimitDecision[]): Promise<void> {
    // a request some policy refused took nothing (what another hash slot charged went back then)
    if (!decisions.every((decision) => decision.allowed)) return;
    const taken: Taken[] = [];
    for (const decision of decisions) {
      const charge = takeCharge(decision);
      // what each gives back: its request's cost, or what a settle made it since
      if (charge !== undefined) taken.push({ decision, charge, amount: chargedCost(charge) });
    }
    if (taken.length === 0) return;
    let failure: PromiseRejectedResult | undefined;
    for (const [group, result] of await this.refundCalls(taken)) {
      if (result.status === 'fulfilled') continue;
      failure ??= result;
      for (const i of group) restoreCharge(taken[i].decision, taken[i].charge);
    }
    if (failure !== undefined) throw failure.reason;
  }

  /**
   * Charges admitted requests their real cost (see `RateLimitStore.settle`): the refund call of each
   * hash slot with a signed amount per decision (the difference to give back, or below 0 to take
   * more), one call per slot in parallel, as `refund` makes them. Refusals remembered for those keys
   * are forgotten around it (a settle that gives back makes a bucket admit sooner). When a slot's
   * call failed, it rejects with its error once every call has settled, and the decisions of that
   * slot keep their charges as they were, to be settled by the next settle of them; the others hold
   * their settled charges.
   *
   * @throws TypeError or RangeError for a bad settle, before anything is settled (as a rejection)
   */
  async settle(settles: readonly RateLimitSettle[]): Promise<(RateLimitDecision | undefined)[]> {
    checkSettles(settles, 'RedisStore.settle');
    const answers = new Array<RateLimitDecision | undefined>(settles.length);
    const taken: (Taken & { index: number; actual: number })[] = [];
    settles.forEach(({ decision, actual }, index) => {
      const charge = takeCharge(decision);
      if (charge !== undefined) taken.push({ index, decision, charge, actual, amount: chargedCost(charge) - actual });
    });
    if (taken.length === 0) return answers;
    let failure: PromiseRejectedResult | undefined;
    for (const [group, result] of await this.refundCalls(taken)) {
      if (result.status === 'rejected') {
        failure ??= result;
        for (const i of group) restoreCharge(taken[i].decision, taken[i].charge);
        continue;
      }
      group.forEach((i, j) => {
        const { index, decision, charge, actual } = taken[i];
        const after = settledCharge(charge, actual, result.value.outcomes[j]);
        restoreCharge(decision, after.charge);
        answers[index] = after.decision;
      });
    }
    if (failure !== undefined) throw failure.reason;
    return answers;
  }

  /**
   * The refund call of each hash slot for `taken` (each its `amount`), in parallel, with refusals
   * remembered for their keys forgotten around them: per slot, the indexes of `taken` it holds and
   * how its call ended.
   */
  private async refundCalls(taken: readonly Taken[]): Promise<[number[], PromiseSettledResult<Answer>][]> {
    const keys = taken.map(({ charge }) => charge.request.key);
    const groups = [...groupBySlot(keys, this.cluster)];
    const settled = await this.forgetting(keys, () =>
      Promise.allSettled(
        groups.map(([slot, group]) =>
          this.refundIn(
            slot,
            group.map((i) => taken[i].charge.request),
            group.map((i) => taken[i].amount),
            group.map((i) => taken[i].charge.at),
          ),
        ),
      ),
    );
    return groups.map(([, group], k) => [group, settled[k]]);
  }

  /** Runs a reset or a refund of `keys` (`undefined`: of all) with the gate forgetting them around it. */
  private forgetting<T>(keys: readonly string[] | undefined, work: () => Promise<T>): Promise<T> {
    return this.gate === undefined ? work() : this.gate.forgetting(keys, work);
  }

  /**
   * A charge goes through the gate, which looks it up once (not again right after `cached`, for the
   * same array; a call that repeats a key, which the module never makes, is looked up again as its
   * distinct keys); a look goes straight to Redis. Never throws: a bad request rejects this call
   * alone, before it can join (and fail) a batch. A key given twice is decided once.
   */
  private call(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    timeoutMs: number | undefined,
  ): Promise<RateLimitDecision[]> {
    let distinct: ReturnType<typeof distinctRequests>;
    try {
      distinct = distinctRequests(requests, charge ? 'RedisStore.consume' : 'RedisStore.peek');
    } catch (error) {
      return Promise.reject(error);
    }
    if (distinct.positions) {
      const { positions } = distinct;
      return this.call(distinct.requests, charge, timeoutMs).then((decisions) =>
        spreadDecisions(decisions, requests, positions),
      );
    }
    if (requests.length === 0) return Promise.resolve([]);
    const gate = charge ? this.gate : undefined;
    if (gate === undefined)
      return this.send(requests, charge, timeoutMs).then(({ outcomes }) =>
        requests.map((request, i) => toDecision(request, outcomes[i])),
      );
    return gate.charge(requests, () => this.send(requests, true, timeoutMs));
  }

  /** Redis's answer for requests on distinct keys: one batched call, or one per hash slot of a Cluster. */
  private send(requests: readonly RateLimitRequest[], charge: boolean, timeoutMs: number | undefined): Promise<Reply> {
    // a single Redis (or Sentinel) takes every key in one call: no slots to work out
    if (!this.cluster) return this.batches.join(requests, charge, 0, timeoutMs);
    const groups = this.slotsOf(requests);
    if (groups.size > 1) return this.across(requests, [...groups], charge, timeoutMs, false);
    return this.inSlot(requests, charge, groups.keys().next().value ?? 0, timeoutMs, false);
  }

  /**
   * Decides requests of one hash slot of a Cluster in the slot's batch (`alone`: in a call of
   * their own). While the slot is being moved with their keys on both masters, no call on several
   * of them can run (see `SlotMoving`): they are decided key by key, each where it is, and a key
   * that refuses has the others' charges given back (see `across`).
   */
  private inSlot(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    slot: number,
    timeoutMs: number | undefined,
    alone: boolean,
  ): Promise<Reply> {
    const reply = alone
      ? this.batches.alone(requests, charge, slot, timeoutMs)
      : this.batches.join(requests, charge, slot, timeoutMs);
    if (alone && requests.length === 1) return reply;
    return reply.catch((error: unknown) => {
      if (!(error instanceof SlotMoving)) throw error;
      // a key alone is decided where it is (on the importing master after ASKING)
      if (requests.length === 1) return this.batches.alone(requests, charge, slot, timeoutMs);
      const keys = requests.map((_, i): [number, number[]] => [slot, [i]]);
      return this.across(requests, keys, charge, timeoutMs, true);
    });
  }

  /**
   * Decides requests in parts, one call per part in parallel: a part per hash slot of a request
   * whose policies live in several, or a key per part in a slot being moved (`alone`). When a part
   * refuses (or fails), what the others charged is given back.
   */
  private async across(
    requests: readonly RateLimitRequest[],
    parts: [slot: number, indexes: number[]][],
    charge: boolean,
    timeoutMs: number | undefined,
    alone: boolean,
  ): Promise<Reply> {
    const settled = await Promise.allSettled(
      parts.map(([slot, part]) =>
        this.inSlot(
          part.map((i) => requests[i]),
          charge,
          slot,
          timeoutMs,
          alone,
        ),
      ),
    );
    const outcomes: Outcome[] = new Array<Outcome>(requests.length);
    const at: number[] = new Array<number>(requests.length);
    let allowed = true;
    let decidedAt = Infinity;
    settled.forEach((result, k) => {
      if (result.status === 'rejected') return void (allowed = false);
      parts[k][1].forEach((i, j) => {
        outcomes[i] = result.value.outcomes[j];
        at[i] = result.value.at[j];
      });
      allowed &&= result.value.outcomes.every((outcome) => outcome.allowed);
      decidedAt = Math.min(decidedAt, result.value.decidedAt);
    });
    if (charge && !allowed) {
      await Promise.all(
        settled.map(async (result, k) => {
          if (result.status === 'rejected' || !result.value.outcomes.every((outcome) => outcome.allowed)) return;
          const [slot, part] = parts[k];
          const refund = this.refundIn(
            slot,
            part.map((i) => requests[i]),
            part.map((i) => requests[i].cost),
            result.value.at,
          );
          const refunded =
            timeoutMs === undefined
              ? await refund
              : await this.deadlines.race(refund, timeoutMs, () => storeTimeout(timeoutMs));
          // its policies admitted the request: their verdicts stand, on the buckets as given back
          part.forEach((i, j) => (outcomes[i] = { ...refunded.outcomes[j], allowed: true, retryMs: 0 }));
        }),
      );
    }
    const failed = settled.findIndex((result) => result.status === 'rejected');
    if (failed >= 0) throw failedAt((settled[failed] as PromiseRejectedResult).reason, this.masterOf(parts[failed][0]));
    return { outcomes, at, decidedAt };
  }

  /**
   * Gives back what a call charged for requests of one hash slot, `amounts[i]` tokens each (taken
   * more where it is below 0: a settle); key by key while the slot is being moved (see `inSlot`).
   */
  private refundIn(
    slot: number,
    requests: readonly RateLimitRequest[],
    amounts: readonly number[],
    at: readonly number[],
  ): Promise<Answer> {
    return this.scripts.refund(requests, amounts, at, slot).catch(async (error: unknown) => {
      if (!(error instanceof SlotMoving) || requests.length === 1) throw error;
      const each = await Promise.all(
        requests.map((request, i) => this.scripts.refund([request], [amounts[i]], [at[i]], slot)),
      );
      return { outcomes: each.flatMap(({ outcomes }) => outcomes), at: each.flatMap((answer) => answer.at) };
    });
  }

  /** The requests' indexes by hash slot (on a Cluster): those `nodesOf` worked out for them, if it was just asked. */
  private slotsOf(requests: readonly RateLimitRequest[]): Map<number, number[]> {
    const last = this.lastSlots;
    this.lastSlots = undefined;
    if (last?.requests === requests) return last.groups;
    return groupBySlot(
      requests.map((request) => request.key),
      true,
    );
  }

  /** The masters that hold the requests' keys, as the Cluster client last learned them ('' for a slot it knows no master of yet). */
  private mastersOf(requests: readonly RateLimitRequest[]): readonly string[] {
    const groups = this.slotsOf(requests);
    this.lastSlots = { requests, groups };
    let first: string | undefined;
    let all: Set<string> | undefined;
    for (const slot of groups.keys()) {
      const master = this.masterOf(slot) ?? '';
      if (first === undefined) first = master;
      else if (master !== first) (all ??= new Set([first])).add(master);
    }
    if (all !== undefined) return [...all];
    first ??= '';
    let list = this.nodeLists.get(first);
    if (list === undefined) this.nodeLists.set(first, (list = [first]));
    return list;
  }

  /** The address of the master that serves `slot`, as the Cluster client last learned it. */
  private masterOf(slot: number): string | undefined {
    return this.port.masterOf(slot);
  }
}
