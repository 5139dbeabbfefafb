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

type Enforce = (policies: readonly RoutePolicy[]) => boolean | Promise<boolean>;

/** Each route's policies split by where a GraphQL field charges them, worked out once per route. */
const SPLITS = new WeakMap<readonly RoutePolicy[], { operation: readonly RoutePolicy[]; own: readonly RoutePolicy[] }>();

/**
 * Charges a request or message once per policy, however many times the guard runs on it (a
 * global guard and `@UseGuards`, the fields of one GraphQL operation): `enforce` decides the
 * policies not charged yet, and a later run shares the verdicts of those charged before.
 *
 * With a `selection` (a GraphQL field's, see `RateLimitContext.selection`), the policies its
 * handler declares itself are charged once per selection, once the others, charged once per
 * `target` (the operation), have admitted it: a field its own policy refuses leaves the
 * operation's charge in place (the operation runs), and a refused operation charges no field.
 */
export function chargeOnce(target: object, policies: readonly RoutePolicy[], enforce: Enforce, selection: object = target): boolean | Promise<boolean> {
  if (selection === target) return chargeOn(target, policies, enforce);
  let split = SPLITS.get(policies);
  if (split === undefined) {
    split = { operation: policies.filter((policy) => policy.onHandler !== true), own: policies.filter((policy) => policy.onHandler === true) };
    SPLITS.set(policies, split);
  }
  const operation = split.operation.length === 0 ? true : chargeOn(target, split.operation, enforce);
  if (split.own.length === 0) return operation;
  return chargeOn(selection, split.own, (fresh) => (operation === true ? enforce(fresh) : Promise.resolve(operation).then((admitted) => admitted && enforce(fresh))));
}

/** Charges `policies` once on `target`: at once on a target the guard has not run on, else only those not charged there yet. */
function chargeOn(target: object, policies: readonly RoutePolicy[], enforce: Enforce): boolean | Promise<boolean> {
  const charges = (target as Charged)[CHARGES];
  if (charges === undefined) {
    const verdict = enforce(policies);
    (target as Charged)[CHARGES] = [{ policies, verdict }];
    return verdict;
  }
  return chargeAgain(charges, policies, enforce);
}

/** A target the guard has run on before: only the policies not yet charged are decided. */
async function chargeAgain(charges: Charge[], policies: readonly RoutePolicy[], enforce: Enforce): Promise<boolean> {
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
