import type { Outcome, Rule } from '../../algorithms/algorithm.types.js';
import { wholeIfNear } from '../../algorithms/conversions.js';
import { ALGORITHM_DESCRIPTORS } from '../../algorithms/registry.js';
import { logEntries } from '../../algorithms/sliding-window-log.js';

/**
 * Milliseconds from an admitted charge until a request of `cost` fits the policy again, from the
 * charged outcome alone: 0 when it fits at once, `undefined` when the outcome does not tell (a
 * request like it then goes to Redis). `cost` is at most `burst`.
 *
 * How the wait follows from the outcome depends on how the algorithm's quota comes back, its
 * descriptor's `regain`. A bucket that refills at `rps` (`'rps'`: `token_bucket`; `gcra` and
 * `leaky_bucket` drain their backlog at `rps`) has `remaining + 1` tokens after `nextMs`, and
 * `cost` tokens `cost - remaining - 1` tokens later (earlier, for a cost in the fraction of a
 * token past `remaining`). Both rounded up to whole ms, the sum is the exact wait or 1 ms more (the
 * fraction `nextMs` was rounded up by may make up that of the rest), which `RefusedCache`'s
 * `ROUNDING_MS` takes off again: so the cache never refuses past the wait, and reports it as Redis
 * does, less that 1 ms. Only where `nextMs` itself lies a floating-point rounding under a whole ms
 * can the sum be 1 ms short.
 *
 * A window's (`'window'`, `'log'`) wait grows with the tokens needed, from `nextMs` (for
 * `remaining + 1`) to `fullMs` (for `burst`): those two are exact, and so is every need when they
 * are equal, as they always are in a fixed window (its end). A log (`sliding_window_log`) whose
 * request logged more than half of `burst` needs some of those entries, logged now, to leave: all
 * have at `fullMs`. Otherwise the outcome says too little of what the window holds, as of a cost
 * in the fraction of a token past `remaining`, which fits at once or not before `nextMs`.
 *
 * A slot (`'release'`: `concurrency`) comes back when a request ends, so only "it fits now" is known.
 */
export function waitForCost(
  { algorithm, rps, burst }: Rule,
  cost: number,
  { remaining, nextMs, fullMs }: Outcome,
): number | undefined {
  const regain = ALGORITHM_DESCRIPTORS[algorithm].regain;
  // a log takes a whole entry per token, a fraction rounded up (and a slot is a log's entry)
  const need = regain === 'log' || regain === 'release' ? logEntries(cost) : cost;
  if (need <= remaining) return 0;
  // a slot comes back when a request gives it back: no time tells when
  if (regain === 'release') return undefined;
  if (regain === 'rps') return Math.max(0, Math.min(fullMs, nextMs + refillMs(need - remaining - 1, rps, burst)));
  if (need < remaining + 1) return undefined;
  if (need === remaining + 1 || nextMs === fullMs) return nextMs;
  if (need === burst || (regain === 'log' && 2 * need > burst)) return fullMs;
  return undefined;
}

/**
 * Milliseconds, rounded up, that `tokens` take to refill at `rps` (negative: a time to take off),
 * where tokens within floating-point rounding of a whole number are that number, as in the
 * models (`wholeIfNear`), and a time within rounding of a whole ms is that ms. `durationMs` would
 * round up both a cost of `1 + 2 ** -52` past a whole token (26 less that cost is 25 in the
 * models) and `(42 * 1000) / (1000 / 3)`, 126.00000000000001: added to a `nextMs` rounded up
 * itself, the wait would be 2 ms long, where `ROUNDING_MS` takes off 1.
 */
function refillMs(tokens: number, rps: number, burst: number): number {
  const ms = (wholeIfNear(tokens, burst) * 1000) / rps;
  return Math.ceil(wholeIfNear(ms, Math.abs(ms)));
}
