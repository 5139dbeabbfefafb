/**
 * How the benchmarks collect samples and what they make of them: rounds that alternate the
 * contenders, the median with its range, ratios of medians against targets, and Markdown tables.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Clock ticks per second of the times in `/proc/<pid>/stat`. */
const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** One timed run of one contender. */
export interface Sample {
  /** Decisions or requests per second: for information on a shared machine. */
  perSecond: number;
  /**
   * µs of CPU per request or decision, where the comparison measures it: the app process's own
   * (user + system, HTTP), or Redis's inside the scripts (redis-cost). What the targets read.
   */
  cpu?: number;
  /** Counts the run also reports (status codes, Redis calls, errors), by name. */
  counts?: Record<string, number>;
}

/** A contender of a comparison: a name and one timed run of it. */
export interface Contender {
  name: string;
  run(): Promise<Sample>;
}

/** The median of a contender's samples and their range. */
export interface Summary {
  median: number;
  min: number;
  max: number;
}

/** What a ratio must be to PASS; without one a ratio is printed for information only. */
export interface Target {
  op: '>=' | '>' | '<' | '<=';
  value: number;
}

/** One line of the final summary: a figure of a comparison and how it fares against its target. */
export interface RatioRow {
  comparison: string;
  /** What the figure is, e.g. `ours-redis-hot / none`. */
  label: string;
  value: number;
  target?: Target;
  /**
   * Why a figure without a target is information, where the reader would look for one (a target
   * given up, e.g. `the commands alone cost 26,300 Ir`): printed beside its `info`.
   */
  why?: string;
}

/**
 * Runs every contender once per round for `rounds` rounds, each round starting one contender
 * later (A B C, B C A, C A B, ...). Alternating rather than running A five times then B five
 * times spreads slow drifts of a shared machine (another job, thermal limits, a GC-heavy
 * neighbour) over every contender alike, and rotating the start keeps any one contender from
 * always running first (on a cold cache) or right after the heaviest one.
 *
 * `onSample` hears about each run as it ends, for progress lines.
 */
export async function alternate(
  contenders: readonly Contender[],
  rounds: number,
  onSample: (contender: string, round: number, sample: Sample) => void,
): Promise<Map<string, Sample[]>> {
  const samples = new Map<string, Sample[]>(contenders.map(({ name }) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < contenders.length; i++) {
      const contender = contenders[(round + i) % contenders.length];
      const sample = await contender.run();
      samples.get(contender.name)!.push(sample);
      onSample(contender.name, round, sample);
    }
  }
  return samples;
}

export function summarize(values: readonly number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
  return { median, min: sorted[0], max: sorted[sorted.length - 1] };
}

/** Medians per second of each contender's samples. */
export function medianRate(samples: readonly Sample[]): number {
  return summarize(samples.map((sample) => sample.perSecond)).median;
}

/** The median of a contender's CPU per request or decision, µs. */
export function medianCpu(samples: readonly Sample[]): number {
  return summarize(samples.map((sample) => sample.cpu ?? Number.NaN)).median;
}

/** `ours` over `theirs`, as the ratio of their medians (per second: above 1, ours is faster). */
export function ratioOfMedians(ours: readonly Sample[], theirs: readonly Sample[]): number {
  return medianRate(ours) / medianRate(theirs);
}

export function meets(value: number, target: Target): boolean {
  if (target.op === '>=') return value >= target.value;
  if (target.op === '>') return value > target.value;
  if (target.op === '<=') return value <= target.value;
  return value < target.value;
}

/** `>= 0.95`, or `-` for a figure printed for information only. */
export function formatTarget(target: Target | undefined): string {
  return target ? `${target.op} ${target.value}` : '-';
}

/** PASS or MISS against the target, `info` without one. */
export function verdict(row: RatioRow): string {
  if (!row.target) return 'info';
  return meets(row.value, row.target) ? 'PASS' : 'MISS';
}

/** The verdict as the summary prints it: an `info` row with its reason, `info: <why>`. */
export function formatVerdict(row: RatioRow): string {
  const result = verdict(row);
  return result === 'info' && row.why ? `info: ${row.why}` : result;
}

/** A rate with thousands separators and no decimals: `12,345`. */
export function formatRate(value: number): string {
  return Math.round(value).toLocaleString('en-US');
}

/** A sample's non-zero counts, as a run's progress line shows them: `200 16,000, requests 16,000`. */
export function formatCounts(sample: Sample): string {
  return Object.entries(sample.counts ?? {})
    .filter(([, count]) => count > 0)
    .map(([name, count]) => `${name} ${formatRate(count)}`)
    .join(', ');
}

/** A ratio with three significant decimals; very small ones (Redis calls per 429) in full. */
export function formatRatio(value: number): string {
  if (value !== 0 && Math.abs(value) < 0.01) return value.toPrecision(2);
  return value.toFixed(3);
}

/** Median, then min–max: `12,345 (11,980–12,700)`. */
export function formatSummary(summary: Summary): string {
  return `${formatRate(summary.median)} (${formatRate(summary.min)}–${formatRate(summary.max)})`;
}

/** Microseconds with two decimals, median then min–max: `41.23 (40.10–43.00)`. */
export function formatMicros(summary: Summary): string {
  return `${summary.median.toFixed(2)} (${summary.min.toFixed(2)}–${summary.max.toFixed(2)})`;
}

/**
 * A Markdown table. The first `textColumns` columns are left-aligned, the others (numbers)
 * right-aligned; cells are padded so that the table also reads well as plain text in a terminal.
 */
export function markdownTable(head: readonly string[], rows: readonly (readonly string[])[], textColumns = 1): string {
  const widths = head.map((cell, column) => Math.max(cell.length, 3, ...rows.map((row) => row[column].length)));
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, column) => (column < textColumns ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join(' | ')} |`;
  const rule = `|${widths.map((width, column) => (column < textColumns ? '-'.repeat(width + 2) : `${'-'.repeat(width + 1)}:`)).join('|')}|`;
  return [line(head), rule, ...rows.map(line)].join('\n');
}

/** The summary table of every ratio: its figure, target and verdict. */
export function ratioTable(rows: readonly RatioRow[]): string {
  return markdownTable(
    ['comparison', 'ratio', 'value', 'target', 'result'],
    rows.map((row) => [
      row.comparison,
      row.label,
      formatRatio(row.value),
      formatTarget(row.target),
      formatVerdict(row),
    ]),
    2,
  );
}

/** Each count of a contender's samples, summed over its rounds. */
export function totalCounts(samples: readonly Sample[]): Record<string, number> {
  const totals: Record<string, number> = {};
  for (const sample of samples) {
    for (const [name, count] of Object.entries(sample.counts ?? {})) totals[name] = (totals[name] ?? 0) + count;
  }
  return totals;
}

/**
 * One row per contender: with `cpuHead`, the median CPU per request or decision with its range
 * first; then the median per second with its range, then the `counts` named, summed over every
 * round (a count no sample has shows as 0).
 */
export function contenderTable(
  samples: ReadonlyMap<string, readonly Sample[]>,
  rateHead: string,
  counts: readonly string[],
  cpuHead?: string,
): string {
  const rows = [...samples].map(([name, runs]) => {
    const totals = totalCounts(runs);
    const cpu = cpuHead === undefined ? [] : [formatMicros(summarize(runs.map((run) => run.cpu ?? Number.NaN)))];
    return [
      name,
      ...cpu,
      formatSummary(summarize(runs.map((run) => run.perSecond))),
      ...counts.map((count) => formatRate(totals[count] ?? 0)),
    ];
  });
  const cpu = cpuHead === undefined ? [] : [`${cpuHead}: median (min–max)`];
  return markdownTable(
    ['contender', ...cpu, `${rateHead}: median (min–max)`, ...counts.map((count) => `${count} (all rounds)`)],
    rows,
  );
}

/**
 * User + system CPU time of process `pid` so far, µs: fields 14 (utime) and 15 (stime) of
 * `/proc/<pid>/stat`, in clock ticks, every thread of the process included (its GC's too).
 */
export function cpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // field 2, the command, is in parentheses and may hold spaces: count from after its ')'
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
}
