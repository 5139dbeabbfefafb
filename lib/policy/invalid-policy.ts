import { invalidPolicy, invalidPolicyField, problemInTier } from '../rate-limit.messages.js';

/** The reason a policy is refused at start. */
export class InvalidPolicyError extends Error {
  override readonly name = 'InvalidPolicyError';
}

/** Refuses one field: `expected` says what it must be (`"rps" must be a positive number …, got 0`). */
export type Fail = (field: string, value: unknown, expected: string) => never;
/** Refuses the policy as a whole: `problem` says which of its fields do not go together. */
export type Conflict = (problem: string) => never;

/**
 * The two ways a policy at `where` is refused (`CatsController.findAll`, `RateLimitModule
 * policies[0]`), each throwing an `InvalidPolicyError` whose message names `where`.
 */
export function refusals(where: string): { fail: Fail; conflict: Conflict } {
  return {
    fail: (field, value, expected) => {
      throw new InvalidPolicyError(invalidPolicyField(where, field, value, expected));
    },
    conflict: (problem) => {
      throw new InvalidPolicyError(invalidPolicy(where, problem));
    },
  };
}

/** `fail` and `conflict` for one tier's limits: its fields named `tiers.<tier>.<field>`, its problems by the tier. */
export function tierRefusals(tier: string, fail: Fail, conflict: Conflict): { fail: Fail; conflict: Conflict } {
  return {
    fail: (field, value, expected) => fail(`tiers.${tier}.${field}`, value, expected),
    conflict: (problem) => conflict(problemInTier(tier, problem)),
  };
}
