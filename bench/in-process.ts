/**
 * What our JavaScript costs in this process, without a network: each figure is a difference or
 * a ratio of two contenders that alternate in the same run, so what the machine adds to both
 * cancels out.
 *
 * - guard over headers-only: µs of CPU per decision of the module's `RateLimitGuard.canActivate`
 *   (memory store, a limit nobody reaches, metrics as by default) minus that of the
 *   headers-only guard of bench/server.ts (the same 5 headers, no limiting), both driven by the
 *   loop of bench/guard-metrics.ts in the same app: the guard's own JavaScript.
 * - memory store over a bare loop, 10,000 and 1,000,000 keys: µs of CPU per decision of
 *   `MemoryStore.decideNow` (what the engine calls for it, through `StoreCalls`: no promise),
 *   one request per call, the keys taken round-robin, against the least a decision in memory
 *   can be: a GCRA decision on a `Map` (key to row) and a `Float64Array` (the TAT of each row),
 *   on the same keys. At 10,000 keys the difference is the store's own part; at 1,000,000 keys,
 *   where both miss the CPU caches, the ratio.
 * - bytes allocated per decision, for each contender, for information (see `allocationMeter`).
 *
 * Key strings are built before the timed loops, so no loop measures string building.
 */
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { GCProfiler, getHeapSpaceStatistics, type HeapSpaceStatistics } from 'node:v8';
import { HttpAdapterHost } from '@nestjs/core';
import { MemoryStore, type RateLimitRequest } from 'nestjs-ratelimit';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { guardOf, loop } from './guard-metrics.js';
import { HeadersOnlyGuard } from './server.js';
import {
  type Contender,
  formatRate,
  markdownTable,
  medianRate,
  type RatioRow,
  type Sample,
  summarize,
  type Target,
} from './stats.js';

const COMPARISON = 'in-process';
/** Decisions between two looks at the clock (and a turn of the event loop, so timers still run). */
const BATCH = 1024;
/** Every call is admitted: no key comes near a million decisions a second. */
const RULE: RateLimitRequest['rule'] = { algorithm: 'token_bucket', rps: 1e6, burst: 1e6 };
const FEW_KEYS = 10_000;
const MANY_KEYS = 1_000_000;

/** The guard's own JavaScript per decision, µs of CPU over headers-only. */
const GUARD_TARGET: Target = { op: '<=', value: 1.5 };
/** The memory store's own part per decision at 10,000 keys, µs of CPU over the bare loop. */
const STORE_TARGET: Target = { op: '<=', value: 0.5 };
/** The memory store over the bare loop at 1,000,000 keys. */
const MANY_KEYS_TARGET: Target = { op: '<=', value: 1.3 };

/** One decision on the `i`th key; true when admitted. */
type DecideAt = (i: number) => boolean;

/** V8's spaces of the young generation, where what a decision makes is allocated. */
const YOUNG_SPACES: ReadonlySet<string> = new Set(['new_space', 'new_large_object_space']);

/** Bytes used in the young generation, from a collection's statistics (see `allocationMeter`). */
function youngBytes(spaces: readonly HeapSpaceStatistics[]): number {
  return spaces.reduce((sum, space) => (YOUNG_SPACES.has(space.spaceName) ? sum + space.spaceUsedSize : sum), 0);
}

/** Bytes used in the young generation now. */
function youngBytesNow(): number {
  return getHeapSpaceStatistics().reduce(
    (sum, space) => (YOUNG_SPACES.has(space.space_name) ? sum + space.space_used_size : sum),
    0,
  );
}

/**
 * Measures the bytes allocated in the young generation while it runs, and counts its scavenges.
 * `GCProfiler` reports the young generation's used bytes before and after every collection, so
 * what was allocated between two collections is what the later one found less what the earlier
 * one left (its survivors), and after the last one, what is used at the end less what it left.
 * Exact for everything that starts in the young generation, which is all a decision makes (only
 * large objects and the sites V8 pretenures start in the old one). Scavenges times the
 * semi-space's size would read about 25 % high: V8 scavenges, as a task, once the semi-space is
 * 80 % full (`--minor-gc-task-trigger`), and these loops let its tasks run.
 */
function allocationMeter(): { stop(): { scavenges: number; bytes: number } } {
  const profiler = new GCProfiler();
  const atStart = youngBytesNow();
  profiler.start();
  return {
    stop() {
      const { statistics } = profiler.stop();
      let bytes = 0;
      let left = atStart;
      let scavenges = 0;
      for (const { gcType, beforeGC, afterGC } of statistics) {
        bytes += youngBytes(beforeGC.heapSpaceStatistics) - left;
        left = youngBytes(afterGC.heapSpaceStatistics);
        if (gcType === 'Scavenge') scavenges++;
      }
      return { scavenges, bytes: bytes + youngBytesNow() - left };
    },
  };
}

/**
 * Runs `timed`, adding this process's CPU per decision (user + system, every thread: the
 * collector's helpers too) as the sample's `cpu`, and, from an `allocationMeter`, its scavenges
 * and bytes allocated to its counts, with its decisions (the guard's loop does not
 * count them: they are its rate times its time), so bytes per decision can be summed over rounds.
 * CPU rather than wall time: on a shared machine a wait for a core lengthens a run's wall time,
 * not its CPU time, and the figures subtract two runs that waited differently.
 */
async function metered(timed: () => Promise<Sample>): Promise<Sample> {
  const meter = allocationMeter();
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const sample = await timed();
  const seconds = (performance.now() - started) / 1000;
  const { user, system } = process.cpuUsage(cpuBefore);
  const { scavenges, bytes } = meter.stop();
  const decisions = sample.counts?.decisions ?? Math.round(sample.perSecond * seconds);
  return {
    ...sample,
    cpu: (user + system) / decisions,
    counts: { ...sample.counts, decisions, scavenges, allocated: bytes },
  };
}

/** Decides for `seconds`, the keys round-robin from 0 to `keys - 1`. */
async function roundRobin(decide: DecideAt, keys: number, seconds: number): Promise<Sample> {
  let decisions = 0;
  let refused = 0;
  let i = 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  while (performance.now() < end) {
    for (let n = 0; n < BATCH; n++) {
      if (!decide(i)) refused++;
      if (++i === keys) i = 0;
    }
    decisions += BATCH;
    await nextTurn();
  }
  return { perSecond: decisions / ((performance.now() - started) / 1000), counts: { decisions, refused } };
}

/**
 * The memory store as the engine calls it: `decideNow`, one request per call. The call is one
 * request whose key is set before each decision, so that only the store is timed: the engine's
 * request is new, in the CPU's cache, where a million built beforehand (an array and an object
 * each, 100 MB) would each miss it, a cost of the bench that the bare loop does not pay.
 */
function storeDecider(keys: readonly string[]): { decide: DecideAt; store: MemoryStore } {
  const store = new MemoryStore({ maxKeys: keys.length });
  const decideNow = store.decideNow;
  if (decideNow === undefined) throw new Error('MemoryStore has no decideNow: the engine would call consume');
  const request: RateLimitRequest = { key: keys[0], policy: 'bench', rule: RULE, cost: 1 };
  const call = [request];
  return {
    decide: (i) => {
      request.key = keys[i];
      return decideNow(call, true)[0].allowed;
    },
    store,
  };
}

/**
 * The least a decision in memory can be: the key's row from a `Map` (a new key gets the next
 * one), its theoretical arrival time (TAT) from a `Float64Array`, GCRA's test and, when
 * admitted, the new TAT written back. The same rule as the store's (emission interval
 * 1000 / rps ms, tolerance burst × interval), the clock read once a decision as the store does.
 */
function bareDecider(keys: readonly string[]): DecideAt {
  const rowOf = new Map<string, number>();
  const tats = new Float64Array(keys.length);
  const interval = 1000 / RULE.rps;
  const tolerance = RULE.burst * interval;
  return (i) => {
    const key = keys[i];
    let row = rowOf.get(key);
    if (row === undefined) {
      row = rowOf.size;
      rowOf.set(key, row);
    }
    const now = Date.now();
    const tat = Math.max(tats[row], now) + interval;
    if (tat - now > tolerance) return false;
    tats[row] = tat;
    return true;
  };
}

/** `count` distinct store keys, shaped like the module's (`rl:<policy>:<tag>:<client>`). */
function keysOf(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `rl:bench:tb:client-${i}`);
}

/** A contender that warms up, then is timed with its allocations metered. */
function contender(name: string, run: (seconds: number) => Promise<Sample>, context: BenchContext): Contender {
  return {
    name,
    run: async () => {
      await run(context.warmupSeconds);
      return metered(() => run(context.seconds));
    },
  };
}

/** µs of CPU per decision of each run of a contender. */
function micros(samples: readonly Sample[]): number[] {
  return samples.map((sample) => sample.cpu ?? Number.NaN);
}

/** The guard's contenders, both in one app, both on the loop of guard-metrics. */
async function guardPair(context: BenchContext): Promise<Map<string, Sample[]>> {
  const { guard, app } = await guardOf({});
  try {
    const headersOnly = new HeadersOnlyGuard(app.get(HttpAdapterHost));
    return await context.alternate([
      contender('guard (ours)', (seconds) => loop(guard, seconds), context),
      contender('guard (headers-only)', (seconds) => loop(headersOnly, seconds), context),
    ]);
  } finally {
    await app.close();
  }
}

/** The store and the bare loop on `count` keys; everything they hold is dropped afterwards. */
async function storePair(context: BenchContext, count: number): Promise<Map<string, Sample[]>> {
  const keys = keysOf(count);
  const { decide, store } = storeDecider(keys);
  const bare = bareDecider(keys);
  const label = count.toLocaleString('en-US');
  // a full collection first: building a million keys and calls starts one (incremental marking),
  // and V8, finding every object of a site alive when it ends, pretenures the site, so that the
  // store's per-decision records would from then on be made in the old generation (about 3 µs a
  // decision, not 0.6: one run in five did so). Inputs built, the runs start from a settled heap
  globalThis.gc?.();
  // every key seen once before anything is timed, as a server has seen its clients: the runs
  // find each key's row (the store's expired by then: at 1e6 tokens a second a bucket is full
  // again 1 ms after its decision) rather than time the first insert of a million keys
  for (let i = 0; i < count; i++) {
    decide(i);
    bare(i);
  }
  try {
    return await context.alternate([
      contender(`memory store, ${label} keys`, (seconds) => roundRobin(decide, count, seconds), context),
      contender(`bare loop, ${label} keys`, (seconds) => roundRobin(bare, count, seconds), context),
    ]);
  } finally {
    await store.close();
  }
}

export async function inProcess(context: BenchContext): Promise<ComparisonReport> {
  const samples = new Map<string, Sample[]>([
    ...(await guardPair(context)),
    ...(await storePair(context, FEW_KEYS)),
    ...(await storePair(context, MANY_KEYS)),
  ]);
  const median = (name: string) => summarize(micros(samples.get(name)!)).median;
  const ratios: RatioRow[] = [
    {
      comparison: COMPARISON,
      label: 'guard (ours) - headers-only, µs CPU',
      value: median('guard (ours)') - median('guard (headers-only)'),
      target: GUARD_TARGET,
    },
    {
      comparison: COMPARISON,
      label: 'memory store - bare loop, 10,000 keys, µs CPU',
      value: median('memory store, 10,000 keys') - median('bare loop, 10,000 keys'),
      target: STORE_TARGET,
    },
    {
      comparison: COMPARISON,
      label: 'memory store / bare loop, 1,000,000 keys',
      value: median('memory store, 1,000,000 keys') / median('bare loop, 1,000,000 keys'),
      target: MANY_KEYS_TARGET,
    },
  ];
  const rows = [...samples].map(([name, runs]) => {
    const { median, min, max } = summarize(micros(runs));
    const total = (count: string) => runs.reduce((sum, run) => sum + (run.counts?.[count] ?? 0), 0);
    return [
      name,
      `${median.toFixed(3)} (${min.toFixed(3)}–${max.toFixed(3)})`,
      formatRate(medianRate(runs)),
      Math.round(total('allocated') / total('decisions')).toLocaleString('en-US'),
      total('scavenges').toLocaleString('en-US'),
    ];
  });
  const table = markdownTable(
    [
      'contender',
      'µs CPU/decision: median (min–max)',
      'decisions/s (wall)',
      'bytes/decision',
      'scavenges (all rounds)',
    ],
    rows,
  );
  const notes = [...samples].flatMap(([name, runs]) =>
    runs.some((run) => run.counts?.refused) ? [`${name}: some decisions refused, where all should pass`] : [],
  );
  notes.push(
    'bytes/decision: bytes allocated in the young generation / decisions, over all rounds, from what each collection found there (see allocationMeter).',
  );
  return { table, ratios, notes };
}
