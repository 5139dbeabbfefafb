/**
 * Measures the figures of the README's "Choosing an algorithm" table and prints it as markdown:
 * how each algorithm takes a burst, how far it lets a hammering client past the limit across a
 * window boundary, how often it decides differently from the exact sliding window log on a
 * seeded trace, and what it costs in Redis (memory per key, commands and time per call).
 *
 * Run with `npm run compare`. It starts its own redis-server on a free loopback port (never
 * 6379) and stops it at the end. Everything but the microseconds is deterministic: the traces
 * are seeded, and the memory store and Redis run on a clock the trace drives.
 */
import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import {
  type Algorithm,
  ALGORITHMS,
  MemoryStore,
  type RateLimitDecision,
  type RateLimitRequest,
  RedisStore,
} from 'nestjs-ratelimit';
import { requireRedisServer, startRedisServer, stopRedisServer } from '../test/support/redis/process.js';

/** The algorithms compared: those whose limit is a rate (not concurrency's slots, nor a quota's calendar periods). */
const RATE_ALGORITHMS: readonly Algorithm[] = ALGORITHMS.filter(
  (algorithm) => algorithm !== 'concurrency' && algorithm !== 'quota',
);

type Rule = RateLimitRequest['rule'];

/** The table's policy: limit 100 per 10 s, which is rps 10, burst 100. */
const LIMIT = 100;
const WINDOW_MS = 10_000;
/** The same window with ten times the limit, to show what grows with it. */
const LARGE_LIMIT = 1_000;

/** 2026-01-01T00:00:00Z: a multiple of every window here, so boundaries fall at known offsets. */
const EPOCH = Date.UTC(2026, 0, 1);

/** Requests arriving at one instant on a fresh key. */
const BURST_REQUESTS = 300;
/** The hammer: one request every 10 ms (ten times the policy's rate), from 1 s before a window boundary, for 22 s. */
const HAMMER = { gapMs: 10, fromMs: WINDOW_MS - 1_000, forMs: 22_000 };

/** The exactness trace: Poisson arrivals on 10 keys at 0.6, 0.7, ..., 1.5 times the policy's rate. */
const SEED = 20_260_101;
const TRACE_REQUESTS = 200_000;
const RATE_FACTORS = Array.from({ length: 10 }, (_, k) => 0.6 + k / 10);
/** Policy shapes on which sliding_window_counter is also compared with the log. */
const SHAPES = [
  { limit: 10, windowMs: 1_000 },
  { limit: 100, windowMs: 10_000 },
  { limit: 1_000, windowMs: 60_000 },
];

/** Requests of the trace replayed on Redis, per algorithm and limit, for its command counts and timings. */
const REDIS_REQUESTS = 10_000;
/** Replays of those requests; the quickest one's timing is reported. */
const REDIS_ROUNDS = 3;
/** Replayed requests in flight at once (one connection keeps them in order). */
const REDIS_BATCH = 500;

/** The rule of a policy of `limit` per `windowMs`, as the module normalises `{ limit, window }`. */
function ruleOf(algorithm: Algorithm, limit: number, windowMs: number): Rule {
  return { algorithm, rps: (limit * 1000) / windowMs, burst: limit };
}

// --- traces -------------------------------------------------------------------------------

/** One request of a trace: when, in ms after `EPOCH`, and which client. */
interface Arrival {
  at: number;
  client: number;
}

/** mulberry32: a tiny seeded PRNG, uniform in [0, 1), the same sequence on every machine. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * `count` Poisson arrivals of clients whose rates are `rates` (requests per second): the merged
 * process has exponential gaps at the total rate, and each arrival is a client's in proportion
 * to its rate. Times are floored to whole ms, as the stores' clocks are.
 */
function poissonTrace(seed: number, count: number, rates: readonly number[]): Arrival[] {
  const random = mulberry32(seed);
  const total = rates.reduce((sum, rate) => sum + rate, 0);
  const trace: Arrival[] = [];
  let t = 0;
  while (trace.length < count) {
    t += (-Math.log(1 - random()) * 1000) / total;
    let pick = random() * total;
    let client = 0;
    while (client < rates.length - 1 && pick >= rates[client]) pick -= rates[client++];
    trace.push({ at: Math.floor(t), client });
  }
  return trace;
}

function burstTrace(): Arrival[] {
  return Array.from({ length: BURST_REQUESTS }, () => ({ at: 0, client: 0 }));
}

function hammerTrace(): Arrival[] {
  const { gapMs, fromMs, forMs } = HAMMER;
  return Array.from({ length: forMs / gapMs }, (_, i) => ({ at: fromMs + i * gapMs, client: 0 }));
}

/**
 * The first `count` requests of the trace of `SEED` for a policy of `limit` per `windowMs`: the
 * clients' rates are `RATE_FACTORS` times the policy's rate, times `load`.
 */
function exactnessTrace(limit: number, windowMs: number, count = TRACE_REQUESTS, load = 1): Arrival[] {
  const rps = (limit * 1000) / windowMs;
  return poissonTrace(
    SEED,
    count,
    RATE_FACTORS.map((factor) => factor * load * rps),
  );
}

const digests = new Map<number, string>();

/** A store key shaped like the module's (`rl:<policy>:<tag>:{<22-character digest>}`). */
function keyOf(algorithm: Algorithm, client: number): string {
  let digest = digests.get(client);
  if (digest === undefined) {
    digest = createHash('sha256').update(`client:${client}`).digest('base64url').slice(0, 22);
    digests.set(client, digest);
  }
  return `rl:compare:${algorithm}:{${digest}}`;
}

// --- replays in memory ------------------------------------------------------------------------

/** What a store decided on each request of a trace. */
interface Replay {
  allowed: Uint8Array;
  /** The largest delay an admitted request was given, ms. */
  maxDelayMs: number;
}

/** Replays `trace` on a fresh `MemoryStore` whose clock the trace drives, each client on its own bucket. */
function replayInMemory(trace: readonly Arrival[], rule: Rule): Replay {
  let now = EPOCH;
  const store = new MemoryStore({ clock: () => now });
  const allowed = new Uint8Array(trace.length);
  let maxDelayMs = 0;
  trace.forEach(({ at, client }, i) => {
    now = EPOCH + at;
    const [decision] = store.decideSync(
      [{ key: keyOf(rule.algorithm, client), policy: 'compare', rule, cost: 1 }],
      true,
    );
    allowed[i] = decision.allowed ? 1 : 0;
    maxDelayMs = Math.max(maxDelayMs, decision.delay * 1000);
  });
  return { allowed, maxDelayMs };
}

function admittedCount({ allowed }: Replay): number {
  return allowed.reduce((sum, a) => sum + a, 0);
}

/** The most requests admitted in any span of `spanMs` (half-open, whole ms) of one client's trace. */
function mostInAnySpan(trace: readonly Arrival[], { allowed }: Replay, spanMs: number): number {
  const times = trace.filter((_, i) => allowed[i] === 1).map(({ at }) => at);
  let most = 0;
  let first = 0;
  times.forEach((at, last) => {
    while (times[first] <= at - spanMs) first++;
    most = Math.max(most, last - first + 1);
  });
  return most;
}

/** How a replay's decisions disagree with a reference's, in all and in each direction. */
interface Disagreement {
  /** Share of all decisions that differ, 0 to 1. */
  share: number;
  /** Requests admitted that the reference refused. */
  moreAdmitted: number;
  /** Requests refused that the reference admitted. */
  moreRefused: number;
}

function disagreement(moreAdmitted: number, moreRefused: number, decisions: number): Disagreement {
  return { share: (moreAdmitted + moreRefused) / decisions, moreAdmitted, moreRefused };
}

/** How `replay` disagrees with `reference`, a replay of the same trace. */
function versus({ allowed }: Replay, reference: Replay): Disagreement {
  let moreAdmitted = 0;
  let moreRefused = 0;
  allowed.forEach((a, i) => {
    if (a > reference.allowed[i]) moreAdmitted++;
    else if (a < reference.allowed[i]) moreRefused++;
  });
  return disagreement(moreAdmitted, moreRefused, allowed.length);
}

/**
 * How `replay` disagrees with the exact rule (at most `limit` admitted in the last `windowMs`)
 * applied to the requests it admitted itself. Unlike `versus`, an earlier difference does not
 * carry over into later decisions through a different history.
 */
function versusOwnHistory(
  trace: readonly Arrival[],
  { allowed }: Replay,
  limit: number,
  windowMs: number,
): Disagreement {
  const admittedAt = new Map<number, number[]>();
  let moreAdmitted = 0;
  let moreRefused = 0;
  trace.forEach(({ at, client }, i) => {
    const times = admittedAt.get(client) ?? [];
    admittedAt.set(client, times);
    while (times.length > 0 && times[0] <= at - windowMs) times.shift();
    const exact = times.length < limit;
    if (allowed[i] === 1 && !exact) moreAdmitted++;
    if (allowed[i] === 0 && exact) moreRefused++;
    if (allowed[i] === 1) times.push(at);
  });
  return disagreement(moreAdmitted, moreRefused, trace.length);
}

// --- Redis ------------------------------------------------------------------------------------

/** What one algorithm costs in Redis under one policy. */
interface RedisCost {
  /** `MEMORY USAGE` of a key whose whole limit has been taken, bytes. */
  fullKeyBytes: number;
  /** Redis commands the script ran per call, by command name. */
  commandsPerCall: Map<string, number>;
  /** Mean time of one script call inside Redis, µs (`INFO commandstats`), in the quickest round. */
  usecPerCall: number;
  /** Replayed requests on which Redis decided differently from the memory store, in the worst round. */
  disagreements: number;
}

/** Calls and total µs per command since the last `CONFIG RESETSTAT`. */
async function commandStats(redis: Redis): Promise<Map<string, { calls: number; usec: number }>> {
  const stats = new Map<string, { calls: number; usec: number }>();
  for (const match of (await redis.info('commandstats')).matchAll(/^cmdstat_(\S+?):calls=(\d+),usec=(\d+)/gm)) {
    stats.set(match[1], { calls: Number(match[2]), usec: Number(match[3]) });
  }
  return stats;
}

/** A `RedisStore` on a clock the caller sets, taking one token under `rule` from one client's key at a time. */
interface RedisReplayer {
  clock: { now: number };
  consume: (client: number) => Promise<RateLimitDecision[]>;
}

function redisReplayer(redis: Redis, rule: Rule): RedisReplayer {
  const clock = { now: 0 };
  const store = new RedisStore({ client: redis, clock: () => clock.now, cacheRefusals: false });
  const consume = (client: number) =>
    store.consume([{ key: keyOf(rule.algorithm, client), policy: 'compare', rule, cost: 1 }]);
  return { clock, consume };
}

/**
 * What `rule` costs in Redis: `MEMORY USAGE` of one key filled to its limit, then the first
 * `REDIS_REQUESTS` of `trace` replayed `REDIS_ROUNDS` times. The replays run on the trace's
 * clock, started at the next window boundary of the real time, so that windows fall as they do
 * in memory and the keys' expiry times (PEXPIREAT) lie ahead of Redis's own clock.
 */
async function measureRedis(redis: Redis, rule: Rule, trace: readonly Arrival[], inMemory: Replay): Promise<RedisCost> {
  const replayer = redisReplayer(redis, rule);
  await redis.flushall();
  replayer.clock.now = Date.now();
  for (let i = 0; i < rule.burst; i++) await replayer.consume(-1);
  const fullKeyBytes = Number(await redis.call('MEMORY', 'USAGE', keyOf(rule.algorithm, -1), 'SAMPLES', '0'));

  // The calls are loaded by now, so every replayed call is one FCALL (one EVALSHA on a Redis without functions).
  const rounds: Omit<RedisCost, 'fullKeyBytes'>[] = [];
  for (let round = 0; round < REDIS_ROUNDS; round++) rounds.push(await replayOnRedis(redis, replayer, trace, inMemory));
  // Other processes only ever add time: the quickest round is the closest to the script's own.
  const quickest = rounds.reduce((best, round) => (round.usecPerCall < best.usecPerCall ? round : best));
  return { ...quickest, fullKeyBytes, disagreements: Math.max(...rounds.map((round) => round.disagreements)) };
}

/** One replay of the first `REDIS_REQUESTS` of `trace`, from an empty database and fresh `INFO commandstats`. */
async function replayOnRedis(
  redis: Redis,
  { clock, consume }: RedisReplayer,
  trace: readonly Arrival[],
  inMemory: Replay,
): Promise<Omit<RedisCost, 'fullKeyBytes'>> {
  await redis.flushall();
  await redis.config('RESETSTAT');
  const start = Math.ceil(Date.now() / WINDOW_MS) * WINDOW_MS;
  const replayed = trace.slice(0, REDIS_REQUESTS);
  let disagreements = 0;
  for (let from = 0; from < replayed.length; from += REDIS_BATCH) {
    const calls = replayed.slice(from, from + REDIS_BATCH).map(({ at, client }) => {
      clock.now = start + at;
      return consume(client);
    });
    (await Promise.all(calls)).forEach(([decision], j) => {
      if (Number(decision.allowed) !== inMemory.allowed[from + j]) disagreements++;
    });
  }

  const stats = await commandStats(redis);
  const script = stats.get('fcall') ?? stats.get('evalsha') ?? { calls: 0, usec: 0 };
  if (script.calls !== replayed.length)
    throw new Error(`expected ${replayed.length} FCALL or EVALSHA calls, Redis counted ${script.calls}`);
  const commandsPerCall = new Map<string, number>();
  for (const [name, { calls }] of stats) {
    if (!/^(fcall|evalsha|config|info)/.test(name)) commandsPerCall.set(name.toUpperCase(), calls / script.calls);
  }
  return { commandsPerCall, usecPerCall: script.usec / script.calls, disagreements };
}

/** Runs `body` against a redis-server of its own, stopped afterwards whatever happens. */
async function withRedisServer<T>(body: (client: Redis) => Promise<T>): Promise<T> {
  requireRedisServer();
  const server = await startRedisServer();
  const stop = () => stopRedisServer(server.pid);
  const interrupted = () => {
    stop();
    process.exit(130);
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    return await body(client);
  } finally {
    client.disconnect();
    stop();
    process.off('SIGINT', interrupted);
    process.off('SIGTERM', interrupted);
  }
}

// --- the report -------------------------------------------------------------------------------

const percent = (share: number): string => `${(share * 100).toFixed(2)} %`;
const whole = (n: number): string => n.toLocaleString('en-US');
const perCall = (n: number): string => String(Number(n.toFixed(2)));
/** Bytes, to the kB above 10 kB: a skiplist's size varies a little from run to run (random node levels). */
const bytes = (n: number): string => (n < 10_000 ? `${whole(n)} B` : `≈${whole(Math.round(n / 1000))} kB`);
const sum = (values: Iterable<number>): number => [...values].reduce((total, n) => total + n, 0);

function commandList(commands: Map<string, number>): string {
  const parts = [...commands].sort(([, a], [, b]) => b - a).map(([name, n]) => `${name} ${perCall(n)}`);
  return `${perCall(sum(commands.values()))} (${parts.join(', ')})`;
}

function differ({ share, moreAdmitted, moreRefused }: Disagreement, reference: string): string {
  return `${percent(share)} differ (${whole(moreAdmitted)} admitted that ${reference} refused, ${whole(moreRefused)} refused that it admitted)`;
}

async function main(): Promise<void> {
  const started = performance.now();
  const indexOf = (algorithm: Algorithm) => RATE_ALGORITHMS.indexOf(algorithm);
  const rules = RATE_ALGORITHMS.map((algorithm) => ruleOf(algorithm, LIMIT, WINDOW_MS));
  const largeRules = RATE_ALGORITHMS.map((algorithm) => ruleOf(algorithm, LARGE_LIMIT, WINDOW_MS));

  const burst = burstTrace();
  const hammer = hammerTrace();
  const trace = exactnessTrace(LIMIT, WINDOW_MS);
  // Only replayed on Redis, so only as long as that replay.
  const largeTrace = exactnessTrace(LARGE_LIMIT, WINDOW_MS, REDIS_REQUESTS);
  const bursts = rules.map((rule) => replayInMemory(burst, rule));
  const hammers = rules.map((rule) => replayInMemory(hammer, rule));
  const replays = rules.map((rule) => replayInMemory(trace, rule));
  const largeReplays = largeRules.map((rule) => replayInMemory(largeTrace, rule));
  const log = replays[indexOf('sliding_window_log')];
  const counter = replays[indexOf('sliding_window_counter')];

  const { costs, largeCosts, redisVersion } = await withRedisServer(async (redis) => {
    const costs: RedisCost[] = [];
    const largeCosts: RedisCost[] = [];
    for (let i = 0; i < RATE_ALGORITHMS.length; i++) {
      costs.push(await measureRedis(redis, rules[i], trace, replays[i]));
      largeCosts.push(await measureRedis(redis, largeRules[i], largeTrace, largeReplays[i]));
    }
    const redisVersion = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown';
    return { costs, largeCosts, redisVersion };
  });

  const seconds = WINDOW_MS / 1000;
  const out: string[] = [];
  out.push(
    `Policy: limit ${LIMIT} per ${seconds} s (rps ${LIMIT / seconds}, burst ${LIMIT}). Trace: seed ${SEED}, ` +
      `${whole(TRACE_REQUESTS)} requests of cost 1, Poisson arrivals on ${RATE_FACTORS.length} keys at ` +
      `${RATE_FACTORS[0].toFixed(1)} to ${RATE_FACTORS[RATE_FACTORS.length - 1].toFixed(1)} times the policy's rate. ` +
      `Hammer: a request every ${HAMMER.gapMs} ms on a fresh key, from ${(WINDOW_MS - HAMMER.fromMs) / 1000} s before a ` +
      `window boundary, for ${HAMMER.forMs / 1000} s.`,
  );
  out.push('');
  out.push(
    `| algorithm | ${BURST_REQUESTS} requests at one instant: admitted | hammer across a window boundary: most admitted in ${seconds} s | ` +
      `largest delay | decisions that differ from \`sliding_window_log\` | Redis memory per full key, limit ${LIMIT} / ${whole(LARGE_LIMIT)} | ` +
      `Redis commands per call | script time per call, limit ${LIMIT} / ${whole(LARGE_LIMIT)} (*) |`,
  );
  out.push('|---|--:|--:|--:|--:|--:|--:|--:|');
  RATE_ALGORITHMS.forEach((algorithm, i) => {
    const delayMs = Math.max(bursts[i].maxDelayMs, hammers[i].maxDelayMs);
    const cells = [
      `\`${algorithm}\``,
      String(admittedCount(bursts[i])),
      String(mostInAnySpan(hammer, hammers[i], WINDOW_MS)),
      delayMs > 0 ? `${delayMs / 1000} s` : '0',
      replays[i] === log ? 'reference' : percent(versus(replays[i], log).share),
      `${bytes(costs[i].fullKeyBytes)} / ${bytes(largeCosts[i].fullKeyBytes)}`,
      perCall(sum(costs[i].commandsPerCall.values())),
      `${costs[i].usecPerCall.toFixed(1)} µs / ${largeCosts[i].usecPerCall.toFixed(1)} µs`,
    ];
    out.push(`| ${cells.join(' | ')} |`);
  });
  out.push('');
  out.push(
    `(*) Mean time of one call (\`FCALL\`) inside Redis ${redisVersion} (\`INFO commandstats\`), best of ${REDIS_ROUNDS} replays ` +
      `of the trace's first ${whole(REDIS_REQUESTS)} requests: it depends on the machine. Every other figure is deterministic. ` +
      `Commands per call are counted on the same replay; in production each call also runs one \`TIME\`.`,
  );
  out.push('');
  out.push('Redis commands per call, by command:');
  out.push('');
  RATE_ALGORITHMS.forEach((algorithm, i) => out.push(`- \`${algorithm}\`: ${commandList(costs[i].commandsPerCall)}`));
  out.push('');

  const own = versusOwnHistory(trace, counter, LIMIT, WINDOW_MS);
  out.push(
    `sliding_window_counter vs sliding_window_log: of ${whole(TRACE_REQUESTS)} decisions, ${differ(versus(counter, log), 'the log')}. ` +
      `In all the counter admitted ${whole(admittedCount(counter))} requests, the log ${whole(admittedCount(log))}. ` +
      `Judged by the exact rule on the requests it admitted itself (so that one difference does not change the history ` +
      `of the next decisions), ${percent(own.share)} of its decisions are wrong: ${whole(own.moreAdmitted)} admitted over ` +
      `the limit, ${whole(own.moreRefused)} refused under it.`,
  );
  out.push('');
  out.push('The same comparison on other policy shapes and loads, same seed:');
  out.push('');
  const variants = [
    ...SHAPES.map((shape) => ({ ...shape, load: 1, loadNote: '' })),
    { limit: LIMIT, windowMs: WINDOW_MS, load: 0.5, loadNote: ', keys at half those rates' },
  ];
  for (const { limit, windowMs, load, loadNote } of variants) {
    const variant = exactnessTrace(limit, windowMs, TRACE_REQUESTS, load);
    const variantCounter = replayInMemory(variant, ruleOf('sliding_window_counter', limit, windowMs));
    const variantLog = replayInMemory(variant, ruleOf('sliding_window_log', limit, windowMs));
    out.push(
      `- limit ${whole(limit)} per ${windowMs / 1000} s${loadNote}: ${differ(versus(variantCounter, variantLog), 'the log')}`,
    );
  }
  out.push('');

  const gcraVsTokenBucket = versus(replays[indexOf('gcra')], replays[indexOf('token_bucket')]);
  const storesDisagree = sum([...costs, ...largeCosts].map((cost) => cost.disagreements));
  out.push(
    `Checks: gcra and token_bucket decided ${whole(gcraVsTokenBucket.moreAdmitted + gcraVsTokenBucket.moreRefused)} of ` +
      `${whole(TRACE_REQUESTS)} requests differently; Redis and the memory store, ${whole(storesDisagree)} of ` +
      `${whole(2 * RATE_ALGORITHMS.length * REDIS_REQUESTS)} replayed requests. Took ${((performance.now() - started) / 1000).toFixed(1)} s.`,
  );
  console.log(out.join('\n'));
}

await main();
