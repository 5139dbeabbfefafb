/**
 * redis-cost: what a decision costs Redis, in Redis's own CPU: the microseconds `INFO
 * commandstats` counts inside the script calls (`cmdstat_fcall`, `cmdstat_evalsha` and
 * `cmdstat_eval`, reset by `CONFIG RESETSTAT` before each run) over the decisions the run made. Unlike decisions per
 * second, it hardly depends on who else shares the cores; but Redis times a command by the wall
 * clock, so a script that loses its core midway is charged for the wait. Beside it, for
 * information, the redis-server process's own CPU (user + system, `/proc`) over the same
 * decisions: every command's parsing, replies and network included, no wait.
 *
 * One contender per algorithm, each our `RedisStore` driven as in redis-decisions (256 calls in
 * flight on random keys of a million, so the store batches up to 64 decisions per call), under a
 * limit every call fits in (1000 per second, burst 1000: each decision writes its state); the
 * token bucket again at 1 and at 16 calls in flight (smaller batches: more of each call's fixed
 * cost per decision), for information; and rate-limiter-flexible's `RateLimiterRedis` (its own
 * script, one call per decision), for comparison. Runs are short (at most 2 s): the figure is a ratio of two counts, not a rate.
 */
import { Redis } from 'ioredis';
import { type Algorithm, ALGORITHMS, RedisStore } from 'nestjs-ratelimit';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { type Decide, drive, ours, rateLimiterFlexible } from './decisions.js';
import { contenderTable, cpuMicros, medianCpu, type RatioRow, type Sample, summarize, type Target } from './stats.js';

/** Timed seconds of a run, at most. */
const SECONDS = 2;
/** Redis µs per token-bucket decision, at most. */
const TOKEN_BUCKET_TARGET: Target = { op: '<=', value: 4 };
const RLF_NAME = 'rate-limiter-flexible (RateLimiterRedis)';
/** Calls in flight of the token bucket's extra contenders, beside the usual `IN_FLIGHT`. */
const FEWER_IN_FLIGHT = [1, 16];

export async function redisCost(context: BenchContext): Promise<ComparisonReport> {
  const ourClient = new Redis(context.redis.url);
  const theirClient = new Redis(context.redis.url);
  const store = new RedisStore({ client: ourClient });
  const seconds = Math.min(SECONDS, context.seconds);
  const contenders: Array<{ name: string; decide: Decide; inFlight?: number }> = ALGORITHMS.map(
    (algorithm: Algorithm) => ({ name: algorithm, decide: ours(store, { algorithm, rps: 1000, burst: 1000 }) }),
  );
  for (const inFlight of FEWER_IN_FLIGHT) {
    contenders.push({
      name: `token_bucket, ${inFlight} in flight`,
      decide: ours(store, { algorithm: 'token_bucket', rps: 1000, burst: 1000 }),
      inFlight,
    });
  }
  contenders.push({
    name: RLF_NAME,
    decide: rateLimiterFlexible(new RateLimiterRedis({ storeClient: theirClient, points: 1000, duration: 1 })),
  });
  try {
    context.log(`warming up ${context.warmupSeconds} s each`);
    for (const { decide, inFlight } of contenders) await drive(decide, context.warmupSeconds, inFlight);
    const samples = await context.alternate(
      contenders.map(({ name, decide, inFlight }) => ({ name, run: () => costOf(context, decide, seconds, inFlight) })),
    );
    const ratios: RatioRow[] = [...samples].flatMap(([name, runs]): RatioRow[] => [
      {
        comparison: 'redis-cost',
        label: `${name}, Redis µs/decision in scripts`,
        value: medianCpu(runs),
        target: name === 'token_bucket' ? TOKEN_BUCKET_TARGET : undefined,
      },
      {
        comparison: 'redis-cost',
        label: `${name}, redis-server process CPU µs/decision`,
        value: summarize(runs.map(({ counts = {} }) => counts['redis-server CPU µs'] / Math.max(1, counts.decisions)))
          .median,
      },
    ]);
    return {
      table: contenderTable(samples, 'decisions/s', ['decisions', 'script calls', 'errors'], 'Redis CPU µs/decision'),
      ratios,
      notes: [],
    };
  } finally {
    await store.close();
    ourClient.disconnect();
    theirClient.disconnect();
  }
}

/**
 * One run on an empty Redis with fresh statistics: its decisions, and Redis's script µs over them.
 * `inFlight`: calls outstanding (`drive`'s default when absent).
 */
async function costOf(context: BenchContext, decide: Decide, seconds: number, inFlight?: number): Promise<Sample> {
  await context.admin.flushall();
  await context.admin.config('RESETSTAT');
  const cpuBefore = cpuMicros(context.redis.pid);
  const sample = await drive(decide, seconds, inFlight);
  const cpuAfter = cpuMicros(context.redis.pid);
  const { calls, usec } = scriptStats(await context.admin.info('commandstats'));
  const counts = sample.counts!;
  counts['script calls'] = calls;
  counts['redis-server CPU µs'] = cpuAfter - cpuBefore;
  return { ...sample, cpu: usec / Math.max(1, counts.decisions) };
}

/** Calls and µs of EVALSHA, EVAL and FCALL (read-only forms too) in an `INFO commandstats` reply. */
function scriptStats(info: string): { calls: number; usec: number } {
  let calls = 0;
  let usec = 0;
  for (const [, , count, micros] of info.matchAll(
    /^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro):calls=(\d+),usec=(\d+)/gm,
  )) {
    calls += Number(count);
    usec += Number(micros);
  }
  return { calls, usec };
}
