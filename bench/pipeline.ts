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
 * `WARM_UP` requests, then injects `REQUESTS` more, `IN_FLIGHT` at a time as the HTTP bench's
 * connections send them, and reports its own CPU (user + system, every thread: the collector's
 * too) and the bytes it allocated (see `allocationMeter`) over them. A count, not BENCH_SECONDS:
 * every contender answers as many requests, so a new client's store holds as many buckets
 * whatever its speed, and a Redis contender, slower in wall time, is as warm when its timing
 * starts. The bench Redis is flushed before each run.
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
 * request above the headers-only guard of the same clients.
 *
 *   node pipeline.js <express|fastify> <variant> <known|new>      (BENCH_REDIS_URL: the bench's Redis)
 */
import { fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { GCProfiler, getHeapStatistics } from 'node:v8';
import type { INestApplication } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import inject, { type InjectOptions, type Response } from 'light-my-request';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { type Adapter, ADAPTERS, benchApp, type Variant, VARIANTS } from './server.js';
import {
  type Contender,
  formatRate,
  markdownTable,
  medianCpu,
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
/**
 * Requests in flight at once, as the HTTP bench's 64 connections keep them: what a busy server's
 * limiter works under (a store that sends requests arriving together in one call does so here).
 */
const IN_FLIGHT = 64;
const CLIENTS = ['known', 'new'] as const;
type Client = (typeof CLIENTS)[number];
const SCRIPT = fileURLToPath(import.meta.url);
/** How long a run may take, start to report, before it is killed. */
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
  const guarded = variant.startsWith('ours-') || variant === 'headers-only';
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

/** One run, in this process (forked by `runOf`): the app made, warmed up, timed, closed. */
async function measure(adapter: Adapter, variant: Variant, client: Client, redisUrl: string): Promise<Sample> {
  const { app, dispatch } = await started(adapter, variant, redisUrl);
  try {
    await injecting(dispatch, variant, client, WARM_UP);
    globalThis.gc?.();
    const meter = allocationMeter();
    const cpuBefore = process.cpuUsage();
    const startedAt = performance.now();
    const counts = await injecting(dispatch, variant, client, REQUESTS);
    const seconds = (performance.now() - startedAt) / 1000;
    const { user, system } = process.cpuUsage(cpuBefore);
    const allocated = meter.stop();
    return {
      perSecond: counts.requests / seconds,
      cpu: (user + system) / counts.requests,
      counts: { ...counts, allocated },
    };
  } finally {
    await app.close();
  }
}

/** A contender's run: this file forked for its load on a flushed Redis, its sample read back. */
function runOf(load: Load, context: BenchContext): Contender {
  return {
    name: load.name,
    run: async () => {
      await context.admin.flushall();
      const child = fork(SCRIPT, [load.adapter, load.variant, load.client], {
        env: { ...process.env, BENCH_REDIS_URL: context.redis.url },
        // the collector and the compiler on the main thread: their helper threads' CPU, counted
        // too, moved one contender's figure by 10 % or more from run to run, by when they were scheduled
        execArgv: ['--expose-gc', '--single-threaded'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      context.children.add(child);
      try {
        return await new Promise<Sample>((resolve, reject) => {
          const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
          child.once('message', (sample) => resolve(sample as Sample));
          child.once('exit', (code, signal) => {
            clearTimeout(timer);
            reject(new Error(`${load.name}: the run exited (${signal ?? code}) without a sample`));
          });
        });
      } finally {
        if (child.exitCode === null && child.signalCode === null)
          await new Promise((resolve) => child.once('exit', resolve));
        context.children.delete(child);
      }
    },
  };
}

/** The loads of one adapter: no guard, headers-only, ours and the throttler on each store, each for both kinds of client. */
function loadsOf(adapter: Adapter): Load[] {
  const loads: Load[] = [{ name: `${adapter} none`, adapter, variant: 'none', client: 'known' }];
  for (const client of CLIENTS) {
    loads.push({ name: `${adapter} headers-only ${client}`, adapter, variant: 'headers-only', client });
    for (const variant of ['ours-memory', 'throttler-memory', 'ours-redis', 'throttler-redis'] as const)
      loads.push({ name: `${adapter} ${variant} ${client}`, adapter, variant, client });
  }
  return loads;
}

export async function pipeline(context: BenchContext): Promise<ComparisonReport> {
  const loads = ADAPTERS.flatMap(loadsOf);
  const samples = await context.alternate(loads.map((load) => runOf(load, context)));
  const cpu = (name: string) => medianCpu(samples.get(name)!);

  const ratios: RatioRow[] = [];
  for (const adapter of ADAPTERS) {
    ratios.push({
      comparison: COMPARISON,
      label: `${adapter} headers-only − none, µs CPU/request`,
      value: cpu(`${adapter} headers-only known`) - cpu(`${adapter} none`),
    });
    for (const client of CLIENTS) {
      ratios.push({
        comparison: COMPARISON,
        label: `${adapter} ours-memory ${client} − headers-only ${client}, µs CPU/request`,
        value: cpu(`${adapter} ours-memory ${client}`) - cpu(`${adapter} headers-only ${client}`),
        target: OVER_HEADERS_ONLY[client],
      });
    }
    for (const store of ['memory', 'redis'] as const) {
      for (const client of CLIENTS) {
        ratios.push({
          comparison: COMPARISON,
          label: `${adapter} ours-${store} ${client} / throttler-${store} ${client}, CPU/request`,
          value: cpu(`${adapter} ours-${store} ${client}`) / cpu(`${adapter} throttler-${store} ${client}`),
          target: BELOW,
        });
      }
    }
  }

  const rows = [...samples].map(([name, runs]) => {
    const { median, min, max } = summarize(runs.map((run) => run.cpu ?? Number.NaN));
    const totals = totalCounts(runs);
    return [
      name,
      `${median.toFixed(2)} (${min.toFixed(2)}–${max.toFixed(2)})`,
      formatRate(medianRate(runs)),
      formatRate(totals.allocated / totals.requests),
    ];
  });
  const table = markdownTable(
    ['contender', 'µs CPU/request: median (min–max)', 'requests/s (wall)', 'bytes allocated/request'],
    rows,
  );
  const notes = [...samples].flatMap(([name, runs]) => {
    const counts = totalCounts(runs);
    const wrong = ['other status', 'errors', 'unlimited'].filter((count) => counts[count] > 0);
    const expected = name.includes('throttler') || name.endsWith('none') ? '200' : '200 with RateLimit headers';
    return wrong.length > 0
      ? [
          `${name}: ${wrong.map((count) => `${formatRate(counts[count])} ${count}`).join(', ')} (all should be ${expected})`,
        ]
      : [];
  });
  notes.push(
    `CPU: the run's process, user + system, every thread (the garbage collector's too), over ${formatRate(REQUESTS)} requests after ${formatRate(WARM_UP)} of warm-up; bytes: its JavaScript heap, from V8 (see allocationMeter), over all rounds.`,
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
  measure(adapter, variant, client, process.env.BENCH_REDIS_URL ?? '').then(
    (sample) => process.send?.(sample, () => process.exit(0)),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
