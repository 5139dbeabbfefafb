import { once } from 'node:events';
import type { WriteStream } from 'node:fs';
import { open } from 'node:fs/promises';
import type { Arrival, Offered } from './simulation.js';
import { NO_KEY } from './trace-formats.js';

/** Characters gathered before one write to the file. */
const CHUNK = 64 * 1024;

/** What a spreadsheet reads as the start of a formula when a cell begins with it (OWASP, "CSV Injection"). */
const FORMULA_START = /^[=+\-@\t\r]/;

/**
 * A key as a CSV field a spreadsheet shows as text: a key from a trace that begins as a formula
 * does (`=`, `+`, `-`, `@`, tab, carriage return) gets a `'` before it and double quotes around
 * it, as OWASP advises, so that opening the file runs nothing; a key with a comma, a quote or a
 * line break is quoted as RFC 4180 says. `-` alone, the simulator's name for "no key", is written
 * as it is: nothing follows the sign, so it is no formula.
 */
export function csvKey(key: string): string {
  if (key !== NO_KEY && FORMULA_START.test(key)) return `"'${key.replace(/"/g, '""')}"`;
  return /[",\r\n]/.test(key) ? `"${key.replace(/"/g, '""')}"` : key;
}

/**
 * The `--csv` file: one row per request, `time_ms,key,allowed,remaining,retry_after` (seconds,
 * as `Retry-After`: 0 when admitted, empty for a request that can never be admitted; `remaining`
 * below 0 for a request refused while the bucket was in debt: minus the tokens it owed). With
 * `--compare`, a row per request and algorithm, the algorithm in a third column. Written through
 * a stream with backpressure: `row` says when the caller must wait for `drained()`, so a slow disk
 * holds the replay back instead of the rows piling up in memory.
 */
export class CsvOutput {
  private pending: string;
  /** The stream's error, thrown by the next call: a stream that fails between two writes must not crash the process. */
  private error: Error | undefined;

  private constructor(
    private readonly stream: WriteStream,
    private readonly withLane: boolean,
  ) {
    this.pending = `time_ms,key,${withLane ? 'algorithm,' : ''}allowed,remaining,retry_after\n`;
    stream.on('error', (error) => (this.error ??= error));
  }

  /**
   * Opens (truncates) `file`; `withLane` adds the algorithm column.
   *
   * @throws when the file cannot be opened for writing
   */
  static async open(file: string, withLane: boolean): Promise<CsvOutput> {
    return new CsvOutput((await open(file, 'w')).createWriteStream({ encoding: 'utf8' }), withLane);
  }

  /** Adds a row; `true` when the stream is full and the caller must await `drained()` before the next. */
  row({ time, key }: Arrival, lane: string, { decision, debt }: Offered): boolean {
    if (this.error) throw this.error;
    const { allowed, remaining, retryAfter } = decision;
    const retry = retryAfter === Infinity ? '' : String(retryAfter);
    const left = debt > 0 ? -debt : remaining;
    this.pending += `${time},${csvKey(key)},${this.withLane ? `${lane},` : ''}${allowed},${left},${retry}\n`;
    if (this.pending.length < CHUNK) return false;
    const full = !this.stream.write(this.pending);
    this.pending = '';
    return full;
  }

  /** Resolves once the stream has room again (or fails with its error). */
  async drained(): Promise<void> {
    if (this.error) throw this.error;
    await once(this.stream, 'drain');
  }

  /** Writes what is left and closes the file. */
  async close(): Promise<void> {
    if (this.error) throw this.error;
    const finished = once(this.stream, 'finish');
    this.stream.end(this.pending);
    this.pending = '';
    await finished;
  }
}
