/**
 * What the guard costs a NestJS app (bench/server.ts) under autocannon: 64 connections, one
 * request at a time on each, `GET /`, on Express and on Fastify.
 *
 * The figure the targets read is the app process's own CPU per request: user + system time from
 * `/proc/<pid>/stat`, read before and after the timed run, over the requests it answered. On 2
 * shared cores, requests per second measure the machine as much as the app (Redis and the load
 * generator take CPU from it, and ratios moved by 0.1 to 0.25 between two runs of one commit);
 * the CPU the app spends on a request is its own work, whoever else runs. Requests per second
 * stay in the tables, for information.
 *
 * - http-<adapter>: no guard, the headers-only guard (the floor: the same 5 headers, no
 *   decision), ours and @nestjs/throttler, each on memory and on Redis, with a limit nobody
 *   reaches. Each guarded variant runs in two key modes: `hot` (every request has the same
 *   x-api-key) and `spread` (a random one of 10,000 per request).
 * - refused-flood-<adapter>: ours with a policy that refuses nearly everything, flooded on one
 *   key (`hot`) or a random one of 100 (`spread`), against ours admitting every request on the
 *   same route and store (`admitted`, one key). A 429 should cost the app no more than an
 *   admitted request, and a refused client should not reach Redis on every request: Redis calls
 *   per 429 are counted from `INFO commandstats`.
 *
 * Each run forks a fresh server, so no run inherits another's buckets, caches or heap; FLUSHALLs
 * the bench Redis; warms up for `warmupSeconds` (not counted); then measures for `seconds`.
 * The load generator runs in the bench process, the app in its child.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { type Adapter, sendsRateLimitHeader, type Variant } from './server.js';
import {
  type Contender,
  contenderTable,
  cpuMicros,
  formatRate,
  medianCpu,
  type RatioRow,
  ratioOfMedians,
  type Sample,
  type Target,
  totalCounts,
} from './stats.js';

const CONNECTIONS = 64;
/** Distinct x-api-key values of the `spread` mode of http-<adapter>. */
const SPREAD_KEYS = 10_000;
/** Distinct x-api-key values of the `spread` mode of refused-flood-<adapter>. */
const FLOOD_SPREAD_KEYS = 100;
const SERVER = fileURLToPath(new URL('./server.js', import.meta.url));
/** How long a server may take to start listening. */
const START_TIMEOUT_MS = 30_000;

/** µs of app CPU per request that ours may spend above the headers-only guard, per store. */
const OVER_HEADERS_ONLY: Record<'memory' | 'redis', Target> = {
  memory: { op: '<=', value: 3 },
  redis: { op: '<=', value: 5 },
};
const FASTER: Target = { op: '>', value: 1 };
/** A refused request's CPU over an admitted one's. */
const NO_DEARER: Target = { op: '<=', value: 1 };
/** Redis calls per refused request, at most. */
const CALLS_PER_REFUSAL: Target = { op: '<', value: 0.01 };
/** The CPU column of the tables. */
const CPU_HEAD = 'app CPU µs/request';

/** One contender of an HTTP comparison: a server variant and the keys its clients send. */
interface Load {
  name: string;
  variant: Variant;
  /** Distinct x-api-key values, drawn at random per request; 1 is the `hot` mode. */
  keys: number;
}

/** The counts every HTTP run reports (see `measure`). */
const COUNTS = ['2xx', '429', '5xx', 'other status', 'errors', 'unlimited'];
/** And what the refused flood also reports. */
const REDIS_COUNTS = ['script calls', 'commands'];

export async function httpThroughput(context: BenchContext, adapter: Adapter): Promise<ComparisonReport> {
  const loads: Load[] = [
    { name: 'none', variant: 'none', keys: 1 },
    { name: 'headers-only', variant: 'headers-only', keys: 1 },
  ];
  for (const guard of ['ours', 'throttler'] as const) {
    for (const store of ['memory', 'redis'] as const) {
      loads.push({ name: `${guard}-${store}-hot`, variant: `${guard}-${store}`, keys: 1 });
      loads.push({ name: `${guard}-${store}-spread`, variant: `${guard}-${store}`, keys: SPREAD_KEYS });
    }
  }
  const samples = await context.alternate(loads.map((load) => contender(context, adapter, load)));

  const comparison = `http-${adapter}`;
  const of = (name: string) => samples.get(name)!;
  const cpu = (name: string) => medianCpu(of(name));
  const ratios: RatioRow[] = [
    { comparison, label: 'headers-only − none, µs CPU/request', value: cpu('headers-only') - cpu('none') },
  ];
  for (const store of ['memory', 'redis'] as const) {
    for (const mode of ['hot', 'spread']) {
      const ours = `ours-${store}-${mode}`;
      ratios.push({
        comparison,
        label: `${ours} − headers-only, µs CPU/request`,
        value: cpu(ours) - cpu('headers-only'),
        target: OVER_HEADERS_ONLY[store],
      });
    }
  }
  for (const store of ['memory', 'redis'] as const) {
    for (const mode of ['hot', 'spread']) {
      const [ours, theirs] = [`ours-${store}-${mode}`, `throttler-${store}-${mode}`];
      ratios.push({
        comparison,
        label: `${theirs} / ${ours}, CPU/request`,
        value: cpu(theirs) / cpu(ours),
        target: FASTER,
      });
      ratios.push({
        comparison,
        label: `${ours} / ${theirs}, requests/s`,
        value: ratioOfMedians(of(ours), of(theirs)),
        target: FASTER,
      });
    }
  }
  const notes = [...samples].flatMap(([name, runs]) => {
    const counts = totalCounts(runs);
    const wrong = ['429', '5xx', 'other status', 'errors', 'unlimited'].filter((count) => counts[count] > 0);
    return wrong.length > 0
      ? [
          `${name}: ${wrong.map((count) => `${formatRate(counts[count])} ${count}`).join(', ')} (all should be 2xx with RateLimit headers)`,
        ]
      : [];
  });
  return { table: contenderTable(samples, 'requests/s', COUNTS, CPU_HEAD), ratios, notes };
}

export async function refusedFlood(context: BenchContext, adapter: Adapter): Promise<ComparisonReport> {
  const loads: Load[] = [];
  for (const store of ['memory', 'redis'] as const) {
    loads.push(
      { name: `ours-${store}-admitted`, variant: `ours-${store}`, keys: 1 },
      { name: `ours-${store}-refused-hot`, variant: `ours-${store}-refuse`, keys: 1 },
      { name: `ours-${store}-refused-spread`, variant: `ours-${store}-refuse`, keys: FLOOD_SPREAD_KEYS },
    );
  }
  const samples = await context.alternate(loads.map((load) => contender(context, adapter, load)));

  const comparison = `refused-flood-${adapter}`;
  const ratios: RatioRow[] = [];
  const notes: string[] = [];
  for (const { name, variant } of loads) {
    if (!variant.endsWith('-refuse')) continue;
    const runs = samples.get(name)!;
    const admitted = name.replace(/refused-(hot|spread)$/, 'admitted');
    // the same key mode as the admitted run is the target; a spread flood is for information
    const target = name.endsWith('-hot') ? NO_DEARER : undefined;
    ratios.push({
      comparison,
      label: `${name} / ${admitted}, CPU/request`,
      value: medianCpu(runs) / medianCpu(samples.get(admitted)!),
      target,
    });
    if (variant === 'ours-redis-refuse') {
      // every call the run caused, warm-up included, over every 429 it got: the worst round
      const callsPerRefusal = Math.max(
        ...runs.map(({ counts = {} }) => counts['script calls'] / Math.max(1, counts['429'] + counts['warm-up 429'])),
      );
      ratios.push({
        comparison,
        label: `${name}: Redis calls per 429 (worst round)`,
        value: callsPerRefusal,
        target: CALLS_PER_REFUSAL,
      });
    }
    const counts = totalCounts(runs);
    const responses = counts['2xx'] + counts['429'] + counts['5xx'] + counts['other status'];
    const refusedShare = counts['429'] / Math.max(1, responses);
    if (refusedShare < 0.99) notes.push(`${name}: only ${(refusedShare * 100).toFixed(2)} % of responses were 429`);
    const wrong = ['5xx', 'other status', 'errors', 'unlimited'].filter((count) => counts[count] > 0);
    if (wrong.length > 0)
      notes.push(`${name}: ${wrong.map((count) => `${formatRate(counts[count])} ${count}`).join(', ')}`);
  }
  return { table: contenderTable(samples, 'requests/s', [...COUNTS, ...REDIS_COUNTS], CPU_HEAD), ratios, notes };
}

/** One run of a load: a fresh server, a flushed Redis, a warm-up, the timed run, the server stopped. */
function contender(context: BenchContext, adapter: Adapter, load: Load): Contender {
  return {
    name: load.name,
    run: async () => {
      const server = await startServer(context, adapter, load.variant);
      try {
        await context.admin.flushall();
        const before = await commandStats(context);
        await prime(server.url, load);
        const warmUp = await measure(server.url, context.warmupSeconds, load);
        const cpuBefore = cpuMicros(server.child.pid!);
        const sample = await measure(server.url, context.seconds, load);
        const cpuAfter = cpuMicros(server.child.pid!);
        const after = await commandStats(context);
        const { '2xx': ok, '429': refused, '5xx': failed, 'other status': other } = sample.counts!;
        sample.cpu = (cpuAfter - cpuBefore) / Math.max(1, ok + refused + failed + other);
        sample.counts!['warm-up 429'] = warmUp.counts!['429'];
        sample.counts!['script calls'] = after.scripts - before.scripts;
        sample.counts!['commands'] = after.commands - before.commands;
        return sample;
      } finally {
        await stopServer(context, server.child);
      }
    },
  };
}

/**
 * One request for each of the load's keys, in turn, before the warm-up: a `spread` run then
 * measures 10,000 clients the app has seen (their buckets, key digests and caches in place), as
 * a server in its steady state has. Drawn at random from the start, a 1 s warm-up and a 3 s run
 * would meet a third of them for the first time and measure the first request of each.
 */
async function prime(url: string, load: Load): Promise<void> {
  if (load.keys === 1) return;
  let next = 0;
  await autocannon({
    url,
    connections: CONNECTIONS,
    pipelining: 1,
    amount: load.keys,
    headers: { 'x-api-key': 'bench-0' },
    requests: [
      {
        setupRequest: (request) => {
          request.headers['x-api-key'] = `bench-${next++ % load.keys}`;
          return request;
        },
      },
    ],
  });
}

/**
 * autocannon against `url` for `seconds`: responses per second (whatever their status) and
 * counts of 2xx, 429, 5xx, other statuses, socket errors and timeouts, and `unlimited`: responses
 * of a guarded variant without a `RateLimit` header, i.e. let through without a decision (our
 * guard's failMode 'open' when the store fails or is slower than the module's `timeout`).
 */
async function measure(url: string, seconds: number, load: Load): Promise<Sample> {
  const guarded = sendsRateLimitHeader(load.variant);
  let unlimited = 0;
  // every variant gets the same client-side work; only those that send the header are checked for it
  const onResponse = (_status: number, _body: string, _context: object, headers: Record<string, unknown>) => {
    if (guarded && headers.RateLimit === undefined && headers.ratelimit === undefined) unlimited++;
  };
  const keys = load.keys;
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    pipelining: 1,
    duration: seconds,
    headers: { 'x-api-key': 'bench-hot' },
    requests: [
      keys === 1
        ? { onResponse }
        : {
            onResponse,
            setupRequest: (request) => {
              request.headers['x-api-key'] = `bench-${Math.floor(Math.random() * keys)}`;
              return request;
            },
          },
    ],
  });
  const byStatus = (match: (status: number) => boolean) =>
    Object.entries(result.statusCodeStats).reduce(
      (sum, [status, { count }]) => sum + (match(Number(status)) ? count : 0),
      0,
    );
  const counts = {
    '2xx': byStatus((status) => status >= 200 && status < 300),
    '429': byStatus((status) => status === 429),
    '5xx': byStatus((status) => status >= 500),
    'other status': byStatus((status) => status < 200 || (status >= 300 && status < 500 && status !== 429)),
    errors: result.errors + result.timeouts,
    unlimited,
  };
  return { perSecond: result.requests.total / result.duration, counts };
}

/**
 * Calls the store sent (FCALL, EVALSHA and EVAL: RedisStore sends nothing else while deciding), and
 * every command Redis ran but the bench's own (INFO, FLUSHALL) and connection set-up (INFO,
 * CLIENT), those inside scripts included.
 */
async function commandStats(context: BenchContext): Promise<{ scripts: number; commands: number }> {
  const info = await context.admin.info('commandstats');
  let scripts = 0;
  let commands = 0;
  for (const [, command, calls] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (command === 'info' || command === 'flushall' || command.startsWith('client|')) continue;
    commands += Number(calls);
    if (/^(eval(sha)?|fcall)(_ro)?$/.test(command)) scripts += Number(calls);
  }
  return { scripts, commands };
}

interface Server {
  child: ChildProcess;
  url: string;
}

/** Forks bench/server.js for the variant and waits for its `ready <port>`. */
async function startServer(context: BenchContext, adapter: Adapter, variant: Variant): Promise<Server> {
  const child = fork(SERVER, [adapter, variant], {
    env: { ...process.env, BENCH_REDIS_URL: context.redis.url },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  context.children.add(child);
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${adapter} ${variant} server: not ready after ${START_TIMEOUT_MS} ms`)),
        START_TIMEOUT_MS,
      );
      child.on('message', (message) => {
        const ready = /^ready (\d+)$/.exec(typeof message === 'string' ? message : '');
        if (ready) {
          clearTimeout(timer);
          resolve(Number(ready[1]));
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${adapter} ${variant} server exited (${signal ?? code}) before it was ready`));
      });
    });
    return { child, url: `http://127.0.0.1:${port}/` };
  } catch (error) {
    await stopServer(context, child);
    throw error;
  }
}

/** Asks the server to close, and kills it if it has not exited within 5 s. */
async function stopServer(context: BenchContext, child: ChildProcess): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    if (child.connected) child.send('stop');
    else child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }
  context.children.delete(child);
}
