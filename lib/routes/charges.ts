import type { RoutePolicy } from './route-policy.js';

/**
 * Where a request or message keeps what it has been charged: on its target (see
 * `RateLimitContext.target`), so every guard instance sees it (Nest makes one for `APP_GUARD` and
 * another in each module that names it in `@UseGuards`). A symbol property costs next to nothing;
 * a `WeakMap` entry per request cost about 1 µs of the guard's 2.
 */
const CHARGES = Symbol('nestjs-ratelimit charges');

/** A target, marked once the guard has run on it. */
interface Charged {
  [CHARGES]?: Charge[];
}

/** A route's verdict under some of its policies, kept for the next run of the guard on the same target. */
interface Charge {
  readonly policies: readonly RoutePolicy[];
  /** `true` when it was admitted at once; a refusal is always a (rejected) promise. */
  readonly verdict: boolean | Promise<boolean>;
}

/**
 * Charges a request or message once per policy, however many times the guard runs on it (a
 * global guard and `@UseGuards`, the fields of one GraphQL request): `enforce` decides the
 * policies not charged yet, and a later run shares the verdicts of those charged before.
 */
export function chargeOnce(
  target: object,
  policies: readonly RoutePolicy[],
  enforce: (policies: readonly RoutePolicy[]) => boolean | Promise<boolean>,
): boolean | Promise<boolean> {
  const charges = (target as Charged)[CHARGES];
  if (charges === undefined) {
    const verdict = enforce(policies);
    (target as Charged)[CHARGES] = [{ policies, verdict }];
    return verdict;
  }
  return chargeAgain(charges, policies, enforce);
}

/** A target the guard has run on before: only the policies not yet charged are decided. */
async function chargeAgain(
  charges: Charge[],
  policies: readonly RoutePolicy[],
  enforce: (policies: readonly RoutePolicy[]) => boolean | Promise<boolean>,
): Promise<boolean> {
  const verdicts = new Set<boolean | Promise<boolean>>();
  const fresh = policies.filter((policy) => {
    const charge = charges.find((earlier) => earlier.policies.some(({ keyPrefix }) => keyPrefix === policy.keyPrefix));
    if (charge !== undefined) verdicts.add(charge.verdict);
    return charge === undefined;
  });
  if (fresh.length > 0) {
    const verdict = enforce(fresh);
    charges.push({ policies: fresh, verdict });
    verdicts.add(verdict);
  }
  await Promise.all(verdicts);
  return true;
}
