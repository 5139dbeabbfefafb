import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Arrival } from './simulation.js';
import { type LineParser, NO_KEY, parserFor, type TraceFormat } from './trace-formats.js';

/** Bad lines whose number, reason and text the output shows; the rest are only counted. */
export const SHOWN_BAD_LINES = 5;
/** Longest part of a bad line the output quotes, characters. */
const SHOWN_TEXT = 80;
/** Lines (or requests) between two looks at the clock for progress. */
const PROGRESS_EVERY_LINES = 16_384;
/** Milliseconds between two progress lines. */
const PROGRESS_INTERVAL_MS = 1_000;

/** A line of a trace that records no request. */
export interface BadLine {
  /** 1-based line number in the file. */
  line: number;
  reason: string;
  /** The line, cut to 80 characters. */
  text: string;
}

/** What reading a trace found, filled in as it is read. */
export interface TraceReport {
  file: string;
  format: TraceFormat | undefined;
  lines: number;
  badLines: number;
  /** The first few bad lines (see `SHOWN_BAD_LINES`). */
  firstBadLines: BadLine[];
}

/** How many requests `rate` per second make in `durationMs`: what `evenlySpaced` yields. */
export const requestsOf = (rate: number, durationMs: number): number => Math.floor((rate * durationMs) / 1000);

/**
 * A progress line's pace: `tick(count)` after each item looks at `now` every
 * `PROGRESS_EVERY_LINES` items and calls `say(count, perSecond)` once `PROGRESS_INTERVAL_MS` have
 * passed since the last line (or the start).
 */
function progressPace(say: (count: number, perSecond: number) => void, now: () => number): (count: number) => void {
  let last = now();
  let countAtLast = 0;
  return (count) => {
    if (count % PROGRESS_EVERY_LINES !== 0) return;
    const at = now();
    if (at - last < PROGRESS_INTERVAL_MS) return;
    say(count, ((count - countAtLast) * 1000) / (at - last));
    last = at;
    countAtLast = count;
  };
}

const whole = (n: number): string => Math.round(n).toLocaleString('en-US');

/**
 * `rate` requests per second for `durationMs`, evenly spaced from time 0 (integer ms, rounded
 * down), all from one client. Every ~1 s of `now` (milliseconds), `progress` gets a line saying
 * how far it is: a run near the bound takes a while.
 */
export function* evenlySpaced(
  rate: number,
  durationMs: number,
  progress: (line: string) => void = () => {},
  now = () => performance.now(),
): Generator<Arrival> {
  const count = requestsOf(rate, durationMs);
  const tick = progressPace(
    (done, perSecond) =>
      progress(
        `simulate: ${whole(done)} of ${whole(count)} requests (${Math.floor((done * 100) / count)} %), ${whole(perSecond)} requests/s`,
      ),
    now,
  );
  for (let i = 0; i < count; i++) {
    yield {
      time: Math.floor((i * 1000) / rate),
      key: NO_KEY,
      cost: undefined,
      actual: undefined,
      durationMs: undefined,
    };
    tick(i + 1);
  }
}

/**
 * The requests of a trace file (`-`: stdin), read line by line (readline over a stream: memory does not grow
 * with the file). The first line that is a CSV header or records a request decides the format
 * (see `parserFor`); a bad line before it does not. A line that records no request, the first
 * included, is counted in `report` (the first few kept with their numbers), never thrown.
 * Every ~1 s of reading, `progress` gets a line saying how far it is.
 *
 * @throws when the file cannot be opened or read
 */
export async function* readTrace(
  file: string,
  report: TraceReport,
  progress: (line: string) => void,
): AsyncGenerator<Arrival> {
  // a file is opened first, so that a missing one throws here with its own error; '-' is stdin
  const input =
    file === '-' ? process.stdin.setEncoding('utf8') : (await open(file, 'r')).createReadStream({ encoding: 'utf8' });
  const lines = createInterface({ input, crlfDelay: Infinity });
  const tick = progressPace(
    (read, perSecond) => progress(`simulate: ${whole(read)} lines read, ${whole(perSecond)} lines/s`),
    () => performance.now(),
  );
  let parse: LineParser | undefined;
  try {
    for await (const raw of lines) {
      const number = ++report.lines;
      tick(number);
      const line = (number === 1 ? raw.replace(/^\uFEFF/, '') : raw).trim();
      if (line === '') continue;
      // until a header or a request settles the format, each line is read by the format it looks like
      let parseLine = parse;
      if (parseLine === undefined) {
        const parser = parserFor(line);
        report.format = parser.format;
        if (parser.header) {
          parse = parser.parse;
          continue;
        }
        parseLine = parser.parse;
      }
      const parsed = parseLine(line);
      if (typeof parsed === 'string') {
        if (++report.badLines <= SHOWN_BAD_LINES) {
          const reason =
            parse === undefined && report.format === 'csv'
              ? `${parsed}; nor is the line a header (a CSV header names a "time" column)`
              : parsed;
          report.firstBadLines.push({
            line: number,
            reason,
            text: line.length > SHOWN_TEXT ? `${line.slice(0, SHOWN_TEXT)}…` : line,
          });
        }
      } else {
        parse = parseLine;
        yield parsed;
      }
    }
  } finally {
    lines.close();
    input.destroy();
  }
}
