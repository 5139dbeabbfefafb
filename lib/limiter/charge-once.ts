import type { RoutePolicy } from '../routes/route-policy.js';
import { type CallRecord, type Charge, type LimitedCall, recordOn } from './limited-call.js';

type Enforce = (policies: readonly RoutePolicy[]) => boolean | Promise<boolean>;

/** Each route's policies split by where a GraphQL field charges them, worked out once per route. */
const SPLITS = new WeakMap<
  readonly RoutePolicy[],
  { operation: readonly RoutePolicy[]; own: readonly RoutePolicy[] }
>();

/**
 * Charges a request or message once per policy, however many times the guard runs on it (a
 * global guard and `@UseGuards`, the fields of one GraphQL operation): `enforce` decides the
 * policies not charged yet, and a later run shares the verdicts of those charged before.
 *
 * With a selection of its own (a GraphQL field's, see `RateLimitContext.selection`), the policies
 * its handler declares itself are charged once per selection, once the others, charged once per
 * target (the operation), have admitted it: a field its own policy refuses leaves the operation's
 * charge in place (the operation runs), and a refused operation charges no field.
 */
export function chargeOnce(call: LimitedCall, enforce: Enforce): boolean | Promise<boolean> {
  const { route } = call;
  if (call.selection === call.target) return chargeOn(call.record, route, enforce);
  let split = SPLITS.get(route);
  if (split === undefined) {
    split = {
      operation: route.filter((policy) => policy.onHandler !== true),
      own: route.filter((policy) => policy.onHandler === true),
    };
    SPLITS.set(route, split);
  }
  const operation = split.operation.length === 0 ? true : chargeOn(call.record, split.operation, enforce);
  if (split.own.length === 0) return operation;
  return chargeOn(recordOn(call.selection), split.own, (fresh) =>
    operation === true ? enforce(fresh) : Promise.resolve(operation).then((admitted) => admitted && enforce(fresh)),
  );
}

/** Charges `policies` once on a record: at once on one the guard has not charged, else only those not charged there yet. */
function chargeOn(record: CallRecord, policies: readonly RoutePolicy[], enforce: Enforce): boolean | Promise<boolean> {
  const { charges } = record;
  if (charges === undefined) {
    const verdict = enforce(policies);
    record.charges = [{ policies, verdict }];
    return verdict;
  }
  return chargeAgain(charges, policies, enforce);
}

/** A target the guard has run on before: only the policies not yet charged are decided. */
async function chargeAgain(charges: Charge[], policies: readonly RoutePolicy[], enforce: Enforce): Promise<boolean> {
  // only a pending verdict is waited for: one already given has nothing to reject with
  const pending = new Set<Promise<boolean>>();
  const fresh = policies.filter((policy) => {
    const charge = charges.find((earlier) => earlier.policies.some(({ keyPrefix }) => keyPrefix === policy.keyPrefix));
    if (charge !== undefined && typeof charge.verdict !== 'boolean') pending.add(charge.verdict);
    return charge === undefined;
  });
  if (fresh.length > 0) {
    const verdict = enforce(fresh);
    charges.push({ policies: fresh, verdict });
    if (typeof verdict !== 'boolean') pending.add(verdict);
  }
  await Promise.all(pending);
  return true;
}
