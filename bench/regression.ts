/**
 * No regression against an older commit: the guard's decisions of this build and of a baseline
 * build (bench/baseline-build.ts; BENCH_BASELINE, by default the commit before issue 25) in the
 * same process, in alternating rounds, on a memory store and on Redis.
 *
 * Each build runs its own module in an initialised app of its own (not listening) with one
 * controller decorated by that build's `@RateLimit`, and `canActivate` of the module's guard is
 * driven as the store benchmarks drive a store (bench/decisions.ts: 256 calls in flight, a random
 * API key of a million each, a limit nobody reaches, so every decision charges its bucket). That
 * is the whole path a request takes through the package (metadata, keys, store, headers) without
 * HTTP. A memory run gets a fresh app (fresh buckets); a Redis run reuses its app and starts
 * from an empty database.
 *
 * Printed: µs per decision of each build, median (min–max) over the rounds, and new / old per
 * round (above 1, the new build is slower) with its median and range: a ratio whose range holds
 * 1 is noise.
 */
import { Controller, Get, type INestApplication, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { ExpressAdapter } from '@nestjs/platform-express';
import * as current from 'nestjs-ratelimit';
import { type BaselineBuild, buildBaseline, type PackageApi } from './baseline-build.js';
import type { BenchContext, ComparisonReport } from './comparison.js';
import { type Decide, drive } from './decisions.js';
import {
  formatMicros,
  formatRate,
  formatRatio,
  markdownTable,
  medianRate,
  type RatioRow,
  type Sample,
  summarize,
  totalCounts,
} from './stats.js';

/** Where the decisions are kept. */
export type RegressionStore = 'memory' | 'redis';

/** New over old, µs per decision: at most this much slower passes (a shared machine's noise). */
const WITHIN_NOISE = { op: '<=', value: 1.05 } as const;

/** Every request is admitted: the policy is far above what one process can send. */
const POLICY = { name: 'bench', rps: 1_000_000, burst: 1_000_000, key: 'api-key' } as const;

/** The guard sets headers through Express's `response.set`: this response takes them and keeps nothing. */
const RESPONSE = { set: () => undefined };

/** One build's guard in an initialised app, and the app to close. */
interface GuardApp {
  decide: Decide;
  app: INestApplication;
}

/** The baseline, built once for both comparisons of a run. */
let baseline: Promise<BaselineBuild> | undefined;

/** A controller whose one route carries `POLICY`, decorated by `api`'s own `@RateLimit`. */
function controllerOf(api: PackageApi) {
  @Controller()
  class BenchController {
    @api.RateLimit(POLICY)
    @Get()
    find() {
      return 'ok';
    }
  }
  return BenchController;
}

/** `api`'s module with its global guard, in an app of its own; `decide` asks that guard. */
async function guardApp(api: PackageApi, store: RegressionStore, redisUrl: string): Promise<GuardApp> {
  const BenchController = controllerOf(api);
  @Module({
    imports: [api.RateLimitModule.forRoot(store === 'redis' ? { redis: redisUrl } : {})],
    controllers: [BenchController],
  })
  class BenchModule {}
  const app = await NestFactory.create(BenchModule, new ExpressAdapter(), { logger: false });
  await app.init();
  const guard = app.get(api.RateLimitGuard);
  const handler = BenchController.prototype.find;
  const decide: Decide = async (key) => {
    const request = { ip: '203.0.113.9', headers: { 'x-api-key': key } };
    return guard.canActivate(new ExecutionContextHost([request, RESPONSE], BenchController, handler));
  };
  return { decide, app };
}

/** µs per decision of a sample. */
function microsPer(sample: Sample): number {
  return 1e6 / sample.perSecond;
}

export async function regression(context: BenchContext, store: RegressionStore): Promise<ComparisonReport> {
  const old = await (baseline ??= buildBaseline(context.log));
  const names = {
    old: old.ref === old.commit ? `old (${old.ref})` : `old (${old.ref}, ${old.commit})`,
    new: 'new (this checkout)',
  };
  const builds = [
    { name: names.new, api: current },
    { name: names.old, api: old.api },
  ];
  const apps = new Map<string, GuardApp>();
  const run = async (name: string, api: PackageApi, seconds: number): Promise<Sample> => {
    if (store === 'redis') {
      await context.admin.flushall();
      if (!apps.has(name)) apps.set(name, await guardApp(api, store, context.redis.url));
      return drive(apps.get(name)!.decide, seconds);
    }
    const fresh = await guardApp(api, store, context.redis.url);
    try {
      return await drive(fresh.decide, seconds);
    } finally {
      await fresh.app.close();
    }
  };
  try {
    context.log(`warming up ${context.warmupSeconds} s each`);
    for (const { name, api } of builds) await run(name, api, context.warmupSeconds);
    const samples = await context.alternate(
      builds.map(({ name, api }) => ({ name, run: () => run(name, api, context.seconds) })),
    );
    return report(`baseline-${store}`, samples, names);
  } finally {
    await Promise.all([...apps.values()].map(({ app }) => app.close()));
  }
}

/** The table of both builds, the ratio new / old per round, and anything that should not happen. */
function report(
  comparison: string,
  samples: ReadonlyMap<string, readonly Sample[]>,
  names: { old: string; new: string },
): ComparisonReport {
  const olds = samples.get(names.old)!;
  const news = samples.get(names.new)!;
  // the rounds alternate the builds, so round i of one ran next to round i of the other
  const perRound = news.map((sample, round) => microsPer(sample) / microsPer(olds[round]));
  const ratio = summarize(perRound);
  const rows = [...samples].map(([name, runs]) => {
    const micros = runs.map(microsPer);
    return [
      name,
      formatMicros(summarize(micros)),
      formatRate(medianRate(runs)),
      micros.map((us) => us.toFixed(2)).join(' '),
    ];
  });
  const ratioCell = `${formatRatio(ratio.median)} (${formatRatio(ratio.min)}–${formatRatio(ratio.max)})`;
  rows.push(['new / old', ratioCell, '', perRound.map(formatRatio).join(' ')]);
  const head = ['build', 'µs/decision: median (min–max)', 'decisions/s: median', 'each round'];
  const table = markdownTable(head, rows);
  const ratios: RatioRow[] = [
    { comparison, label: 'new / old, µs per decision (median of rounds)', value: ratio.median, target: WITHIN_NOISE },
  ];
  const notes = [...samples].flatMap(([name, runs]) => {
    const { refused = 0, errors = 0 } = totalCounts(runs);
    return refused + errors > 0
      ? [`${name}: ${refused} refused and ${errors} failed decisions, where all should pass`]
      : [];
  });
  if (ratio.min <= 1 && ratio.max >= 1) notes.push('The range of new / old holds 1: no difference beyond noise.');
  return { table, ratios, notes };
}
