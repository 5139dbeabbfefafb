import { staleStoreCall } from '../../rate-limit.messages.js';
import type { Deadlines } from '../../utils/deadline-queue.js';
import { failedAt, RateLimitStoreError, storeTimeout } from '../rate-limit-store.error.js';
import type { RateLimitRequest } from '../rate-limit-store.interface.js';
import type { RedisClock } from './redis-clock.js';
import type { RedisScripts } from './redis-scripts.js';
import { type Answer, type CallRequest, type DecideReply, decodeDecideReply, encodeDecide } from './script-protocol.js';

/**
 * Most bucket keys one decide call carries; a batch that reaches it is sent at once. Bounds how
 * long one call holds Redis (a few µs per key) and how big its reply is.
 */
export const MAX_BATCH_KEYS = 64;

/** A decide call's answer for one request. */
export interface Reply extends Answer {
  /** When Redis decided, on the local clock, at the earliest (ms): Redis's time less the offset. */
  decidedAt: number;
}

/** A request of a batch, waiting for its answer: its part of the call (its deadline set when the batch is sent). */
interface Waiting extends CallRequest {
  /** How long its caller waits once the call is sent, ms; `undefined`: as long as it takes. */
  timeoutMs: number | undefined;
  resolve: (reply: Reply) => void;
  reject: (error: unknown) => void;
}

/** Requests of one hash slot waiting to go to Redis in one decide call, and how many keys they name. */
interface Batch {
  waiting: Waiting[];
  keys: number;
}

/**
 * Requests on their way to Redis, one batch per hash slot (slot 0 on a single Redis): every
 * request that arrives before the event loop's next check phase (or until the batch is full)
 * goes in the same decide call, so a busy instance makes one Redis call for many requests and
 * an idle one sends each at once. Each request stays atomic and exact: the script decides them
 * in turn (see `DECIDE_LUA`).
 *
 * A request's time counts from when its call is sent, not from when it joined the batch: a stall
 * of the app's own event loop in between (a heavy request, a collection pause) is the app's, not
 * Redis's. From then on its caller waits its `timeoutMs` at most, and gets its answer when the
 * reply had arrived by then (the deadlines are checked after the replies are read: see
 * `DeadlineQueue`); the script drops a request it runs only after that (see `RedisClock.deadline`).
 */
export class SlotBatches {
  /** Requests not yet sent, by hash slot. */
  private readonly batches = new Map<number, Batch>();

  /**
   * @param nodeOf the address of the server a slot's calls go to, named by their errors (a
   * Cluster's master); `undefined` for a single server
   */
  constructor(
    private readonly scripts: RedisScripts,
    private readonly clock: RedisClock,
    private readonly deadlines: Deadlines,
    private readonly nodeOf: (slot: number) => string | undefined = () => undefined,
  ) {}

  /**
   * Puts requests of one hash slot in the slot's batch, to be decided in its call: their reply;
   * `timeoutMs` counts from when the call is sent.
   *
   * @throws RateLimitStoreError past the timeout (`'timeout'`), or when Redis ran the call after
   * it (`'stale'`)
   */
  join(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    slot: number,
    timeoutMs: number | undefined,
  ): Promise<Reply> {
    let batch = this.batches.get(slot);
    if (batch === undefined) {
      const opened: Batch = (batch = { waiting: [], keys: 0 });
      this.batches.set(slot, opened);
      setImmediate(() => this.send(slot, opened));
    }
    const opened = batch;
    const reply = waitFor(opened, requests, charge, timeoutMs);
    batch.keys += requests.length;
    if (batch.keys >= MAX_BATCH_KEYS) this.send(slot, batch);
    return reply;
  }

  /**
   * Sends requests of one hash slot in a call of their own, at once (a key of a slot being moved:
   * see `SlotMoving`): their reply, as `join`'s.
   *
   * @throws RateLimitStoreError as `join`
   */
  alone(
    requests: readonly RateLimitRequest[],
    charge: boolean,
    slot: number,
    timeoutMs: number | undefined,
  ): Promise<Reply> {
    const batch: Batch = { waiting: [], keys: requests.length };
    const reply = waitFor(batch, requests, charge, timeoutMs);
    this.sendNow(slot, batch);
    return reply;
  }

  /** Sends a slot's batch in one decide call (unless it went already) and answers each request. */
  private send(slot: number, batch: Batch): void {
    if (this.batches.get(slot) !== batch) return;
    this.batches.delete(slot);
    this.sendNow(slot, batch);
  }

  private sendNow(slot: number, batch: Batch): void {
    const sentAt = this.clock.localNow();
    for (const waiting of batch.waiting) waiting.deadline = this.clock.deadline(slot, sentAt, waiting.timeoutMs);
    const call = encodeDecide(batch.waiting);
    const node = this.nodeOf(slot);
    // on the client's socket from here: each caller's time starts now
    const answers = this.scripts.runDecideCall(call, slot).then(
      (raw) => this.answers(slot, batch, decodeDecideReply(raw, batch.waiting, call), sentAt, node),
      (error: unknown) => {
        throw failedAt(error, node);
      },
    );
    batch.waiting.forEach((waiting, i) => {
      const answer = answers.then((all) => {
        if (all[i] instanceof RateLimitStoreError) throw all[i];
        return all[i];
      });
      const { timeoutMs } = waiting;
      const bounded =
        timeoutMs === undefined ? answer : this.deadlines.race(answer, timeoutMs, () => storeTimeout(timeoutMs, node));
      bounded.then(waiting.resolve, waiting.reject);
    });
  }

  /**
   * Each request's answer from a decide call's reply, or a stale error where Redis ran it past its
   * deadline.
   *
   * A `leaky_bucket` turn (`delayMs`) comes `delayMs` after Redis decided, so what the reply took
   * to be read since (Redis held up before writing it, this process busy) is taken off: requests of
   * one queue decided in different calls keep their spacing whichever reply is read late.
   */
  private answers(
    slot: number,
    batch: Batch,
    { answers, now: redisNow }: DecideReply,
    sentAt: number,
    node: string | undefined,
  ): (Reply | RateLimitStoreError)[] {
    const readAt = this.clock.localNow();
    const decidedAt = this.clock.learn(slot, redisNow, sentAt, readAt);
    const late = this.clock.sinceDecided(slot, redisNow, readAt);
    return batch.waiting.map(({ timeoutMs }, j) => {
      const answer = answers[j];
      if (answer === undefined) return new RateLimitStoreError(staleStoreCall(timeoutMs!), { reason: 'stale', node });
      const reply: Reply = { outcomes: answer.outcomes, at: answer.at, decidedAt };
      if (late > 0)
        for (const outcome of reply.outcomes)
          if (outcome.delayMs > 0) outcome.delayMs = Math.max(0, outcome.delayMs - late);
      return reply;
    });
  }
}

/** Adds requests to a batch: their reply, once the batch's call has answered them. */
function waitFor(
  batch: Batch,
  requests: readonly RateLimitRequest[],
  charge: boolean,
  timeoutMs: number | undefined,
): Promise<Reply> {
  return new Promise<Reply>((resolve, reject) =>
    batch.waiting.push({ requests, charge, deadline: '', timeoutMs, resolve, reject }),
  );
}
