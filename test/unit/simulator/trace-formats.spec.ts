/**
 * The simulator's trace parsers: times in milliseconds and ISO 8601, CSV with and without a
 * header, NDJSON, common and combined access logs, format detection, and bad lines counted and
 * reported with their numbers, never thrown.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  csvParser,
  detectFormat,
  parseAccessLogLine,
  parseNdjsonLine,
  parserFor,
  parseTime,
  splitCsv,
} from '../../../lib/simulator/trace-formats.js';
import { readTrace, type TraceReport } from '../../../lib/simulator/traffic.js';

const T0 = Date.UTC(2000, 9, 10, 20, 55, 36); // 10/Oct/2000:13:55:36 -0700

describe('parseTime', () => {
  it.each([
    ['1700000000000', 1_700_000_000_000],
    ['  250 ', 250],
    ['1700000000000.9', 1_700_000_000_000],
    [42.5, 42],
    ['2000-10-10T20:55:36Z', T0],
    ['2000-10-10T20:55:36.250Z', T0 + 250],
    ['2000-10-10T13:55:36-07:00', T0],
    ['2000-10-10T13:55:36-0700', T0],
    ['2000-10-10 20:55:36', T0], // no zone: UTC, whatever the machine's
    ['2000-10-10T20:55', T0 - 36_000],
    ['2000-10-10', Date.UTC(2000, 9, 10)],
    // the widest whole milliseconds a number holds exactly: 2^53 - 1 either way
    ['9007199254740991', Number.MAX_SAFE_INTEGER],
    ['-9007199254740991', -Number.MAX_SAFE_INTEGER],
  ])('%j is %d ms', (text, ms) => {
    expect(parseTime(text)).toBe(ms);
  });

  it.each([
    '',
    'now',
    '10/Oct/2000:13:55:36',
    '2000-13-45T00:00:00Z',
    '1e3',
    NaN,
    Infinity,
    null,
    {},
    '9007199254740992',
    '-9007199254740993',
    `1${'0'.repeat(400)}`,
    1e300,
  ])('%j is no time', (text) => {
    expect(parseTime(text)).toBeUndefined();
  });
});

describe('CSV', () => {
  it('takes time[,key[,cost]] in that order without a header', () => {
    const { format, header, parse } = parserFor('1000,alice,2');
    expect([format, header]).toEqual(['csv', false]);
    expect(parse('1000,alice,2')).toEqual({ time: 1000, key: 'alice', cost: 2 });
    expect(parse('1001,bob')).toEqual({ time: 1001, key: 'bob', cost: undefined });
    expect(parse('1002')).toEqual({ time: 1002, key: '-', cost: undefined });
    expect(parse('2000-10-10T20:55:36Z,carol,')).toEqual({ time: T0, key: 'carol', cost: undefined });
  });

  it('skips a header row, and reads the columns it names in any order', () => {
    const plain = parserFor('time,key,cost');
    expect(plain.header).toBe(true);
    expect(plain.parse('5,k,3')).toEqual({ time: 5, key: 'k', cost: 3 });
    const named = parserFor('Cost, Key ,path,Time');
    expect(named.header).toBe(true);
    expect(named.parse('3,k,/a,5')).toEqual({ time: 5, key: 'k', cost: 3 });
    const timeOnly = parserFor('time');
    expect(timeOnly.header).toBe(true);
    expect(timeOnly.parse('5,k,3')).toEqual({ time: 5, key: '-', cost: undefined });
  });

  it('takes no other first line for a header: one that names no time column is read as a request (and is a bad line)', () => {
    const { header, parse } = parserFor('ts,client');
    expect(header).toBe(false);
    expect(parse('ts,client')).toBe('time is neither milliseconds nor ISO 8601: "ts"');
    expect(parse('7,c')).toEqual({ time: 7, key: 'c', cost: undefined });
    expect(parserFor('1e12,alice').header).toBe(false);
  });

  it('reads quoted fields', () => {
    expect(splitCsv('1,"a,b ""c""",2')).toEqual(['1', 'a,b "c"', '2']);
    expect(csvParser({ time: 0, key: 1, cost: 2 })('1,"a,b",2')).toEqual({ time: 1, key: 'a,b', cost: 2 });
  });

  it('says why a line records no request', () => {
    const parse = csvParser({ time: 0, key: 1, cost: 2 });
    expect(parse('yesterday,k')).toBe('time is neither milliseconds nor ISO 8601: "yesterday"');
    expect(parse('1,k,0')).toBe('cost is not a positive number: "0"');
    expect(parse('1,k,heavy')).toBe('cost is not a positive number: "heavy"');
    expect(parse('9007199254740993,k')).toBe(
      'time is beyond ±9007199254740991 ms, where milliseconds are no longer exact: "9007199254740993"',
    );
  });
});

describe('actual costs and durations', () => {
  const parse = parserFor('time,key,cost,actual,duration').parse;

  it('reads actual and duration from the columns a header names, and from NDJSON fields', () => {
    expect(parse('5,k,3,7,250')).toEqual({ time: 5, key: 'k', cost: 3, actual: 7, durationMs: 250 });
    expect(parse('5,k,,0.5,')).toEqual({ time: 5, key: 'k', cost: undefined, actual: 0.5, durationMs: undefined });
    // a request that is settled may reserve nothing up front; a duration is whole ms
    expect(parse('5,k,0,7,1.9')).toEqual({ time: 5, key: 'k', cost: 0, actual: 7, durationMs: 1 });
    expect(parserFor('duration,time,actual').parse('100,5,2')).toMatchObject({ time: 5, actual: 2, durationMs: 100 });
    expect(parseNdjsonLine('{"time":5,"cost":3,"actual":"7","duration":250}')).toEqual({
      time: 5,
      key: '-',
      cost: 3,
      actual: 7,
      durationMs: 250,
    });
    // without a header, columns after cost are not read: a trace of today reads as it did
    expect(parserFor('5,k,3,7').parse('5,k,3,7')).toEqual({ time: 5, key: 'k', cost: 3 });
  });

  it('says why an actual or a duration makes no request', () => {
    expect(parse('5,k,3,-1')).toBe('actual is not a number >= 0: "-1"');
    expect(parse('5,k,3,lots')).toBe('actual is not a number >= 0: "lots"');
    expect(parse('5,k,-1,2')).toBe('cost is not a number >= 0: "-1"');
    expect(parse('5,k,0,')).toBe('cost is not a positive number: "0"');
    expect(parse('5,k,3,2,-5')).toBe('duration is not a number of milliseconds from 0 to 86400000 (a day): "-5"');
    expect(parse('5,k,3,2,86400001')).toBe(
      'duration is not a number of milliseconds from 0 to 86400000 (a day): "86400001"',
    );
    expect(parse('9007199254740991,k,3,2,1')).toBe(
      'duration ends the request beyond 9007199254740991 ms, where milliseconds are no longer exact: "1"',
    );
    expect(parseNdjsonLine('{"time":1,"actual":null}')).toBe('actual is not a number >= 0: null');
    expect(parseNdjsonLine('{"time":1,"actual":true}')).toBe('actual is not a number >= 0: true');
  });
});

describe('NDJSON', () => {
  it('takes an object with time and optional key and cost', () => {
    expect(parseNdjsonLine('{"time":1000,"key":"alice","cost":2}')).toEqual({ time: 1000, key: 'alice', cost: 2 });
    expect(parseNdjsonLine('{"time":"2000-10-10T20:55:36Z","key":7,"path":"/x"}')).toEqual({
      time: T0,
      key: '7',
      cost: undefined,
    });
    expect(parseNdjsonLine('{"time":1}')).toEqual({ time: 1, key: '-', cost: undefined });
  });

  it('says why a line records no request', () => {
    expect(parseNdjsonLine('{"time":1,')).toBe('not JSON');
    expect(parseNdjsonLine('[1,"k"]')).toBe('not a JSON object');
    expect(parseNdjsonLine('{"key":"k"}')).toBe('time is neither milliseconds nor ISO 8601: null');
    expect(parseNdjsonLine('{"time":1,"key":{"id":1}}')).toBe('key is not a string: {"id":1}');
    expect(parseNdjsonLine('{"time":1,"cost":-1}')).toBe('cost is not a positive number: -1');
    expect(parseNdjsonLine('{"time":1e300}')).toBe(
      'time is beyond ±9007199254740991 ms, where milliseconds are no longer exact: 1e+300',
    );
  });
});

describe('access logs', () => {
  const common = '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326';
  const combined = `${common} "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`;

  it('reads the time (with its offset) and the client address of common and combined lines', () => {
    expect(parseAccessLogLine(common)).toEqual({ time: T0, key: '127.0.0.1', cost: undefined });
    expect(parseAccessLogLine(combined)).toEqual({ time: T0, key: '127.0.0.1', cost: undefined });
    expect(parseAccessLogLine(common.replace('-0700', '+0530'))).toEqual({
      time: T0 - 12.5 * 3_600_000,
      key: '127.0.0.1',
      cost: undefined,
    });
  });

  it('keys clients as the ip key source does: IPv4-mapped folded, IPv6 by /64; a host name as it is', () => {
    expect(parseAccessLogLine(common.replace('127.0.0.1', '::ffff:10.1.2.3'))).toMatchObject({ key: '10.1.2.3' });
    expect(parseAccessLogLine(common.replace('127.0.0.1', '2001:db8:1:2:3:4:5:6'))).toMatchObject({
      key: '2001:db8:1:2::/64',
    });
    expect(parseAccessLogLine(common.replace('127.0.0.1', 'client.example.com'))).toMatchObject({
      key: 'client.example.com',
    });
  });

  it('says why a line records no request', () => {
    expect(parseAccessLogLine('127.0.0.1 - - [10/Oct/2000:13:55:36] "GET / HTTP/1.0" 200 1')).toBe(
      'not in common or combined log format',
    );
    expect(parseAccessLogLine(common.replace('Oct', 'Okt'))).toBe(
      'time is not a log time: "[10/Okt/2000:13:55:36 -0700]"',
    );
    expect(parseAccessLogLine(common.replace(':13:', ':25:'))).toBe(
      'time is not a log time: "[10/Oct/2000:25:55:36 -0700]"',
    );
  });

  it('is told apart from CSV and NDJSON by its first line', () => {
    expect(detectFormat(combined)).toBe('access-log');
    expect(detectFormat(common)).toBe('access-log');
    expect(detectFormat('{"time":1}')).toBe('ndjson');
    expect(detectFormat('time,key')).toBe('csv');
  });
});

describe('readTrace', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rl-trace-'));
  });

  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function read(text: string): Promise<{ times: number[]; report: TraceReport }> {
    const file = join(dir, 'trace');
    await writeFile(file, text);
    const report: TraceReport = { file, format: undefined, lines: 0, badLines: 0, firstBadLines: [] };
    const times: number[] = [];
    for await (const arrival of readTrace(file, report, () => {})) times.push(arrival.time);
    return { times, report };
  }

  it('skips a byte order mark, blank lines and CRLF endings, and counts every line', async () => {
    const { times, report } = await read('\uFEFFtime,key\r\n1,a\r\n\r\n2,b\r\n');
    expect(times).toEqual([1, 2]);
    expect(report).toMatchObject({ format: 'csv', lines: 4, badLines: 0 });
  });

  it('names the line of a bad actual cost, reading on', async () => {
    const { times, report } = await read('time,key,cost,actual\n1,a,1,5\n2,a,1,-5\n3,a,1,\n');
    expect(times).toEqual([1, 3]);
    expect(report.firstBadLines).toEqual([{ line: 3, reason: 'actual is not a number >= 0: "-5"', text: '2,a,1,-5' }]);
  });

  it('counts bad lines and keeps the first five with their line numbers, reading on', async () => {
    const lines = [
      '{"time":1}',
      'garbage',
      '{"time":2}',
      ...Array.from({ length: 6 }, (_, i) => `{"time":"t${i}"}`),
      '{"time":3}',
    ];
    const { times, report } = await read(lines.join('\n'));
    expect(times).toEqual([1, 2, 3]);
    expect(report.badLines).toBe(7);
    expect(report.firstBadLines).toEqual([
      { line: 2, reason: 'not JSON', text: 'garbage' },
      ...[0, 1, 2, 3].map((i) => ({
        line: 4 + i,
        reason: `time is neither milliseconds nor ISO 8601: "t${i}"`,
        text: `{"time":"t${i}"}`,
      })),
    ]);
  });

  it('reports a first line that is neither a header nor a request as a bad line, and reads on', async () => {
    // 1e12 is no time here (milliseconds are written in full), and no header names a time column
    const { times, report } = await read('1e12,alice\n1000000001000,alice\n1e12,alice\n');
    expect(times).toEqual([1_000_000_001_000]);
    expect(report).toMatchObject({ format: 'csv', lines: 3, badLines: 2 });
    expect(report.firstBadLines).toEqual([
      {
        line: 1,
        reason:
          'time is neither milliseconds nor ISO 8601: "1e12"; nor is the line a header (a CSV header names a "time" column)',
        text: '1e12,alice',
      },
      { line: 3, reason: 'time is neither milliseconds nor ISO 8601: "1e12"', text: '1e12,alice' },
    ]);
    // a header the format does not define is no header either
    expect(await read('ts,client\n7,c\n')).toMatchObject({
      times: [7],
      report: { badLines: 1, firstBadLines: [{ line: 1, text: 'ts,client' }] },
    });
  });

  it('lets the first line that records a request decide the format, not a bad line before it', async () => {
    const ndjson = await read('# exported 2026-11-26\n{"time":1,"key":"a"}\n{"time":2}\n');
    expect(ndjson.times).toEqual([1, 2]);
    expect(ndjson.report).toMatchObject({
      format: 'ndjson',
      badLines: 1,
      firstBadLines: [{ line: 1, text: '# exported 2026-11-26' }],
    });
    const log = await read('garbage\n127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1\n');
    expect(log.times).toEqual([T0]);
    expect(log.report).toMatchObject({ format: 'access-log', badLines: 1 });
    // once a header or a request has settled it, the format stays
    const settled = await read('1,a\n{"time":2}\n');
    expect(settled.times).toEqual([1]);
    expect(settled.report).toMatchObject({
      format: 'csv',
      badLines: 1,
      firstBadLines: [{ line: 2, reason: 'time is neither milliseconds nor ISO 8601: "{time:2}"' }],
    });
  });

  it('cuts a long bad line to 80 characters', async () => {
    const { report } = await read(`1,a\n${'x'.repeat(500)}\n`);
    expect(report.firstBadLines[0].text).toBe(`${'x'.repeat(80)}…`);
  });

  it('reads an empty file as no requests', async () => {
    expect(await read('')).toEqual({
      times: [],
      report: expect.objectContaining({ format: undefined, lines: 0 }) as unknown,
    });
  });

  it('throws for a file that is not there, before reading anything', async () => {
    const report: TraceReport = { file: 'x', format: undefined, lines: 0, badLines: 0, firstBadLines: [] };
    await expect(readTrace(join(dir, 'missing.log'), report, () => {}).next()).rejects.toThrow(/ENOENT/);
  });
});
