import { type Held, RELEASED, type Rule } from '../algorithms/algorithm.types.js';
import { decideAll, type Entry, expiresAt, expiryAfter, modelOf } from '../algorithms/decide.js';
import { limiting } from '../headers/rate-limit-headers.js';
import { quotaRule } from '../policy/quota-rule.js';
import { toDecision } from '../stores/decision.js';
import type { RateLimitDecision, RateLimitRequest } from '../stores/rate-limit-store.interface.js';
import { type Release, ReleaseQueue } from './release-queue.js';

/** A validated policy as the simulator runs it. */
export interface SimulatedPolicy {
  name: string;
  rule: Rule;
  /** Tokens a request takes under this policy when the trace gives no cost of its own. */
  cost: number;
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
  /** Tokens the request takes under every policy; `undefined`: each policy's own cost. */
  cost: number | undefined;
}

/** A bucket's state, and when it is as good as an absent key (the memory store's expiry of it). */
interface Slot {
  state: Held;
  expiry: number;
}

/** What the simulation keeps per key of a lane: its buckets (one per policy) and its counts. */
export interface KeyRecord {
  slots: (Slot | undefined)[];
  offered: number;
  refused: number;
}

/**
 * Counts per second of the clock (`floor(time / 1000)`): offered, admitted, then refused by each
 * policy of the lane (a request several policies refuse counts for each).
 */
export type SecondCounts = number[];

/**
 * One lane's run over the traffic: the pure algorithm functions the stores run (`decideAll`, time
 * passed in), a bucket per key and policy in a `Map`, and per-second counts. What it keeps grows
 * with the distinct keys and seconds, never with the number of requests (the slots in flight of
 * a `concurrency` policy are at most its limit per key).
 *
 * A `quota` policy's rule is made per request, as the guard makes it: the calendar period that
 * holds the request's time (`quotaRule`; a trace's times are Unix ms, `--rate` starts at Unix
 * time 0, 1970-01-01T00:00:00Z). A `concurrency` policy's slot is given back `holdMs` after its
 * request was admitted, by the model's refund of the charge, as the guard's refund does when
 * a request ends; a slot still held when its lease ends has left the log already.
 */
export class LaneRun {
  readonly keys = new Map<string, KeyRecord>();
  readonly seconds = new Map<number, SecondCounts>();
  offered = 0;
  admitted = 0;
  /** Each policy as the store request `toDecision` reads (its name and rule). */
  private readonly requests: RateLimitRequest[];
  /** The indexes of the lane's `concurrency` policies, whose slots admitted requests give back. */
  private readonly released: number[];
  /** Slots to give back, soonest first. */
  private readonly releases = new ReleaseQueue<KeyRecord>();

  /** @param holdMs how long an admitted request holds a `concurrency` slot, ms (`--hold`) */
  constructor(
    readonly lane: Lane,
    private readonly holdMs = 0,
  ) {
    this.requests = lane.policies.map(({ name, rule, cost }) => ({ key: '', policy: name, rule, cost }));
    this.released = lane.policies.flatMap(({ rule }, i) => (RELEASED.has(rule.algorithm) ? [i] : []));
  }

  /**
   * Offers the lane one request of the traffic, decided as the memory store does and counted:
   * every policy's bucket read (expired: absent), all charged only when all admit, blocks stored
   * as a refusal starts them. Returns the decision the guard's headers would describe
   * (`limiting`: the refusing policy that frees up last, or the one closest to refusing).
   */
  offer({ time, key, cost }: Arrival): RateLimitDecision {
    const { policies } = this.lane;
    // the requests that ended by now give their slots back first, as the guard's refunds do
    if (this.released.length > 0) this.release(time);
    let record = this.keys.get(key);
    if (record === undefined) {
      record = { slots: new Array<Slot | undefined>(policies.length).fill(undefined), offered: 0, refused: 0 };
      this.keys.set(key, record);
    }
    const entries: Entry[] = new Array<Entry>(policies.length);
    for (let i = 0; i < policies.length; i++) {
      const slot = record.slots[i];
      entries[i] = {
        state: slot !== undefined && slot.expiry > time ? slot.state : undefined,
        rule: quotaRule(policies[i].rule, time),
        cost: cost ?? policies[i].cost,
      };
    }
    const verdict = decideAll(entries, time, true);
    if (verdict.allowed) {
      for (const i of this.released)
        this.releases.push({
          at: time + this.holdMs,
          owner: record,
          policy: i,
          cost: entries[i].cost,
          chargedAt: verdict.next[i].at,
        });
    }
    const decisions: RateLimitDecision[] = new Array<RateLimitDecision>(policies.length);
    for (let i = 0; i < policies.length; i++) {
      if (verdict.allowed || verdict.blocks?.[i]) {
        const state = verdict.next[i];
        record.slots[i] = { state, expiry: expiryAfter(state.at, verdict.outcomes[i].fullMs) };
      }
      decisions[i] = toDecision(this.requests[i], verdict.outcomes[i]);
    }
    this.count(record, time, verdict.allowed, decisions);
    return limiting(decisions);
  }

  /** Gives back every slot whose request ended by `time`: the model's refund of its charge, at its end. */
  private release(time: number): void {
    let ended: Release<KeyRecord> | undefined;
    while ((ended = this.releases.popUntil(time)) !== undefined) {
      const { at, owner, policy, cost, chargedAt } = ended;
      const slot = owner.slots[policy];
      // a log that expired since holds no slot: the lease gave it back already
      if (slot === undefined || slot.expiry <= at) continue;
      const { rule } = this.lane.policies[policy];
      const model = modelOf(rule);
      const state = model.refund(model.current(slot.state, at, rule), rule, cost, chargedAt);
      owner.slots[policy] = { state, expiry: expiresAt(model, state, rule) };
    }
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
