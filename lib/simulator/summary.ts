import { RELEASED } from '../algorithms/algorithm.types.js';
import type { DebtCounts } from './debt-ledger.js';
import type { Traffic } from './simulate-args.js';
import type { LaneRun } from './simulation.js';
import type { TraceReport } from './traffic.js';

/** One key's counts in the summary. */
export interface KeyShare {
  key: string;
  offered: number;
  refused: number;
  /** refused / offered, 0 to 1. */
  refusedShare: number;
}

/** One settling policy's debt over the run, in the `--json` summary (see `DebtCounts`). */
export type PolicyDebt = { name: string; maxDebt: number } & Omit<DebtCounts, 'seconds'>;

/** The `--json` summary of one lane. */
export interface LaneSummary {
  title: string;
  /**
   * Each policy's rule: `rps` and `burst` (a `concurrency` policy's slots, with `leaseSeconds`; a
   * quota's limit per `period` in `timeZone`, its `rps` that of the longest period), and its cost;
   * with traffic that settles, how far past empty it lets a bucket go (`maxDebt`).
   */
  policies: {
    name: string;
    algorithm: string;
    rps: number;
    burst: number;
    leaseSeconds?: number;
    period?: string;
    timeZone?: string;
    cost: number;
    maxDebt?: number;
  }[];
  offered: number;
  admitted: number;
  refused: number;
  /** refused / offered overall, 0 to 1 (0 without requests). */
  refusedShare: number;
  keys: number;
  /**
   * With traffic that settles (a trace with actual costs): the requests refused while one of
   * their buckets was in debt, and each settling policy's tokens reserved and charged and debt.
   */
  debt?: { refusedInDebt: number; policies: PolicyDebt[] };
  /** Every key's counts and share refused. */
  perKey: Record<string, Omit<KeyShare, 'key'>>;
  /** The keys refused most, most first (ties: by key), at most `--top` of them. */
  topRefused: KeyShare[];
}

/** What `--json` prints: the traffic, and for each lane the share refused overall and per key. */
export interface Summary {
  traffic: Traffic & Partial<Omit<TraceReport, 'file'>>;
  requests: number;
  lanes: LaneSummary[];
}

const share = (part: number, whole: number): number => (whole === 0 ? 0 : part / whole);

/** Says what the traffic was, in one line: `600 requests: 60 requests/s, evenly spaced, for 10 s`. */
export function describeTraffic(traffic: Traffic, requests: number, trace: TraceReport | undefined): string {
  const count = `${requests.toLocaleString('en-US')} request${requests === 1 ? '' : 's'}`;
  const held = traffic.holdMs === undefined ? '' : `, each holding its slot ${traffic.holdMs / 1000} s`;
  if ('rate' in traffic)
    return `${count}: ${traffic.rate} requests/s, evenly spaced, for ${traffic.durationMs / 1000} s${held}`;
  const bad =
    trace!.badLines === 0
      ? ''
      : `, ${trace!.badLines.toLocaleString('en-US')} bad line${trace!.badLines === 1 ? '' : 's'} skipped`;
  return `${count} replayed from ${traffic.trace} (${trace!.format ?? 'empty'}, ${trace!.lines.toLocaleString('en-US')} lines${bad})${held}`;
}

/** The `--json` summary. */
export function summaryOf(
  traffic: Traffic,
  trace: TraceReport | undefined,
  runs: readonly LaneRun[],
  top: number,
): Summary {
  const { file: _file, ...read } = trace ?? { file: '' };
  return {
    traffic: trace === undefined ? traffic : { ...traffic, ...read },
    requests: runs[0]?.offered ?? 0,
    lanes: runs.map((run) => laneSummary(run, top)),
  };
}

function laneSummary(run: LaneRun, top: number): LaneSummary {
  // entries, not assignments: a key from a trace may be "__proto__"
  const perKey: [string, Omit<KeyShare, 'key'>][] = [];
  const keys: KeyShare[] = [];
  for (const [key, { offered, refused }] of run.keys) {
    const counts = { offered, refused, refusedShare: share(refused, offered) };
    perKey.push([key, counts]);
    if (refused > 0) keys.push({ key, ...counts });
  }
  keys.sort((a, b) => b.refused - a.refused || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const refused = run.offered - run.admitted;
  const { policies } = run.lane;
  const debts = policies.flatMap(({ name }, i): PolicyDebt[] => {
    const ledger = run.ledgers[i];
    if (ledger === undefined) return [];
    const { seconds: _seconds, ...counts } = ledger.counts;
    return [{ name, maxDebt: ledger.maxDebt, ...counts }];
  });
  return {
    title: run.lane.title,
    policies: policies.map(({ name, rule, cost, maxDebt }) => ({
      name,
      algorithm: rule.algorithm,
      rps: rule.rps,
      burst: rule.burst,
      ...(RELEASED.has(rule.algorithm) ? { leaseSeconds: rule.burst / rule.rps } : {}),
      ...(rule.calendar === undefined ? {} : { period: rule.calendar.period, timeZone: rule.calendar.timeZone }),
      cost,
      ...(run.settling && maxDebt !== undefined ? { maxDebt } : {}),
    })),
    offered: run.offered,
    admitted: run.admitted,
    refused,
    refusedShare: share(refused, run.offered),
    keys: run.keys.size,
    ...(run.settling ? { debt: { refusedInDebt: run.refusedInDebt, policies: debts } } : {}),
    perKey: Object.fromEntries(perKey),
    topRefused: keys.slice(0, top),
  };
}
