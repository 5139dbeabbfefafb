/**
 * Store decisions per second, without HTTP: how many rate-limit decisions one Node process gets
 * from a store when 256 calls are always in flight (when one settles the next starts), each on a
 * random key of a million, under a limit every call fits in (so each decision writes its bucket).
 *
 * - redis-decisions: our `RedisStore` against rate-limiter-flexible's `RateLimiterRedis`, each on
 *   its own ioredis client of the same Redis, and against the ceiling: redis-benchmark sending
 *   the very EVALSHA our store sends for one decision (50 connections, 16 pipelined, no Node at
 *   all), which is what this Redis allows for our decide script on this machine at one decision
 *   per call; and the same for calls of 64 decisions, as the store batches them under load.
 * - memory-decisions: our `MemoryStore` against rate-limiter-flexible's `RateLimiterMemory`.
 *   Both decide in the calling process, so in-flight calls matter little; the driver is the same
 *   so the two figures compare with Redis's. A third contender, a no-op store of the same shape
 *   (`consume` answers at once), measures the driver itself, so that each store's own part per
 *   decision can be told apart from the loop that calls it.
 *
 * Our policy is a token bucket of 1000 tokens refilled at 1000/s; rate-limiter-flexible's is
 * 1000 points per 1 s window: the same 1000 a second per key, and no key nears it.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Redis } from 'ioredis';
import {
  MemoryStore,
  type RateLimitDecision,
  type RateLimitRequest,
  type RateLimitStore,
  RedisStore,
} from 'nestjs-ratelimit';
import {
  type RateLimiterAbstract,
  RateLimiterMemory,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterStoreAbstract,
} from 'rate-limiter-flexible';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { redisBenchmark } from './redis-benchmark.js';
import { RULE_ARGS } from '../lib/stores/redis/script-protocol.js';
import { MAX_BATCH_KEYS } from '../lib/stores/redis/slot-batches.js';
import {
  contenderTable,
  formatRate,
  medianRate,
  type RatioRow,
  ratioOfMedians,
  type Sample,
  totalCounts,
} from './stats.js';

/** Calls in flight at once. */
export const IN_FLIGHT = 256;
/** Keys are `rl:bench:<1..KEY_SPACE>`, drawn uniformly. */
const KEY_SPACE = 1_000_000;
/** Our policy: 1000 tokens per second, bucket of 1000. */
const RULE: RateLimitRequest['rule'] = { algorithm: 'token_bucket', rps: 1000, burst: 1000 };
/** rate-limiter-flexible's: 1000 points per 1-second window. */
const RLF_LIMIT = { points: 1000, duration: 1 };
/**
 * Each in-flight chain lets the event loop turn once every this many decisions, as a server's
 * I/O would: otherwise a store that answers in a microtask would starve its own timers (our
 * sweep, rate-limiter-flexible's per-key expiry) for the whole run.
 */
const YIELD_EVERY = 256;

/** redis-benchmark's part of the ceiling: connections and commands pipelined on each. */
const CEILING = { connections: 50, pipeline: 16 };

/** One decision on `key`: true when admitted. Rejects only when the store cannot decide. */
export type Decide = (key: string) => Promise<boolean>;

function randomKey(): string {
  return `rl:bench:${1 + Math.floor(Math.random() * KEY_SPACE)}`;
}

/**
 * Decides for `seconds` with `inFlight` calls outstanding, and reports decisions per second
 * (admitted or refused; a call that fails is counted apart, as an error) and their number.
 */
export async function drive(decide: Decide, seconds: number, inFlight = IN_FLIGHT): Promise<Sample> {
  let decisions = 0;
  let refused = 0;
  let errors = 0;
  // the chains yield to the event loop, so a timer can end the run: no clock read per decision
  let running = true;
  const timer = setTimeout(() => (running = false), seconds * 1000);
  const started = performance.now();
  const chain = async () => {
    for (let i = 1; running; i++) {
      try {
        if (!(await decide(randomKey()))) refused++;
        decisions++;
      } catch {
        errors++;
      }
      if (i % YIELD_EVERY === 0) await nextTurn();
    }
  };
  await Promise.all(Array.from({ length: inFlight }, chain));
  clearTimeout(timer);
  return { perSecond: decisions / ((performance.now() - started) / 1000), counts: { decisions, refused, errors } };
}

/** Each Decide adds one promise to the store's own call, the same for every contender. */
export function ours(store: Pick<RateLimitStore, 'consume'>, rule: RateLimitRequest['rule'] = RULE): Decide {
  return (key) => store.consume([{ key, policy: 'bench', rule, cost: 1 }]).then((decisions) => decisions[0].allowed);
}

/** rate-limiter-flexible rejects with a `RateLimiterRes` when limited and with an `Error` when it cannot decide. */
export function rateLimiterFlexible(limiter: RateLimiterAbstract | RateLimiterStoreAbstract): Decide {
  return (key) =>
    limiter.consume(key).then(
      () => true,
      (reason: unknown) => {
        if (reason instanceof RateLimiterRes) return false;
        throw reason;
      },
    );
}

/** Notes on what should not happen here: every call fits its limit and no store fails. */
function anomalies(samples: ReadonlyMap<string, readonly Sample[]>): string[] {
  return [...samples].flatMap(([name, runs]) => {
    const { refused = 0, errors = 0 } = totalCounts(runs);
    return refused + errors > 0
      ? [`${name}: ${formatRate(refused)} refused and ${formatRate(errors)} failed calls, where all should pass`]
      : [];
  });
}

export async function redisDecisions(context: BenchContext): Promise<ComparisonReport> {
  const ourClient = new Redis(context.redis.url);
  const theirClient = new Redis(context.redis.url);
  const store = new RedisStore({ client: ourClient });
  const decideOurs = ours(store);
  const decideTheirs = rateLimiterFlexible(new RateLimiterRedis({ storeClient: theirClient, ...RLF_LIMIT }));
  const fresh = async (decide: Decide, seconds: number) => {
    await context.admin.flushall();
    return drive(decide, seconds);
  };
  try {
    const command = await storeCommand(context, decideOurs);
    context.log(`ceiling: redis-benchmark ${command.map((arg) => (arg === '' ? "''" : arg)).join(' ')}`);
    context.log(`warming up ${context.warmupSeconds} s each, and sizing redis-benchmark's run`);
    await fresh(decideOurs, context.warmupSeconds);
    await fresh(decideTheirs, context.warmupSeconds);
    const probe = await ceiling(context, command, 100_000);
    const requests = Math.ceil(probe.perSecond * context.seconds);
    const batched = batchOf(command, MAX_BATCH_KEYS);
    const batchedProbe = await ceiling(context, batched, 5_000, MAX_BATCH_KEYS);
    const batchedRequests = Math.ceil((batchedProbe.perSecond / MAX_BATCH_KEYS) * context.seconds);

    const samples = await context.alternate([
      { name: 'ours (RedisStore)', run: () => fresh(decideOurs, context.seconds) },
      { name: 'rate-limiter-flexible (RateLimiterRedis)', run: () => fresh(decideTheirs, context.seconds) },
      {
        name: 'ceiling (redis-benchmark, our script)',
        run: async () => {
          await context.admin.flushall();
          return ceiling(context, command, requests);
        },
      },
      {
        name: `ceiling (redis-benchmark, our script, ${MAX_BATCH_KEYS} per call)`,
        run: async () => {
          await context.admin.flushall();
          return ceiling(context, batched, batchedRequests, MAX_BATCH_KEYS);
        },
      },
    ]);
    const [oursSamples, theirSamples, ceilingSamples, batchedSamples] = [...samples.values()];
    const ratios: RatioRow[] = [
      {
        comparison: 'redis-decisions',
        label: 'ours / rate-limiter-flexible',
        value: ratioOfMedians(oursSamples, theirSamples),
        target: { op: '>=', value: 2 },
      },
      {
        comparison: 'redis-decisions',
        label: 'ours / ceiling, one decision per call',
        value: ratioOfMedians(oursSamples, ceilingSamples),
      },
      {
        comparison: 'redis-decisions',
        label: `ours / ceiling, ${MAX_BATCH_KEYS} decisions per call`,
        value: ratioOfMedians(oursSamples, batchedSamples),
        target: { op: '>=', value: 0.85 },
      },
    ];
    return { table: contenderTable(samples, 'decisions/s', ['refused', 'errors']), ratios, notes: anomalies(samples) };
  } finally {
    await store.close();
    ourClient.disconnect();
    theirClient.disconnect();
  }
}

/**
 * The call our store sends Redis for one decision, seen with MONITOR, with its key made
 * `rl:bench:__rand_int__` (redis-benchmark draws a random one per call): an FCALL of its library,
 * or on a server without functions an EVALSHA. Seeing it rather than rebuilding it from the
 * protocol keeps the ceiling on exactly the code and the arguments the store uses. A call sent
 * whole (EVAL) is turned into the EVALSHA of its script: the store's steady state.
 */
async function storeCommand(context: BenchContext, decide: Decide): Promise<string[]> {
  const key = 'rl:bench:monitored';
  await decide(key); // the first calls may load the scripts and the library
  await context.admin.ping();
  await decide(key);
  const monitor = await context.admin.monitor();
  try {
    const seen = new Promise<string[]>((resolve) => {
      monitor.on('monitor', (_time: string, args: string[]) => {
        if (/^(eval(sha)?|fcall)$/i.test(args[0]) && args.includes(key)) resolve(args);
      });
    });
    await decide(key);
    const [name, script, ...rest] = await seen;
    const sha = name.toLowerCase() === 'eval' ? String(await context.admin.script('LOAD', script)) : script;
    const command = name.toLowerCase() === 'fcall' ? 'FCALL' : 'EVALSHA';
    return [command, sha, ...rest.map((arg) => (arg === key ? 'rl:bench:__rand_int__' : arg))];
  } finally {
    monitor.disconnect();
  }
}

/**
 * The store's one-decision call made a call of `count` decisions on as many random keys, as the
 * store sends when requests arrive together (see `script-protocol.ts`): the call's keys, its
 * clock, then a flat call's deadline and rule as they were; else its head (rules, keyed,
 * deadline, plain, requests: made `count`) and its rule, then what the one request carries
 * (nothing, when it is plain) once per key.
 */
function batchOf(command: readonly string[], count: number): string[] {
  const [call, name, , key, clock, ...args] = command;
  // a flat call's arguments: its deadline and its rule's algorithm, rps, burst (and a window's
  // limit); a general call's head and rule alone take 5 + RULE_ARGS
  if (args.length < 5 + RULE_ARGS)
    return [call, name, String(count), ...Array<string>(count).fill(key), clock, ...args];
  const [rules, keyed, deadline, plain, , ...rest] = args;
  const head = [rules, keyed, deadline, plain, String(count), ...rest.slice(0, RULE_ARGS * Number(rules))];
  const request = rest.slice(RULE_ARGS * Number(rules));
  return [
    call,
    name,
    String(count),
    ...Array<string>(count).fill(key),
    clock,
    ...head,
    ...Array.from({ length: count }, () => request).flat(),
  ];
}

/**
 * redis-benchmark sending `command` (a script call of our store, `perCall` decisions) `requests`
 * times on random keys of `KEY_SPACE`. Decisions per second are its calls per second times `perCall`.
 */
async function ceiling(
  context: BenchContext,
  command: readonly string[],
  requests: number,
  perCall = 1,
): Promise<Sample> {
  const args = [
    '-h',
    '127.0.0.1',
    '-p',
    String(context.redis.port),
    '-c',
    String(CEILING.connections),
    '-P',
    String(CEILING.pipeline),
    '-r',
    String(KEY_SPACE),
    '-n',
    String(requests),
    '--csv',
    ...command,
  ];
  const { code, output } = await redisBenchmark(context, args);
  // --csv prints a header line, then "<command>","<requests per second>",<latencies>...
  const line = output.split('\n').find((row) => row.startsWith(`"${command[0]}`));
  const perSecond = Number(line?.split('","')[1]);
  if (code !== 0 || !Number.isFinite(perSecond) || perSecond <= 0 || /error/i.test(output)) {
    throw new Error(`redis-benchmark ${args.join(' ')} failed (exit ${code}): ${output.trim()}`);
  }
  return { perSecond: perSecond * perCall };
}

/** Every decision admitted with the store's full answer, one object shared by every call. */
const ADMITTED: RateLimitDecision = {
  allowed: true,
  policy: 'bench',
  limit: 1000,
  remaining: 999,
  resetAfter: 0,
  fullAfter: 0,
  retryAfter: 0,
  delay: 0,
};

/** The driver's part: a store of our store's shape that answers at once, with a fresh array as a store would. */
const NO_OP_STORE: Pick<RateLimitStore, 'consume'> = { consume: () => Promise.resolve([ADMITTED]) };

/** µs per decision at `perSecond` decisions per second. */
const microsPer = (perSecond: number) => 1e6 / perSecond;

export async function memoryDecisions(context: BenchContext): Promise<ComparisonReport> {
  /** A fresh store for each run, closed after it: no run inherits another's buckets. */
  const runOurs = async (seconds: number) => {
    const store = new MemoryStore();
    try {
      return await drive(ours(store), seconds);
    } finally {
      await store.close();
    }
  };
  const runTheirs = (seconds: number) => drive(rateLimiterFlexible(new RateLimiterMemory(RLF_LIMIT)), seconds);
  const runDriver = (seconds: number) => drive(ours(NO_OP_STORE), seconds);

  context.log(`warming up ${context.warmupSeconds} s each`);
  await runOurs(context.warmupSeconds);
  await runTheirs(context.warmupSeconds);
  await runDriver(context.warmupSeconds);
  const samples = await context.alternate([
    { name: 'ours (MemoryStore)', run: () => runOurs(context.seconds) },
    { name: 'rate-limiter-flexible (RateLimiterMemory)', run: () => runTheirs(context.seconds) },
    { name: 'driver only (no-op store)', run: () => runDriver(context.seconds) },
  ]);
  const [oursSamples, theirSamples, driverSamples] = [...samples.values()];
  const driver = microsPer(medianRate(driverSamples));
  const comparison = 'memory-decisions';
  return {
    table: contenderTable(samples, 'decisions/s', ['refused', 'errors']),
    ratios: [
      {
        comparison,
        label: 'ours / rate-limiter-flexible',
        value: ratioOfMedians(oursSamples, theirSamples),
        target: { op: '>=', value: 3 },
      },
      { comparison, label: 'driver, µs/decision', value: driver },
      {
        comparison,
        label: 'ours, own part, µs/decision (driver subtracted)',
        value: microsPer(medianRate(oursSamples)) - driver,
        target: { op: '<', value: 0.8 },
      },
      {
        comparison,
        label: 'rate-limiter-flexible, own part, µs/decision',
        value: microsPer(medianRate(theirSamples)) - driver,
      },
    ],
    notes: [
      ...anomalies(samples),
      'Either target meets the goal: 3x rate-limiter-flexible, or our own part under 0.8 µs per decision.',
    ],
  };
}
