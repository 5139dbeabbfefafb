import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Arrival } from './simulation.js';
import { type LineParser, NO_KEY, parserFor, type TraceFormat } from './trace-formats.js';

/** Bad lines whose number, reason and text the output shows; the rest are only counted. */
export const SHOWN_BAD_LINES = 5;
/** Longest part of a bad line the output quotes, characters. */
const SHOWN_TEXT = 80;
/** Lines between two looks at the clock for progress. */
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

/**
 * `rate` requests per second for `durationMs`, evenly spaced from time 0 (integer ms, rounded
 * down), all from one client.
 */
export function* evenlySpaced(rate: number, durationMs: number): Generator<Arrival> {
  const count = Math.floor((rate * durationMs) / 1000);
  for (let i = 0; i < count; i++) yield { time: Math.floor((i * 1000) / rate), key: NO_KEY, cost: undefined };
}

/**
 * The requests of a trace file (`-`: stdin), read line by line (readline over a stream: memory does not grow
 * with the file). The first non-empty line decides the format (see `parserFor`). A line that
 * records no request is counted in `report` (the first few kept with their numbers), never thrown.
 * Every ~1 s of reading, `progress` gets a line saying how far it is.
 *
 * @throws when the file cannot be opened or read
 */
export async function* readTrace(file: string, report: TraceReport, progress: (line: string) => void): AsyncGenerator<Arrival> {
  // a file is opened first, so that a missing one throws here with its own error; '-' is stdin
  const input = file === '-' ? process.stdin.setEncoding('utf8') : (await open(file, 'r')).createReadStream({ encoding: 'utf8' });
  const lines = createInterface({ input, crlfDelay: Infinity });
  const started = performance.now();
  let lastReport = started;
  let linesAtLastReport = 0;
  let parse: LineParser | undefined;
  try {
    for await (const raw of lines) {
      const number = ++report.lines;
      if (number % PROGRESS_EVERY_LINES === 0) {
        const now = performance.now();
        if (now - lastReport >= PROGRESS_INTERVAL_MS) {
          const perSecond = ((number - linesAtLastReport) * 1000) / (now - lastReport);
          progress(`simulate: ${number.toLocaleString('en-US')} lines read, ${Math.round(perSecond).toLocaleString('en-US')} lines/s`);
          lastReport = now;
          linesAtLastReport = number;
        }
      }
      const line = (number === 1 ? raw.replace(/^\uFEFF/, '') : raw).trim();
      if (line === '') continue;
      if (parse === undefined) {
        const parser = parserFor(line);
        report.format = parser.format;
        parse = parser.parse;
        if (parser.header) continue;
      }
      const parsed = parse(line);
      if (typeof parsed === 'string') {
        if (++report.badLines <= SHOWN_BAD_LINES) {
          report.firstBadLines.push({ line: number, reason: parsed, text: line.length > SHOWN_TEXT ? `${line.slice(0, SHOWN_TEXT)}…` : line });
        }
      } else yield parsed;
    }
  } finally {
    lines.close();
    input.destroy();
  }
}
