/**
 * One load process of the `shares` comparison (bench/shares.ts): an app's `RateLimiterService`,
 * from a Nest application context of `RateLimitModule.forRoot({ redis, shares })`, consuming one
 * hot key at a steady rate. bench/shares.ts forks several at once on one Redis, so that each
 * is an instance of its own, as an app's replicas are.
 *
 *   node shares-load.js <on|off> [timeout ms]      (BENCH_REDIS_URL: the Redis to decide on)
 *
 * It tells its parent `ready` once its context is up, runs the `LoadOrder` it is sent (open
 * loop: at each tick it sends every decision due by then, whether or not the earlier ones have
 * been answered), answers with a `LoadResult`, and closes its context (its shares go back) and
 * exits when told `stop`, or when its parent goes away.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import 'reflect-metadata';
import { type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { RateLimiterService, RateLimitModule, type RateLimitPolicy } from 'nestjs-ratelimit';

/** What the parent asks a load process to do. */
export interface LoadOrder {
  /** When to send the first decision, Unix ms (every process of a run is given the same). */
  startAt: number;
  seconds: number;
  /** Decisions a second this process sends. */
  perSecond: number;
  /** Whose bucket: `<source>:<value>`, as `RateLimiterService.consume` takes it. */
  identity: string;
  policy: RateLimitPolicy;
}

/** What a load process did. Times are Unix ms with a fraction (`performance.timeOrigin + now()`). */
export interface LoadResult {
  sent: number;
  admitted: number;
  refused: number;
  /** Decisions the service rejected (a `RateLimitStoreError`: the store did not answer in time). */
  errors: number;
  /** When the first decision was sent (0 when none was). */
  firstSent: number;
  /** When the last one was answered (0 when none was). */
  lastAnswered: number;
  /** Most decisions waiting for an answer at once. */
  mostInFlight: number;
  /** Longest gap between two ticks of the sending loop, ms: how late its timer came at worst. */
  longestGapMs: number;
  /** Decisions sent more than `LATE_MS` after they were due (the loop catches up on a late tick). */
  late: number;
}

/** How often the loop wakes to send what is due, ms: a batch of about 4 decisions at 2,000/s. */
const TICK_MS = 2;
/** A decision sent more than this after it was due is counted late, ms. */
export const LATE_MS = 10;

const clock = () => performance.timeOrigin + performance.now();

/** Sends `order.perSecond` decisions a second for `order.seconds`, then waits for the last answers. */
export async function load(limiter: RateLimiterService, order: LoadOrder): Promise<LoadResult> {
  const result: LoadResult = {
    sent: 0,
    admitted: 0,
    refused: 0,
    errors: 0,
    firstSent: 0,
    lastAnswered: 0,
    mostInFlight: 0,
    longestGapMs: 0,
    late: 0,
  };
  const total = Math.round(order.seconds * order.perSecond);
  let started = 0;
  let inFlight = 0;
  let drained: (() => void) | undefined;
  const answered = () => {
    result.lastAnswered = clock();
    if (--inFlight === 0) drained?.();
  };
  const send = (now: number) => {
    // decision i is due i / perSecond seconds after the start
    if (now - (started + (result.sent * 1000) / order.perSecond) > LATE_MS) result.late++;
    result.sent++;
    inFlight++;
    limiter.consume(order.identity, order.policy).then(
      ([decision]) => {
        if (decision.allowed) result.admitted++;
        else result.refused++;
        answered();
      },
      () => {
        result.errors++;
        answered();
      },
    );
  };

  await sleep(Math.max(0, order.startAt - Date.now()));
  started = clock();
  const end = started + order.seconds * 1000;
  let tick = started;
  while (result.sent < total) {
    const now = clock();
    result.longestGapMs = Math.max(result.longestGapMs, now - tick);
    tick = now;
    const due = Math.min(total, Math.floor(((now - started) * order.perSecond) / 1000) + 1);
    if (result.sent === 0) result.firstSent = now;
    while (result.sent < due) send(now);
    result.mostInFlight = Math.max(result.mostInFlight, inFlight);
    await sleep(TICK_MS);
  }
  // a run of no decisions (the idle run) still lasts its seconds
  await sleep(Math.max(0, end - clock()));
  if (inFlight > 0) await new Promise<void>((resolve) => (drained = resolve));
  return result;
}

async function main(shares: boolean, timeout: number | undefined): Promise<void> {
  @Module({
    imports: [RateLimitModule.forRoot({ redis: process.env.BENCH_REDIS_URL, shares, timeout })],
  })
  class LoadModule {}

  const app: INestApplicationContext = await NestFactory.createApplicationContext(LoadModule, { logger: false });
  const limiter = app.get(RateLimiterService);
  process.on('message', (message: LoadOrder | 'stop') => {
    if (message === 'stop') {
      // closing the context retires this instance's shares: what they hold goes back to the store
      void app.close().then(() => process.exit(0));
      return;
    }
    void load(limiter, message).then((result) => process.send?.(result));
  });
  process.once('disconnect', () => process.exit(0));
  process.send?.('ready');
}

/** Run as a script (as bench/shares.ts forks it), not imported (bench/shares.ts imports its types). */
const isScript = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;

if (isScript) {
  const [mode, timeout] = process.argv.slice(2);
  if (mode !== 'on' && mode !== 'off') {
    console.error('usage: node shares-load.js <on|off> [timeout ms]');
    process.exit(2);
  }
  main(mode === 'on', timeout === undefined ? undefined : Number(timeout)).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
