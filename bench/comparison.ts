/**
 * What a comparison of the bench is, what it gets from the orchestration (bench/main.ts) and what
 * it reports: shared by main.ts and the comparisons (decisions.ts, http.ts), so that neither
 * side imports the other.
 */
import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import type { Contender, RatioRow, Sample } from './stats.js';

/** What every comparison gets from the orchestration. */
export interface BenchContext {
  /** Rounds of the comparison (each runs every contender once). */
  rounds: number;
  /** Timed seconds of each run. */
  seconds: number;
  /** Seconds of warm-up before each timed run, not counted. */
  warmupSeconds: number;
  /** The bench's own redis-server (`pid`: its process, whose CPU time redis-cost reads). */
  redis: { port: number; url: string; pid: number };
  /** A client of that server for the bench's own commands (FLUSHALL, INFO). */
  admin: Redis;
  /** Child processes alive now (app servers, redis-benchmark): killed should the bench stop early. */
  children: Set<ChildProcess>;
  /** Runs the contenders in alternating rounds (see `alternate`), printing a line per run. */
  alternate(contenders: readonly Contender[]): Promise<Map<string, Sample[]>>;
  log(line: string): void;
}

/** What a comparison reports: its table of contenders, its ratios, and anything odd it saw. */
export interface ComparisonReport {
  table: string;
  ratios: RatioRow[];
  /** Warnings: errors, 5xx, fail-open answers, refused requests where all should pass... */
  notes: string[];
}

/** One comparison, run by `npm run bench` unless BENCH_ONLY leaves it out. */
export interface Comparison {
  name: string;
  /** Timed runs it makes per round, for the time estimate. */
  runsPerRound: number;
  /** Seconds it takes besides its timed runs, whatever the rounds (redis-ir counts once), for the time estimate. */
  fixedSeconds?: number;
  run(context: BenchContext): Promise<ComparisonReport>;
}
