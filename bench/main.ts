/**
 * `npm run bench`: every comparison of nestjs-ratelimit with the alternatives, in one run.
 *
 * - redis-decisions, memory-decisions (bench/decisions.ts): store decisions per second, against
 *   rate-limiter-flexible and, on Redis, against what redis-benchmark gets from our own script;
 *   in memory, with the driver's own cost measured apart.
 * - redis-cost (bench/redis-cost.ts): Redis's CPU per decision inside our scripts, per algorithm,
 *   and inside rate-limiter-flexible's.
 * - redis-ir (bench/redis-ir.ts): the instructions redis-server runs per decision (valgrind
 *   callgrind, installed when missing), for the very calls our store and the others send; counts,
 *   not times, so it runs once whatever BENCH_ROUNDS says.
 * - redis-memory (bench/redis-memory.ts): the bytes Redis holds per active key (`MEMORY USAGE`,
 *   and the growth of `used_memory`) for each of our algorithms, the sliding log and concurrency
 *   at several fills, beside rate-limiter-flexible's and the throttler's Redis storage's keys;
 *   sizes, for information, so it too runs once.
 * - shares (bench/shares.ts): hot-key shares on and off, one hot key decided 2,000 times a second
 *   by each of 4 app processes on one Redis for 60 s (twice its limit): store calls and Redis
 *   instructions (callgrind, on 10 s of the same load at a quarter of the rate) per admitted
 *   request, and admitted over the exact allowance; 60 s runs whatever BENCH_SECONDS says.
 * - http-express, http-fastify, refused-flood-express, refused-flood-fastify (bench/http.ts):
 *   the app process's CPU per request (and requests per second) without a guard, with a guard
 *   that only sets the headers, with ours and with @nestjs/throttler, and of a refused request
 *   against an admitted one.
 * - pipeline (bench/pipeline.ts): µs of CPU and bytes allocated per admitted request through the
 *   whole Nest pipeline, injected with light-my-request (no socket), on Express and Fastify: ours
 *   against @nestjs/throttler and against the headers-only guard, for a known client (one IP) and
 *   for new clients (a new IP per request), on memory and on Redis.
 * - guard-metrics (bench/guard-metrics.ts): µs per decision of the guard itself, in this process,
 *   with metrics off, on without an OpenTelemetry SDK, and on with one.
 * - in-process (bench/in-process.ts): µs per decision of the guard's own JavaScript over a guard
 *   that only sets the headers, and of the memory store over a bare Map + Float64Array GCRA
 *   loop at 10,000 and 1,000,000 keys, with the bytes each allocates per decision.
 * - baseline-memory, baseline-redis (bench/regression.ts): µs per decision of the guard of this
 *   build against an older commit's build, alternating in this process; `BENCH_ONLY=baseline`
 *   runs only these two.
 *
 * It starts its own redis-server on a free loopback port (never 6379) and stops it at the end,
 * also on an error or Ctrl-C. It prints each comparison's table as it ends, then a summary of
 * every ratio against its target, and (when every comparison ran) writes all of it with the
 * machine's description to bench/last-run.md, from which BENCHMARKS.md is made.
 *
 * Environment:
 * - BENCH_ROUNDS: rounds per comparison, each running every contender once (default 3);
 * - BENCH_SECONDS: timed seconds of each run (default 3), after a warm-up that is not counted;
 * - BENCH_ONLY: comma-separated comparison names to run, or their prefixes (`http`, `refused-flood`);
 * - BENCH_BASELINE: the commit the baseline comparisons build and compare with (default 272b40a).
 */
import type { ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import {
  requireRedisServer,
  startRedisServer,
  stopRedisProcesses,
  stopRedisServer,
} from '../test/support/redis/process.js';
import type { BenchContext, Comparison } from './comparison.js';
import { memoryDecisions, redisDecisions } from './decisions.js';
import { guardMetrics } from './guard-metrics.js';
import { httpThroughput, refusedFlood } from './http.js';
import { inProcess } from './in-process.js';
import { pipeline } from './pipeline.js';
import { redisCost } from './redis-cost.js';
import { redisIr } from './redis-ir.js';
import { redisMemory } from './redis-memory.js';
import { regression } from './regression.js';
import { shares } from './shares.js';
import { alternate, type Contender, formatCounts, formatRate, type RatioRow, ratioTable, verdict } from './stats.js';

const COMPARISONS: readonly Comparison[] = [
  { name: 'redis-decisions', runsPerRound: 4, run: (context) => redisDecisions(context) },
  { name: 'redis-cost', runsPerRound: 9, run: (context) => redisCost(context) },
  { name: 'redis-ir', runsPerRound: 0, fixedSeconds: 180, run: (context) => redisIr(context) },
  { name: 'redis-memory', runsPerRound: 0, fixedSeconds: 40, run: (context) => redisMemory(context) },
  { name: 'shares', runsPerRound: 2, fixedSeconds: 510, run: (context) => shares(context) },
  { name: 'memory-decisions', runsPerRound: 3, run: (context) => memoryDecisions(context) },
  { name: 'http-express', runsPerRound: 10, run: (context) => httpThroughput(context, 'express') },
  { name: 'http-fastify', runsPerRound: 10, run: (context) => httpThroughput(context, 'fastify') },
  { name: 'refused-flood-express', runsPerRound: 6, run: (context) => refusedFlood(context, 'express') },
  { name: 'refused-flood-fastify', runsPerRound: 6, run: (context) => refusedFlood(context, 'fastify') },
  { name: 'pipeline', runsPerRound: 22, run: (context) => pipeline(context) },
  { name: 'guard-metrics', runsPerRound: 3, run: (context) => guardMetrics(context) },
  { name: 'in-process', runsPerRound: 6, run: (context) => inProcess(context) },
  { name: 'baseline-memory', runsPerRound: 2, run: (context) => regression(context, 'memory') },
  { name: 'baseline-redis', runsPerRound: 2, run: (context) => regression(context, 'redis') },
];

const WARMUP_SECONDS = 1;
/** About what an HTTP run spends starting its app server, for the time estimate. */
const START_SECONDS = 1;
const REPORT_PATH = new URL('../../bench/last-run.md', import.meta.url);

function positiveInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1)
    throw new Error(`${name} must be a whole number >= 1, got ${JSON.stringify(raw)}`);
  return value;
}

/** The comparisons BENCH_ONLY names (a name or the start of names, e.g. `http`), all by default. */
function selectComparisons(): Comparison[] {
  const only = (process.env.BENCH_ONLY ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  if (only.length === 0) return [...COMPARISONS];
  const unknown = only.filter((name) => !COMPARISONS.some((c) => c.name === name || c.name.startsWith(`${name}-`)));
  if (unknown.length > 0) {
    throw new Error(
      `BENCH_ONLY names no comparison: ${unknown.join(', ')} (they are ${COMPARISONS.map((c) => c.name).join(', ')})`,
    );
  }
  return COMPARISONS.filter((c) => only.some((name) => c.name === name || c.name.startsWith(`${name}-`)));
}

/** Everything started that must not outlive the bench. */
const running: { redisPid?: number; children: Set<ChildProcess> } = { children: new Set() };

/** Kills what the bench started: its app servers, redis-benchmark, its redis-server. */
function killEverything(): void {
  for (const child of running.children) child.kill('SIGKILL');
  if (running.redisPid !== undefined) stopRedisServer(running.redisPid);
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping the app servers and redis-server`);
    killEverything();
    process.exit(130);
  });
}

async function main(): Promise<void> {
  const rounds = positiveInteger('BENCH_ROUNDS', 3);
  const seconds = positiveInteger('BENCH_SECONDS', 3);
  const comparisons = selectComparisons();
  const runs = comparisons.reduce((sum, c) => sum + c.runsPerRound * rounds, 0);
  const started = performance.now();
  let done = 0;
  const log = (line: string) => console.log(line);

  requireRedisServer();
  const server = await startRedisServer();
  running.redisPid = server.pid;
  const admin = new Redis(server.url);
  try {
    const machine = await describeMachine(admin, rounds, seconds);
    log(machine.join('\n'));
    const fixedSeconds = comparisons.reduce((sum, c) => sum + (c.fixedSeconds ?? 0), 0);
    const estimate = Math.ceil((runs * (seconds + WARMUP_SECONDS + START_SECONDS) + fixedSeconds) / 60);
    log(
      `\n${comparisons.length} comparisons, ${runs} timed runs of ${seconds} s (+ ${WARMUP_SECONDS} s warm-up each): about ${estimate} min\n`,
    );

    const sections: string[] = [];
    const ratios: RatioRow[] = [];
    for (const comparison of comparisons) {
      const context: BenchContext = {
        rounds,
        seconds,
        warmupSeconds: WARMUP_SECONDS,
        redis: { port: server.port, url: server.url, pid: server.pid },
        admin,
        children: running.children,
        log,
        alternate: (contenders) =>
          alternate(contenders.map(collectingGarbageFirst), rounds, (contender, round, sample) => {
            done++;
            const elapsed = (performance.now() - started) / 1000;
            const counts = formatCounts(sample);
            log(
              `[${done}/${runs} ${formatDuration(elapsed)}] ${comparison.name} round ${round + 1}/${rounds} ` +
                `${contender}: ${formatRate(sample.perSecond)}/s${counts ? ` (${counts})` : ''}`,
            );
          }),
      };
      log(`== ${comparison.name}`);
      const report = await comparison.run(context);
      const section = [`## ${comparison.name}`, '', report.table, ...report.notes.map((note) => `\n> ${note}`)].join(
        '\n',
      );
      log(`\n${section}\n`);
      sections.push(section);
      ratios.push(...report.ratios);
    }

    const summary = ratioTable(ratios);
    const misses = ratios.filter((row) => verdict(row) === 'MISS').length;
    const wall = formatDuration((performance.now() - started) / 1000);
    log(
      `## Summary\n\n${summary}\n\n${misses} of ${ratios.filter((row) => row.target).length} targets missed; wall time ${wall}`,
    );
    const document = [
      '# nestjs-ratelimit: last `npm run bench`',
      '',
      ...machine.map((line) => `- ${line}`),
      '',
      'Each figure is the median (min–max) of the rounds, which alternate the contenders; a ratio is a ratio of medians.',
      '',
      ...sections.flatMap((section) => [section, '']),
      '## Summary',
      '',
      summary,
      '',
      `Wall time ${wall}.`,
      '',
    ].join('\n');
    if (comparisons.length === COMPARISONS.length) {
      await writeFile(REPORT_PATH, document);
      log('\nwritten to bench/last-run.md');
    } else {
      log('\nBENCH_ONLY ran a subset: bench/last-run.md is left as it was');
    }
  } finally {
    admin.disconnect();
    // waits until it is gone, so that this process reaps it rather than leave a zombie behind
    await stopRedisProcesses([server.pid]);
    running.redisPid = undefined;
  }
}

/**
 * The contender, run after a full garbage collection (npm run bench passes --expose-gc): what
 * the previous run left on the heap is not collected during this one.
 */
function collectingGarbageFirst(contender: Contender): Contender {
  return {
    name: contender.name,
    run: () => {
      globalThis.gc?.();
      return contender.run();
    },
  };
}

/** `key: value` lines: CPU, cores, Node, Redis, date, load, settings. */
async function describeMachine(admin: Redis, rounds: number, seconds: number): Promise<string[]> {
  const info = await admin.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  return [
    `CPU: ${cpus()[0]?.model ?? 'unknown'}`,
    `cores: ${cpus().length}`,
    `Node: ${process.version}`,
    `Redis: ${redisVersion}`,
    `date: ${new Date().toISOString()}`,
    `load average at start: ${loadavg()
      .map((load) => load.toFixed(2))
      .join(' ')}`,
    `settings: BENCH_ROUNDS=${rounds} BENCH_SECONDS=${seconds}${process.env.BENCH_ONLY ? ` BENCH_ONLY=${process.env.BENCH_ONLY}` : ''}`,
  ];
}

function formatDuration(seconds: number): string {
  const minutes = Math.floor(seconds / 60);
  return `${minutes}m${String(Math.floor(seconds % 60)).padStart(2, '0')}s`;
}

main().then(
  // Exit rather than wait for the event loop to drain: a timer or socket a library leaves
  // behind must not keep a finished benchmark alive.
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    killEverything();
    process.exit(1);
  },
);
