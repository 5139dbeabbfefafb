import { writeFile } from 'node:fs/promises';
import { CsvOutput } from './csv-output.js';
import { panelsOf } from './panels.js';
import type { SimulateOptions } from './simulate-args.js';
import { type Arrival, LaneRun } from './simulation.js';
import { describeTraffic, summaryOf } from './summary.js';
import { svgChart } from './svg-chart.js';
import { terminalReport } from './terminal-report.js';
import { evenlySpaced, readTrace, type TraceReport } from './traffic.js';

/** Where the simulator writes: the report or summary, and progress. */
export interface Output {
  // functions, not methods: `stderr` is handed on alone to the traffic readers
  stdout: (text: string) => void;
  stderr: (line: string) => void;
}

/**
 * Replays the traffic against every lane and writes what was asked: the terminal report (or the
 * `--json` summary) on stdout, the `--svg` chart and the `--csv` rows to their files. Requests are
 * read, decided and written one at a time: only per-key and per-second counts are kept.
 *
 * @throws when a file cannot be read or written
 */
export async function simulate(options: SimulateOptions, output: Output): Promise<void> {
  const started = performance.now();
  const { traffic } = options;
  const trace: TraceReport | undefined =
    'trace' in traffic
      ? { file: traffic.trace, format: undefined, lines: 0, badLines: 0, firstBadLines: [] }
      : undefined;
  const arrivals: AsyncIterable<Arrival> | Iterable<Arrival> =
    'trace' in traffic
      ? readTrace(traffic.trace, trace!, output.stderr)
      : evenlySpaced(traffic.rate, traffic.durationMs, output.stderr);
  const runs = options.lanes.map((lane) => new LaneRun(lane, traffic.holdMs));
  const csv = options.csv === undefined ? undefined : await CsvOutput.open(options.csv, options.compare);
  try {
    for await (const arrival of arrivals) {
      for (const run of runs) {
        const offered = run.offer(arrival);
        if (csv?.row(arrival, run.lane.title, offered)) await csv.drained();
      }
    }
  } finally {
    await csv?.close();
  }
  for (const run of runs) run.finish();

  const requests = runs[0].offered;
  const heading = describeTraffic(traffic, requests, trace);
  const panels = panelsOf(runs);
  if (options.svg !== undefined) await writeFile(options.svg, svgChart(heading, panels));
  if (options.json) output.stdout(`${JSON.stringify(summaryOf(traffic, trace, runs, options.top), null, 2)}\n`);
  else output.stdout(terminalReport(heading, panels, trace?.firstBadLines ?? [], trace?.badLines ?? 0));

  const seconds = (performance.now() - started) / 1000;
  const { maxRSS } = process.resourceUsage();
  output.stderr(
    `simulate: ${requests.toLocaleString('en-US')} requests in ${seconds.toFixed(2)} s` +
      `${trace === undefined ? '' : ` (${Math.round(trace.lines / seconds).toLocaleString('en-US')} lines/s)`}, peak RSS ${(maxRSS / 1024).toFixed(1)} MB`,
  );
}
