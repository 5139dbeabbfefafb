import { normalizeIp } from '../keys/ip.js';
import type { Arrival } from './simulation.js';

/** The formats a trace may be in, told apart by its first line that is a request or a CSV header. */
export type TraceFormat = 'csv' | 'ndjson' | 'access-log';

/** Parses one line: the request it records, or why it records none (a bad line). */
export type LineParser = (line: string) => Arrival | string;

/** The key of a request whose trace line names none: every such request is one client. */
export const NO_KEY = '-';

const MONTHS: Record<string, number> = {
  Jan: 0,
  Feb: 1,
  Mar: 2,
  Apr: 3,
  May: 4,
  Jun: 5,
  Jul: 6,
  Aug: 7,
  Sep: 8,
  Oct: 9,
  Nov: 10,
  Dec: 11,
};
/**
 * Common (and combined) log format, up to the request line: client address, identity, user,
 * `[10/Oct/2000:13:55:36 -0700]`. What follows (request, status, size, referer, user agent) is
 * not read.
 */
const ACCESS_LOG =
  /^(\S+) \S+ \S+ \[(\d{2})\/([A-Z][a-z]{2})\/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\] "/;
const MILLISECONDS = /^-?\d+(?:\.\d+)?$/;
/** ISO 8601 date-time (a space for the `T` allowed); without a zone it is UTC, whatever the machine's. */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$/;

/**
 * A number of milliseconds as a trace time: whole (a fraction is dropped) and within
 * ±`Number.MAX_SAFE_INTEGER`, past which two milliseconds are one number and the arithmetic on
 * times is no longer exact. `undefined` outside.
 */
function wholeMilliseconds(ms: number): number | undefined {
  const whole = Math.floor(ms);
  return Number.isSafeInteger(whole) ? whole : undefined;
}

/**
 * A trace time as integer milliseconds: a number of milliseconds (Unix time, or any origin; a
 * fraction is dropped; at most ±2^53 - 1, about 285,000 years), or an ISO 8601 date-time.
 * `undefined` when it is neither.
 */
export function parseTime(value: unknown): number | undefined {
  if (typeof value === 'number') return wholeMilliseconds(value);
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (MILLISECONDS.test(text)) return wholeMilliseconds(Number(text));
  const iso = ISO_8601.exec(text);
  if (!iso) return undefined;
  const ms = Date.parse(
    `${text.replace(' ', 'T').replace(',', '.')}${iso[1] === undefined && text.length > 10 ? 'Z' : ''}`,
  );
  return Number.isNaN(ms) ? undefined : ms;
}

/** Longest a trace's request may last, ms (`duration`): a day, as `--hold`. */
export const MAX_REQUEST_MS = 86_400_000;

/** A number a trace gives as a number or as text (`''`, as absent: `undefined`); `NaN` when it is neither. */
function numberOf(value: unknown): number | undefined {
  if (value === undefined || value === '') return undefined;
  if (typeof value === 'number') return value;
  return typeof value === 'string' && value.trim() !== '' ? Number(value.trim()) : NaN;
}

/**
 * A request's cost from a trace: a positive finite number, `undefined` when absent, or why not.
 * A request that gives its `actual` cost (`settles`) may reserve 0: it is charged when it ends.
 */
function parseCost(value: unknown, settles: boolean): number | undefined | string {
  const cost = numberOf(value);
  if (cost === undefined) return undefined;
  if (Number.isFinite(cost) && (cost > 0 || (settles && cost === 0))) return cost;
  return settles
    ? `cost is not a number >= 0: ${JSON.stringify(value)}`
    : `cost is not a positive number: ${JSON.stringify(value)}`;
}

/** What a request costs in the end (`actual`): a finite number >= 0, `undefined` when absent, or why not. */
function parseActual(value: unknown): number | undefined | string {
  const actual = numberOf(value);
  if (actual === undefined || (Number.isFinite(actual) && actual >= 0)) return actual;
  return `actual is not a number >= 0: ${JSON.stringify(value)}`;
}

/**
 * How long a request lasts (`duration`), whole ms (a fraction is dropped): 0 to `MAX_REQUEST_MS`,
 * `undefined` when absent, or why not.
 */
function parseDuration(value: unknown): number | undefined | string {
  const ms = numberOf(value);
  if (ms === undefined) return undefined;
  if (Number.isFinite(ms) && ms >= 0 && ms <= MAX_REQUEST_MS) return Math.floor(ms);
  return `duration is not a number of milliseconds from 0 to ${MAX_REQUEST_MS} (a day): ${JSON.stringify(value)}`;
}

/** Why `time` is no trace time. */
function badTime(time: unknown): string {
  const number = typeof time === 'number' || (typeof time === 'string' && MILLISECONDS.test(time.trim()));
  return number
    ? `time is beyond ±${Number.MAX_SAFE_INTEGER} ms, where milliseconds are no longer exact: ${typeof time === 'number' ? time : JSON.stringify(time)}`
    : `time is neither milliseconds nor ISO 8601: ${JSON.stringify(time ?? null)}`;
}

/** What a trace line gives of a request, each field as read (`undefined`: the line has none). */
interface LineFields {
  time: unknown;
  key: unknown;
  cost: unknown;
  actual: unknown;
  duration: unknown;
}

/** The request of a line's fields, or why they make none. */
function arrivalOf({ time, key, cost, actual, duration }: LineFields): Arrival | string {
  const ms = parseTime(time);
  if (ms === undefined) return badTime(time);
  const parsedActual = parseActual(actual);
  if (typeof parsedActual === 'string') return parsedActual;
  const parsedCost = parseCost(cost, parsedActual !== undefined);
  if (typeof parsedCost === 'string') return parsedCost;
  const durationMs = parseDuration(duration);
  if (typeof durationMs === 'string') return durationMs;
  // its end is a trace time too: milliseconds past 2^53 - 1 are no longer exact
  if (durationMs !== undefined && !Number.isSafeInteger(ms + durationMs))
    return `duration ends the request beyond ${Number.MAX_SAFE_INTEGER} ms, where milliseconds are no longer exact: ${JSON.stringify(duration)}`;
  if (key !== undefined && typeof key !== 'string' && typeof key !== 'number')
    return `key is not a string: ${JSON.stringify(key)}`;
  return {
    time: ms,
    key: key === undefined || key === '' ? NO_KEY : String(key),
    cost: parsedCost,
    actual: parsedActual,
    durationMs,
  };
}

/** The format `line` is in, as far as its look tells. */
export function detectFormat(line: string): TraceFormat {
  if (line.startsWith('{')) return 'ndjson';
  return ACCESS_LOG.test(line) ? 'access-log' : 'csv';
}

/**
 * The parser for a trace whose format `first` (a line before any request) tells, and whether
 * that line is a CSV header (to be skipped). A header is what the CSV format defines: a line
 * whose first field is no time and that names a `time` column, and `key`, `cost`, `actual` and
 * `duration` if it has them, in any order (other columns are not read). Without a header the
 * columns are time, key, cost in that order (a request's actual cost and duration are read only
 * from columns a header names), and a first line that is neither a header nor a request is a bad
 * line like any other.
 */
export function parserFor(first: string): { format: TraceFormat; header: boolean; parse: LineParser } {
  const format = detectFormat(first);
  if (format === 'ndjson') return { format, header: false, parse: parseNdjsonLine };
  if (format === 'access-log') return { format, header: false, parse: parseAccessLogLine };
  const fields = splitCsv(first);
  const names = fields.map((name) => name.trim().toLowerCase());
  if (parseTime(fields[0]) !== undefined || !names.includes('time'))
    return { format, header: false, parse: csvParser({ time: 0, key: 1, cost: 2 }) };
  const column = (name: string) => names.indexOf(name);
  return {
    format,
    header: true,
    parse: csvParser({
      time: column('time'),
      key: column('key'),
      cost: column('cost'),
      actual: column('actual'),
      duration: column('duration'),
    }),
  };
}

/** Which column of a CSV line holds each field, 0-based (-1 or absent: none). */
export interface CsvColumns {
  time: number;
  key?: number;
  cost?: number;
  actual?: number;
  duration?: number;
}

/** A CSV line's parser that reads each field from its column. */
export function csvParser(columns: CsvColumns): LineParser {
  const { time, key = -1, cost = -1, actual = -1, duration = -1 } = columns;
  const at = (fields: readonly string[], i: number) => (i < 0 ? undefined : fields[i]);
  return (line) => {
    const fields = splitCsv(line);
    return arrivalOf({
      time: fields[time],
      key: at(fields, key),
      cost: at(fields, cost),
      actual: at(fields, actual),
      duration: at(fields, duration),
    });
  };
}

/** A CSV line's fields: separated by commas, a field in double quotes may hold commas and `""`. */
export function splitCsv(line: string): string[] {
  if (!line.includes('"')) return line.split(',');
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const char = line[i];
    if (quoted && char === '"' && line[i + 1] === '"') field += line[++i];
    else if (char === '"') quoted = !quoted;
    else if (char === ',' && !quoted) {
      fields.push(field);
      field = '';
    } else field += char;
  }
  fields.push(field);
  return fields;
}

/** An NDJSON line: an object with `time` and optional `key`, `cost`, `actual` and `duration`. */
export function parseNdjsonLine(line: string): Arrival | string {
  let record: unknown;
  try {
    record = JSON.parse(line);
  } catch {
    return 'not JSON';
  }
  if (typeof record !== 'object' || record === null || Array.isArray(record)) return 'not a JSON object';
  const { time, key, cost, actual, duration } = record as Record<string, unknown>;
  return arrivalOf({ time, key, cost, actual, duration });
}

/**
 * A common or combined log format line: its time (to the second, with its UTC offset) and its
 * client address as the key, folded and grouped as the `ip` key source does (a host name, logged
 * where lookups are on, is kept as it is).
 */
export function parseAccessLogLine(line: string): Arrival | string {
  const match = ACCESS_LOG.exec(line);
  if (!match) return 'not in common or combined log format';
  const [, host, day, monthName, year, hour, minute, second, sign, offsetHours, offsetMinutes] = match;
  const month = MONTHS[monthName];
  if (month === undefined || +day < 1 || +day > 31 || +hour > 23 || +minute > 59 || +second > 60) {
    return `time is not a log time: ${JSON.stringify(line.slice(line.indexOf('['), line.indexOf(']') + 1))}`;
  }
  const offsetMs = (sign === '-' ? -1 : 1) * (+offsetHours * 60 + +offsetMinutes) * 60_000;
  const time = Date.UTC(+year, month, +day, +hour, +minute, +second) - offsetMs;
  return { time, key: normalizeIp(host) ?? host, cost: undefined, actual: undefined, durationMs: undefined };
}
