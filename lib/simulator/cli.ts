#!/usr/bin/env node
/**
 * `npx nestjs-ratelimit simulate`: the package's `bin`. Not loaded by the package root: only
 * this command line reads it. Exit status 0 when done, 2 for a bad command line (the message
 * says which flag), 1 when a file cannot be read or written.
 */
import { InvalidPolicyError } from '../policy/resolve-policy.js';
import { simulate } from './simulate.js';
import {
  DEFAULT_DURATION,
  DEFAULT_TOP,
  MAX_RATE_REQUESTS,
  parseCommandLine,
  SimulateArgumentError,
} from './simulate-args.js';

const USAGE = `Usage: nestjs-ratelimit simulate <policies> <traffic> [outputs]

Replays traffic against rate-limit policies with the functions the stores run.

Policies (one of):
  --policy '<json>'          a policy as @RateLimit takes it, e.g. '{"rps":10,"burst":50}';
                             repeat it for several, decided all-or-nothing as the guard does
  --compare <algorithms>     algorithms to compare (comma-separated, or all), each with
    --rps <n> --burst <n>      tokens per second and capacity, or
    --limit <n> --window <d>   requests per window ('10s', '1m', '1h');
    --limit <n> --lease <d>    concurrency: requests in flight, each for at most the lease;
    --limit <n> --period <p>   quota: requests per day, week, month or year,
      [--time-zone <zone>]     in an IANA time zone (default UTC)
                             (all: every algorithm but concurrency and quota, not rates)
    [--max-debt <n>]           tokens a trace's actual costs may take a bucket past empty
                               (default: burst, or limit; a --policy says "maxDebt")
  --hold <d>                 with a concurrency policy: how long each admitted request
                             holds its slot ('500ms', '2s') before it gives it back

Traffic (one of):
  --rate <n> [--duration <d>]  n requests per second, evenly spaced (default ${DEFAULT_DURATION});
                             at most ${MAX_RATE_REQUESTS.toLocaleString('en-US')} requests, for at most 1d,
                             from Unix time 0 (1970-01-01T00:00:00Z: a quota's first period)
  --trace <file>             CSV or NDJSON of time[,key[,cost]] (time in ms or ISO 8601),
                             or an access log in common or combined log format; - is stdin;
                             with actual (and duration, ms): a request reserves cost (may be
                             0) and is charged actual when it ends (CSV: a header names them)

Outputs (a per-second table and a chart on stdout by default):
  --svg <file>               chart of admitted and refused requests over time
  --csv <file>               one row per request: time_ms,key,allowed,remaining,retry_after
                             (a key that starts as a formula does is written as text: '=...;
                             remaining below 0: the tokens owed by a bucket in debt)
  --json                     a summary on stdout: share refused overall and per key
                             (and with actual costs: tokens reserved and charged, debt)
  --top <n>                  keys refused most the summary lists (default ${DEFAULT_TOP})
`;

async function main(argv: readonly string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(USAGE);
    return argv.length === 0 ? 2 : 0;
  }
  try {
    const options = parseCommandLine(argv);
    if (options === 'help') {
      process.stdout.write(USAGE);
      return 0;
    }
    await simulate(options, {
      stdout: (text) => process.stdout.write(text),
      stderr: (line) => process.stderr.write(`${line}\n`),
    });
    return 0;
  } catch (error) {
    if (error instanceof SimulateArgumentError || error instanceof InvalidPolicyError) {
      process.stderr.write(`${error.message}\n`);
      return 2;
    }
    process.stderr.write(`nestjs-ratelimit simulate: ${(error as Error).message}\n`);
    return 1;
  }
}

// no top-level await: the command runs the same from a CommonJS build
void main(process.argv.slice(2)).then((status) => {
  process.exitCode = status;
});
