/**
 * The simulator as users run it: the built `nestjs-ratelimit` command in a Node process of its
 * own. A 1,000,000-line combined access log (with a few bad lines) replays in under a minute,
 * streamed: the peak RSS the command reports for it (`process.resourceUsage().maxRSS`, on stderr)
 * stays within 1.5 times that of a 100,000-line log. The simulator page's picture is what
 * `npm run readme:chart` makes now. A trace with actual costs (test/fixtures/simulator) is
 * settled and its debt reported.
 */
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from '@jest/globals';
import type { Summary } from '../../lib/simulator/summary.js';
import { buildApp } from '../support/processes/build-app.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** A client sends every 5 ms (200 requests/s) from 1,000 addresses in turn: 0.2 requests/s each. */
const GAP_MS = 5;
const CLIENTS = 1_000;
/** Every this many lines, a line that is no log line. */
const BAD_EVERY = 250_000;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
/** 0.1 tokens/s per client, half what each sends: about half refused once the bursts are spent. */
const POLICY = '{"name":"per-ip","rps":0.1,"burst":5}';

let dir: string;
let cli: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rl-simulate-'));
  cli = await buildApp(dir, 'lib/simulator/cli.ts');
}, 60_000);

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Writes `lines` combined-log lines (and a bad line every `BAD_EVERY`) through a stream. */
async function writeAccessLog(file: string, lines: number): Promise<void> {
  const out = createWriteStream(file);
  const start = Date.UTC(2026, 0, 1);
  const two = (n: number) => String(n).padStart(2, '0');
  let chunk = '';
  for (let i = 0; i < lines; i++) {
    const t = new Date(start + i * GAP_MS);
    const client = (i * 7_919) % CLIENTS;
    const time = `${two(t.getUTCDate())}/${MONTHS[t.getUTCMonth()]}/${t.getUTCFullYear()}:${two(t.getUTCHours())}:${two(t.getUTCMinutes())}:${two(t.getUTCSeconds())} +0000`;
    chunk += `10.0.${client >> 8}.${client & 255} - - [${time}] "GET /items?page=${i % 50} HTTP/1.1" 200 512 "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64)"\n`;
    if ((i + 1) % BAD_EVERY === 0) chunk += 'this line is no log line\n';
    if (chunk.length > 1 << 16) {
      if (!out.write(chunk)) await once(out, 'drain');
      chunk = '';
    }
  }
  out.end(chunk);
  await once(out, 'finish');
}

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
  /** Wall time of the process, ms, as the test saw it. */
  ms: number;
}

/** Runs the built command with `args`, `input` on its stdin; killed (status null) if it runs past `timeoutMs`. */
async function run(args: string[], input = '', timeoutMs?: number): Promise<Run> {
  // the child needs no --experimental-vm-modules (it would only print a warning on stderr)
  const { NODE_OPTIONS: _jestOptions, ...env } = process.env;
  const started = performance.now();
  const child = spawn(process.execPath, [cli, ...args], { env, cwd: ROOT, timeout: timeoutMs });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  child.stdin.end(input);
  const [status] = (await once(child, 'close')) as [number | null];
  return { status, stdout, stderr, ms: performance.now() - started };
}

/** The command's own last line on stderr: its time and peak RSS. */
function reported(stderr: string): { requests: number; seconds: number; rssMb: number } {
  const match = /simulate: ([\d,]+) requests in ([\d.]+) s.*, peak RSS ([\d.]+) MB\n$/.exec(stderr);
  if (!match) throw new Error(`no final report on stderr:\n${stderr}`);
  return { requests: Number(match[1].replace(/,/g, '')), seconds: Number(match[2]), rssMb: Number(match[3]) };
}

async function countLines(file: string): Promise<number> {
  let lines = 0;
  for await (const chunk of createReadStream(file)) for (const byte of chunk as Buffer) if (byte === 10) lines++;
  return lines;
}

describe('nestjs-ratelimit simulate, built, as a process', () => {
  it('replays a 1,000,000-line combined log in under a minute, with flat memory', async () => {
    const small = join(dir, 'access-100k.log');
    const large = join(dir, 'access-1m.log');
    await writeAccessLog(small, 100_000);
    await writeAccessLog(large, 1_000_000);

    const args = (log: string, csv: string) => [
      'simulate',
      '--policy',
      POLICY,
      '--trace',
      log,
      '--json',
      '--csv',
      csv,
      '--top',
      '3',
    ];
    const smallRun = await run(args(small, join(dir, 'small.csv')));
    expect(smallRun).toMatchObject({ status: 0 });
    const largeCsv = join(dir, 'large.csv');
    const largeRun = await run(args(large, largeCsv));
    expect(largeRun).toMatchObject({ status: 0 });

    const smallReport = reported(smallRun.stderr);
    const largeReport = reported(largeRun.stderr);
    console.log(
      `simulate, combined log: 100,000 lines in ${smallReport.seconds} s, peak RSS ${smallReport.rssMb} MB; ` +
        `1,000,000 lines in ${largeReport.seconds} s (${(largeRun.ms / 1000).toFixed(2)} s with start-up), peak RSS ${largeReport.rssMb} MB`,
    );
    expect(largeRun.ms).toBeLessThan(60_000);
    expect(largeReport.requests).toBe(1_000_000);
    // streaming: ten times the lines, not ten times the memory
    expect(largeReport.rssMb).toBeLessThanOrEqual(1.5 * smallReport.rssMb);
    // progress on stderr while it reads
    expect(largeRun.stderr).toMatch(/simulate: [\d,]+ lines read, [\d,]+ lines\/s\n/);

    const summary = JSON.parse(largeRun.stdout) as Summary;
    expect(summary.traffic).toMatchObject({ format: 'access-log', lines: 1_000_004, badLines: 4 });
    expect((summary.traffic as { firstBadLines: unknown[] }).firstBadLines[0]).toEqual({
      line: BAD_EVERY + 1,
      reason: 'not in common or combined log format',
      text: 'this line is no log line',
    });
    const [lane] = summary.lanes;
    expect(lane.keys).toBe(CLIENTS);
    expect(lane.offered).toBe(1_000_000);
    // each client sends 0.2/s against 0.1/s: about half refused, all alike
    expect(lane.refusedShare).toBeGreaterThan(0.45);
    expect(lane.refusedShare).toBeLessThan(0.5);
    expect(lane.topRefused).toHaveLength(3);
    expect(await countLines(largeCsv)).toBe(1_000_001);
  }, 120_000);

  it("draws the simulator page's picture: docs/simulator.svg is what npm run readme:chart writes now", async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const command = /node dist\/simulator\/cli\.js (simulate .*)$/.exec(pkg.scripts['readme:chart']);
    expect(command).not.toBeNull();
    const args = command![1].split(/\s+/);
    const svg = join(dir, 'simulator.svg');
    args[args.indexOf('--svg') + 1] = svg;
    expect(await run(args)).toMatchObject({ status: 0 });
    expect(await readFile(svg, 'utf8')).toBe(await readFile(join(ROOT, 'docs/simulator.svg'), 'utf8'));
  }, 60_000);

  it('reads a trace from stdin with --trace -', async () => {
    const log = ['1.2.3.4', '1.2.3.4', '5.6.7.8']
      .map((ip) => `${ip} - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 1`)
      .join('\n');
    const { status, stdout } = await run(
      ['simulate', '--policy', '{"rps":1,"burst":1}', '--trace', '-', '--json'],
      log,
    );
    expect(status).toBe(0);
    const summary = JSON.parse(stdout) as Summary;
    expect(summary.traffic).toMatchObject({ trace: '-', format: 'access-log', lines: 3 });
    expect(summary.lanes[0].perKey).toEqual({
      '1.2.3.4': { offered: 2, refused: 1, refusedShare: 0.5 },
      '5.6.7.8': { offered: 1, refused: 0, refusedShare: 0 },
    });
  }, 60_000);

  it('exits with status 2 and the message for a bad command line, 1 for a trace that is not there', async () => {
    const bad = await run(['simulate', '--policy', '{"rps":0}', '--rate', '10']);
    expect(bad).toMatchObject({
      status: 2,
      stdout: '',
      stderr: 'Invalid @RateLimit policy on --policy: "rps" must be a positive number (tokens per second), got 0\n',
    });
    const missing = await run(['simulate', '--policy', '{"rps":1}', '--trace', join(dir, 'missing.log')]);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/^nestjs-ratelimit simulate: ENOENT: no such file or directory/);
    // more requests than a run simulates: refused at once, not decided until killed
    const endless = await run(
      ['simulate', '--policy', '{"rps":10,"burst":5}', '--rate', '1e308', '--duration', '1s'],
      '',
      20_000,
    );
    expect(endless).toMatchObject({
      status: 2,
      stdout: '',
      stderr:
        'Invalid nestjs-ratelimit simulate argument --rate: times --duration 1s makes over 1e308 requests; a run simulates at most 10,000,000: lower --rate or --duration, got "1e308"\n',
    });
    const help = await run(['simulate', '--help']);
    expect(help).toMatchObject({ status: 0, stdout: expect.stringContaining('Usage: nestjs-ratelimit simulate') });
    expect(help.stdout).toContain('--hold <d>');
  }, 60_000);

  it("settles a trace with actual costs at each request's end, and reports the debt and the bad lines", async () => {
    // 10 tokens/s, 50 of them, at most 20 past empty; alice's first request reserves 10, lasts 1 s
    // and costs 80: at its end the bucket holds 45, and goes the 20 it may past empty
    const trace = 'test/fixtures/simulator/actual-costs.csv';
    const policy = '{"name":"tokens","rps":10,"burst":50,"maxDebt":20}';
    const csv = join(dir, 'actual-costs-out.csv');
    const report = await run(['simulate', '--policy', policy, '--trace', trace, '--csv', csv]);
    expect(report.status).toBe(0);
    expect(report.stdout).toContain('line 9: cost is not a positive number: "x": 4600,carol,x,,');
    expect(report.stdout).toContain('line 10: actual is not a number >= 0: "-3": 4700,carol,10,-3,');
    expect(report.stdout).toContain(
      [
        'tokens: token_bucket, rps 10, burst 50, max debt 20',
        'refused 3 of 7 (42.9 %)',
        'tokens: 40 reserved, 105 actual, 100 charged (2 requests settled)',
        'debt: deepest 20 past empty (at most 20), at 1 s, key alice',
        'in debt 2 s in all; 2 requests refused in debt',
      ].join('\n'),
    );
    expect(report.stdout).toMatch(/^ +1 +1 +0 +1 +20$/m);
    // remaining below 0: what alice owed when refused; paid back at 3 s, then only short of tokens
    expect((await readFile(csv, 'utf8')).trim().split('\n')).toEqual([
      'time_ms,key,allowed,remaining,retry_after',
      '0,alice,true,40,0',
      '100,alice,true,31,0',
      '200,bob,true,40,0',
      '1000,alice,false,-20,3',
      '2000,alice,false,-10,2',
      '3500,alice,false,5,1',
      '4500,alice,true,5,0',
    ]);
    const json = await run(['simulate', '--policy', policy, '--trace', trace, '--json']);
    const [lane] = (JSON.parse(json.stdout) as Summary).lanes;
    expect(lane.debt).toEqual({
      refusedInDebt: 2,
      policies: [
        {
          name: 'tokens',
          maxDebt: 20,
          settled: 2,
          reserved: 40,
          actual: 105,
          charged: 100,
          deepest: 20,
          deepestAt: 1000,
          deepestKey: 'alice',
          inDebtMs: 2000,
          refusedInDebt: 2,
        },
      ],
    });
  }, 60_000);

  it('simulates slots in flight with --hold, and says so when it is missing', async () => {
    const slots = ['simulate', '--policy', '{"algorithm":"concurrency","limit":2,"lease":"5m"}', '--rate', '4'];
    const unheld = await run([...slots, '--duration', '2s']);
    expect(unheld).toMatchObject({ status: 2, stdout: '' });
    expect(unheld.stderr).toMatch(
      /^Invalid nestjs-ratelimit simulate argument --hold: is needed with a "concurrency" policy/,
    );
    // 4 requests/s, each held 1 s: 2 in flight at most, so every other request passes
    const held = await run([...slots, '--duration', '2s', '--hold', '1s', '--json']);
    expect(held.status).toBe(0);
    const summary = JSON.parse(held.stdout) as Summary;
    expect(summary.traffic).toEqual({ rate: 4, durationMs: 2000, holdMs: 1000 });
    expect(summary.lanes[0]).toMatchObject({ offered: 8, admitted: 4, refused: 4 });
  }, 60_000);
});
