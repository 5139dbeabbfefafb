import { RELEASED, type Rule, WINDOW_ALGORITHMS } from '../algorithms/algorithm.types.js';
import type { DebtCounts } from './debt-ledger.js';
import type { LaneRun, SimulatedPolicy } from './simulation.js';

/** What one chart (and table) shows: requests admitted and refused over time, and a policy's debt. */
export interface Panel {
  title: string;
  /** The policies' numbers, or how several are decided. */
  subtitle: string;
  /** Per second of the clock: [offered, admitted, refused]. */
  seconds: ReadonlyMap<number, readonly [number, number, number]>;
  /** For one policy's panel of traffic that settles (a trace with actual costs): its debt figures. */
  debt?: PanelDebt;
}

/** A settling policy's debt, as its panel shows it. */
export interface PanelDebt {
  /** Tokens a settle may take a bucket past empty (its `maxDebt`). */
  maxDebt: number;
  counts: DebtCounts;
}

/** The counts of a span of seconds. */
export interface Bin {
  /** Seconds from the first second of the traffic to the span's start. */
  from: number;
  /** Seconds the span covers: `width`, or less for the last one. */
  seconds: number;
  offered: number;
  admitted: number;
  refused: number;
  /** The most tokens past empty a bucket was seen at in the span (0: none in debt, or no debt shown). */
  debt: number;
}

/** A panel's counts in spans of `width` seconds each (the last may be shorter), from the first second of the traffic. */
export interface Binned {
  width: number;
  /** Seconds from the first second of the traffic to the end of the last: what the bins cover together. */
  seconds: number;
  bins: Bin[];
}

/**
 * A policy's numbers as its owner wrote them: `rps 10, burst 50`, or `limit 100 per 10 s` for a
 * window, then its block (`, block 60 s`, and `, then reset` when its end resets the bucket);
 * `limit 2 in flight, lease 300 s` for slots, `limit 10000 per month (Europe/Berlin)` for a quota.
 */
export function describeRule({ algorithm, rps, burst, blockMs, blockResets, anchor, calendar }: Rule): string {
  const seconds = burst / rps;
  if (calendar !== undefined) return `limit ${burst} per ${calendar.period} (${calendar.timeZone})`;
  if (RELEASED.has(algorithm)) return `limit ${burst} in flight, lease ${+seconds.toPrecision(6)} s`;
  const numbers = WINDOW_ALGORITHMS.has(algorithm)
    ? `limit ${burst} per ${+seconds.toPrecision(6)} s${anchor === undefined ? '' : ' from the first request'}`
    : `rps ${+rps.toPrecision(6)}, burst ${burst}`;
  return `${numbers}${blockMs === undefined ? '' : `, block ${blockMs / 1000} s${blockResets === true ? ', then reset' : ''}`}`;
}

/**
 * A policy's algorithm, rule and cost, without what the panel's title already says (its name, its
 * algorithm); with traffic that settles, how far past empty it lets a bucket go.
 */
function describePolicy({ name, rule, cost, maxDebt }: SimulatedPolicy, title: string, settling: boolean): string {
  const named = name === title ? '' : `${name}: `;
  const algorithm = rule.algorithm === title ? '' : `${rule.algorithm}, `;
  const debt = settling && maxDebt !== undefined ? `, max debt ${maxDebt}` : '';
  return `${named}${algorithm}${describeRule(rule)}${cost === 1 ? '' : `, cost ${cost}`}${debt}`;
}

/**
 * The panels of the runs: one per lane; for a lane of several policies, one for the lane (a
 * request passes only when all admit it) and one per policy (what that policy admitted and
 * refused of every request, whatever the others said). A policy's own panel (the lane's, for a
 * lane of one) shows its debt when the traffic settles.
 */
export function panelsOf(runs: readonly LaneRun[]): Panel[] {
  return runs.flatMap((run) => {
    const { title, policies } = run.lane;
    const lane = (column: (counts: readonly number[]) => number): Panel['seconds'] =>
      new Map(
        [...run.seconds].map(([second, counts]) => [second, [counts[0], counts[0] - column(counts), column(counts)]]),
      );
    const refused = (counts: readonly number[]) => counts[0] - counts[1];
    const debt = (i: number): { debt?: PanelDebt } => {
      const ledger = run.ledgers[i];
      return run.settling && ledger !== undefined ? { debt: { maxDebt: ledger.maxDebt, counts: ledger.counts } } : {};
    };
    if (policies.length === 1)
      return [
        { title, subtitle: describePolicy(policies[0], title, run.settling), seconds: lane(refused), ...debt(0) },
      ];
    return [
      {
        title,
        subtitle: `${policies.length} policies, all-or-nothing: ${policies.map(({ name }) => name).join(', ')}`,
        seconds: lane(refused),
      },
      ...policies.map((policy, i) => ({
        title: policy.name,
        subtitle: `${describePolicy(policy, policy.name, run.settling)} (its own verdict)`,
        seconds: lane((counts) => counts[2 + i]),
        ...debt(i),
      })),
    ];
  });
}

/**
 * The first and last second of the traffic, of the clock (`floor(ms / 1000)`), up to the last
 * settle a panel's debt was seen at (a request may end after the last one arrived).
 */
export function spanOf(panels: readonly Panel[]): { first: number; last: number } | undefined {
  let first = Infinity;
  let last = -Infinity;
  for (const second of panels[0]?.seconds.keys() ?? []) {
    first = Math.min(first, second);
    last = Math.max(last, second);
  }
  if (first === Infinity) return undefined;
  for (const panel of panels)
    for (const second of panel.debt?.counts.seconds.keys() ?? []) last = Math.max(last, second);
  return { first, last };
}

/**
 * A panel's counts summed over spans of whole seconds, wide enough that there are at most
 * `maxBins`, and its deepest debt in each. Seconds without a request count as zero.
 */
export function binned(panel: Panel, span: { first: number; last: number }, maxBins: number): Binned {
  const seconds = span.last - span.first + 1;
  const width = Math.ceil(seconds / maxBins);
  const bins: Bin[] = Array.from({ length: Math.ceil(seconds / width) }, (_, i) => ({
    from: i * width,
    seconds: Math.min(width, seconds - i * width),
    offered: 0,
    admitted: 0,
    refused: 0,
    debt: 0,
  }));
  for (const [second, [offered, admitted, refused]] of panel.seconds) {
    const bin = bins[Math.floor((second - span.first) / width)];
    bin.offered += offered;
    bin.admitted += admitted;
    bin.refused += refused;
  }
  for (const [second, debt] of panel.debt?.counts.seconds ?? []) {
    const bin = bins[Math.floor((second - span.first) / width)];
    bin.debt = Math.max(bin.debt, debt);
  }
  return { width, seconds, bins };
}

/** The smallest axis step of 1, 2 or 5 times a power of ten that is at least `min` (> 0). */
export function niceStepAtLeast(min: number): number {
  const power = 10 ** Math.floor(Math.log10(min));
  return [1, 2, 5, 10].find((m) => m * power >= min)! * power;
}

/** A step for an axis from 0 to `max` with about `ticks` ticks: 1, 2 or 5 times a power of ten. */
export function niceStep(max: number, ticks: number): number {
  return niceStepAtLeast(Math.max(max, 1) / ticks);
}
