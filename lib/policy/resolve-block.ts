import type { Rule } from '../algorithms/algorithm.types.js';
import {
  expectedBlockDuration,
  expectedBlockDurationGiven,
  expectedBlockField,
  expectedBlockThen,
} from '../rate-limit.messages.js';
import { resolveDuration } from './durations.js';
import type { Fail } from './invalid-policy.js';
import type { RateLimitPolicy } from './policy.types.js';

/** The fields of `blockFor` as an object (`BlockFor`). */
const BLOCK_FIELDS = ['duration', 'then'];

/**
 * `blockFor` as a rule's fields (`undefined`: no block): `blockMs` in whole milliseconds, parsed
 * as a window is and bounded alike, and `blockResets` for `then: 'reset'`.
 *
 * @throws InvalidPolicyError through `fail`
 */
export function resolveBlock(
  blockFor: RateLimitPolicy['blockFor'],
  fail: Fail,
): Pick<Rule, 'blockMs' | 'blockResets'> | undefined {
  if (blockFor === undefined) return undefined;
  if (typeof blockFor !== 'object' || blockFor === null || Array.isArray(blockFor))
    return { blockMs: blockMsOf('blockFor', blockFor, fail) };
  for (const field of Object.keys(blockFor)) {
    if (!BLOCK_FIELDS.includes(field))
      fail(
        `blockFor.${field}`,
        (blockFor as unknown as Record<string, unknown>)[field],
        expectedBlockField(BLOCK_FIELDS),
      );
  }
  const { duration, then = 'keep' } = blockFor;
  if (duration === undefined) fail('blockFor.duration', duration, expectedBlockDurationGiven());
  const blockMs = blockMsOf('blockFor.duration', duration, fail);
  if (then !== 'keep' && then !== 'reset') fail('blockFor.then', then, expectedBlockThen());
  return then === 'reset' ? { blockMs, blockResets: true } : { blockMs };
}

/** A block's duration in whole milliseconds: what rounds to less than 1 ms is none, and refused. */
function blockMsOf(field: 'blockFor' | 'blockFor.duration', duration: unknown, fail: Fail): number {
  const seconds = resolveDuration(field, duration, 0.5, expectedBlockDuration(field === 'blockFor'), fail);
  return Math.round(seconds * 1000);
}
