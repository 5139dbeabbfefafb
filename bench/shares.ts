/**
 * shares: hot-key shares (module option `shares: true`) on and off, on the load issue 41 names
 * (`TIMED`): one hot key, `PROCESSES` app instances on one Redis each deciding on it 2,000 times
 * a second for 60 s, demand twice the limit of a token bucket. Each instance is a process of its
 * own (bench/shares-load.ts): a Nest application context of `RateLimitModule.forRoot({ redis,
 * shares })` whose `RateLimiterService` consumes the key in an open loop, as requests arriving at
 * a steady rate would.
 *
 * Each run, with shares on or off, reports:
 * - store calls per admitted request: the script calls (EVALSHA, EVAL, FCALL and their `_RO`
 *   forms) in `INFO commandstats`, from when every instance is up to when every one has closed
 *   (its shares given back), over the requests admitted; the bench's Redis serves nobody else
 *   meanwhile;
 * - admitted over the exact allowance: what the bucket could have admitted over the run, its
 *   `burst` (a fresh key starts full) plus `rps` times the span from the first decision sent to
 *   the last answered, over every instance (on one machine, so one clock). The span can only
 *   be longer than the store's, so the allowance errs high: an admitted count above it is a
 *   real excess;
 * - Redis instructions per admitted request: a load of the same form (`UNDER_CALLGRIND`) on a
 *   redis-server under valgrind callgrind (as redis-ir counts, bench/instruction-meter.md), less
 *   an idle run (the same instances started, connected, left idle as long, and closed), over the
 *   requests admitted in that run. Redis runs some 30-50 times slower there, so without shares
 *   it cannot answer 8,000 decisions a second: the load is a quarter of the timed one, its
 *   bucket too. That is the harder case for shares: their store calls come at a rate that hardly
 *   depends on the load (a share is sized from the bucket's rate), so per admitted request they
 *   cost more the slower the load, while the calls without shares batch fewer decisions.
 *   A run under callgrind in which Redis fell behind (a process answered under `KEPT_UP` of its
 *   rate) is run again, up to `IR_ATTEMPTS` in all, and the notes say so: behind, Redis batches
 *   more decisions a call without shares, and its count would stand for a lighter load.
 *
 * Every process's rate (its answered decisions over its span) is reported, with the load
 * average at the run's start: 4 instances and Redis share the machine's cores.
 */
import { type ChildProcess, fork, spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { RateLimitPolicy } from 'nestjs-ratelimit';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { underCallgrind } from './redis-ir.js';
import { LATE_MS, type LoadOrder, type LoadResult } from './shares-load.js';
import {
  formatRate,
  formatRatio,
  formatTarget,
  markdownTable,
  type RatioRow,
  type Sample,
  type Target,
} from './stats.js';

const COMPARISON = 'shares';
const LOAD = fileURLToPath(new URL('./shares-load.js', import.meta.url));

/** App instances deciding on the hot key, each a process. */
const PROCESSES = 4;

/** A load: how long, how fast each instance decides, on what bucket, with what store timeout. */
interface LoadShape {
  seconds: number;
  /** Decisions a second each instance sends. */
  perSecond: number;
  policy: RateLimitPolicy & { rps: number; burst: number };
  /** The instances' store `timeout`, ms. */
  timeoutMs: number;
}

/**
 * Issue 41's load: 2,000 decisions a second from each instance for 60 s (whatever BENCH_SECONDS
 * says), twice the bucket's rate, its burst one second's worth. The store timeout is 1 s rather
 * than the default 100 ms: on a shared 2-core machine a stall of the scheduler would otherwise
 * count as store failures, which is not what this measures.
 */
const TIMED: LoadShape = {
  seconds: 60,
  perSecond: 2_000,
  policy: { name: 'hot', algorithm: 'token_bucket', rps: 4_000, burst: 4_000 },
  timeoutMs: 1_000,
};
/**
 * The load under callgrind: a quarter of the rate and of the bucket (demand still twice the
 * limit) for 10 s, as much as Redis under callgrind answers without shares on this machine. The
 * 10 s timeout keeps a slow answer from turning into a failure.
 */
const UNDER_CALLGRIND: LoadShape = {
  seconds: 10,
  perSecond: 500,
  policy: { name: 'hot', algorithm: 'token_bucket', rps: 1_000, burst: 1_000 },
  timeoutMs: 10_000,
};
/** The idle run whose count is taken off: the same instances up as long, deciding nothing. */
const IDLE: LoadShape = { ...UNDER_CALLGRIND, perSecond: 0 };

/** How long an instance may take to start, ms. */
const START_TIMEOUT_MS = 30_000;
/**
 * A run under callgrind counts only when every process was answered at this part of its rate at
 * least; else it is run again, up to `IR_ATTEMPTS` in all. A Redis that falls behind batches
 * more decisions per call, which makes the count without shares too low for the load it names.
 */
const KEPT_UP = 0.95;
const IR_ATTEMPTS = 3;

/** With shares on, at most. */
const CALLS_TARGET: Target = { op: '<=', value: 0.05 };
/** With shares on, admitted over the exact allowance: at least, and never above. */
const ALLOWANCE_FLOOR: Target = { op: '>=', value: 0.95 };
const ALLOWANCE_CEILING: Target = { op: '<=', value: 1 };
/** Redis Ir per admitted request, shares on over off, at most. */
const IR_TARGET: Target = { op: '<=', value: 0.1 };

type Mode = 'on' | 'off';

/** What one load over every instance came to. */
interface LoadFigures {
  admitted: number;
  refused: number;
  errors: number;
  /** From the first decision sent to the last answered, over every instance, ms. */
  spanMs: number;
  /** `burst` + `rps` x the span. */
  allowance: number;
  /** Script calls the store made. */
  calls: number;
  /** Each instance's answered decisions per second over its own span. */
  rates: number[];
  mostInFlight: number;
  longestGapMs: number;
  /** Decisions sent more than `LATE_MS` after they were due. */
  late: number;
}

/** One run of one mode: the timed load on the bench's Redis, and the load under callgrind. */
interface Run {
  mode: Mode;
  /** The 1-minute load average when the run began. */
  load: number;
  timed: LoadFigures;
  /** Absent when valgrind is not installed. */
  ir?: { figures: LoadFigures; perAdmitted: number; attempts: number };
}

/**
 * The shares comparison: `context.rounds` rounds, each a run with shares on and one with shares
 * off (alternating which goes first), and a table per round against issue 41's targets.
 */
export async function shares(context: BenchContext): Promise<ComparisonReport> {
  const notes: string[] = [];
  const valgrind = spawnSync('sh', ['-c', 'command -v valgrind'], { stdio: 'ignore' }).status === 0;
  if (!valgrind) notes.push('valgrind is not installed: Redis Ir not measured (`BENCH_ONLY=redis-ir` installs it).');
  const dir = await mkdtemp(join(tmpdir(), 'shares-ir-'));
  try {
    let idle = 0;
    if (valgrind) {
      context.log(`idle run under callgrind: ${PROCESSES} instances up for ${IDLE.seconds} s, no decisions`);
      idle = (await underCallgrind(context, dir, (url) => runLoad(context, url, 'off', IDLE))).ir;
    }
    const runs: Run[] = [];
    const measure = async (mode: Mode): Promise<Sample> => {
      const run = await measureRun(context, mode, valgrind ? { dir, idle } : undefined, runs.length);
      runs.push(run);
      const { timed } = run;
      return {
        perSecond: (timed.admitted + timed.refused + timed.errors) / (timed.spanMs / 1000),
        counts: {
          admitted: timed.admitted,
          refused: timed.refused,
          errors: timed.errors,
          'store calls': timed.calls,
          ...(run.ir ? { 'Ir per admitted': run.ir.perAdmitted } : {}),
        },
      };
    };
    await context.alternate([
      { name: 'shares on', run: () => measure('on') },
      { name: 'shares off', run: () => measure('off') },
    ]);
    const rounds = Array.from({ length: context.rounds }, (_, i) => runs.slice(2 * i, 2 * i + 2));
    notes.push(...rounds.flatMap((round, i) => irNotes(round, i)));
    notes.push(
      `Timed runs: ${describe(TIMED)}. Redis Ir per admitted measured on another run of each: ` +
        `${describe(UNDER_CALLGRIND)}, on a redis-server under valgrind callgrind, less an idle run of the same instances` +
        `${valgrind ? ` (${formatRate(idle)} Ir)` : ''}.`,
    );
    return {
      table: rounds.map((round, i) => `Round ${i + 1}\n\n${roundTable(round)}`).join('\n\n'),
      ratios: rounds.flatMap((round, i) => ratiosOf(round, i)),
      notes,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** One run of `mode`: the timed load on the bench's Redis, then the same under callgrind. */
async function measureRun(
  context: BenchContext,
  mode: Mode,
  callgrind: { dir: string; idle: number } | undefined,
  index: number,
): Promise<Run> {
  const load = loadavg()[0];
  await context.admin.flushall();
  const timed = await runLoad(context, context.redis.url, mode, TIMED, index);
  if (!callgrind) return { mode, load, timed };
  for (let attempt = 1; ; attempt++) {
    const { ir, result } = await underCallgrind(context, callgrind.dir, (url) =>
      runLoad(context, url, mode, UNDER_CALLGRIND, index),
    );
    const slowest = Math.min(...result.rates);
    if (slowest >= KEPT_UP * UNDER_CALLGRIND.perSecond || attempt === IR_ATTEMPTS) {
      return {
        mode,
        load,
        timed,
        ir: { figures: result, perAdmitted: (ir - callgrind.idle) / result.admitted, attempts: attempt },
      };
    }
    context.log(
      `shares ${mode} under callgrind: a process was answered at ${formatRate(slowest)}/s of its ` +
        `${formatRate(UNDER_CALLGRIND.perSecond)}, Redis fell behind: counted again`,
    );
  }
}

/**
 * Starts `PROCESSES` instances on the Redis at `url` and, once every one is up, has them decide
 * on one key as `shape` says (`index` tells its key from other runs'), closes them, and adds up
 * what they did and the store's script calls meanwhile.
 */
async function runLoad(
  context: BenchContext,
  url: string,
  mode: Mode,
  shape: LoadShape,
  index = 0,
): Promise<LoadFigures> {
  const admin = new Redis(url);
  const children = Array.from({ length: PROCESSES }, () =>
    fork(LOAD, [mode, String(shape.timeoutMs)], {
      env: { ...process.env, BENCH_REDIS_URL: url },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  for (const child of children) context.children.add(child);
  try {
    await Promise.all(children.map((child) => nextMessage(child, 'ready', START_TIMEOUT_MS)));
    const before = await scriptCalls(admin);
    const order: LoadOrder = {
      startAt: Date.now() + 200,
      seconds: shape.seconds,
      perSecond: shape.perSecond,
      identity: `api-key:hot-${mode}-${index}`,
      policy: shape.policy,
    };
    const answers = children.map((child) => nextMessage<LoadResult>(child, 'result', (shape.seconds + 60) * 1000));
    for (const child of children) child.send(order);
    const results = await Promise.all(answers);
    await Promise.all(children.map((child) => stopChild(child)));
    const calls = (await scriptCalls(admin)) - before;
    return addUp(results, calls, shape);
  } finally {
    for (const child of children) {
      child.kill('SIGKILL');
      context.children.delete(child);
    }
    admin.disconnect();
  }
}

function addUp(results: readonly LoadResult[], calls: number, { policy }: LoadShape): LoadFigures {
  const answered = results.filter((result) => result.sent > 0);
  const first = Math.min(...answered.map((result) => result.firstSent));
  const last = Math.max(...answered.map((result) => result.lastAnswered));
  const spanMs = answered.length > 0 ? last - first : 0;
  const sum = (pick: (result: LoadResult) => number) => results.reduce((total, result) => total + pick(result), 0);
  return {
    admitted: sum((result) => result.admitted),
    refused: sum((result) => result.refused),
    errors: sum((result) => result.errors),
    spanMs,
    allowance: policy.burst + (policy.rps * spanMs) / 1000,
    calls,
    rates: answered.map(
      (result) =>
        (result.admitted + result.refused + result.errors) / ((result.lastAnswered - result.firstSent) / 1000),
    ),
    mostInFlight: Math.max(0, ...results.map((result) => result.mostInFlight)),
    longestGapMs: Math.max(0, ...results.map((result) => result.longestGapMs)),
    late: sum((result) => result.late),
  };
}

/**
 * The first message from `child` that is `what` (the string `ready`) or, for `result`, an object.
 *
 * @throws Error when it exits or takes longer than `timeoutMs` first
 */
function nextMessage<T = string>(child: ChildProcess, what: 'ready' | 'result', timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`shares load process: no ${what} after ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onExit = (code: number | null, signal: string | null) => {
      clearTimeout(timer);
      reject(new Error(`shares load process exited (${signal ?? code}) before its ${what}`));
    };
    const onMessage = (message: unknown) => {
      if (what === 'ready' ? message !== 'ready' : typeof message !== 'object') return;
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(message as T);
    };
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** Tells a load process to close its context (its shares go back to the store) and waits for it to exit. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.send('stop');
  await Promise.race([exited, sleep(10_000)]);
}

/** Script calls (EVALSHA, EVAL, FCALL, and their `_RO` forms) the server has run so far. */
async function scriptCalls(client: Redis): Promise<number> {
  const info = await client.info('commandstats');
  let calls = 0;
  for (const [, count] of info.matchAll(/^cmdstat_(?:eval|evalsha|fcall)(?:_ro)?:calls=(\d+)/gm))
    calls += Number(count);
  return calls;
}

/** `4 processes x 2,000 decisions/s on one key for 60 s, token bucket rps 4,000 burst 4,000, store timeout 1,000 ms`. */
function describe({ seconds, perSecond, policy, timeoutMs }: LoadShape): string {
  return (
    `${PROCESSES} processes x ${formatRate(perSecond)} decisions/s on one key for ${seconds} s, token bucket ` +
    `rps ${formatRate(policy.rps)} burst ${formatRate(policy.burst)}, shares: true (after 50, hold 1 s) or false, ` +
    `store timeout ${formatRate(timeoutMs)} ms`
  );
}

const callsPerAdmitted = (figures: LoadFigures) => figures.calls / figures.admitted;
const ofAllowance = (figures: LoadFigures) => figures.admitted / figures.allowance;
const byMode = (round: readonly Run[], mode: Mode) => round.find((run) => run.mode === mode)!;

/** A round's runs against the targets: shares on's figures, and its Ir over shares off's. */
function roundTable(round: readonly Run[]): string {
  const rows = (['on', 'off'] as const).map((mode) => {
    const run = byMode(round, mode);
    const { timed } = run;
    return [
      `shares ${mode}`,
      formatRatio(callsPerAdmitted(timed)),
      formatRatio(ofAllowance(timed)),
      run.ir ? formatRate(run.ir.perAdmitted) : '–',
      formatRate(timed.admitted),
      formatRate(timed.allowance),
      formatRate(timed.calls),
      formatRate(timed.errors),
      `${formatRate(Math.min(...timed.rates))}–${formatRate(Math.max(...timed.rates))}`,
      `${((100 * timed.late) / (timed.admitted + timed.refused + timed.errors)).toFixed(1)} %`,
      `${formatRate(timed.mostInFlight)} / ${timed.longestGapMs.toFixed(0)} ms`,
      run.load.toFixed(2),
    ];
  });
  return markdownTable(
    [
      'shares',
      `store calls / admitted (on ${formatTarget(CALLS_TARGET)})`,
      'admitted / allowance (on 0.95–1)',
      `Redis Ir / admitted, at ${formatRate(UNDER_CALLGRIND.perSecond)}/s a process (on <= off / 10)`,
      'admitted',
      'exact allowance',
      'store calls',
      'errors',
      'decisions/s per process',
      `sent > ${LATE_MS} ms late`,
      'most in flight / longest tick gap',
      'load avg',
    ],
    rows,
  );
}

/** What each round's run under callgrind came to, for the notes. */
function irNotes(round: readonly Run[], index: number): string[] {
  const parts = round
    .filter((run) => run.ir)
    .map(({ mode, ir }) => {
      const { figures, perAdmitted, attempts } = ir!;
      const kept = Math.min(...figures.rates) >= KEPT_UP * UNDER_CALLGRIND.perSecond;
      const tries = attempts > 1 ? `, attempt ${attempts}${kept ? '' : ', Redis still fell behind'}` : '';
      return (
        `shares ${mode}${tries}: ${formatRate(perAdmitted)} Ir per admitted, ${formatRate(figures.admitted)} admitted ` +
        `(${formatRatio(ofAllowance(figures))} of the allowance), ${formatRate(figures.calls)} store calls ` +
        `(${formatRatio(callsPerAdmitted(figures))} per admitted), ${formatRate(figures.errors)} errors, ` +
        `${formatRate(Math.min(...figures.rates))}–${formatRate(Math.max(...figures.rates))} decisions/s per process`
      );
    });
  return parts.length > 0 ? [`Round ${index + 1} under callgrind: ${parts.join('; ')}.`] : [];
}

/** A round's targets: shares on's calls per admitted and share of the allowance, and Ir on over off. */
function ratiosOf(round: readonly Run[], index: number): RatioRow[] {
  const on = byMode(round, 'on');
  const off = byMode(round, 'off');
  const label = (what: string) => `round ${index + 1}, ${what}`;
  const rows: RatioRow[] = [
    {
      comparison: COMPARISON,
      label: label('shares on, store calls / admitted'),
      value: callsPerAdmitted(on.timed),
      target: CALLS_TARGET,
    },
    {
      comparison: COMPARISON,
      label: label('shares on, admitted / allowance'),
      value: ofAllowance(on.timed),
      target: ALLOWANCE_FLOOR,
    },
    {
      comparison: COMPARISON,
      label: label('shares on, admitted / allowance'),
      value: ofAllowance(on.timed),
      target: ALLOWANCE_CEILING,
    },
  ];
  if (on.ir && off.ir) {
    rows.push({
      comparison: COMPARISON,
      label: label(`Redis Ir / admitted, on / off (${formatRate(UNDER_CALLGRIND.perSecond)}/s a process)`),
      value: on.ir.perAdmitted / off.ir.perAdmitted,
      target: IR_TARGET,
    });
  }
  return rows;
}
