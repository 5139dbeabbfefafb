import { parseArgs } from 'node:util';
import { type Algorithm, RATE_ALGORITHMS, RELEASED } from '../algorithms/algorithm.types.js';
import { ALGORITHM_DESCRIPTORS } from '../algorithms/registry.js';
import type { RateLimitPolicy } from '../policy/policy.types.js';
import { InvalidPolicyError, parseWindow, resolvePolicy } from '../policy/resolve-policy.js';
import { duplicatePolicyName, invalidPolicy, invalidSimulateArgument } from '../rate-limit.messages.js';
import type { Lane, SimulatedPolicy } from './simulation.js';
import { requestsOf } from './traffic.js';

/** Requests the `--json` summary lists as the keys refused most, unless `--top` says otherwise. */
export const DEFAULT_TOP = 10;
/** `--duration` when `--rate` is given without one. */
export const DEFAULT_DURATION = '10s';
/**
 * Most requests `--rate` and `--duration` may make together: a run decides each one, so more
 * would run for minutes (about 1 µs per request and policy), and evenly spaced traffic shows all
 * it has to show long before.
 */
export const MAX_RATE_REQUESTS = 10_000_000;
/**
 * Longest `--duration`, seconds (one day): the run keeps counts per second of every lane, so a
 * longer one would hold hundreds of megabytes for traffic that only repeats itself.
 */
export const MAX_DURATION_SECONDS = 86_400;

/**
 * The algorithms `--compare all` runs: every one but `concurrency` and `quota`. `all` compares
 * algorithms on one rate (`--rps`/`--burst` or `--limit`/`--window`), and neither of those says
 * its limit as a rate: slots in flight (with a lease) and a count per calendar period have no
 * numbers a rate's lane would share. Each can still be named in `--compare` with its own flags.
 */
export const COMPARED_BY_ALL: readonly Algorithm[] = RATE_ALGORITHMS;

/** A command line that does not hold: the CLI prints the message and exits with status 2. */
export class SimulateArgumentError extends Error {
  override readonly name = 'SimulateArgumentError';
}

/**
 * The traffic to replay: evenly spaced requests, or a trace file; and with a `concurrency`
 * policy, how long each admitted request holds its slot (`--hold`, ms) before it gives it back.
 */
export type Traffic = ({ rate: number; durationMs: number } | { trace: string }) & { holdMs?: number };

/** What `nestjs-ratelimit simulate` is asked to do. */
export interface SimulateOptions {
  /** One lane of the `--policy` flags, or one per algorithm of `--compare`. */
  lanes: Lane[];
  /** Whether the lanes are algorithms compared (`--compare`) rather than policies decided together. */
  compare: boolean;
  traffic: Traffic;
  svg: string | undefined;
  csv: string | undefined;
  json: boolean;
  /** How many of the keys refused most the `--json` summary lists. */
  top: number;
}

const OPTIONS = {
  policy: { type: 'string', multiple: true },
  compare: { type: 'string' },
  rps: { type: 'string' },
  burst: { type: 'string' },
  limit: { type: 'string' },
  window: { type: 'string' },
  lease: { type: 'string' },
  period: { type: 'string' },
  'time-zone': { type: 'string' },
  'max-debt': { type: 'string' },
  hold: { type: 'string' },
  rate: { type: 'string' },
  duration: { type: 'string' },
  trace: { type: 'string' },
  svg: { type: 'string' },
  csv: { type: 'string' },
  json: { type: 'boolean', default: false },
  top: { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/** The flags that set `--compare`'s one policy. */
const LIMIT_FLAGS = ['rps', 'burst', 'limit', 'window', 'lease', 'period', 'time-zone', 'max-debt'] as const;
/** The policy field each limit flag sets. */
const FIELD_OF: Record<(typeof LIMIT_FLAGS)[number], string> = {
  rps: 'rps',
  burst: 'burst',
  limit: 'limit',
  window: 'window',
  lease: 'lease',
  period: 'period',
  'time-zone': 'timeZone',
  'max-debt': 'maxDebt',
};
/** The limit flags read as text even when they look like numbers (a lease of `300` is 300 s either way). */
const TEXT_FLAGS: ReadonlySet<string> = new Set(['window', 'period', 'time-zone']);
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;

const fail = (flag: string, value: unknown, expected: string): never => {
  throw new SimulateArgumentError(invalidSimulateArgument(flag, value, expected));
};

/** A flag's text as the policy field: a number when it reads as one, else the text, refused by `resolvePolicy` in its words. */
const numberOrText = (text: string): number | string => (NUMBER.test(text.trim()) ? Number(text) : text);

/**
 * Reads a command line (the arguments after `nestjs-ratelimit`): `simulate` and its flags.
 *
 * @throws SimulateArgumentError or InvalidPolicyError naming the flag
 */
export function parseCommandLine([command, ...args]: readonly string[]): SimulateOptions | 'help' {
  if (command !== 'simulate') fail('<command>', command ?? '', `must be 'simulate'`);
  return parseSimulateArgs(args);
}

/**
 * Reads the arguments after `simulate`. Policies are validated by `resolvePolicy`, exactly as
 * `@RateLimit` policies are at start, with the same messages; `'help'` when `--help` is asked for.
 *
 * @throws SimulateArgumentError or InvalidPolicyError naming the flag
 */
export function parseSimulateArgs(args: readonly string[]): SimulateOptions | 'help' {
  let values;
  try {
    ({ values } = parseArgs({ args: [...args], options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new SimulateArgumentError(`${(error as Error).message} (nestjs-ratelimit simulate --help lists the options)`);
  }
  if (values.help) return 'help';

  const compare = values.compare !== undefined;
  const lanes = compare ? compareLanes(values.compare!, values) : policyLanes(values.policy ?? [], values);
  const traffic = trafficOf(values);
  const holdMs = holdOf(values.hold, lanes);
  return {
    lanes,
    compare,
    traffic: holdMs === undefined ? traffic : { ...traffic, holdMs },
    svg: values.svg,
    csv: values.csv,
    json: values.json,
    top: topOf(values.top),
  };
}

type Values = { [F in (typeof LIMIT_FLAGS)[number]]?: string } & {
  policy?: string[];
  rate?: string;
  duration?: string;
  trace?: string;
  hold?: string;
};

/** The `--policy` flags as one lane, decided all-or-nothing. */
function policyLanes(texts: readonly string[], values: Values): Lane[] {
  if (texts.length === 0)
    fail('--policy', undefined, `or --compare is needed: a policy as JSON, or algorithms to compare`);
  for (const flag of LIMIT_FLAGS) {
    if (values[flag] !== undefined)
      fail(`--${flag}`, values[flag], `goes with --compare: a --policy gives its own numbers`);
  }
  const names = new Set<string>();
  const policies = texts.map((text, i) => {
    let policy: RateLimitPolicy;
    try {
      policy = JSON.parse(text) as RateLimitPolicy; // checked by resolvePolicy, as a decorator's is
    } catch {
      return fail('--policy', text, `must be a policy as JSON, such as '{"rps":10,"burst":50}'`);
    }
    const where = texts.length > 1 ? `--policy [${i}]` : '--policy';
    const simulated = simulatedPolicy(policy, where, texts.length > 1 ? `policy-${i + 1}` : 'default');
    if (names.has(simulated.name))
      throw new InvalidPolicyError(invalidPolicy('--policy', duplicatePolicyName(simulated.name)));
    names.add(simulated.name);
    return simulated;
  });
  return [{ title: policies.length > 1 ? 'all policies' : policies[0].name, policies }];
}

/** One lane per algorithm of `--compare` (a comma-separated list, or `all`), each with the one policy the limit flags give. */
function compareLanes(list: string, values: Values): Lane[] {
  if (values.policy !== undefined)
    fail(
      '--compare',
      list,
      `cannot go with --policy: give policies, or algorithms to compare with one set of --rps/--burst or --limit/--window`,
    );
  const algorithms =
    list.trim() === 'all'
      ? [...COMPARED_BY_ALL]
      : list
          .split(',')
          .map((name) => name.trim())
          .filter(Boolean);
  if (algorithms.length === 0)
    fail('--compare', list, `must name algorithms: a comma-separated list such as 'token_bucket,gcra', or 'all'`);
  const limits: Record<string, number | string> = {};
  for (const flag of LIMIT_FLAGS)
    if (values[flag] !== undefined)
      limits[FIELD_OF[flag]] = TEXT_FLAGS.has(flag) ? values[flag] : numberOrText(values[flag]);
  return [...new Set(algorithms)].map((algorithm) => {
    const policy = { name: algorithm, algorithm, ...limits } as RateLimitPolicy;
    return { title: algorithm, policies: [simulatedPolicy(policy, `--compare ${algorithm}`, algorithm)] };
  });
}

/**
 * A policy validated as `@RateLimit` validates it. Its cost is what a request takes when the
 * trace gives none: `cost`, or `defaultCost` for a cost read from a header or query (which a
 * trace's cost column stands for). A trace's actual costs stand for a `settle` function (which
 * JSON cannot give): they settle under every policy whose algorithm can settle, as far past empty
 * as its `maxDebt` says (its rule's `debt`), by default its `burst` (or `limit`).
 */
function simulatedPolicy(policy: RateLimitPolicy, where: string, defaultName: string): SimulatedPolicy {
  const { name, rule, cost, defaultCost } = resolvePolicy(policy, where, defaultName);
  const settles = ALGORITHM_DESCRIPTORS[rule.algorithm].refuses?.settle === undefined;
  return {
    name,
    rule,
    cost: typeof cost === 'number' ? cost : defaultCost,
    maxDebt: settles ? (rule.debt ?? rule.burst) : undefined,
  };
}

function trafficOf({ rate, duration, trace }: Values): Traffic {
  if (trace !== undefined) {
    if (rate !== undefined) fail('--trace', trace, `cannot go with --rate: replay a trace, or evenly spaced requests`);
    if (duration !== undefined) fail('--duration', duration, `goes with --rate: a trace lasts as long as it lasts`);
    return { trace };
  }
  if (rate === undefined)
    fail('--rate', undefined, `or --trace is needed: evenly spaced requests, or a trace to replay`);
  const perSecond = NUMBER.test(rate!.trim()) ? Number(rate) : NaN;
  if (!(perSecond > 0 && Number.isFinite(perSecond)))
    fail('--rate', rate, 'must be a positive number of requests per second');
  const seconds = parseWindow(duration ?? DEFAULT_DURATION);
  if (seconds === undefined)
    fail('--duration', duration, `must be a positive number of seconds or a duration such as '10s', '1m', '1h'`);
  if (seconds! > MAX_DURATION_SECONDS)
    fail('--duration', duration, `must be at most 1d (${MAX_DURATION_SECONDS} s); replay a --trace for longer traffic`);
  const durationMs = Math.round(seconds! * 1000);
  // refused here, before a request is decided: the count is known, and past the bound the run would not end in reasonable time
  const requests = requestsOf(perSecond, durationMs);
  if (requests > MAX_RATE_REQUESTS) {
    const count = !Number.isFinite(requests)
      ? 'over 1e308'
      : requests < 1e15
        ? requests.toLocaleString('en-US')
        : requests.toExponential(2);
    fail(
      '--rate',
      rate,
      `times --duration ${duration ?? DEFAULT_DURATION} makes ${count} requests; a run simulates at most ${MAX_RATE_REQUESTS.toLocaleString('en-US')}: lower --rate or --duration`,
    );
  }
  return { rate: perSecond, durationMs };
}

/**
 * `--hold` as ms: how long each admitted request holds its `concurrency` slot, needed when a
 * lane has such a policy (a slot is given back when its request ends, and only the traffic can
 * say when that is) and refused when none has.
 */
function holdOf(hold: string | undefined, lanes: readonly Lane[]): number | undefined {
  const held = lanes.some((lane) => lane.policies.some(({ rule }) => RELEASED.has(rule.algorithm)));
  if (hold === undefined) {
    if (held)
      fail(
        '--hold',
        undefined,
        `is needed with a "concurrency" policy: how long each admitted request holds its slot, such as '2s' (a slot comes back when its request ends)`,
      );
    return undefined;
  }
  if (!held) fail('--hold', hold, `goes with a "concurrency" policy: only a slot in flight is held`);
  const seconds = parseWindow(numberOrText(hold));
  if (seconds === undefined || seconds * 1000 < 1)
    fail('--hold', hold, `must be a duration of at least 1 ms: seconds, or a string such as '500ms', '2s', '1m'`);
  if (seconds! > MAX_DURATION_SECONDS) fail('--hold', hold, `must be at most 1d (${MAX_DURATION_SECONDS} s)`);
  return Math.round(seconds! * 1000);
}

function topOf(top: string | undefined): number {
  if (top === undefined) return DEFAULT_TOP;
  const n = Number(top);
  return Number.isInteger(n) && n >= 1 ? n : fail('--top', top, 'must be a whole number >= 1');
}
