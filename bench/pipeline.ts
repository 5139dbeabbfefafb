/**
 * An admitted request through the whole Nest pipeline, with no socket: `GET /` of bench/server.ts's
 * app (the same variants as the HTTP bench) injected with light-my-request (Fastify's own `inject`
 * is light-my-request too), on Express and on Fastify. Routing, the guard, its headers, the
 * handler, the interceptors where a policy needs its outcome watched, and the response's end all
 * run; the kernel, the sockets and a load generator do not, so the figures move by far less than
 * the HTTP bench's, whose differences they are meant to settle.
 *
 * Each run forks this file as a script, which makes the one app of its contender, as a server
 * process has one (in a process that had made the others' apps too, the framework's code would
 * have met every app's request objects and grown slower for all of them, and each run would
 * inherit the garbage and the JIT's guesses of the one before). It warms the app up with
 * `WARM_UP` requests, then answers `REQUESTS` more in batches of `BATCH`, `IN_FLIGHT` at a time
 * as the HTTP bench's connections send them, and reports its own CPU (user + system, every
 * thread: the collector's too) and the bytes it allocated (see `allocationMeter`) over them. A
 * count, not BENCH_SECONDS: every contender answers as many requests, so a new client's store
 * holds as many buckets whatever its speed, and a Redis contender, slower in wall time, is as
 * warm when its timing starts.
 *
 * The runs of one adapter and one kind of client are alive together, pinned to one CPU (see
 * `PINNED_CPU`), and take turns, a batch each (about 50 ms), in an order that rotates, so they
 * are timed over the same seconds on the same CPU: this machine's speed moves from one second to
 * the next, and the batches of runs alive together rise and fall together. Even so a request's CPU
 * moves by 4 to 55 % from one process of a contender to the next, far more than the targets' few
 * µs, so the targets read each contender's best round; the time inside the guard's `canActivate`
 * (see `timedGuard`) moves by less and is printed beside it. The bench Redis is flushed before each group.
 *
 * Two kinds of client:
 *
 * - `known`: every request from one IP address, as a client that comes back;
 * - `new`: each request from an address never seen before (its bucket, its key's digest and its
 *   identity made for the first time), as a flood of clients or a scan.
 *
 * The guards are keyed as in the HTTP bench, by `x-api-key`, and fall back to the client's IP
 * when there is none: the injected requests send none, so ours and the throttler both limit by IP.
 *
 * Targets: ours below @nestjs/throttler in every cell (adapter, store, client), CPU per request;
 * and on the memory store, ours at most 3 µs (known client) and 6 µs (new client) of CPU per
 * request above the headers-only guard of the same clients (each contender's best round). Beside
 * them, as information, the minimal limiter (bench/server.ts) splits that difference in two: what
 * any limiter keyed like ours (the identity, one bucket read and written) spends above
 * headers-only, and what ours spends above it.
 *
 *   node pipeline.js <express|fastify> <variant> <known|new>      (BENCH_REDIS_URL: the bench's Redis; with an IPC channel)
 */
import { type ChildProcess, fork } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { GCProfiler, getHeapStatistics } from 'node:v8';
import type { ExecutionContext, INestApplication } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import inject, { type InjectOptions, type Response } from 'light-my-request';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { RateLimitGuard } from 'nestjs-ratelimit';
import {
  type Adapter,
  ADAPTERS,
  benchApp,
  HeadersOnlyGuard,
  MinimalLimiterGuard,
  sendsRateLimitHeader,
  type Variant,
  VARIANTS,
} from './server.js';
import {
  formatCounts,
  formatRate,
  markdownTable,
  medianRate,
  type RatioRow,
  type Sample,
  summarize,
  type Target,
  totalCounts,
} from './stats.js';

const COMPARISON = 'pipeline';
/**
 * Requests of each run's warm-up, not counted: enough for the JIT to have compiled the hot path
 * (at 8,000, ours over headers-only moved by 4 µs from run to run).
 */
const WARM_UP = 16_000;
/** Requests of each run's timed part. */
const REQUESTS = 16_000;
/** Requests a run answers in its turn (see the top of this file). */
const BATCH = 500;
/**
 * Requests in flight at once, as the HTTP bench's 64 connections keep them: what a busy server's
 * limiter works under (a store that sends requests arriving together in one call does so here).
 */
const IN_FLIGHT = 64;
const CLIENTS = ['known', 'new'] as const;
type Client = (typeof CLIENTS)[number];
const SCRIPT = fileURLToPath(import.meta.url);
/**
 * The CPU every run is pinned to, the last this process may run on (`Cpus_allowed_list`, Linux):
 * on this machine a process was 30 to 60 % slower than another for as long as the scheduler kept
 * it on one CPU rather than the other, so runs that take turns on one CPU meet the same speed.
 * (Redis stays free to run on another.) `undefined` where it cannot be told.
 */
const PINNED_CPU = allowedCpus().at(-1);
/** util-linux's `taskset`, which pins a run to `PINNED_CPU`; without it, runs go where the kernel puts them. */
const TASKSET = ['/usr/bin/taskset', '/bin/taskset'].find((path) => existsSync(path));

/** The CPUs this process may run on, from `/proc/self/status` (`0-3,6`); none where there is no such file. */
function allowedCpus(): number[] {
  let status: string;
  try {
    status = readFileSync('/proc/self/status', 'utf8');
  } catch {
    return [];
  }
  const list = /^Cpus_allowed_list:\s*(\S+)$/m.exec(status)?.[1] ?? '';
  return list.split(',').flatMap((range) => {
    const [first, last = first] = range.split('-').map(Number);
    return Number.isInteger(first) && Number.isInteger(last)
      ? Array.from({ length: last - first + 1 }, (_, i) => first + i)
      : [];
  });
}
/** How long a run may take to start and warm up, or to answer a batch, before it is killed. */
const RUN_TIMEOUT_MS = 120_000;

/** µs of CPU per request that ours may spend above the headers-only guard on the memory store, per client. */
const OVER_HEADERS_ONLY: Record<Client, Target> = {
  known: { op: '<=', value: 3 },
  new: { op: '<=', value: 6 },
};
/** Ours over the throttler, CPU per request. */
const BELOW: Target = { op: '<', value: 1 };
/** The address of the `known` client. */
const KNOWN_ADDRESS = '203.0.113.9';

/** One contender: a variant of the app on an adapter, and where its requests come from. */
interface Load {
  name: string;
  adapter: Adapter;
  variant: Variant;
  client: Client;
}

/** Sends one request to an app, as its adapter's injection does. */
type Dispatch = (options: InjectOptions) => Promise<Response>;

/** IPv4 addresses handed to `new` clients so far: none is given twice. */
let addressesGiven = 0;

/** An IPv4 address no request of this run has come from, in 11.0.0.0/8 (16.7 million of them). */
function newAddress(): string {
  const n = addressesGiven++;
  return `11.${(n >>> 16) & 0xff}.${(n >>> 8) & 0xff}.${n & 0xff}`;
}

/**
 * Measures what the process allocates while it runs, from V8's own figures: the heap in use at
 * the end, less at the start, plus what every collection in between freed (`GCProfiler` records
 * the heap in use before and after each). Exact for the JavaScript heap; what lives outside it
 * (a Buffer's bytes) is not counted.
 */
function allocationMeter(): { stop(): number } {
  const profiler = new GCProfiler();
  const started = getHeapStatistics().used_heap_size;
  profiler.start();
  return {
    stop() {
      const ended = getHeapStatistics().used_heap_size;
      let freed = 0;
      for (const { beforeGC, afterGC } of profiler.stop().statistics)
        freed += beforeGC.heapStatistics.usedHeapSize - afterGC.heapStatistics.usedHeapSize;
      return ended - started + freed;
    },
  };
}

/** The app of a variant, initialised, and how to inject a request into it. */
async function started(
  adapter: Adapter,
  variant: Variant,
  redisUrl: string,
): Promise<{ app: INestApplication; dispatch: Dispatch }> {
  const app = await benchApp(adapter, variant, redisUrl);
  await app.init();
  if (adapter === 'fastify') {
    const fastify = (app as NestFastifyApplication).getHttpAdapter().getInstance();
    await fastify.ready();
    return { app, dispatch: (options) => fastify.inject(options) };
  }
  const express = app.getHttpAdapter().getInstance() as Parameters<typeof inject>[0];
  return { app, dispatch: (options) => inject(express, options) };
}

/**
 * Injects `requests` requests, `IN_FLIGHT` at a time, each client sending its next once its last
 * is answered: counts of 200s, other statuses, errors, and `unlimited` (a response of ours or
 * headers-only without a `RateLimit` header: let through undecided).
 */
async function injecting(
  dispatch: Dispatch,
  variant: Variant,
  client: Client,
  requests: number,
): Promise<Record<string, number>> {
  const guarded = sendsRateLimitHeader(variant);
  const counts = { requests: 0, '200': 0, 'other status': 0, errors: 0, unlimited: 0 };
  const connection = async (): Promise<void> => {
    while (counts.requests < requests) {
      counts.requests++;
      const remoteAddress = client === 'known' ? KNOWN_ADDRESS : newAddress();
      try {
        const response = await dispatch({ method: 'GET', url: '/', remoteAddress });
        counts[response.statusCode === 200 ? '200' : 'other status']++;
        if (guarded && response.headers.ratelimit === undefined) counts.unlimited++;
      } catch {
        counts.errors++;
      }
      // a turn of the event loop before the next request, as a server has between two reads of
      // a socket: what the response's end leaves for the check phase (its 'close') runs, and the
      // request is let go. Injected back to back, hundreds would wait there, alive, and every
      // scavenge would copy them (a quarter of the CPU in garbage collection, the harness's)
      await nextTurn();
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, connection));
  return counts;
}

/** The count of a run's µs inside its guard's `canActivate` (see `timedGuard`). */
const GUARD_US = 'guard µs';

/**
 * Times the guard's `canActivate` of a variant that decides at once (ours on memory, headers-only,
 * the minimal limiter): its ms, added up until reset. Steadier than the process's CPU, which moves
 * by more than the guard costs from one process to the next (see the top of this file), it shows
 * what the guard itself costs among the pipeline's code, the collections it sets off included. Two
 * `performance.now()` calls a request, in each.
 */
function timedGuard(variant: Variant): { ms: number } {
  const timed = { ms: 0 };
  const guard = TIMED_GUARDS[variant];
  if (guard === undefined) return timed;
  const { canActivate } = guard.prototype;
  guard.prototype.canActivate = function (this: InstanceType<typeof guard>, context: ExecutionContext) {
    const startedAt = performance.now();
    try {
      return canActivate.call(this, context);
    } finally {
      timed.ms += performance.now() - startedAt;
    }
  };
  return timed;
}

/** The guard class of each variant whose `canActivate` is timed (see `timedGuard`). */
const TIMED_GUARDS: Partial<
  Record<Variant, typeof RateLimitGuard | typeof HeadersOnlyGuard | typeof MinimalLimiterGuard>
> = {
  'ours-memory': RateLimitGuard,
  'headers-only': HeadersOnlyGuard,
  'minimal-limiter': MinimalLimiterGuard,
};

/** A sample's µs inside its guard's `canActivate` per request. */
function inGuardPerRequest({ counts = {} }: Sample): number {
  return counts[GUARD_US] / counts.requests;
}

/** What the bench asks of a run: a batch of requests, or its end. */
type Ask = { batch: number } | { end: true };
/** What a run answers: it is warmed up; a batch's CPU (µs), wall time (ms) and counts; its end's bytes allocated. */
type Answer = { ready: true } | { cpu: number; ms: number; counts: Record<string, number> } | { allocated: number };

/**
 * One run, in this process (forked by `Run.start`): the app made and warmed up, then batches
 * answered as the bench asks for them, then closed. The allocation meter runs from the first
 * batch to the end; the process does nothing in between.
 */
async function serve(adapter: Adapter, variant: Variant, client: Client, redisUrl: string): Promise<void> {
  const guard = timedGuard(variant);
  const { app, dispatch } = await started(adapter, variant, redisUrl);
  // no collection forced after it: one (gc()) had the first 16,000 timed requests run partly
  // unoptimized again, ours 7 to 8.5 µs in canActivate instead of 3 to 3.5
  await injecting(dispatch, variant, client, WARM_UP);
  let meter: { stop(): number } | undefined;
  const tell = (answer: Answer) => process.send?.(answer);
  process.on('message', (ask: Ask) => {
    if ('batch' in ask) {
      meter ??= allocationMeter();
      const cpuBefore = process.cpuUsage();
      const startedAt = performance.now();
      guard.ms = 0;
      void injecting(dispatch, variant, client, ask.batch).then((counts) => {
        const ms = performance.now() - startedAt;
        const { user, system } = process.cpuUsage(cpuBefore);
        tell({ cpu: user + system, ms, counts: { ...counts, [GUARD_US]: guard.ms * 1000 } });
      });
      return;
    }
    const allocated = meter?.stop() ?? 0;
    void app.close().then(() => process.send?.({ allocated } satisfies Answer, () => process.exit(0)));
  });
  tell({ ready: true });
}

/** A load's run: this file forked, asked for batches, its sample added up. */
class Run {
  private readonly totals: Record<string, number> = { cpu: 0, ms: 0 };
  private constructor(
    readonly load: Load,
    private readonly child: ChildProcess,
  ) {}

  /** Forks the run of `load` and waits until it has warmed up. */
  static async start(load: Load, context: BenchContext): Promise<Run> {
    // the collector and the compiler on the main thread: their helper threads' CPU, counted
    // too, moved one contender's figure by 10 % or more from run to run, by when they were scheduled
    const flags = ['--single-threaded'];
    const child = fork(SCRIPT, [load.adapter, load.variant, load.client], {
      env: { ...process.env, BENCH_REDIS_URL: context.redis.url },
      // every run on one CPU (see PINNED_CPU)
      ...(TASKSET === undefined || PINNED_CPU === undefined
        ? { execArgv: flags }
        : { execPath: TASKSET, execArgv: ['-c', String(PINNED_CPU), process.execPath, ...flags] }),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    context.children.add(child);
    child.once('exit', () => context.children.delete(child));
    const run = new Run(load, child);
    await run.next();
    return run;
  }

  /** Has the run answer `requests` more, adding up its CPU, time and counts. */
  async batch(requests: number): Promise<void> {
    this.child.send({ batch: requests } satisfies Ask);
    const answer = (await this.next()) as Extract<Answer, { cpu: number }>;
    this.totals.cpu += answer.cpu;
    this.totals.ms += answer.ms;
    for (const [name, count] of Object.entries(answer.counts)) this.totals[name] = (this.totals[name] ?? 0) + count;
  }

  /** Ends the run: its sample, over every batch. */
  async end(): Promise<Sample> {
    this.child.send({ end: true } satisfies Ask);
    const { allocated } = (await this.next()) as Extract<Answer, { allocated: number }>;
    if (this.child.exitCode === null && this.child.signalCode === null)
      await new Promise((resolve) => this.child.once('exit', resolve));
    const { cpu, ms, ...counts } = this.totals;
    return { perSecond: counts.requests / (ms / 1000), cpu: cpu / counts.requests, counts: { ...counts, allocated } };
  }

  /** Kills the run (a group that failed). */
  kill(): void {
    this.child.kill('SIGKILL');
  }

  /** The run's next answer, within `RUN_TIMEOUT_MS`. */
  private next(): Promise<Answer> {
    const { child, load } = this;
    return new Promise<Answer>((resolve, reject) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
      const exited = (code: number | null, signal: string | null) => {
        clearTimeout(timer);
        reject(new Error(`${load.name}: the run exited (${signal ?? code}) without answering`));
      };
      child.once('exit', exited);
      child.once('message', (answer) => {
        clearTimeout(timer);
        child.off('exit', exited);
        resolve(answer as Answer);
      });
    });
  }
}

/**
 * One round of a group (one adapter, one kind of client): its runs started on a flushed Redis,
 * then a batch each in turn, the order rotating, until each has answered `REQUESTS`.
 */
async function groupRound(loads: readonly Load[], context: BenchContext): Promise<Map<string, Sample>> {
  await context.admin.flushall();
  const runs: Run[] = [];
  try {
    for (const load of loads) runs.push(await Run.start(load, context));
    for (let turn = 0; turn * BATCH < REQUESTS; turn++) {
      const requests = Math.min(BATCH, REQUESTS - turn * BATCH);
      for (let i = 0; i < runs.length; i++) await runs[(turn + i) % runs.length].batch(requests);
    }
    const samples = new Map<string, Sample>();
    for (const run of runs) samples.set(run.load.name, await run.end());
    return samples;
  } catch (error) {
    for (const run of runs) run.kill();
    throw error;
  }
}

/**
 * The groups of loads whose runs take turns (see the top of this file), per adapter and kind of
 * client: headers-only, the minimal limiter, ours and the throttler on each store; no guard at all
 * among the known.
 */
function groupsOf(adapter: Adapter): Load[][] {
  return CLIENTS.map((client) => {
    const loads: Load[] = client === 'known' ? [{ name: `${adapter} none`, adapter, variant: 'none', client }] : [];
    for (const variant of [
      'headers-only',
      'minimal-limiter',
      'ours-memory',
      'throttler-memory',
      'ours-redis',
      'throttler-redis',
    ] as const)
      loads.push({ name: `${adapter} ${variant} ${client}`, adapter, variant, client });
    return loads;
  });
}

/** Every group in `context.rounds` rounds, the order of the groups rotating: each load's samples. */
async function groupRounds(context: BenchContext): Promise<Map<string, Sample[]>> {
  const groups = ADAPTERS.flatMap(groupsOf);
  const samples = new Map<string, Sample[]>(groups.flat().map(({ name }) => [name, []]));
  const started = performance.now();
  let done = 0;
  for (let round = 0; round < context.rounds; round++) {
    for (let i = 0; i < groups.length; i++) {
      const group = groups[(round + i) % groups.length];
      for (const [name, sample] of await groupRound(group, context)) {
        samples.get(name)!.push(sample);
        const counts = formatCounts(sample);
        const elapsed = Math.round((performance.now() - started) / 1000);
        context.log(
          `[${++done}/${samples.size * context.rounds} ${elapsed} s] pipeline round ${round + 1}/${context.rounds} ` +
            `${name}: ${formatRate(sample.perSecond)}/s (${counts})`,
        );
      }
    }
  }
  return samples;
}

export async function pipeline(context: BenchContext): Promise<ComparisonReport> {
  const samples = await groupRounds(context);
  // each load's best round: its rounds differ by more than the targets (see the top of this file)
  const cpu = (name: string) => summarize(samples.get(name)!.map((sample) => sample.cpu ?? Number.NaN)).min;
  const inGuard = (name: string) => summarize(samples.get(name)!.map(inGuardPerRequest)).min;

  const ratios: RatioRow[] = [];
  /** `above` − `below` (variants of one adapter and client), µs of CPU and in canActivate, best rounds. */
  const difference = (adapter: Adapter, client: Client, above: Variant, below: Variant, target?: Target) => {
    const [a, b] = [`${adapter} ${above} ${client}`, `${adapter} ${below} ${client}`];
    ratios.push(
      {
        comparison: COMPARISON,
        label: `${a} − ${below} ${client}, µs CPU/request (best rounds)`,
        value: cpu(a) - cpu(b),
        target,
      },
      {
        comparison: COMPARISON,
        label: `${a} − ${below} ${client}, µs in canActivate (best rounds)`,
        value: inGuard(a) - inGuard(b),
      },
    );
  };
  for (const adapter of ADAPTERS) {
    ratios.push({
      comparison: COMPARISON,
      label: `${adapter} headers-only − none, µs CPU/request (best rounds)`,
      value: cpu(`${adapter} headers-only known`) - cpu(`${adapter} none`),
    });
    for (const client of CLIENTS) {
      difference(adapter, client, 'ours-memory', 'headers-only', OVER_HEADERS_ONLY[client]);
      // how much of that any limiter keyed as ours spends, and what ours spends above it
      difference(adapter, client, 'minimal-limiter', 'headers-only');
      difference(adapter, client, 'ours-memory', 'minimal-limiter');
    }
    for (const store of ['memory', 'redis'] as const) {
      for (const client of CLIENTS) {
        ratios.push({
          comparison: COMPARISON,
          label: `${adapter} ours-${store} ${client} / throttler-${store} ${client}, CPU/request (best rounds)`,
          value: cpu(`${adapter} ours-${store} ${client}`) / cpu(`${adapter} throttler-${store} ${client}`),
          target: BELOW,
        });
      }
    }
  }

  const rows = [...samples].map(([name, runs]) => {
    const { median, min, max } = summarize(runs.map((run) => run.cpu ?? Number.NaN));
    const totals = totalCounts(runs);
    const guard = summarize(runs.map(inGuardPerRequest));
    return [
      name,
      `${median.toFixed(2)} (${min.toFixed(2)}–${max.toFixed(2)})`,
      totals[GUARD_US] > 0 ? `${guard.median.toFixed(2)} (${guard.min.toFixed(2)}–${guard.max.toFixed(2)})` : '-',
      formatRate(medianRate(runs)),
      formatRate(totals.allocated / totals.requests),
    ];
  });
  const table = markdownTable(
    [
      'contender',
      'µs CPU/request: median (min–max)',
      'µs in canActivate/request',
      'requests/s (wall)',
      'bytes allocated/request',
    ],
    rows,
  );
  const variants = new Map(
    ADAPTERS.flatMap(groupsOf).flatMap((group) => group.map((load) => [load.name, load.variant])),
  );
  const notes = [...samples].flatMap(([name, runs]) => {
    const counts = totalCounts(runs);
    const wrong = ['other status', 'errors', 'unlimited'].filter((count) => counts[count] > 0);
    const expected = sendsRateLimitHeader(variants.get(name)!) ? '200 with RateLimit headers' : '200';
    return wrong.length > 0
      ? [
          `${name}: ${wrong.map((count) => `${formatRate(counts[count])} ${count}`).join(', ')} (all should be ${expected})`,
        ]
      : [];
  });
  notes.push(
    `CPU: the run's process, user + system, every thread (the garbage collector's too), over ${formatRate(REQUESTS)} requests after ${formatRate(WARM_UP)} of warm-up, in batches of ${BATCH} taking turns with the other runs of its adapter and client; in canActivate: the time inside the guard's canActivate (ours on memory, headers-only, the minimal limiter); bytes: its JavaScript heap, from V8 (see allocationMeter), over all rounds. Targets read each contender's best round.`,
  );
  return { table, ratios, notes };
}

/** Run as a script (as `runOf` forks it): one run, its sample sent to the parent. */
const isScript = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;

if (isScript) {
  const [adapter, variant, client] = process.argv.slice(2) as [Adapter, Variant, Client];
  if (!ADAPTERS.includes(adapter) || !VARIANTS.includes(variant) || !CLIENTS.includes(client)) {
    console.error(`usage: node pipeline.js <${ADAPTERS.join('|')}> <${VARIANTS.join('|')}> <${CLIENTS.join('|')}>`);
    process.exit(2);
  }
  // the bench died without saying so: nobody will read this run
  process.once('disconnect', () => process.exit(0));
  serve(adapter, variant, client, process.env.BENCH_REDIS_URL ?? '').catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
