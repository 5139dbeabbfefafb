import { type Held, RELEASED, type Rule } from '../algorithms/algorithm.types.js';
import { decideAll, type Entry, expiryAfter, modelOf, settleState } from '../algorithms/decide.js';
import { limiting } from '../headers/rate-limit-headers.js';
import { quotaRule } from '../policy/quota-rule.js';
import { toDecision } from '../stores/decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { DebtLedger } from './debt-ledger.js';
import { type Release, ReleaseQueue } from './release-queue.js';

/** A validated policy as the simulator runs it. */
export interface SimulatedPolicy {
  name: string;
  rule: Rule;
  /** Tokens a request takes under this policy when the trace gives no cost of its own. */
  cost: number;
  /**
   * Tokens a settle may take its buckets past empty (its `maxDebt`, by default its `burst`), the
   * `debt` of its rule once the traffic settles; `undefined` for a policy whose algorithm cannot
   * settle (`concurrency`), whose reservation stands.
   */
  maxDebt: number | undefined;
}

/**
 * Policies decided together, all-or-nothing as the guard decides a route's policies, on buckets
 * of their own: the `--policy` flags make one lane, `--compare` one lane per algorithm.
 */
export interface Lane {
  /** What the lane is called in the output: the algorithm compared, or 'policies'. */
  title: string;
  policies: readonly SimulatedPolicy[];
}

/** One request of the traffic. */
export interface Arrival {
  /** Integer milliseconds (Unix time for a trace, from 0 for `--rate`). */
  time: number;
  /** The client's identity: every policy of a lane keeps one bucket per key. */
  key: string;
  /** Tokens the request reserves under every policy; `undefined`: each policy's own cost. */
  cost: number | undefined;
  /**
   * Tokens the request costs in the end, when the trace says (its `actual`): when it ends, a
   * settling policy charges it the difference, past empty down to its `maxDebt`, or gives back
   * what it reserved too much. `undefined`: the reservation stands.
   */
  actual: number | undefined;
  /** Milliseconds from its admission to its end (its `duration`); `undefined`: `--hold`, else at once. */
  durationMs: number | undefined;
}

/** What `LaneRun.offer` found for a request: the decision the guard's headers would describe, and its debt. */
export interface Offered {
  decision: RateLimitDecision;
  /** Tokens past empty the bucket of the decision's policy was at when it refused the request (0: not in debt). */
  debt: number;
}

/** A bucket's state, and when it is as good as an absent key (the memory store's expiry of it). */
interface Slot {
  state: Held;
  expiry: number;
}

/** What the simulation keeps per key of a lane: its buckets (one per policy) and its counts. */
export interface KeyRecord {
  key: string;
  slots: (Slot | undefined)[];
  offered: number;
  refused: number;
}

/**
 * Counts per second of the clock (`floor(time / 1000)`): offered, admitted, then refused by each
 * policy of the lane (a request several policies refuse counts for each).
 */
export type SecondCounts = number[];

/** What a request owes policy `policy` of `owner` at its end (see `Release`). */
const owed = (
  owner: KeyRecord,
  at: number,
  policy: number,
  cost: number,
  chargedAt: number,
  actual: number,
): Release<KeyRecord> => ({ at, owner, policy, cost, chargedAt, actual });

/**
 * One lane's run over the traffic: the pure algorithm functions the stores run (`decideAll`, time
 * passed in), a bucket per key and policy in a `Map`, and per-second counts. What it keeps grows
 * with the distinct keys and seconds, never with the number of requests (the slots in flight of
 * a `concurrency` policy are at most its limit per key; the settles to come, the requests that
 * have not ended yet).
 *
 * A `quota` policy's rule is made per request, as the guard makes it: the calendar period that
 * holds the request's time (`quotaRule`; a trace's times are Unix ms, `--rate` starts at Unix
 * time 0, 1970-01-01T00:00:00Z).
 *
 * An admitted request ends `durationMs` after it was admitted (its trace line's `duration`, else
 * `holdMs`, else at once), and its end does what the guard's end of a request does: a
 * `concurrency` slot is given back, by the model's refund of the charge (a slot still held when
 * its lease ends has left the log already); a request that gives its `actual` cost is settled
 * under every policy that can settle, charged `actual - cost` as the stores do (more: the model's
 * `debit` on the bucket as it is then, past empty down to the rule's `debt`; less: its `refund`,
 * into the window it was taken from). The rules carry `debt` from the first request with an
 * `actual` on: before it no bucket is past empty, so a trace without one runs today's rules.
 */
export class LaneRun {
  readonly keys = new Map<string, KeyRecord>();
  readonly seconds = new Map<number, SecondCounts>();
  offered = 0;
  admitted = 0;
  /** Requests refused while one of their buckets was in debt. */
  refusedInDebt = 0;
  /** Each settling policy's debt figures (`undefined` for one that cannot settle), by index in the lane. */
  readonly ledgers: readonly (DebtLedger | undefined)[];
  /** Whether a request has given its actual cost: the rules carry their `debt` from then on. */
  settling = false;
  /** Each policy as the store request `toDecision` reads (its name and rule). */
  private readonly requests: RateLimitRequest[];
  /** The indexes of the lane's `concurrency` policies, whose slots admitted requests give back. */
  private readonly released: number[];
  /** Each policy's rule with its `debt`, for a policy that can settle (else its rule). */
  private readonly settlingRules: readonly Rule[];
  /** What admitted requests give back or owe when they end, soonest first. */
  private readonly ends = new ReleaseQueue<KeyRecord>();

  /** @param holdMs how long an admitted request lasts when its trace line does not say, ms (`--hold`) */
  constructor(
    readonly lane: Lane,
    private readonly holdMs = 0,
  ) {
    this.requests = lane.policies.map(({ name, rule, cost }) => ({ key: '', policy: name, rule, cost }));
    this.released = lane.policies.flatMap(({ rule }, i) => (RELEASED.has(rule.algorithm) ? [i] : []));
    this.settlingRules = lane.policies.map(({ rule, maxDebt }) =>
      maxDebt === undefined ? rule : { ...rule, debt: maxDebt },
    );
    this.ledgers = lane.policies.map(({ maxDebt }) => (maxDebt === undefined ? undefined : new DebtLedger(maxDebt)));
  }

  /** Policy `i`'s rule as the run decides with it now: with its `debt` once the traffic settles. */
  private ruleOf(i: number): Rule {
    return this.settling ? this.settlingRules[i] : this.lane.policies[i].rule;
  }

  /**
   * Offers the lane one request of the traffic, decided as the memory store does and counted:
   * every policy's bucket read (expired: absent), all charged only when all admit, blocks stored
   * as a refusal starts them. Returns the decision the guard's headers would describe
   * (`limiting`: the refusing policy that frees up last, or the one closest to refusing), and
   * how deep in debt that policy's bucket was.
   */
  offer({ time, key, cost, actual, durationMs }: Arrival): Offered {
    const { policies } = this.lane;
    if (actual !== undefined && !this.settling) this.settling = this.ledgers.some((ledger) => ledger !== undefined);
    // the requests that ended by now give back and settle first, as the guard's ends do
    this.endUntil(time);
    let record = this.keys.get(key);
    if (record === undefined) {
      record = { key, slots: new Array<Slot | undefined>(policies.length).fill(undefined), offered: 0, refused: 0 };
      this.keys.set(key, record);
    }
    const entries: Entry[] = new Array<Entry>(policies.length);
    for (let i = 0; i < policies.length; i++) {
      const slot = record.slots[i];
      entries[i] = {
        state: slot !== undefined && slot.expiry > time ? slot.state : undefined,
        rule: quotaRule(this.ruleOf(i), time),
        cost: cost ?? policies[i].cost,
      };
    }
    const verdict = decideAll(entries, time, true);
    const decisions: RateLimitDecision[] = new Array<RateLimitDecision>(policies.length);
    for (let i = 0; i < policies.length; i++) {
      if (verdict.allowed || verdict.blocks?.[i]) {
        const state = verdict.next[i];
        record.slots[i] = { state, expiry: expiryAfter(state.at, verdict.outcomes[i].fullMs) };
      }
      decisions[i] = toDecision(this.requests[i], verdict.outcomes[i]);
    }
    this.count(record, time, verdict.allowed, decisions);
    const decision = limiting(decisions);
    if (verdict.allowed) {
      this.owe(record, time, time + (durationMs ?? this.holdMs), entries, verdict.next, actual);
      return { decision, debt: 0 };
    }
    return {
      decision,
      debt: this.settling ? this.refusedDebt(record, time, entries, verdict.next, decision, decisions) : 0,
    };
  }

  /** Ends what is left to end: every request still in flight when the traffic stops ends when it would. */
  finish(): void {
    this.endUntil(Infinity);
    for (const ledger of this.ledgers) ledger?.close();
  }

  /**
   * What an admitted request owes its end at `end`: each `concurrency` slot, given back; under each
   * settling policy, the difference between its `actual` cost and what it reserved. An end that
   * comes at once (a request that lasts 0 ms) is done now, after its charge.
   */
  private owe(
    record: KeyRecord,
    time: number,
    end: number,
    entries: readonly Entry[],
    next: readonly Held[],
    actual: number | undefined,
  ): void {
    for (const i of this.released) this.ends.push(owed(record, end, i, entries[i].cost, next[i].at, 0));
    for (let i = 0; i < entries.length; i++) {
      const ledger = this.ledgers[i];
      if (ledger === undefined) continue;
      const { cost } = entries[i];
      ledger.admitted(cost, actual);
      if (actual !== undefined && actual !== cost) this.ends.push(owed(record, end, i, cost, next[i].at, actual));
    }
    if (end <= time) this.endUntil(time);
  }

  /**
   * Settles every request that ended by `time`, in the order they end: what it reserved given back
   * or made up to its actual cost, on its bucket as it is then, as a store's settle does
   * (`settleState`; a bucket full again is dropped, as the store drops its key).
   */
  private endUntil(time: number): void {
    let ended: Release<KeyRecord> | undefined;
    while ((ended = this.ends.popUntil(time)) !== undefined) {
      const { at, owner, policy, cost, chargedAt, actual } = ended;
      const slot = owner.slots[policy];
      // a bucket that expired since is full: nothing to give back (a lease gave a slot back already)
      const live = slot !== undefined && slot.expiry > at ? slot.state : undefined;
      if (actual < cost && live === undefined) continue;
      const rule = quotaRule(this.ruleOf(policy), at);
      const { next, changed, outcome } = settleState(live, at, rule, cost, actual, chargedAt);
      if (!changed) continue;
      owner.slots[policy] =
        outcome.fullMs === 0 ? undefined : { state: next, expiry: expiryAfter(next.at, outcome.fullMs) };
      const ledger = this.ledgers[policy];
      if (ledger !== undefined) {
        const model = modelOf(rule);
        // the bucket as the settle found it (`settleState` reads it so), for what it took or gave
        ledger.settled(owner.key, at, model, model.current(live, at, rule), next, rule);
      }
    }
  }

  /**
   * For a refused request: each settling policy's bucket as it found it, seen by its ledger (a
   * bucket in debt refuses, and counts a refusal in debt). Returns the debt of the bucket of the
   * policy `decision` speaks for.
   */
  private refusedDebt(
    record: KeyRecord,
    time: number,
    entries: readonly Entry[],
    states: readonly Held[],
    decision: RateLimitDecision,
    decisions: readonly RateLimitDecision[],
  ): number {
    let limitingDebt = 0;
    let inDebt = false;
    for (let i = 0; i < entries.length; i++) {
      const ledger = this.ledgers[i];
      if (ledger === undefined) continue;
      const { rule } = entries[i];
      const debt = ledger.saw(record.key, time, modelOf(rule), states[i], rule);
      if (debt === 0) continue;
      ledger.refusedInDebt();
      inDebt = true;
      if (decisions[i] === decision) limitingDebt = debt;
    }
    if (inDebt) this.refusedInDebt++;
    return limitingDebt;
  }

  private count(record: KeyRecord, time: number, allowed: boolean, decisions: readonly RateLimitDecision[]): void {
    const second = Math.floor(time / 1000);
    let counts = this.seconds.get(second);
    if (counts === undefined) {
      counts = new Array(2 + decisions.length).fill(0);
      this.seconds.set(second, counts);
    }
    counts[0]++;
    record.offered++;
    this.offered++;
    if (allowed) {
      counts[1]++;
      this.admitted++;
      return;
    }
    record.refused++;
    for (let i = 0; i < decisions.length; i++) if (!decisions[i].allowed) counts[2 + i]++;
  }
}
