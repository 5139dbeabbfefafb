/**
 * Traces with actual costs: a request reserves its `cost` up front and is settled at its end
 * (`duration` after it was admitted, else at once) to its `actual` cost, as the stores settle:
 * more is taken past empty down to the policy's `maxDebt`, less is given back. The runs are pure:
 * arrivals offered to a lane at fixed instants, then the debt figures and what each request was
 * told checked exactly.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { simulate } from '../../../lib/simulator/simulate.js';
import { parseSimulateArgs, type SimulateOptions } from '../../../lib/simulator/simulate-args.js';
import { type Arrival, LaneRun } from '../../../lib/simulator/simulation.js';
import type { Summary } from '../../../lib/simulator/summary.js';

/** A request of key `a` (or `key`) at `time` reserving `cost`, costing `actual` in the end, lasting `durationMs`. */
const at = (time: number, cost: number, actual?: number, durationMs?: number, key = 'a'): Arrival => ({
  time,
  key,
  cost,
  actual,
  durationMs,
});

/** Offers `arrivals` to the one lane `args` make; gives each request's [time, allowed, remaining (negative: owed), retry_after] and the run. */
function replay(policy: object, arrivals: readonly Arrival[], ...args: string[]) {
  const { lanes } = parseSimulateArgs(['--policy', JSON.stringify(policy), '--rate', '1', ...args]) as SimulateOptions;
  const run = new LaneRun(lanes[0]);
  const rows = arrivals.map((arrival) => {
    const { decision, debt } = run.offer(arrival);
    return [arrival.time, decision.allowed, debt > 0 ? -debt : decision.remaining, decision.retryAfter];
  });
  run.finish();
  const { seconds, ...counts } = run.ledgers[0]!.counts;
  return { rows, counts, seconds: Object.fromEntries(seconds), run };
}

describe('simulate: actual costs above the reservation', () => {
  it('takes the rest past empty at the end, and refuses the key until time has paid the debt back', () => {
    // 1 token/s, 4 of them: the request of 0 reserves 1 and costs 6, 2 past empty
    const { rows, counts, seconds, run } = replay({ rps: 1, burst: 4 }, [
      at(0, 1, 6),
      at(500, 1),
      at(1999, 1),
      // paid back at 2000 ms: no longer in debt, but the bucket is empty
      at(2000, 1),
      at(3000, 1),
    ]);
    expect(rows).toEqual([
      [0, true, 3, 0],
      // 1.5 owed: one token is there 2.5 s later
      [500, false, -1.5, 3],
      [1999, false, -0.001, 2],
      [2000, false, 0, 1],
      [3000, true, 0, 0],
    ]);
    expect(counts).toEqual({
      settled: 1,
      reserved: 2,
      actual: 7,
      charged: 7,
      deepest: 2,
      deepestAt: 0,
      deepestKey: 'a',
      inDebtMs: 2000,
      refusedInDebt: 2,
    });
    expect(seconds).toEqual({ 0: 2, 1: 0.001 });
    expect(run.refusedInDebt).toBe(2);
  });

  it("goes no further past empty than the policy's maxDebt, and settles at the end a duration gives", () => {
    const { rows, counts } = replay({ rps: 1, burst: 4, maxDebt: 1 }, [
      // ends at 1500 ms, when the bucket is full again: 4 - 10 stops at 1 past empty
      at(0, 1, 10, 1500),
      at(1000, 1),
      at(1600, 1),
      // 1 owed at 1500: paid back at 2500
      at(2500, 1),
    ]);
    expect(rows).toEqual([
      [0, true, 3, 0],
      // nothing is owed until the request ends
      [1000, true, 3, 0],
      [1600, false, -0.9, 2],
      [2500, false, 0, 1],
    ]);
    // charged: 1 and 1 reserved, and 4.5 of the 9 more (the bucket had 3.5 left at 1500 ms)
    expect(counts).toMatchObject({
      settled: 1,
      reserved: 2,
      actual: 11,
      charged: 6.5,
      deepest: 1,
      deepestAt: 1500,
      inDebtMs: 1000,
    });
  });

  it('counts debt in a window as a count above the limit, paid back when the window ends', () => {
    // 5 per 10 s: the request of 0 reserves 2 and costs 9, 4 above the limit of its window
    const { rows, counts } = replay({ algorithm: 'fixed_window', limit: 5, window: '10s' }, [
      at(0, 2, 9),
      at(9999, 1),
      at(10_000, 5),
    ]);
    expect(rows).toEqual([
      [0, true, 3, 0],
      [9999, false, -4, 1],
      [10_000, true, 0, 0],
    ]);
    expect(counts).toMatchObject({ deepest: 4, inDebtMs: 10_000, refusedInDebt: 1 });
  });

  it('sums the time in debt over keys, and takes a reservation of 0 only while the key owes nothing', () => {
    // 2 tokens/s, 2 of them: a costs 3 (1 past empty), b costs 4 (2 past empty)
    const { rows, counts } = replay({ rps: 2, burst: 2 }, [
      at(0, 0, 3),
      at(0, 0, 4, undefined, 'b'),
      at(100, 0, 1),
      at(900, 0, 1, undefined, 'b'),
      // b paid back at 1000 ms
      at(1000, 0, 0, undefined, 'b'),
    ]);
    expect(rows).toEqual([
      [0, true, 2, 0],
      [0, true, 2, 0],
      // a owes 0.8 tokens, b 0.2
      [100, false, -0.8, 1],
      [900, false, -0.2, 1],
      [1000, true, 0, 0],
    ]);
    // a: 500 ms in debt; b: 1000 ms
    expect(counts).toMatchObject({
      settled: 3,
      reserved: 0,
      actual: 7,
      charged: 7,
      deepest: 2,
      deepestKey: 'b',
      inDebtMs: 1500,
    });
  });
});

describe('simulate: actual costs under every algorithm that limits a rate', () => {
  it.each(['token_bucket', 'leaky_bucket', 'gcra', 'fixed_window', 'sliding_window_log', 'sliding_window_counter'])(
    '%s: a request of 1 that costs 8 of 5 per 10 s leaves its key 3 past empty',
    (algorithm) => {
      const { lanes } = parseSimulateArgs([
        '--compare',
        algorithm,
        ...['--limit', '5', '--window', '10s', '--rate', '1'],
      ]) as SimulateOptions;
      const run = new LaneRun(lanes[0]);
      run.offer(at(0, 1, 8));
      run.finish();
      expect(run.ledgers[0]!.counts).toMatchObject({ deepest: 3, deepestAt: 0, reserved: 1, actual: 8, charged: 8 });
    },
  );
});

describe('simulate: actual costs below the reservation', () => {
  it('gives back what was reserved too much, to the window it was taken from, at the end a duration gives', () => {
    // 5 per 10 s
    const { rows, counts } = replay({ algorithm: 'fixed_window', limit: 5, window: '10s' }, [
      // reserves all 5, costs 1 in the end: 4 come back at once
      at(0, 5, 1),
      at(100, 3),
      // reserves the last one for 2 s, costs nothing
      at(200, 1, 0, 2000),
      at(2199, 1),
      at(2200, 1),
      // a reservation taken in one window is not given back to the next: it ends in it
      at(19_000, 5, 0, 2000),
      at(20_000, 5),
      at(21_000, 1),
    ]);
    expect(rows).toEqual([
      // what a request is told is its reservation: the settle comes after, as after a response's headers
      [0, true, 0, 0],
      [100, true, 1, 0],
      [200, true, 0, 0],
      [2199, false, 0, 8],
      [2200, true, 0, 0],
      [19_000, true, 0, 0],
      [20_000, true, 0, 0],
      [21_000, false, 0, 9],
    ]);
    expect(counts).toEqual({
      settled: 3,
      reserved: 20,
      actual: 10,
      // the 5 reserved at 19 s stay charged: their window had ended when they were given back
      charged: 15,
      deepest: 0,
      deepestAt: undefined,
      deepestKey: undefined,
      inDebtMs: 0,
      refusedInDebt: 0,
    });
  });

  it('admits what the gift makes room for, and no more: a token bucket never past full', () => {
    const { rows, counts } = replay({ rps: 1, burst: 4 }, [at(0, 4, 1, 500), at(400, 1), at(500, 4), at(600, 1)]);
    expect(rows).toEqual([
      [0, true, 0, 0],
      [400, false, 0, 1],
      // 0.5 refilled and 3 given back at 500: 3.5 are there, not 4
      [500, false, 3, 1],
      [600, true, 2, 0],
    ]);
    expect(counts).toMatchObject({ settled: 1, reserved: 5, actual: 2, charged: 2, deepest: 0, inDebtMs: 0 });
  });
});

describe('simulate: actual costs, the options and the report', () => {
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rl-actual-'));
  });

  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('takes maxDebt from a policy and --max-debt with --compare, validated as @RateLimit validates it', () => {
    const lanes = (...args: string[]) => (parseSimulateArgs([...args, '--rate', '1']) as SimulateOptions).lanes;
    expect(lanes('--policy', '{"rps":1,"burst":4,"maxDebt":2}')[0].policies[0].maxDebt).toBe(2);
    expect(lanes('--policy', '{"limit":100,"window":"1m"}')[0].policies[0].maxDebt).toBe(100);
    expect(
      lanes('--compare', 'gcra,fixed_window', '--limit', '10', '--window', '1m', '--max-debt', '3').map(
        (lane) => lane.policies[0].maxDebt,
      ),
    ).toEqual([3, 3]);
    // a concurrency policy keeps its reservation: it holds one slot whatever the request costs
    expect(
      lanes('--policy', '{"algorithm":"concurrency","limit":2,"lease":"1m"}', '--hold', '1s')[0].policies[0].maxDebt,
    ).toBeUndefined();
    expect(() => lanes('--policy', '{"rps":1,"maxDebt":-1}')).toThrow(/"maxDebt" must be a whole number >= 0/);
    expect(() => lanes('--compare', 'gcra', '--rps', '1', '--burst', '2', '--max-debt', 'lots')).toThrow(
      /"maxDebt" must be a whole number >= 0/,
    );
    expect(() =>
      lanes('--policy', '{"algorithm":"concurrency","limit":2,"lease":"1m","maxDebt":1}', '--hold', '1s'),
    ).toThrow(/does not apply to "concurrency"/);
    expect(() => lanes('--policy', '{"rps":1}', '--max-debt', '1')).toThrow(/--max-debt: goes with --compare/);
  });

  it('prints the tokens reserved and charged and the debt, a debt column, and a debt strip in the SVG', async () => {
    const trace = join(dir, 'debt.csv');
    await writeFile(trace, 'time,key,cost,actual\n0,a,1,6\n500,a,1\n1999,a,1\n2000,a\n3000,a\n');
    const svg = join(dir, 'debt.svg');
    const options = parseSimulateArgs(['--policy', '{"rps":1,"burst":4}', '--trace', trace, '--svg', svg]);
    let stdout = '';
    await simulate(options as SimulateOptions, { stdout: (text) => (stdout += text), stderr: () => {} });
    expect(stdout).toContain(
      [
        'default: token_bucket, rps 1, burst 4, max debt 4',
        'refused 3 of 5 (60.0 %)',
        'tokens: 2 reserved, 7 actual, 7 charged (1 request settled)',
        'debt: deepest 2 past empty (at most 4), at 0 s, key a',
        'in debt 2 s in all; 2 requests refused in debt',
        '',
        '  second   offered  admitted   refused      debt',
        '       0         2         1         1         2',
        '       1         1         0         1     0.001',
        '       2         1         0         1         0',
        '       3         1         1         0         0',
      ].join('\n'),
    );
    expect(Math.max(...stdout.split('\n').map((line) => [...line].length))).toBeLessThanOrEqual(80);
    const drawn = await readFile(svg, 'utf8');
    expect(drawn).toContain('>debt (tokens past empty)</text>');
    expect(drawn).toContain('>debt</text>');
    expect(drawn).toContain('>-4</text>');
  });

  it('reports nothing of debt for a trace without actual costs, and the same decisions', async () => {
    const trace = join(dir, 'plain.csv');
    await writeFile(trace, 'time,key,cost\n0,a,1\n500,a,1\n');
    const svg = join(dir, 'plain.svg');
    const options = parseSimulateArgs(['--policy', '{"rps":1,"burst":4}', '--trace', trace, '--json', '--svg', svg]);
    let stdout = '';
    await simulate(options as SimulateOptions, { stdout: (text) => (stdout += text), stderr: () => {} });
    const [lane] = (JSON.parse(stdout) as Summary).lanes;
    expect(lane.debt).toBeUndefined();
    expect(lane.policies[0]).not.toHaveProperty('maxDebt');
    expect(await readFile(svg, 'utf8')).not.toContain('debt');
  });
});
